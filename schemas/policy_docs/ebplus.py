"""EB+ policy document: what engines obey, what the next decision reads back, and the what-if input.

specs/seed-001-ebplus.md section 5.2: the control plane pushes the mode (EB or MB, Eq. 8), the
smoothed threshold theta, k = floor(theta N), the memory-safe batch size N (Eq. 6), the KV-gate
parameters (Eq. 23), the mean lengths the engine needs for the gate and escapes, and the fallback for
a stale or missing policy. The hysteresis state (cooldown, last switch, switch count) and Algorithm 1's
smoothed values live in ``EbplusState``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field

from schemas.policy_docs.base import ContractModel, PolicyDocument


class EbplusMode(StrEnum):
    """EB+'s batching mode (Eq. 8): ``EB``, exclusive batching EB(k); ``MB``, mixed batching.

    The one spelling in Python and the one written, in policy documents and in step reports' ``scheduler_mode``.
    Step reports of earlier releases spelt the modes ``eb`` and ``mb``; those are read as these.
    """

    EB = "EB"
    MB = "MB"

    @classmethod
    def named(cls, text: str) -> EbplusMode | None:
        """The mode ``text`` names in either spelling (``EB`` or ``eb``); None when it names none."""
        upper = text.upper()
        return cls(upper) if upper in cls._value2member_map_ else None


def _read_mode(value: object) -> object:
    """Read a mode's name in either spelling; refuse another string with the names it may take."""
    if isinstance(value, str) and not isinstance(value, EbplusMode):
        mode = EbplusMode.named(value)
        if mode is None:
            msg = f"mode must be EB or MB (eb and mb read the same), got {value[:40]!r}"
            raise ValueError(msg)
        return mode
    return value


ModeField = Annotated[EbplusMode, BeforeValidator(_read_mode)]


class KvGate(ContractModel):
    """KV-aware gate of Eq. 23: refill only when free_blocks >= f_KV * total_blocks.

    f_KV = min(f_max, max(f_min, N mu_O s_KV / (block_size total_blocks) + f0)).
    """

    s_kv: float = Field(default=0.5, ge=0.0, le=10.0, description="safety multiplier on mu_O (paper default 0.5)")
    f0: float = Field(default=0.0, ge=0.0, le=1.0, description="base reserve fraction (paper default 0)")
    f_min: float = Field(default=0.05, ge=0.0, le=1.0, description="lower clip of f_KV (paper 0.05)")
    f_max: float = Field(default=0.6, ge=0.0, le=1.0, description="upper clip of f_KV (paper 0.6)")


class EbplusFallback(ContractModel):
    """What an engine runs when its EB+ policy is missing or past valid_until (spec section 8 P12)."""

    mode: ModeField = EbplusMode.MB
    theta: float = Field(default=0.7, gt=0.0, lt=1.0)
    n: int = Field(ge=1, le=1_000_000, description="batch size N, sequences (the engine's max_num_seqs)")


class EbplusPayload(ContractModel):
    """What an engine obeys: mode, threshold and batch size, KV gate, fallback, MB step budget."""

    mode: ModeField = Field(description="EB: exclusive batching EB(k); MB: mixed batching")
    theta: float = Field(gt=0.0, lt=1.0, description="smoothed threshold theta*^ = k/N the ratio test uses")
    k: int = Field(ge=1, le=1_000_000, description="switch to refill once k slots are idle")
    n: int = Field(ge=1, le=1_000_000, description="batch size N (memory-safe N*), sequences; a hard cap")
    kv_gate: KvGate
    mu_l_tokens: float = Field(gt=0.0, le=1e7, description="mean prompt length the decision used, tokens")
    mu_o_tokens: float = Field(gt=0.0, le=1e7, description="mean output length the decision used, tokens")
    calib_id: str = Field(min_length=1, max_length=128, description="cost-model source: profile id or 'online'")
    fallback: EbplusFallback
    mb_token_budget_tokens: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description=(
            "token budget of a mixed-batching step (decodes plus prefill chunks), below the engine's own so "
            "that a step fits the tightest TBT SLO of its tiers (Governor's TBT guard); None: the engine's own"
        ),
    )


class EbplusState(ContractModel):
    """What the next EB+ decision reads back: Algorithm 1's smoothed values and the hysteresis."""

    mode: ModeField = EbplusMode.MB
    theta_hat: float | None = Field(default=None, gt=0.0, lt=1.0, description="EMA of theta*; None before update 1")
    n_hat: int | None = Field(default=None, ge=1, description="last N-hat*, sequences; None before update 1")
    last_update_completions: int | None = Field(
        default=None, ge=0, description="completions count at the last Algorithm 1 update"
    )
    cooldown_remaining: int = Field(default=0, ge=0, le=1000)
    switch_count: int = Field(default=0, ge=0)
    last_switch_s: float | None = Field(default=None, ge=0.0, description="event time of the last switch, s")
    evaluations: int = Field(default=0, ge=0, description="Eq. 8 evaluations so far")


