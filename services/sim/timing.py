"""Iteration-time models of a simulated engine: the three papers' step-cost formulas.

- ``EbTiming``: specs/seed-001-ebplus.md sections 1.2 and 6.5: a prefill-only step costs
  alpha_p + beta_p * prefill tokens, a decode-only step alpha_d + beta_d * n, a mixed step
  alpha_mb + beta_mb(r) * n_tok with the quadratic beta_mb(r) = c0 + c1 r + c2 r^2 and decode
  ratio r = decode tokens / batch tokens.
- ``SlaiTiming``: specs/seed-000-slai.md section 5.6: T = a0 + a_tok tau + a_seq seqs + a_ctx ctx.
- ``BfioTiming``: specs/seed-003-bfio.md section 1.3 (Eq. 6): T = C + t_l max_g L_g.
- ``JitteredTiming``: any of them with seeded multiplicative per-step noise (off unless asked for),
  so that online cost fits see the scatter real step times have (the EB paper's calibration R^2 is
  0.98-0.99 for decode steps, spec seed-001 section 6.4).

Each model maps a ``BatchShape`` to seconds; engines call it once per iteration.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from policies.ebplus.inputs import CostModel
from schemas.errors import InvalidInputError


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchShape:
    """What a timing model needs to know about one iteration's batch.

    Attributes:
        prefill_tokens: prompt tokens computed in the step (all chunks).
        num_prefill_requests: requests with a prefill chunk in the step.
        decode_requests: requests decoding one token each.
        decode_context_tokens: summed context of the decoding requests.
        prefill_context_tokens: summed attention context of the chunks (chunk start + half the chunk).
        max_rank_load_tokens: L* = max_g L_g for a DP step; for one engine, its resident context.
        exclusive: the scheduler runs prefill and decode phases apart (EB); pure batches are then
            priced with the exclusive formulas, otherwise every batch is a mixed-batching step.
    """

    prefill_tokens: int
    num_prefill_requests: int
    decode_requests: int
    decode_context_tokens: int
    prefill_context_tokens: float = 0.0
    max_rank_load_tokens: int = 0
    exclusive: bool = False


class TimingModel(Protocol):
    """Seconds one iteration of a given batch takes."""

    def step_time_s(self, shape: BatchShape) -> float:
        """Return the iteration time of ``shape`` in seconds (> 0)."""
        ...


def _require_non_negative(model: object, names: tuple[str, ...]) -> None:
    """Raise on the first of ``names`` whose coefficient on ``model`` is negative or NaN."""
    for name in names:
        value = getattr(model, name)
        if not value >= 0.0:
            msg = f"{name} must be >= 0, got {value}"
            raise InvalidInputError(msg, field=name, value=value)


# EbTiming's exclusive and mixed intercepts and slopes: named as in CostModel, never negative.
EB_LINEAR_COEFFICIENTS = ("alpha_p_s", "beta_p_s_per_token", "alpha_d_s", "beta_d_s_per_seq", "alpha_mb_s")


@dataclass(frozen=True, slots=True, kw_only=True)
class EbTiming:
    """The EB paper's per-batch-kind linear cost with the mixed-batch quadratic (seed 001 Eq. 1, App. A.4).

    Under a mixed-batching scheduler every step, pure or not, is priced alpha_mb_s + beta_mb(r) n_tok
    (the DES recipe of spec section 6.5: beta_mb was fitted to v1 throughput, which includes its
    pure steps); with alpha_mb_s = 0 this reproduces the v1 saturation throughput 1 / beta_mb(r).
    Batches of an exclusive (EB) scheduler use alpha_p + beta_p tokens and alpha_d + beta_d n.

    Deviation: a mixed step never costs less than the exclusive formula of its dominant kind
    (alpha_d + beta_d n with decodes, else alpha_p + beta_p tokens). beta_mb(r) is an effective cost
    fitted at saturation, with the fixed overhead amortised; alone, with alpha_mb_s = 0, it would
    price a lone decode at 0.1 ms instead of the ~9 ms floor. At saturation the mixed term dominates,
    so the v1 throughput check of section 6.5 is unchanged. Decode cost ignores context growth, as the
    calibration was taken at context 512 (spec section 6.5).

    Raises:
        InvalidInputError: a negative coefficient.
    """

    alpha_p_s: float
    beta_p_s_per_token: float
    alpha_d_s: float
    beta_d_s_per_seq: float
    alpha_mb_s: float
    c0_s_per_token: float
    c1_s_per_token: float
    c2_s_per_token: float

    def __post_init__(self) -> None:
        _require_non_negative(self, EB_LINEAR_COEFFICIENTS)

    @classmethod
    def from_cost_model(cls, cost: CostModel) -> EbTiming:
        """Build from a calibration profile's ``cost_model`` (policies/ebplus/calibration.py).

        Raises:
            InvalidInputError: the cost model has no beta_MB(r) profile, so mixed steps cannot be priced.
        """
        if cost.beta_mb is None:
            msg = "the cost model has no beta_MB(r) profile; mixed steps cannot be priced"
            raise InvalidInputError(msg, field="beta_mb")
        linear = {name: getattr(cost, name) for name in EB_LINEAR_COEFFICIENTS}
        quadratic = cost.beta_mb
        return cls(
            **linear,
            c0_s_per_token=quadratic.c0_s_per_token,
            c1_s_per_token=quadratic.c1_s_per_token,
            c2_s_per_token=quadratic.c2_s_per_token,
        )

    def beta_mb_s_per_token(self, decode_ratio: float) -> float:
        """beta_mb(r) = c0 + c1 r + c2 r^2 in s/token, r the decode share of the batch's tokens."""
        return self.c0_s_per_token + decode_ratio * (self.c1_s_per_token + decode_ratio * self.c2_s_per_token)

    def step_time_s(self, shape: BatchShape) -> float:
        """Iteration time: exclusive prefill or decode formulas for EB batches, else the mixed formula."""
        if shape.exclusive and shape.decode_requests == 0:
            return self.alpha_p_s + self.beta_p_s_per_token * shape.prefill_tokens
        if shape.exclusive and shape.prefill_tokens == 0:
            return self.alpha_d_s + self.beta_d_s_per_seq * shape.decode_requests
        n_tok = shape.prefill_tokens + shape.decode_requests
        mixed_s = self.alpha_mb_s + self.beta_mb_s_per_token(shape.decode_requests / n_tok) * n_tok
        if shape.decode_requests > 0:
            floor_s = self.alpha_d_s + self.beta_d_s_per_seq * shape.decode_requests
        else:
            floor_s = self.alpha_p_s + self.beta_p_s_per_token * shape.prefill_tokens
        return max(mixed_s, floor_s)


