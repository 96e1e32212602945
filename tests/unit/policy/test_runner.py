"""From snapshot to document: versioning, validity, inputs digest, duplicates and thin data."""

from __future__ import annotations

from schemas.policy_docs import AdmissionPolicy
from schemas.policy_docs.base import SourceOffset
from schemas.records import EstimateSnapshot
from services.policy.runner import decide_from_snapshot
from services.policy.specs import default_registry

SUMMARY = {
    "last_step": {"num_waiting": 40.0, "num_running": 20.0, "kv_use_frac": 0.5, "kv_capacity_tokens": 1e6},
    "arrival_rate_short_per_s": 2.0,
    "completion_rate_short_per_s": 2.0,
}


def _snapshot(version: int, ts: float, estimates: dict | None = None) -> EstimateSnapshot:
    return EstimateSnapshot(
        deployment="dep",
        scope="eng-0",
        snapshot_id=f"sha256:{version}",
        version=version,
        ts=ts,
        trigger="admission:every 5s",
        offsets=[SourceOffset(topic="t", partition=0, offset=version)],
        estimates=estimates if estimates is not None else SUMMARY,
    )


class TestDecideFromSnapshot:
    spec = default_registry().get("admission")

    def test_first_decision_is_version_one_valid_from_the_snapshot_time(self) -> None:
        outcome = decide_from_snapshot(self.spec, _snapshot(1, 10.0), None)
        document = outcome.document
        assert isinstance(document, AdmissionPolicy)
        assert (document.version, document.computed_at, document.valid_until) == (1, 10.0, 40.0)
        assert document.previous_version is None
        assert document.inputs.estimate_versions == {"eng-0": 1}
        assert document.payload.pressure == 1.0
        assert document.payload.level == "overloaded"

    def test_next_decision_increments_version_and_reads_previous_state(self) -> None:
        first = decide_from_snapshot(self.spec, _snapshot(1, 10.0), None).document
        calm = SUMMARY | {"last_step": SUMMARY["last_step"] | {"num_waiting": 0.0}}
        second = decide_from_snapshot(self.spec, _snapshot(2, 15.0, calm), first).document
        assert isinstance(second, AdmissionPolicy)
        assert second.version == 2
        assert second.previous_version == 1
        assert second.payload.pressure == 0.9  # falls slowly: 1 + 0.1 * (0 - 1)
        assert second.payload.level == "overloaded"

    def test_a_snapshot_already_decided_from_is_skipped(self) -> None:
        first = decide_from_snapshot(self.spec, _snapshot(3, 10.0), None).document
        outcome = decide_from_snapshot(self.spec, _snapshot(3, 10.0), first)
        assert outcome.document is None
        assert outcome.skipped == "duplicate_snapshot"

    def test_missing_estimates_mean_not_enough_data(self) -> None:
        outcome = decide_from_snapshot(self.spec, _snapshot(1, 10.0, {}), None)
        assert outcome.document is None
        assert outcome.skipped == "not_enough_data"
