"""Wiring of SLAI (seed 000): its inputs from an engine summary, and its spec (every few seconds).

The SLAI document carries the offset rule, the tier -> TBT map, the token budget and the caps
(specs/seed-000-slai.md section 3.4); the engine applies it between batches. The decision reads the
engine's estimates of spec section 4.3 from the summary of fold/engine_estimates.py:

- tbar (cumulative mean step time) and the windowed P99 step time (the safety floor delta_min);
- KV-block use after the last step;
- per tier: the P99 token gap and the share of gaps within the tier's TBT;
- the median TTFT and the arrival rate;
- the batch-time fit T = a0 + a_tok * tau of mixed steps, tau = prefill tokens + decodes.

Deviation: the summary keeps TTFT sketches per tier only, so the overall median TTFT is the
count-weighted mean of the tiers' medians (exact with one tier, close when one tier dominates, as
with the paper's 5% paid users). A tier's P99 token gap is the P99 of its requests' P99 gaps, which
bounds the P99 over all gaps from above. Both steer only diagnostics and the adaptive tuner (ours,
off by default).
"""

from __future__ import annotations

from decide.registry import PolicySpec, engine_obeys
from decide.wiring.summary import bind_params, engine_summary
from fold.triggers import EverySeconds
from policies.slai import SlaiInputs, SlaiParams, TierObservation
from policies.slai import decide as decide_slai
from policies.slai.decide import unchanged as slai_unchanged
from schemas.estimates import TierSummary
from schemas.policy_docs.slai import SlaiPolicy
from schemas.records import EstimateSnapshot

SLAI_INTERVAL_S = 2.0  # spec §3.4: the control plane's cadence is seconds; the engine switches per batch


def _median_ttft_s(tiers: dict[str, TierSummary]) -> float | None:
    """Count-weighted mean of the tiers' median TTFTs, or None without samples."""
    weighted = 0.0
    count = 0.0
    for tier in tiers.values():
        ttft = tier.ttft_s
        if ttft is not None and ttft.count > 0:
            weighted += ttft.p50_s * ttft.count
            count += ttft.count
    return weighted / count if count > 0 else None


def _tier_observation(name: str, tier: TierSummary) -> TierObservation:
    gaps = float(tier.tbt_gaps)
    over = float(tier.tbt_gaps_over_slo)
    p99 = tier.tbt_p99_s.p99_s if tier.tbt_p99_s is not None else None
    return TierObservation(
        tier=name,
        tbt_p99_s=p99 if p99 is not None and p99 >= 0 else None,
        tbt_attainment_frac=min(1.0, max(0.0, 1.0 - over / gaps)) if gaps > 0 and _has_slo(tier) else None,
        tbt_samples=int(gaps),
    )


def _has_slo(tier: TierSummary) -> bool:
    """Whether the tier names a TBT SLO: without one no gap is over it, and attainment means nothing (not 1.0)."""
    return tier.tbt_slo_s is not None and tier.tbt_slo_s > 0


def _non_negative(value: float | None) -> float | None:
    return value if value is not None and value >= 0 else None


def slai_inputs(snapshot: EstimateSnapshot) -> SlaiInputs | None:
    """SLAI inputs from an engine summary; None until the engine has reported a step (no tbar yet)."""
    s = engine_summary(snapshot)
    tbar = s.tbar_s
    if tbar is None or tbar <= 0:
        return None
    step = s.last_step
    mixed = s.cost.mixed
    return SlaiInputs(
        tbar_s=tbar,
        step_time_p99_s=_non_negative(s.step_time_s.p99_s if s.step_time_s is not None else None),
        kv_use_frac=min(1.0, step.kv_use_frac) if step is not None and step.kv_use_frac >= 0 else None,
        ttft_p50_s=_median_ttft_s(s.tiers),
        arrival_rate_per_s=_non_negative(s.arrival_rate_per_s),
        batch_time_a0_s=_non_negative(mixed.alpha_s if mixed is not None else None),
        batch_time_a_tok_s_per_token=_non_negative(mixed.beta_s_per_unit if mixed is not None else None),
        tiers=tuple(_tier_observation(name, s.tiers[name]) for name in sorted(s.tiers)),
    )


def slai_spec(params: SlaiParams | None = None) -> PolicySpec:
    """SLAI per engine, every ``SLAI_INTERVAL_S`` seconds of the engine's event time."""
    return PolicySpec(
        kind="slai",
        scope="engine",
        trigger=EverySeconds(seconds=SLAI_INTERVAL_S),
        document_type=SlaiPolicy,
        inputs_from_snapshot=slai_inputs,
        decide=bind_params(decide_slai, params or SlaiParams()),
        applies_to=engine_obeys("slai"),
        unchanged=slai_unchanged,
    )