@dataclass(frozen=True, slots=True, kw_only=True)
class SlaiTiming:
    """The SLAI simulator's batch-time fit (seed 000 section 5.6, from Fig. 6a).

    T = a0 + a_tok tau + a_seq (sequences in the batch) + a_ctx (decode contexts + chunk contexts),
    with tau the batch's tokens. Defaults are the spec's section 5.6 values (a0 = 17 ms, a_tok = 5.47e-5
    s/token, a_seq = 3e-4 s, a_ctx = 2e-7 s/token), kept here only: scenarios.toml names the model
    without repeating them. policies/slai/calibration.py's ``SlaiTimingProfile`` shares a_tok, a_seq
    and a_ctx and keeps the section 5.4 least-squares intercept (17.16 ms) as its a0.
    """

    a0_s: float = 0.017
    a_tok_s_per_token: float = 5.47e-5
    a_seq_s_per_seq: float = 3e-4
    a_ctx_s_per_token: float = 2e-7

    def __post_init__(self) -> None:
        _require_non_negative(self, ("a0_s", "a_tok_s_per_token", "a_seq_s_per_seq", "a_ctx_s_per_token"))

    def step_time_s(self, shape: BatchShape) -> float:
        """T = a0 + a_tok tau + a_seq seqs + a_ctx ctx, seconds."""
        tau = shape.prefill_tokens + shape.decode_requests
        seqs = shape.num_prefill_requests + shape.decode_requests
        ctx = shape.decode_context_tokens + shape.prefill_context_tokens
        return self.a0_s + self.a_tok_s_per_token * tau + self.a_seq_s_per_seq * seqs + self.a_ctx_s_per_token * ctx


@dataclass(frozen=True, slots=True, kw_only=True)
class BfioTiming:
    """The BF-IO step model T = C + t_l max_g L_g (seed 003 section 1.3, Eq. 6).

    Defaults are the reference code's as the spec prints them: C = (72 * 0.6e-3 + 35e-3) / 16 =
    4.8875 ms at B = 72 and t_l = 1.00525e-7 s per resident token, kept here only (scenarios.toml
    names the model without repeating them). ``policies.bfio.BfioParams`` evaluates the same two
    formulas for the policy's prior step model before the online fit (its t_l, 1.0052490e-7 s, is
    the unrounded one).
    """

    c_s: float = 4.8875e-3
    t_l_s_per_token: float = 1.00525e-7

    def __post_init__(self) -> None:
        _require_non_negative(self, ("c_s", "t_l_s_per_token"))

    def step_time_s(self, shape: BatchShape) -> float:
        """C + t_l L*, seconds, with L* the largest rank load of the step."""
        return self.c_s + self.t_l_s_per_token * shape.max_rank_load_tokens


class JitteredTiming:
    """A timing model whose every step time is multiplied by seeded log-normal noise of mean 1.

    Each call draws z ~ N(0, 1) and returns ``base(shape) * exp(sigma z - sigma^2 / 2)`` with
    sigma = ``jitter_frac``: the noise is unbiased (E = 1), so fits of the noisy steps estimate the
    noise-free coefficients, and its relative spread is about ``jitter_frac`` (3% gives step times
    within +-6% for 95% of steps). Draws follow the engine's step order, so a run is reproducible
    from the seed. The base model stays the ground truth a bench compares online fits against.

    Raises:
        InvalidInputError: ``jitter_frac`` outside [0, 0.5].
    """

    __slots__ = ("_rng", "base", "jitter_frac")

    def __init__(self, base: TimingModel, *, jitter_frac: float, seed: int | np.random.SeedSequence) -> None:
        """Wrap ``base``; ``seed`` seeds this engine's own noise stream."""
        if not 0.0 <= jitter_frac <= 0.5:
            msg = f"jitter_frac must be in [0, 0.5], got {jitter_frac}"
            raise InvalidInputError(msg, field="jitter_frac", value=jitter_frac)
        self.base = base
        self.jitter_frac = jitter_frac
        self._rng = np.random.default_rng(seed)

    def step_time_s(self, shape: BatchShape) -> float:
        """The base model's time for ``shape`` times one log-normal draw of mean 1, seconds."""
        sigma = self.jitter_frac
        factor = float(np.exp(sigma * self._rng.standard_normal() - 0.5 * sigma * sigma))
        return self.base.step_time_s(shape) * factor