class EbplusPolicy(PolicyDocument):
    """The EB+ policy document for one engine (scope = engine id)."""

    kind: Literal["ebplus"] = "ebplus"
    payload: EbplusPayload
    state: EbplusState


class BetaMbInput(ContractModel):
    """beta_MB^e(r) = c0 + c1 r + c2 r^2, seconds per token."""

    c0_s_per_token: float = Field(ge=-1.0, le=1.0)
    c1_s_per_token: float = Field(ge=-1.0, le=1.0)
    c2_s_per_token: float = Field(ge=-1.0, le=1.0)


class CostModelInput(ContractModel):
    """Iteration-time coefficients (paper Section 3.1): seconds, per prompt token, per sequence."""

    alpha_p_s: float = Field(gt=0.0, le=100.0)
    beta_p_s_per_token: float = Field(ge=0.0, le=1.0)
    alpha_d_s: float = Field(gt=0.0, le=100.0)
    beta_d_s_per_seq: float = Field(ge=0.0, le=1.0)
    alpha_mb_s: float = Field(ge=0.0, le=100.0)
    beta_mb: BetaMbInput | None = None


class EbplusParamsInput(ContractModel):
    """Overrides of EbplusParams for the what-if tool; a field left out keeps the paper's default."""

    t_upd_completions: int | None = Field(default=None, ge=1)
    w_min_samples: int | None = Field(default=None, ge=1)
    theta_default: float | None = Field(default=None, gt=0.0, lt=1.0)
    theta_min: float | None = Field(default=None, gt=0.0, lt=1.0)
    theta_max: float | None = Field(default=None, gt=0.0, lt=1.0)
    theta_ema_alpha: float | None = Field(default=None, gt=0.0, le=1.0)
    delta_theta_cap_factor: float | None = Field(default=None, ge=0.0)
    eps_oom: float | None = Field(default=None, ge=1e-6, le=0.5)
    n_star_method: Literal["eq6", "clt"] | None = None
    auto_n: bool | None = None
    n_min_seqs: int | None = Field(default=None, ge=1)
    p0_geometric_floor: bool | None = None
    rhs_threshold: Literal["theta0", "theta_star"] | None = None
    delta_s_per_token: float | None = Field(default=None, ge=-1.0, le=1.0)
    sticky_factor: float | None = Field(default=None, ge=1.0, le=100.0)
    cooldown_evaluations: int | None = Field(default=None, ge=0, le=1000)
    n_obs_min: float | None = Field(default=None, ge=0.0)
    cold_start_mode: ModeField | None = None
    calibration_id: str | None = Field(default=None, min_length=1, max_length=128)
    tbt_guard: bool | None = None
    mb_step_budget: bool | None = None
    valid_for_s: float | None = Field(default=None, gt=0.0, le=86_400.0)


class EbplusWhatIfInput(ContractModel):
    """JSON input of ``governor policy ebplus``: one estimate snapshot plus optional params overrides."""

    p0: float = Field(gt=0.0, le=1.0, description="hazard intercept, per output token")
    eta: float = Field(ge=-1.0, le=1.0, description="hazard slope, per token squared")
    hazard_samples: int = Field(ge=0, description="output lengths behind the hazard fit")
    mu_l_tokens: float = Field(gt=0.0, le=1e7)
    mu_o_tokens: float = Field(gt=0.0, le=1e7)
    n_obs: float = Field(ge=0.0, le=1e7, description="EMA-smoothed occupancy N_obs, sequences")
    cost_model: CostModelInput | None = Field(default=None, description="None: use params.calibration_id")
    kv_capacity_tokens: int = Field(gt=0, description="KV capacity C = num_gpu_blocks * block_size, tokens")
    max_num_seqs: int = Field(ge=1, le=1_000_000)
    completions: int = Field(ge=0, description="completions reported so far")
    tbt_slo_min_s: float | None = Field(
        default=None, gt=0.0, le=3600.0, description="tightest TBT SLO of the engine's tiers, seconds (TBT guard)"
    )
    token_budget_tokens: int | None = Field(
        default=None, ge=1, le=10_000_000, description="max_num_batched_tokens (TBT guard's prefill chunks)"
    )
    now_s: float = Field(default=0.0, ge=0.0, description="event time of the decision, seconds")
    params: EbplusParamsInput = Field(default_factory=EbplusParamsInput)
