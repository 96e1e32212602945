"""The SLAI policy decision: one engine's estimates -> the SLAI document payload (spec §3.4).

The control plane pushes the offset rule of paper §7.1 (delta_lo / delta_hi switched at a KV-use
threshold, or a fixed delta, or an override), the tier -> TBT map of eq. 8, the token budget,
alpha, beta and the prefill order; the engine keeps the per-iteration bookkeeping. The decision
also derives, for diagnostics, the safety floor delta_min = 2 T_B,p99 / tbar, the deferral windows
W_k = TBT_k - delta * tbar of every tier at both deltas, the delta the rule gives at the current KV
use, and the largest token budget the batch-time fit keeps within the tightest TBT (spec §4.3 item 6).
Every pushed number goes through the guardrails (``policies.bounds``).

Deviation: in the paper's modes the pushed delta_lo stays the paper's even below delta_min; the
decision flags it (``delta_lo_below_floor``) instead of moving it, so that the default reproduces
the paper. The adaptive mode (ours, off by default) never goes below delta_min.
"""

from __future__ import annotations

import math

from policies.bounds import Bound, Clamp, clamp
from policies.decision import Decision, DiagnosticValue
from policies.slai.adaptive import adapt_delta_lo
from policies.slai.deadline import deferral_window_s, safety_floor_delta
from policies.slai.inputs import SlaiInputs
from policies.slai.offset_rule import offset_for_kv_use, offset_rule_of
from policies.slai.params import SlaiParams
from schemas.errors import InvalidInputError
from schemas.policy_docs.slai import SlaiPayload, SlaiPolicy, SlaiState

DELTA_BOUND = Bound(name="delta", lo=0.0, hi=100.0)
KV_THRESHOLD_BOUND = Bound(name="kv_threshold_frac", lo=0.5, hi=1.0)
TBT_BOUND = Bound(name="tbt_s", lo=0.001, hi=60.0)
TOKEN_BUDGET_BOUND = Bound(name="token_budget_tokens", lo=16, hi=65_536)
CAP_BOUND = Bound(name="cap", lo=1, hi=65_536)


def decide(
    inputs: SlaiInputs, previous: SlaiPolicy | None, params: SlaiParams, now_s: float
) -> Decision[SlaiPayload, SlaiState]:
    """Decide the SLAI document for one engine.

    Args:
        inputs: the engine's estimate snapshot.
        previous: the last document pushed to this engine, or None; only its ``state`` is read.
        params: the paper's parameters and our overrides.
        now_s: event time of the decision, seconds.

    Returns:
        The payload to push, the state for the next decision, diagnostics and clamps.

    Raises:
        InvalidInputError: ``now_s`` is not finite.
    """
    if not math.isfinite(now_s):
        msg = f"now_s must be finite, got {now_s}"
        raise InvalidInputError(msg, field="now_s", value=now_s)
    state = previous.state if previous is not None else SlaiState()
    diagnostics: dict[str, DiagnosticValue] = {}
    delta_min = _safety_floor(inputs)
    delta_lo = params.delta_lo
    if params.adaptive_enabled:
        step = adapt_delta_lo(inputs, state, params, now_s, delta_min)
        delta_lo, next_state = step.delta_lo, step.state
        diagnostics.update(adaptive_signal=step.signal, adaptive_moved=step.moved, adaptive_reason=step.reason)
    else:
        next_state = SlaiState(decisions=state.decisions + 1)
    clamps: list[Clamp] = []
    delta_hi = clamp(params.delta_hi, DELTA_BOUND, clamps)
    delta_lo = min(clamp(delta_lo, DELTA_BOUND, clamps), delta_hi)
    override = clamp(params.delta_override, DELTA_BOUND, clamps) if params.delta_override is not None else None
    payload = SlaiPayload(
        mode=params.offset_mode.value,
        delta_fixed=clamp(params.delta_fixed, DELTA_BOUND, clamps),
        delta_lo=delta_lo,
        delta_hi=delta_hi,
        kv_threshold_frac=clamp(params.kv_threshold_frac, KV_THRESHOLD_BOUND, clamps),
        delta_override=override,
        tier_tbt_s={t.tier: clamp(t.tbt_slo_s, TBT_BOUND, clamps) for t in params.tiers},
        default_tbt_s=clamp(params.default_tbt_s, TBT_BOUND, clamps),
        token_budget_tokens=int(clamp(params.token_budget_tokens, TOKEN_BUDGET_BOUND, clamps)),
        max_active=int(clamp(params.max_active, CAP_BOUND, clamps)),
        max_decodes=int(clamp(params.max_decodes, CAP_BOUND, clamps)),
        prefill_order=params.prefill_order.value,
        tbar_seed_s=held_seed(inputs.tbar_s, previous, params),
    )
    diagnostics.update(_explain(inputs, payload, delta_min))
    return Decision(
        payload=payload, state=next_state, diagnostics=diagnostics, clamps=tuple(clamps), valid_for_s=params.valid_for_s
    )


