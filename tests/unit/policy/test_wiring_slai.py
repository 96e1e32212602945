"""SLAI wiring: inputs read from an engine summary, the spec's trigger, and the loop from events to a document."""

from __future__ import annotations

import pytest

from policies.slai import OffsetMode, SlaiParams, TierObservation
from schemas.policy_docs.slai import SlaiPolicy
from schemas.records import EstimateSnapshot
from services.policy.registry import EverySeconds, PolicyRegistry
from services.policy.specs import default_registry
from services.policy.wiring.slai import slai_inputs, slai_spec
from services.replay.offline import OfflineControlPlane
from tests.unit.stream.synthetic import synthetic_stream

SUMMARY = {
    "tbar_s": 0.05,
    "step_time": {"count": 400, "mean": 0.05, "p50": 0.045, "p90": 0.07, "p99": 0.09},
    "last_step": {"num_running": 40.0, "num_waiting": 3.0, "kv_use_frac": 0.97, "kv_capacity_tokens": 235_728.0},
    "arrival_rate_per_s": 1.4,
    "cost": {"mixed": {"alpha_s": 0.02, "beta_s_per_unit": 6e-5, "n_samples": 300, "residual_std_s": 0.004}},
    "tiers": {
        "free": {
            "tbt_slo_s": 0.5,
            "ttft": {"count": 90, "mean": 0.5, "p50": 0.4, "p90": 1.0, "p99": 2.0},
            "tbt_p99": {"count": 90, "mean": 0.3, "p50": 0.3, "p90": 0.35, "p99": 0.38},
            "tbt_gaps": 36_000,
            "tbt_gaps_over_slo": 36,
        },
        "paid": {
            "tbt_slo_s": 0.1,
            "ttft": {"count": 10, "mean": 0.3, "p50": 0.2, "p90": 0.5, "p99": 0.6},
            "tbt_p99": None,
            "tbt_gaps": 0,
            "tbt_gaps_over_slo": 0,
        },
    },
}


def _snapshot(estimates: dict[str, object]) -> EstimateSnapshot:
    return EstimateSnapshot(
        deployment="dep",
        scope="engine-0",
        snapshot_id="sha256:1",
        version=1,
        ts=30.0,
        trigger="slai:every 2s",
        offsets=[],
        estimates=estimates,
    )


class TestSlaiInputs:
    def test_reads_tbar_step_tail_kv_rate_and_the_batch_time_fit(self) -> None:
        inputs = slai_inputs(_snapshot(SUMMARY))
        assert inputs is not None
        assert (inputs.tbar_s, inputs.step_time_p99_s, inputs.kv_use_frac) == (0.05, 0.09, 0.97)
        assert inputs.arrival_rate_per_s == 1.4
        assert (inputs.batch_time_a0_s, inputs.batch_time_a_tok_s_per_token) == (0.02, 6e-5)

    def test_median_ttft_weights_each_tier_median_by_its_count(self) -> None:
        inputs = slai_inputs(_snapshot(SUMMARY))
        assert inputs is not None
        assert inputs.ttft_p50_s == pytest.approx((0.4 * 90 + 0.2 * 10) / 100)

    def test_tiers_carry_p99_gap_and_attainment_or_none_without_samples(self) -> None:
        inputs = slai_inputs(_snapshot(SUMMARY))
        assert inputs is not None
        assert inputs.tiers == (
            TierObservation(tier="free", tbt_p99_s=0.38, tbt_attainment_frac=0.999, tbt_samples=36_000),
            TierObservation(tier="paid", tbt_p99_s=None, tbt_attainment_frac=None, tbt_samples=0),
        )

    def test_no_step_yet_means_not_enough_data(self) -> None:
        assert slai_inputs(_snapshot({k: v for k, v in SUMMARY.items() if k != "tbar_s"})) is None
        assert slai_inputs(_snapshot({})) is None

    def test_a_negative_fit_intercept_is_dropped_not_passed_on(self) -> None:
        bad = SUMMARY | {"cost": {"mixed": {"alpha_s": -0.01, "beta_s_per_unit": 6e-5}}}
        inputs = slai_inputs(_snapshot(bad))
        assert inputs is not None
        assert (inputs.batch_time_a0_s, inputs.batch_time_a_tok_s_per_token) == (None, 6e-5)


class TestSlaiSpec:
    def test_is_engine_scoped_every_two_seconds_and_registered_by_default(self) -> None:
        spec = slai_spec()
        assert (spec.kind, spec.scope, spec.trigger) == ("slai", "engine", EverySeconds(seconds=2.0))
        assert spec.document_type is SlaiPolicy
        assert "slai" in default_registry().kinds()

    def test_decides_the_params_it_was_given(self) -> None:
        spec = slai_spec(SlaiParams(offset_mode=OffsetMode.FIXED))
        inputs = slai_inputs(_snapshot(SUMMARY))
        decision = spec.decide(inputs, None, 30.0)
        assert decision.payload.mode == "fixed"
        assert decision.diagnostics["delta_min"] == pytest.approx(2 * 0.09 / 0.05)
        assert decision.diagnostics["delta_in_effect"] == 10.0

    def test_events_to_documents_in_the_offline_loop(self) -> None:
        plane = OfflineControlPlane("dep", PolicyRegistry([slai_spec()]))
        events = synthetic_stream(engines=2, requests=200)
        for event in events:
            plane.publish(event)
        accepted = [d for d in plane.decisions if d.accepted]
        assert {d.scope for d in accepted} == {e.engine_id for e in events}
        last_ts = max(e.ts for e in events)
        for engine_id in {e.engine_id for e in events}:
            document = plane.current("slai", engine_id, last_ts)
            assert isinstance(document, SlaiPolicy)
            assert document.payload.tbar_seed_s is not None
            assert document.payload.tbar_seed_s > 0
