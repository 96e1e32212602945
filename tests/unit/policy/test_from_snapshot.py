"""From snapshot to document: versioning, validity, inputs digest, duplicates and thin data."""

from __future__ import annotations

import pytest

from decide.from_snapshot import decide_from_snapshot
from decide.specs import default_registry
from decide.wiring.summary import engine_summary
from schemas.estimates import EngineSummary, LastStep
from schemas.policy_docs import AdmissionPolicy
from schemas.policy_docs.base import SourceOffset
from schemas.records import EstimateSnapshot
from services.replay.offline import OfflineControlPlane
from services.testing.models import changed
from tests.fixtures import last_snapshot

BUSY = LastStep(running_requests=20, waiting_requests=40, kv_use_frac=0.5, kv_capacity_tokens=1_000_000)


@pytest.fixture
def summary(demo_plane: OfflineControlPlane) -> EngineSummary:
    """A real admission summary of the demo, with a long queue and balanced flow rates."""
    real = engine_summary(last_snapshot(demo_plane, "admission", "h200-0"))
    return changed(real, last_step=BUSY, arrival_rate_short_per_s=2.0, completion_rate_short_per_s=2.0)


def _snapshot(version: int, ts: float, summary: EngineSummary) -> EstimateSnapshot:
    return EstimateSnapshot(
        deployment="dep",
        scope="eng-0",
        snapshot_id=f"sha256:{version}",
        version=version,
        ts=ts,
        trigger="admission:every 5s",
        offsets=[SourceOffset(topic="t", partition=0, offset=version)],
        estimates=summary,
    )


class TestDecideFromSnapshot:
    spec = default_registry().get("admission")

    def test_first_decision_is_version_one_valid_from_the_snapshot_time(self, summary: EngineSummary) -> None:
        outcome = decide_from_snapshot(self.spec, _snapshot(1, 10.0, summary), None)
        document = outcome.document
        assert isinstance(document, AdmissionPolicy)
        assert (document.version, document.computed_at, document.valid_until) == (1, 10.0, 40.0)
        assert document.previous_version is None
        assert document.inputs.estimate_versions == {"eng-0": 1}
        assert document.payload.pressure == 1.0
        assert document.payload.level == "overloaded"

    def test_next_decision_increments_version_and_reads_previous_state(self, summary: EngineSummary) -> None:
        first = decide_from_snapshot(self.spec, _snapshot(1, 10.0, summary), None).document
        calm = changed(summary, last_step=changed(BUSY, waiting_requests=0))
        second = decide_from_snapshot(self.spec, _snapshot(2, 15.0, calm), first).document
        assert isinstance(second, AdmissionPolicy)
        assert second.version == 2
        assert second.previous_version == 1
        assert second.payload.pressure == 0.9  # falls slowly: 1 + 0.1 * (0 - 1)
        assert second.payload.level == "overloaded"

    def test_a_snapshot_already_decided_from_is_skipped(self, summary: EngineSummary) -> None:
        first = decide_from_snapshot(self.spec, _snapshot(3, 10.0, summary), None).document
        outcome = decide_from_snapshot(self.spec, _snapshot(3, 10.0, summary), first)
        assert outcome.document is None
        assert outcome.skipped == "duplicate_snapshot"

    def test_missing_estimates_mean_not_enough_data(self, summary: EngineSummary) -> None:
        outcome = decide_from_snapshot(self.spec, _snapshot(1, 10.0, changed(summary, last_step=None)), None)
        assert outcome.document is None
        assert outcome.skipped == "not_enough_data"


class TestUnchangedDecisions:
    spec = default_registry().get("slai")

    def _slai_snapshot(self, demo_plane: OfflineControlPlane, version: int, ts: float) -> EstimateSnapshot:
        real = last_snapshot(demo_plane, "slai", "slai-0")
        return EstimateSnapshot.model_validate(
            real.model_dump() | {"snapshot_id": f"sha256:{version}", "version": version, "ts": ts}
        )

    def test_an_unchanged_decision_waits_until_the_document_is_half_way_to_expiry(
        self, demo_plane: OfflineControlPlane
    ) -> None:
        first = decide_from_snapshot(self.spec, self._slai_snapshot(demo_plane, 1, 100.0), None).document
        assert first is not None
        half = first.computed_at + (first.valid_until - first.computed_at) / 2.0
        held = decide_from_snapshot(self.spec, self._slai_snapshot(demo_plane, 2, half - 1.0), first)
        assert (held.document, held.skipped) == (None, "unchanged")
        refreshed = decide_from_snapshot(self.spec, self._slai_snapshot(demo_plane, 3, half), first).document
        assert refreshed is not None
        assert (refreshed.version, refreshed.payload) == (2, first.payload)
