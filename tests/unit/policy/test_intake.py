"""services/policy/intake.py: every record shape is read without raising; the ledger refuses inconsistent snapshots."""

from __future__ import annotations

import json

import pytest

from schemas.policy_docs.base import SourceOffset
from schemas.records import EstimateSnapshot, PolicyConfigRecord
from services.policy.intake import MAX_RECORD_BYTES, RESYNC_RUN, Refusal, SnapshotLedger, read_record
from tests.fixtures import admission_snapshot, synthetic_engine_summary


@pytest.fixture(scope="module")
def summary_snapshot() -> EstimateSnapshot:
    return admission_snapshot(synthetic_engine_summary(), version=1, ts=10.0)


def _at(snapshot: EstimateSnapshot, version: int, offset: int, snapshot_id: str | None = None) -> EstimateSnapshot:
    return snapshot.model_copy(
        update={
            "version": version,
            "snapshot_id": snapshot_id or f"sha256:eng-0-{version}",
            "offsets": [SourceOffset(topic="gov.telemetry", partition=0, offset=offset)],
        }
    )


class TestReadRecord:
    def test_a_snapshot_and_a_config_record_are_read(self, summary_snapshot: EstimateSnapshot) -> None:
        assert read_record(summary_snapshot.model_dump_json().encode()) == summary_snapshot
        config = PolicyConfigRecord(deployment="dep", name="live", config=None, digest=None)
        assert read_record(config.model_dump_json().encode()) == config

    @pytest.mark.parametrize(
        ("value", "reason"),
        [
            (None, "null value (a tombstone): nothing to read"),
            (b"\xff\xfe\x00", "invalid record: Invalid JSON"),
            (b"[1, 2]", "invalid record: Input should be an object"),
            (b'{"record_type": "deadletter"}', "invalid record: Input tag 'deadletter' found using 'record_type'"),
            (b" " * (MAX_RECORD_BYTES + 1), f"record of {MAX_RECORD_BYTES + 1} bytes is over"),
        ],
    )
    def test_what_cannot_be_read_is_refused_with_the_reason(self, value: bytes | None, reason: str) -> None:
        refused = read_record(value)
        assert isinstance(refused, Refusal)
        assert refused.reason.startswith(reason)

    def test_the_refusal_names_the_field_at_fault(self, summary_snapshot: EstimateSnapshot) -> None:
        body = json.loads(summary_snapshot.model_dump_json())
        body["version"] = 0
        refused = read_record(json.dumps(body).encode())
        assert refused == Refusal(
            reason="invalid record: Input should be greater than or equal to 1 at estimate_snapshot.version",
            field="estimate_snapshot.version",
        )


class TestSnapshotLedger:
    def test_versions_one_after_another_and_their_replays_are_taken(self, summary_snapshot: EstimateSnapshot) -> None:
        ledger = SnapshotLedger()
        taken = [ledger.check(_at(summary_snapshot, v, 10 * v)).refused for v in (1, 2, 3)]
        replayed = [ledger.check(_at(summary_snapshot, v, 10 * v)).refused for v in (2, 3)]
        assert taken + replayed == [None] * 5

    def test_a_forged_high_version_is_refused_and_the_next_genuine_one_is_taken(
        self, summary_snapshot: EstimateSnapshot
    ) -> None:
        ledger = SnapshotLedger()
        ledger.check(_at(summary_snapshot, 5, 50))
        forged = ledger.check(_at(summary_snapshot, 1_000_000_000, 60))
        assert forged.refused == "snapshot version gap for eng-0: 1000000000 after 5"
        assert ledger.check(_at(summary_snapshot, 6, 61)).refused is None

    def test_a_new_version_behind_the_last_offset_is_refused(self, summary_snapshot: EstimateSnapshot) -> None:
        ledger = SnapshotLedger()
        ledger.check(_at(summary_snapshot, 5, 50))
        assert ledger.check(_at(summary_snapshot, 6, 49)).refused == (
            "snapshot 6 of eng-0 is at offset 49, behind 50 of 5"
        )

    def test_a_replay_with_another_id_or_a_later_offset_is_refused(self, summary_snapshot: EstimateSnapshot) -> None:
        ledger = SnapshotLedger()
        ledger.check(_at(summary_snapshot, 5, 50))
        assert ledger.check(_at(summary_snapshot, 5, 50, snapshot_id="sha256:other")).refused == (
            "snapshot 5 of eng-0 differs from the one already taken at that version"
        )
        assert ledger.check(_at(summary_snapshot, 4, 70)).refused == (
            "old snapshot 4 of eng-0 claims offset 70, past 50 of 5"
        )

    def test_a_run_of_refused_snapshots_numbered_one_after_another_is_followed(
        self, summary_snapshot: EstimateSnapshot
    ) -> None:
        """A snapshot lost for good cannot freeze an engine: after RESYNC_RUN in a row the ledger resyncs."""
        ledger = SnapshotLedger()
        ledger.check(_at(summary_snapshot, 5, 50))
        verdicts = [ledger.check(_at(summary_snapshot, v, 10 * v)) for v in range(7, 7 + RESYNC_RUN)]
        assert [v.refused is None for v in verdicts] == [False] * (RESYNC_RUN - 1) + [True]
        assert verdicts[-1].resynced
        assert ledger.check(_at(summary_snapshot, 7 + RESYNC_RUN, 100)).refused is None

    def test_the_ledger_round_trips_through_json(self, summary_snapshot: EstimateSnapshot) -> None:
        ledger = SnapshotLedger()
        ledger.check(_at(summary_snapshot, 5, 50))
        ledger.check(_at(summary_snapshot, 9, 90))
        again = SnapshotLedger.from_json(ledger.to_json())
        assert again.to_json() == ledger.to_json()
        assert again.check(_at(summary_snapshot, 6, 60)).refused is None
