"""SLAI wiring: inputs read from a real engine summary, the spec's trigger, and the loop from events to a document."""

from __future__ import annotations

import pytest

from decide.registry import PolicyRegistry
from decide.specs import default_registry
from decide.wiring.slai import slai_inputs, slai_spec
from decide.wiring.summary import engine_summary
from fold.triggers import EverySeconds
from policies.slai import OffsetMode, SlaiParams, TierObservation
from schemas.estimates import LinearCostFit, TierSummary
from schemas.policy_docs.slai import SlaiPolicy
from schemas.records import EstimateSnapshot
from services.replay.offline import OfflineControlPlane
from services.testing.models import changed
from services.testing.streams import synthetic_stream
from tests.fixtures import last_snapshot


@pytest.fixture
def snapshot(demo_plane: OfflineControlPlane) -> EstimateSnapshot:
    """The last SLAI snapshot of the demo's first SLAI engine (two SLO tiers)."""
    return last_snapshot(demo_plane, "slai", "slai-0")


def _with(snapshot: EstimateSnapshot, **update: object) -> EstimateSnapshot:
    return changed(snapshot, estimates=changed(engine_summary(snapshot), **update))


class TestSlaiInputs:
    def test_reads_tbar_step_tail_kv_rate_and_the_batch_time_fit(self, snapshot: EstimateSnapshot) -> None:
        s = engine_summary(snapshot)
        assert s.step_time_s is not None
        assert s.last_step is not None
        assert s.cost.mixed is not None
        inputs = slai_inputs(snapshot)
        assert inputs is not None
        assert (inputs.tbar_s, inputs.step_time_p99_s) == (s.tbar_s, s.step_time_s.p99_s)
        assert (inputs.kv_use_frac, inputs.arrival_rate_per_s) == (s.last_step.kv_use_frac, s.arrival_rate_per_s)
        assert (inputs.batch_time_a0_s, inputs.batch_time_a_tok_s_per_token) == (
            s.cost.mixed.alpha_s,
            s.cost.mixed.beta_s_per_unit,
        )

    def test_median_ttft_weights_each_tier_median_by_its_count(self, snapshot: EstimateSnapshot) -> None:
        s = engine_summary(snapshot)
        ttfts = [t.ttft_s for t in s.tiers.values() if t.ttft_s is not None]
        assert len(ttfts) == 2
        inputs = slai_inputs(snapshot)
        assert inputs is not None
        expected = sum(q.p50_s * q.count for q in ttfts) / sum(q.count for q in ttfts)
        assert inputs.ttft_p50_s == pytest.approx(expected)

    def test_tiers_carry_p99_gap_and_attainment_or_none_without_samples(self, snapshot: EstimateSnapshot) -> None:
        s = engine_summary(snapshot)
        free = changed(s.tiers["free"], tbt_gaps=36_000, tbt_gaps_over_slo=36)
        paid = changed(s.tiers["paid"], tbt_p99_s=None, tbt_gaps=0, tbt_gaps_over_slo=0)
        assert s.tiers["free"].tbt_p99_s is not None
        inputs = slai_inputs(_with(snapshot, tiers={"free": free, "paid": paid}))
        assert inputs is not None
        assert inputs.tiers == (
            TierObservation(
                tier="free",
                tbt_p99_s=s.tiers["free"].tbt_p99_s.p99_s,
                tbt_attainment_frac=1.0 - 36 / 36_000,
                tbt_samples=36_000,
            ),
            TierObservation(tier="paid", tbt_p99_s=None, tbt_attainment_frac=None, tbt_samples=0),
        )

    def test_a_tier_without_a_tbt_slo_has_no_attainment_rather_than_full(self, snapshot: EstimateSnapshot) -> None:
        s = engine_summary(snapshot)
        unbounded = TierSummary(tbt_slo_s=None, ttft_s=None, tbt_p99_s=None, tbt_gaps=5_000, tbt_gaps_over_slo=0)
        inputs = slai_inputs(_with(snapshot, tiers={"free": s.tiers["free"], "best-effort": unbounded}))
        assert inputs is not None
        observed = {t.tier: t for t in inputs.tiers}
        assert observed["best-effort"] == TierObservation(
            tier="best-effort", tbt_p99_s=None, tbt_attainment_frac=None, tbt_samples=5_000
        )
        assert observed["free"].tbt_attainment_frac is not None

    def test_no_step_yet_means_not_enough_data(self, snapshot: EstimateSnapshot) -> None:
        assert slai_inputs(_with(snapshot, tbar_s=None)) is None

    def test_a_negative_fit_intercept_is_dropped_not_passed_on(self, snapshot: EstimateSnapshot) -> None:
        s = engine_summary(snapshot)
        mixed = LinearCostFit(alpha_s=-0.01, beta_s_per_unit=6e-5, n_samples=10, residual_std_s=0.0)
        inputs = slai_inputs(_with(snapshot, cost=changed(s.cost, mixed=mixed)))
        assert inputs is not None
        assert (inputs.batch_time_a0_s, inputs.batch_time_a_tok_s_per_token) == (None, 6e-5)


class TestSlaiSpec:
    def test_is_engine_scoped_every_two_seconds_and_registered_by_default(self) -> None:
        spec = slai_spec()
        assert (spec.kind, spec.scope, spec.trigger) == ("slai", "engine", EverySeconds(seconds=2.0))
        assert spec.document_type is SlaiPolicy
        assert "slai" in default_registry().kinds()

    def test_decides_the_params_it_was_given(self, snapshot: EstimateSnapshot) -> None:
        s = engine_summary(snapshot)
        assert s.step_time_s is not None
        assert s.tbar_s is not None
        spec = slai_spec(SlaiParams(offset_mode=OffsetMode.FIXED))
        inputs = slai_inputs(snapshot)
        decision = spec.decide(inputs, None, snapshot.ts)
        assert decision.payload.mode == "fixed"
        assert decision.diagnostics["delta_min"] == pytest.approx(2 * s.step_time_s.p99_s / s.tbar_s)

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
