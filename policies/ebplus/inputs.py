"""EB+ decision inputs: the plain numbers the estimators provide (specs/seed-001-ebplus.md sections 3.1, 4.2, 5.4).

The runtime builds ``EbplusInputs`` from an estimate snapshot; ``CostModel`` carries the iteration-time
fits (Section 3.1 of the paper: T_p = alpha_p + beta_p sum L, t_d = alpha_d + beta_d n, mixed step
alpha_MB + beta_MB^e(r) n_tok with beta_MB^e(r) = c0 + c1 r + c2 r^2, App. A.4) either refitted online
from step events or taken from a calibration profile (calibration.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from schemas.errors import InvalidInputError

ONLINE_CALIB_ID = "online"  # the cost model fitted from the engine's own step events


def _require(name: str, value: float, ok: bool, what: str) -> None:
    if not (math.isfinite(value) and ok):
        msg = f"{name} must be {what}, got {value}"
        raise InvalidInputError(msg, field=name, value=value)


@dataclass(frozen=True, slots=True, kw_only=True)
class BetaMbQuadratic:
    """Effective mixed-batch marginal cost beta_MB^e(r) = c0 + c1 r + c2 r^2, seconds per token (App. A.4).

    r is the decode ratio n_decode / n_tok in [0, 1].
    """

    c0_s_per_token: float
    c1_s_per_token: float
    c2_s_per_token: float

    def __post_init__(self) -> None:
        for name in ("c0_s_per_token", "c1_s_per_token", "c2_s_per_token"):
            _require(name, getattr(self, name), True, "finite")

    def at(self, r: float) -> float:
        """Return beta_MB^e(r), seconds per token."""
        return self.c0_s_per_token + self.c1_s_per_token * r + self.c2_s_per_token * r * r


@dataclass(frozen=True, slots=True, kw_only=True)
class CostModel:
    """Iteration-time coefficients for one (model, GPU) (paper Section 3.1, App. A).

    Attributes:
        alpha_p_s: prefill-phase fixed overhead, seconds (> 0).
        beta_p_s_per_token: prefill cost per prompt token, seconds (>= 0).
        alpha_d_s: decode-iteration fixed overhead, seconds (> 0).
        beta_d_s_per_seq: decode cost per running sequence (one decode token each), seconds (>= 0).
        alpha_mb_s: mixed-batch fixed overhead, seconds (>= 0); the reference code uses alpha_p.
        beta_mb: the quadratic beta_MB^e(r), or None when it was never profiled (then Eq. 8's
            left-hand side is taken as 0, the reference code's "amortisation only" behaviour).
    """

    alpha_p_s: float
    beta_p_s_per_token: float
    alpha_d_s: float
    beta_d_s_per_seq: float
    alpha_mb_s: float
    beta_mb: BetaMbQuadratic | None

    def __post_init__(self) -> None:
        _require("alpha_p_s", self.alpha_p_s, self.alpha_p_s > 0.0, "finite and > 0")
        _require("beta_p_s_per_token", self.beta_p_s_per_token, self.beta_p_s_per_token >= 0.0, "finite and >= 0")
        _require("alpha_d_s", self.alpha_d_s, self.alpha_d_s > 0.0, "finite and > 0")
        _require("beta_d_s_per_seq", self.beta_d_s_per_seq, self.beta_d_s_per_seq >= 0.0, "finite and >= 0")
        _require("alpha_mb_s", self.alpha_mb_s, self.alpha_mb_s >= 0.0, "finite and >= 0")


@dataclass(frozen=True, slots=True, kw_only=True)
class EbplusInputs:
    """One estimate snapshot for one engine, as EB+ needs it.

    Attributes:
        p0: fitted hazard intercept, per output token (> 0); from the censoring-aware linear fit.
        eta: fitted hazard slope, per token squared (any sign; negative is treated as 0, CFR).
        hazard_samples: output lengths the hazard fit used (>= 0).
        mu_l_tokens: mean prompt length, tokens (> 0).
        mu_o_tokens: mean output length, tokens (> 0).
        n_obs: EMA-smoothed observed occupancy N_obs, sequences (>= 0).
        cost_model: the engine's own cost model (its registered calibration profile or its online
            fits), or None: the params' profile is assumed, or EB+ probes when the params name none.
        cost_model_id: where ``cost_model`` comes from, recorded in the decision: a calibration
            profile id, or ``"online"`` for fits of the engine's own step events.
        declared_profile: the calibration profile the engine registered, or None; a decision made
            from anything else says so (an unknown id such as a typo is otherwise silent).
        kv_capacity_tokens: KV-cache capacity C, tokens (num_gpu_blocks * block_size, > 0).
        max_num_seqs: the engine's slot limit (>= 1).
        completions: completed requests the engine has reported so far (>= 0); drives the
            T_upd cadence of Algorithm 1.
        tbt_slo_min_s: the tightest TBT SLO among the tiers the engine serves, seconds (> 0), or
            None when no tier has one; read by the TBT guard (tbt_guard.py).
        token_budget_tokens: the engine's per-iteration token budget (``max_num_batched_tokens``,
            >= 1), or None when unknown; the guard then prices a refill as one prefill chunk.
    """

    p0: float
    eta: float
    hazard_samples: int
    mu_l_tokens: float
    mu_o_tokens: float
    n_obs: float
    cost_model: CostModel | None
    kv_capacity_tokens: int
    max_num_seqs: int
    completions: int
    tbt_slo_min_s: float | None = None
    token_budget_tokens: int | None = None
    cost_model_id: str = ONLINE_CALIB_ID
    declared_profile: str | None = None

    def __post_init__(self) -> None:
        _require("p0", self.p0, 0.0 < self.p0 <= 1.0, "finite and in (0, 1]")
        _require("eta", self.eta, True, "finite")
        _require("hazard_samples", self.hazard_samples, self.hazard_samples >= 0, ">= 0")
        _require("mu_l_tokens", self.mu_l_tokens, self.mu_l_tokens > 0.0, "finite and > 0")
        _require("mu_o_tokens", self.mu_o_tokens, self.mu_o_tokens > 0.0, "finite and > 0")
        _require("n_obs", self.n_obs, self.n_obs >= 0.0, "finite and >= 0")
        _require("kv_capacity_tokens", self.kv_capacity_tokens, self.kv_capacity_tokens > 0, "> 0")
        _require("max_num_seqs", self.max_num_seqs, self.max_num_seqs >= 1, ">= 1")
        _require("completions", self.completions, self.completions >= 0, ">= 0")
        if self.tbt_slo_min_s is not None:
            _require("tbt_slo_min_s", self.tbt_slo_min_s, self.tbt_slo_min_s > 0.0, "finite and > 0")
        if not self.cost_model_id:
            msg = "cost_model_id must name a calibration profile or 'online'"
            raise InvalidInputError(msg, field="cost_model_id", value=self.cost_model_id)
        if self.token_budget_tokens is not None:
            _require("token_budget_tokens", self.token_budget_tokens, self.token_budget_tokens >= 1, ">= 1")