def held_seed(tbar_s: float | None, previous: SlaiPolicy | None, params: SlaiParams) -> float | None:
    """The mean batch time to push: the previous document's while the estimate stays within the tolerance.

    ``tbar_seed_s`` only seeds a cold engine's deadlines (spec §3.4), and the windowed estimate moves by a
    few percent from one decision to the next; pushing each move would publish a new version every
    interval with nothing an engine acts on.
    """
    pushed = previous.payload.tbar_seed_s if previous is not None else None
    if tbar_s is None or pushed is None:
        return tbar_s
    return pushed if abs(tbar_s - pushed) <= params.tbar_seed_tolerance_frac * pushed else tbar_s


def unchanged(previous: SlaiPolicy, decision: Decision[SlaiPayload, SlaiState]) -> bool:
    """Whether ``decision`` pushes nothing new: the same payload, and the same state but for the decision count.

    The policy service then publishes no new version until the previous document nears its expiry.
    """
    counted = {"decisions"}
    same_state = previous.state.model_dump(exclude=counted) == decision.state.model_dump(exclude=counted)
    return previous.payload == decision.payload and same_state


def _safety_floor(inputs: SlaiInputs) -> float | None:
    if inputs.tbar_s is None or inputs.step_time_p99_s is None or inputs.tbar_s <= 0:
        return None
    return safety_floor_delta(step_time_p99_s=inputs.step_time_p99_s, tbar_s=inputs.tbar_s)


def _explain(inputs: SlaiInputs, payload: SlaiPayload, delta_min: float | None) -> dict[str, DiagnosticValue]:
    """Diagnostics of DESIGN principle 6: what the rule does at the current estimates."""
    out: dict[str, DiagnosticValue] = {
        "delta_min": delta_min,
        "delta_lo_below_floor": delta_min is not None and payload.delta_lo < delta_min,
        "kv_use_frac": inputs.kv_use_frac,
        "tbar_s": inputs.tbar_s,
        "ttft_p50_s": inputs.ttft_p50_s,
        "arrival_rate_per_s": inputs.arrival_rate_per_s,
    }
    rule = offset_rule_of(payload)
    out["delta_in_effect"] = offset_for_kv_use(inputs.kv_use_frac, rule) if inputs.kv_use_frac is not None else None
    if inputs.tbar_s is not None:
        for tier, tbt_s in sorted(payload.tier_tbt_s.items()):
            for label, delta in (("lo", payload.delta_lo), ("hi", payload.delta_hi)):
                out[f"window_s.{tier}.{label}"] = deferral_window_s(tbt_slo_s=tbt_s, delta=delta, tbar_s=inputs.tbar_s)
    for t in inputs.tiers:
        out[f"tbt_p99_s.{t.tier}"] = t.tbt_p99_s
        out[f"tbt_attainment_frac.{t.tier}"] = t.tbt_attainment_frac
    a0, a_tok = inputs.batch_time_a0_s, inputs.batch_time_a_tok_s_per_token
    if a0 is not None and a_tok is not None and a_tok > 0:
        tightest_s = min(payload.tier_tbt_s.values())
        out["budget_within_min_tbt_tokens"] = max(0, math.floor((tightest_s - a0) / a_tok))
    return out
