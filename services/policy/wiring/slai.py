"""Wiring of SLAI (seed 000): its inputs from an engine summary, and its spec (every few seconds).

The SLAI document carries the offset rule, the tier -> TBT map, the token budget and the caps
(specs/seed-000-slai.md section 3.4); the engine applies it between batches. The decision reads the
engine's estimates of spec section 4.3 from the summary of services/stream/estimates.py:

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

from typing import Any

from policies.slai import SlaiInputs, SlaiParams, TierObservation
from policies.slai import decide as decide_slai
from schemas.policy_docs.slai import SlaiPolicy
from schemas.records import EstimateSnapshot
from services.policy.registry import EverySeconds, PolicySpec, engine_obeys
from services.policy.wiring.summary import bind_params, number_at

SLAI_INTERVAL_S = 2.0  # spec §3.4: the control plane's cadence is seconds; the engine switches per batch


def _median_ttft_s(tiers: dict[str, Any]) -> float | None:
    """Count-weighted mean of the tiers' median TTFTs, or None without samples."""
    weighted = 0.0
    count = 0.0
    for tier in tiers.values():
        p50 = number_at(tier, "ttft", "p50")
        n = number_at(tier, "ttft", "count")
        if p50 is not None and n is not None and n > 0:
            weighted += p50 * n
            count += n
    return weighted / count if count > 0 else None


def _tier_observation(name: str, tier: dict[str, Any]) -> TierObservation:
    gaps = number_at(tier, "tbt_gaps") or 0.0
    over = number_at(tier, "tbt_gaps_over_slo") or 0.0
    p99 = number_at(tier, "tbt_p99", "p99")
    return TierObservation(
        tier=name,
        tbt_p99_s=p99 if p99 is not None and p99 >= 0 else None,
        tbt_attainment_frac=min(1.0, max(0.0, 1.0 - over / gaps)) if gaps > 0 else None,
        tbt_samples=int(gaps),
    )


def _non_negative(value: float | None) -> float | None:
    return value if value is not None and value >= 0 else None


def slai_inputs(snapshot: EstimateSnapshot) -> SlaiInputs | None:
    """SLAI inputs from an engine summary; None until the engine has reported a step (no tbar yet)."""
    s = snapshot.estimates
    tbar = number_at(s, "tbar_s")
    if tbar is None or tbar <= 0:
        return None
    tiers_raw = s.get("tiers")
    tiers: dict[str, Any] = tiers_raw if isinstance(tiers_raw, dict) else {}
    kv = number_at(s, "last_step", "kv_use_frac")
    return SlaiInputs(
        tbar_s=tbar,
        step_time_p99_s=_non_negative(number_at(s, "step_time", "p99")),
        kv_use_frac=min(1.0, kv) if kv is not None and kv >= 0 else None,
        ttft_p50_s=_median_ttft_s(tiers),
        arrival_rate_per_s=_non_negative(number_at(s, "arrival_rate_per_s")),
        batch_time_a0_s=_non_negative(number_at(s, "cost", "mixed", "alpha_s")),
        batch_time_a_tok_s_per_token=_non_negative(number_at(s, "cost", "mixed", "beta_s_per_unit")),
        tiers=tuple(_tier_observation(name, tiers[name]) for name in sorted(tiers) if isinstance(tiers[name], dict)),
    )


def slai_spec(params: SlaiParams | None = None) -> PolicySpec:
    """SLAI per engine, every ``SLAI_INTERVAL_S`` seconds of the engine's event time."""
    return PolicySpec(
        kind="slai",
        scope="engine",
        trigger=EverySeconds(seconds=SLAI_INTERVAL_S),
        reads=("tbar_s", "step_time", "last_step", "tiers", "arrival_rate_per_s", "cost"),
        document_type=SlaiPolicy,
        inputs_from_snapshot=slai_inputs,
        decide=bind_params(decide_slai, params or SlaiParams()),
        applies_to=engine_obeys("slai"),
    )
