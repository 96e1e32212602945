"""Adaptive delta tuning: ours, off by default (spec §8 P18 "choosing delta from P99 TBT feedback").

The paper fixes delta_lo = 5 and delta_hi = 10 (§7.1). This tuner moves delta_lo, the offset the
engine uses below the KV threshold, within [delta_min, delta_hi], where delta_min = 2 T_B,p99 / tbar
is the safety floor of spec §3.4:

- up one step when any tier with enough samples misses its TBT (P99 gap above TBT_k, or fewer
  than ``tbt_attainment_target_frac`` of gaps within it): decodes turn critical sooner;
- down one step when every such tier has headroom (P99 gap <= ``tbt_headroom_frac`` * TBT_k) and
  the median TTFT is above ``ttft_target_s``: more of each batch goes to prefills;
- a move needs ``adaptive_patience`` consecutive decisions pointing the same way and
  ``adaptive_cooldown_s`` of event time since the last move (hysteresis against noisy windows).

Deviation: not in the paper; it is a control-plane extension, and it is off unless
``SlaiParams.adaptive_enabled`` is set.
"""

from __future__ import annotations

from dataclasses import dataclass

from policies.slai.inputs import SlaiInputs
from policies.slai.params import SlaiParams
from schemas.policy_docs.slai import SlaiState


@dataclass(frozen=True, slots=True, kw_only=True)
class AdaptiveStep:
    """Outcome of one tuner step.

    Attributes:
        delta_lo: the delta_lo to push.
        state: the tuner's memory for the next decision.
        signal: -1 (lower), +1 (raise) or 0 (hold): what the estimates point to now.
        moved: whether delta_lo changed in this step.
        reason: short explanation for diagnostics.
    """

    delta_lo: float
    state: SlaiState
    signal: int
    moved: bool
    reason: str


def tuning_signal(inputs: SlaiInputs, params: SlaiParams) -> tuple[int, str]:
    """Return the direction the estimates point delta_lo to, and why (-1 lower, +1 raise, 0 hold)."""
    eligible = [
        t
        for t in inputs.tiers
        if t.tbt_samples >= params.min_tier_samples and (t.tbt_p99_s is not None or t.tbt_attainment_frac is not None)
    ]
    if not eligible:
        return 0, "no tier has enough TBT samples"
    for t in eligible:
        target_s = params.tbt_for(t.tier)
        late = t.tbt_p99_s is not None and t.tbt_p99_s > target_s
        short = t.tbt_attainment_frac is not None and t.tbt_attainment_frac < params.tbt_attainment_target_frac
        if late or short:
            return 1, f"tier {t.tier} misses its TBT of {target_s} s"
    roomy = all(
        t.tbt_p99_s is not None and t.tbt_p99_s <= params.tbt_headroom_frac * params.tbt_for(t.tier) for t in eligible
    )
    if roomy and inputs.ttft_p50_s is not None and inputs.ttft_p50_s > params.ttft_target_s:
        return -1, f"median TTFT {inputs.ttft_p50_s} s above {params.ttft_target_s} s with TBT headroom"
    return 0, "TBT met, no TTFT pressure or no headroom"


def adapt_delta_lo(
    inputs: SlaiInputs, state: SlaiState, params: SlaiParams, now_s: float, delta_min: float | None
) -> AdaptiveStep:
    """Run one step of the tuner and return delta_lo and the new state.

    Args:
        inputs: the engine's estimates.
        state: the previous decision's state (a fresh ``SlaiState()`` at first).
        params: the tuner's knobs (``adaptive_*``, targets) and the paper's delta_lo / delta_hi.
        now_s: event time of this decision.
        delta_min: the safety floor, or None when tbar or T_B,p99 is not estimated; without it
            the tuner never goes below the paper's delta_lo.
    """
    floor = min(delta_min, params.delta_hi) if delta_min is not None else min(params.delta_lo, params.delta_hi)
    current = state.adaptive_delta_lo if state.adaptive_delta_lo is not None else params.delta_lo
    signal, reason = tuning_signal(inputs, params)
    count = state.pending_count + 1 if signal != 0 and signal == state.pending_direction else (1 if signal else 0)
    cooled = state.last_move_s is None or now_s - state.last_move_s >= params.adaptive_cooldown_s
    target = current
    if signal != 0 and count >= params.adaptive_patience and cooled:
        target = current + signal * params.adaptive_step
    target = min(max(target, floor), params.delta_hi)
    moved = target != current
    next_state = SlaiState(
        adaptive_delta_lo=target,
        pending_direction=signal,
        pending_count=0 if moved else count,
        last_move_s=now_s if moved else state.last_move_s,
        decisions=state.decisions + 1,
    )
    return AdaptiveStep(delta_lo=target, state=next_state, signal=signal, moved=moved, reason=reason)
