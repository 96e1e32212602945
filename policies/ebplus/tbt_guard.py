"""The TBT guard of EB+ mode selection: EB only where its refill stall fits the tightest TBT SLO (Governor's).

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

Deviation: not in the paper or its code. The stall uses the minimum refill (k slots; under light load
the machine may refill more), so the guard only blocks EB when even the smallest refill breaks the SLO.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from policies.ebplus.inputs import CostModel
from policies.ebplus.mode_selection import ModeChoice
from schemas.errors import InvalidInputError
from schemas.policy_docs.ebplus import EbplusMode


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
    for name, value, ok in checks:
        if not ok:
            msg = f"{name} out of range for the EB refill stall, got {value}"
            raise InvalidInputError(msg, field=name, value=value)
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
    if not guard.blocks_eb or choice.mode != "EB":
        return choice
    leaving = current == "EB"
    return replace(
        choice,
        mode="MB",
        switched=leaving,
        cooldown_remaining=cooldown_evaluations if leaving else 0,
        reason="tbt_guard",
    )
