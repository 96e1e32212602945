"""The TBT guard of EB+: EB only where its refill stall fits the tightest TBT SLO, MB steps bounded to fit it.

EB(k) stops decoding while it refills (specs/seed-001-ebplus.md section 3.4, phase 2): every
running request waits through the prefill of the k new requests and then one decode step, so its
token gap at each refill is at least

    stall = ceil(k mu_L / tau) alpha_p + beta_p k mu_L + alpha_d + beta_d N

with tau the engine's token budget (one prefill chunk per iteration) and the exclusive-phase costs of
Eq. 1. The paper chooses the mode on throughput alone (Eq. 8) and judges latency by mean TPOT, which
averages the stalls away; a tier whose SLO bounds each request's tail token gap (SLAI's tiers, the
demo's paid tier at 100 ms) fails every request that sees a few stalls longer than its SLO. On the
demo fleet the Eq. 8 rule put the RTX PRO 6000 engines into EB with k ~ 20, a ~0.5 s stall, and
paid-tier SLO attainment fell from 96% (ungoverned) to 90% over five seeds (docs/results.md).

Mixed batching has the same hazard in a milder form: a mixed step carries every running request's
decode and up to the token budget of prefill chunks, priced alpha_MB + beta_MB(r) n_tok, so under
vLLM's 8,192-token budget a full step costs ~0.5 s on the RTX PRO 6000 (0.2 s on the H200), and a step
that picks up two or three queued prompts already passes 0.1 s there. On the demo fleet such steps
(0.11-0.17 s) made every paid-tier SLO miss, in every arm (docs/results.md). ``mb_step_budget_tokens``
is the largest step token budget whose step, carrying a decode for each of the engine's
``max_num_seqs`` slots, still fits the tightest TBT SLO: Sarathi-Serve's rule of sizing the chunk from
the TBT target, priced with the engine's cost model. The engine obeys it in its MB steps
(``EbplusPayload.mb_token_budget_tokens``).

Deviation: not in the paper or its code. The stall uses the minimum refill (k slots; under light load
the machine may refill more), so the guard only blocks EB when even the smallest refill breaks the SLO.
The MB budget prices the most decodes a step can carry (max_num_seqs), so it holds at any occupancy;
at lower occupancy the engine's steps stay below the SLO with room to spare.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from policies.ebplus.inputs import CostModel
from policies.ebplus.mode_selection import ModeChoice
from schemas.errors import InvalidInputError
from schemas.policy_docs.ebplus import EbplusMode

_UNKNOWN_BUDGET_TOKENS = 1 << 20  # the search's ceiling for an engine that registered no token budget


def _require(checks: tuple[tuple[str, object, bool], ...], what: str) -> None:
    """Raise on the first (name, value, ok) whose ``ok`` is false.

    Raises:
        InvalidInputError: naming the argument and ``what`` it was for.
    """
    for name, value, ok in checks:
        if not ok:
            msg = f"{name} out of range for {what}, got {value}"
            raise InvalidInputError(msg, field=name, value=value)


@dataclass(frozen=True, slots=True, kw_only=True)
class TbtGuard:
    """Outcome of the TBT guard for one mode evaluation.

    Attributes:
        refill_stall_s: the predicted token gap of a running request at an EB refill, seconds.
        tbt_slo_min_s: the tightest TBT SLO among the engine's tiers, seconds.
        blocks_eb: True when the stall exceeds that SLO, so the engine must stay in MB.
    """

    refill_stall_s: float
    tbt_slo_min_s: float
    blocks_eb: bool


def refill_stall_s(*, cost: CostModel, k: int, n: int, mu_l_tokens: float, token_budget_tokens: int | None) -> float:
    """Return the token gap a decoding request sees across one EB refill of ``k`` prompts, seconds.

    Args:
        cost: exclusive-phase coefficients (alpha_p, beta_p, alpha_d, beta_d).
        k: requests prefilled at the refill (>= 1).
        n: decoding slots N after the refill (>= 1), priced by the next decode step.
        mu_l_tokens: mean prompt length, tokens (> 0).
        token_budget_tokens: prefill tokens one iteration may compute, or None for one chunk.

    Raises:
        InvalidInputError: k or n below 1, a non-positive mean prompt or token budget.
    """
    checks = (
        ("k", k, k >= 1),
        ("n", n, n >= 1),
        ("mu_l_tokens", mu_l_tokens, math.isfinite(mu_l_tokens) and mu_l_tokens > 0.0),
        ("token_budget_tokens", token_budget_tokens, token_budget_tokens is None or token_budget_tokens >= 1),
    )
    _require(checks, "the EB refill stall")
    prefill_tokens = k * mu_l_tokens
    chunks = 1 if token_budget_tokens is None else max(1, math.ceil(prefill_tokens / token_budget_tokens))
    prefill_s = chunks * cost.alpha_p_s + cost.beta_p_s_per_token * prefill_tokens
    return prefill_s + cost.alpha_d_s + cost.beta_d_s_per_seq * n


def tbt_guard(
    *,
    cost: CostModel,
    k: int,
    n: int,
    mu_l_tokens: float,
    token_budget_tokens: int | None,
    tbt_slo_min_s: float,
) -> TbtGuard:
    """Judge whether EB's refill stall breaks the tightest TBT SLO the engine serves.

    Args:
        cost, k, n, mu_l_tokens, token_budget_tokens: as ``refill_stall_s``.
        tbt_slo_min_s: the tightest TBT SLO of the engine's tiers, seconds (> 0).

    Raises:
        InvalidInputError: a non-positive SLO, or an input ``refill_stall_s`` refuses.
    """
    if not (math.isfinite(tbt_slo_min_s) and tbt_slo_min_s > 0.0):
        msg = f"tbt_slo_min_s must be finite and > 0, got {tbt_slo_min_s}"
        raise InvalidInputError(msg, field="tbt_slo_min_s", value=tbt_slo_min_s)
    stall = refill_stall_s(cost=cost, k=k, n=n, mu_l_tokens=mu_l_tokens, token_budget_tokens=token_budget_tokens)
    return TbtGuard(refill_stall_s=stall, tbt_slo_min_s=tbt_slo_min_s, blocks_eb=stall > tbt_slo_min_s)


def mixed_step_s(*, cost: CostModel, tokens: int, decodes: int) -> float:
    """Seconds of one MB step of ``tokens`` tokens of which ``decodes`` are decodes (one token each).

    The mixed formula alpha_MB + beta_MB(r) n_tok with r = decodes / tokens, never below the exclusive
    decode step alpha_d + beta_d decodes (services/sim/timing.py ``EbTiming`` prices steps the same
    way). Without a beta_MB profile the step is priced as its parts on one overhead:
    max(alpha_p, alpha_d) + beta_p prefill tokens + beta_d decodes.
    """
    decode_s = cost.alpha_d_s + cost.beta_d_s_per_seq * decodes
    if cost.beta_mb is None:
        overhead = max(cost.alpha_p_s, cost.alpha_d_s)
        return overhead + cost.beta_p_s_per_token * (tokens - decodes) + cost.beta_d_s_per_seq * decodes
    mixed = cost.alpha_mb_s + cost.beta_mb.at(decodes / tokens) * tokens
    return max(mixed, decode_s)


def mb_step_budget_tokens(
    *, cost: CostModel, max_num_seqs: int, tbt_slo_min_s: float, token_budget_tokens: int | None
) -> int | None:
    """The largest MB step token budget whose step fits the tightest TBT SLO with every slot decoding.

    The budget counts a step's decode and prefill tokens, as vLLM's ``max_num_batched_tokens`` does;
    it leaves at least one prefill token beside ``max_num_seqs`` decodes.

    Args:
        cost: the engine's cost model.
        max_num_seqs: the engine's slot limit, the most decodes one step carries (>= 1).
        tbt_slo_min_s: the tightest TBT SLO of the engine's tiers, seconds (> 0).
        token_budget_tokens: the engine's own budget, or None when unknown.

    Returns:
        the budget, or None when no bound is needed (the engine's own budget already fits the SLO) or
        none helps (a step of ``max_num_seqs`` decodes and one prefill token already breaks it).

    Raises:
        InvalidInputError: a non-positive slot limit, SLO or budget.
    """
    checks = (
        ("max_num_seqs", max_num_seqs, max_num_seqs >= 1),
        ("tbt_slo_min_s", tbt_slo_min_s, math.isfinite(tbt_slo_min_s) and tbt_slo_min_s > 0.0),
        ("token_budget_tokens", token_budget_tokens, token_budget_tokens is None or token_budget_tokens >= 1),
    )
    _require(checks, "the MB step budget")

    def fits(tokens: int) -> bool:
        return mixed_step_s(cost=cost, tokens=tokens, decodes=max_num_seqs) <= tbt_slo_min_s

    lo = max_num_seqs + 1
    hi = token_budget_tokens if token_budget_tokens is not None else _UNKNOWN_BUDGET_TOKENS
    if hi < lo or fits(hi) or not fits(lo):
        return None
    # The step time is convex in its token count (a constant, c0 n_tok and c2 decodes^2 / n_tok), so the
    # budgets that fit form one interval from lo: bisect for its upper end.
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def apply_tbt_guard(
    choice: ModeChoice, *, current: EbplusMode, guard: TbtGuard, cooldown_evaluations: int
) -> ModeChoice:
    """Overrule Eq. 8's choice of EB when the guard blocks it; any other choice passes unchanged.

    An engine already in EB leaves it at once, whatever its cooldown (a broken SLO should not wait
    three evaluations), and starts a new cooldown; an engine in MB simply holds MB. The reason is
    ``tbt_guard`` either way.

    Args:
        choice: what ``select_mode`` chose from the Eq. 8 signal.
        current: the mode in force before this evaluation.
        guard: the guard's judgement for this evaluation.
        cooldown_evaluations: evaluations blocked after a switch.
    """
    if not guard.blocks_eb or choice.mode is not EbplusMode.EB:
        return choice
    leaving = current is EbplusMode.EB
    return replace(
        choice,
        mode=EbplusMode.MB,
        switched=leaving,
        cooldown_remaining=cooldown_evaluations if leaving else 0,
        reason="tbt_guard",
    )
