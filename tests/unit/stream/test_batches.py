"""The batch handling both stream-processor runtimes share: skip at the fence, dead letters, refused commits,
and the outbox order: nothing is committed whose snapshots were not delivered.

A real in-memory store (same compare-and-set rules as Redis) and a producer that keeps what it is
given stand in for Redis and Kafka; the integration tests run the same code on both for real.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import structlog.testing

from decide.specs import default_registry
from fold.fleet import FleetAggregator
from schemas.errors import BackendUnavailableError
from schemas.estimates import EngineSummary, FleetContribution
from schemas.events import encode_event
from schemas.names import DEADLETTER_TOPIC, ESTIMATES_TOPIC, TELEMETRY_TOPIC, Partition, estimate_key
from schemas.records import EstimateSnapshot
from services.delivery import no_checkpoint
from services.engine_partitions import engine_partition
from services.health import ServiceMetrics
from services.settings import EngineLifecycle
from services.store.memory_store import MemoryStore
from services.stream.batches import (
    CONSUMER_NAME,
    SUMMARY_NAME,
    UNADMITTED_RETENTION_S,
    TelemetryBatches,
)
from services.testing.memory_source import MemoryRecord as Record
from services.testing.models import changed
from services.testing.streams import synthetic_stream
from tests.unit.stream.fakes import Consumer, KeptProducer, Sent


def _records(deployment: str, requests: int = 60) -> list[Record]:
    events = synthetic_stream(engines=1, requests=requests, deployment=deployment, seed=2)
    return [
        Record(TELEMETRY_TOPIC, 0, offset, event.engine_id.encode(), encode_event(event))
        for offset, event in enumerate(events)
    ]


def _batches(
    store: MemoryStore, producer: KeptProducer, consumer: Consumer, checkpoint: Callable[[str], None] = no_checkpoint
) -> TelemetryBatches:
    return TelemetryBatches(
        deployment="dep",
        store=store,
        registry=default_registry(),
        producer=producer,  # type: ignore[arg-type]
        consumer=consumer,
        commit_interval_s=3600.0,
        checkpoint=checkpoint,
    )


class CrashError(Exception):
    """What a crash hook raises in the middle of a batch."""


class DownStore(MemoryStore):
    """A store whose commits and loads fail while ``down``, as Redis does when it stops answering."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False

    def load_states(self, consumer: str, scopes: list[str]) -> dict[str, str]:
        if self.down:
            msg = "redis MGET failed: Timeout reading from socket"
            raise BackendUnavailableError(msg, backend="redis")
        return super().load_states(consumer, scopes)

    def commit(  # type: ignore[override]
        self, consumer: str, offsets: object, states: object, summaries: object, expire_s: object = None
    ) -> bool:
        if self.down:
            msg = "redis commit failed: Timeout reading from socket"
            raise BackendUnavailableError(msg, backend="redis")
        return super().commit(consumer, offsets, states, summaries, expire_s)  # type: ignore[arg-type]


def test_a_restart_resumes_after_the_applied_offset_and_skips_what_is_at_or_below_it() -> None:
    store, records = MemoryStore(), _records("dep")
    first = _batches(store, KeptProducer(), Consumer())
    assert first.resume_positions([(TELEMETRY_TOPIC, 0)], 1) == {}
    first.process(records[:40])
    assert first.commit()
    second = _batches(store, KeptProducer(), Consumer())
    assert second.resume_positions([(TELEMETRY_TOPIC, 0)], 1) == {(TELEMETRY_TOPIC, 0): 40}
    second.process(records)
    assert second.counters.skipped == 40
    assert second.counters.folded == len(records) - 40
    assert second.commit()
    assert store.applied_offsets(CONSUMER_NAME) == {f"{TELEMETRY_TOPIC}:0": len(records) - 1}


def test_an_invalid_record_is_dead_lettered_with_its_source_offset_and_still_advances_the_offset() -> None:
    store, producer = MemoryStore(), KeptProducer()
    batches = _batches(store, producer, Consumer())
    batches.resume_positions([(TELEMETRY_TOPIC, 0)], 1)
    batches.process([Record(TELEMETRY_TOPIC, 0, 7, b"k", b'{"event_type": "nope"')])
    assert batches.commit()
    letters = [json.loads(value) for topic, value in producer.sent if topic == DEADLETTER_TOPIC]
    assert [letter["source"]["offset"] for letter in letters] == [7]
    assert batches.counters.dead_lettered == 1
    assert store.applied_offsets(CONSUMER_NAME) == {f"{TELEMETRY_TOPIC}:0": 7}


def test_a_commit_refused_at_the_fence_drops_the_folded_state_and_rewinds_to_what_the_store_holds() -> None:
    store, records, consumer = MemoryStore(), _records("dep"), Consumer()
    stale = _batches(store, KeptProducer(), consumer)
    stale.resume_positions([(TELEMETRY_TOPIC, 0)], 1)
    newer = _batches(store, KeptProducer(), Consumer())
    newer.resume_positions([(TELEMETRY_TOPIC, 0)], 1)
    newer.process(records[:50])
    assert newer.commit()
    stale.process(records[:30])
    # The engine state the stale member loads already holds these 30 events: none is folded again.
    assert stale.counters.skipped == 30
    assert not stale.commit()
    assert consumer.rewinds == [{(TELEMETRY_TOPIC, 0): 50}]
    assert stale.counters.commits_refused == 1
    stale.process(records)
    assert stale.counters.skipped == 30 + 50
    assert stale.commit()
    assert store.applied_offsets(CONSUMER_NAME) == {f"{TELEMETRY_TOPIC}:0": len(records) - 1}


def test_snapshots_go_to_the_estimates_topic() -> None:
    producer = KeptProducer()
    batches = _batches(MemoryStore(), producer, Consumer())
    batches.resume_positions([(TELEMETRY_TOPIC, 0)], 1)
    batches.process(_records("dep", requests=400))
    estimates = [json.loads(value) for topic, value in producer.sent if topic == ESTIMATES_TOPIC]
    assert estimates
    assert len(estimates) == batches.counters.snapshots
    assert all(snapshot["deployment"] == "dep" for snapshot in estimates)


def test_each_snapshot_is_sent_when_its_event_takes_it_not_after_the_rest_of_the_batch() -> None:
    """The first snapshot must not wait for the summaries of the batch's later triggers (docs/performance.md).

    Fleet joins and contributions are the exception: they wait for the watermark, here the batch's end.
    """
    folded_at_send: list[int] = []

    class WatchingProducer(KeptProducer):
        def send(self, topic: str, key: bytes | None, value: bytes) -> Sent:
            if key != b"fleet":
                folded_at_send.append(batches.counters.folded)
            return super().send(topic, key, value)

    records = _records("dep", requests=400)
    batches = _batches(MemoryStore(), WatchingProducer(), Consumer())
    batches.resume_positions([(TELEMETRY_TOPIC, 0)], 1)
    batches.process(records)
    assert len(folded_at_send) > 1
    assert folded_at_send[0] < folded_at_send[-1] < len(records)


def test_a_commit_by_the_previous_owner_between_assignment_and_first_event_is_not_folded_twice() -> None:
    store, records = MemoryStore(), _records("dep")
    previous = _batches(store, KeptProducer(), Consumer())
    previous.resume_positions([(TELEMETRY_TOPIC, 0)], 1)
    previous.process(records[:50])
    successor = _batches(store, KeptProducer(), Consumer())
    # The race: the successor reads the applied offsets (none yet) before the previous owner's commit
    # on revocation lands, and loads the engine's state only at its first event, after that commit.
    assert successor.resume_positions([(TELEMETRY_TOPIC, 0)], 1) == {}
    assert previous.commit()
    successor.process(records)
    assert successor.counters.skipped == 50
    assert successor.counters.folded == len(records) - 50
    assert successor.commit()
    uninterrupted_store = MemoryStore()
    uninterrupted = _batches(uninterrupted_store, KeptProducer(), Consumer())
    uninterrupted.resume_positions([(TELEMETRY_TOPIC, 0)], 1)
    uninterrupted.process(records)
    assert uninterrupted.commit()
    engines = sorted({json.loads(record.value)["engine_id"] for record in records if record.value is not None})
    assert store.load_states("stream", engines) == uninterrupted_store.load_states("stream", engines)


def test_keys_of_registered_engines_live_for_the_retention_and_those_of_stray_engines_briefly() -> None:
    store, producer = MemoryStore(), KeptProducer()
    records = _records("dep")
    stray = json.loads(records[1].value or b"") | {"engine_id": "made-up", "event_id": "stray-1"}
    batches = TelemetryBatches(
        deployment="dep",
        store=store,
        registry=default_registry(),
        producer=producer,
        consumer=Consumer(),
        commit_interval_s=3600.0,
        lifecycle=EngineLifecycle(registration_grace_s=60.0, retention_s=3600.0),
    )
    batches.resume_positions([(TELEMETRY_TOPIC, 0)], 1)
    batches.process([*records, Record(TELEMETRY_TOPIC, 0, len(records), b"made-up", json.dumps(stray).encode())])
    assert batches.commit()
    assert store.expiries["eng-0"] == 3600
    assert store.expiries["made-up"] == UNADMITTED_RETENTION_S
    assert store.expiries[estimate_key("dep", "made-up", SUMMARY_NAME)] == UNADMITTED_RETENTION_S
    assert "made-up" in store.states
    scopes = {json.loads(value)["scope"] for topic, value in producer.sent if topic == ESTIMATES_TOPIC}
    assert scopes == {"eng-0"}
    assert batches.engines_in_memory() == ["eng-0"]


def test_engines_silent_for_the_retention_in_event_time_are_forgotten_from_memory_and_reload_from_the_store() -> None:
    store = MemoryStore()
    events = synthetic_stream(engines=2, requests=200, deployment="dep", seed=2)
    early = [e for e in events if e.engine_id == "eng-0"]
    late = [changed(e, ts=e.ts + 10_000.0) for e in events if e.engine_id == "eng-1"]
    records = [
        Record(TELEMETRY_TOPIC, 0, offset, event.engine_id.encode(), encode_event(event))
        for offset, event in enumerate([*early, *late])
    ]
    batches = TelemetryBatches(
        deployment="dep",
        store=store,
        registry=default_registry(),
        producer=KeptProducer(),
        consumer=Consumer(),
        commit_interval_s=3600.0,
        lifecycle=EngineLifecycle(registration_grace_s=60.0, retention_s=1000.0),
    )
    batches.resume_positions([(TELEMETRY_TOPIC, 0)], 1)
    batches.process(records)
    assert batches.commit()
    assert batches.engines_in_memory() == ["eng-1"]
    assert set(store.states) == {"eng-0", "eng-1"}


@dataclass
class TwoPartitions:
    """A consumer holding partitions 0 and 1, each with a known end."""

    ends: dict[Partition, int]

    def assigned(self) -> list[Partition]:
        return sorted(self.ends)

    def highwater(self, partition: Partition) -> int | None:
        return self.ends[partition]

    def rewind(self, positions: dict[Partition, int]) -> None:
        raise AssertionError("no commit is refused here")


def _fleet_snapshots_when_read(chunks: list[list[Record]], ends: dict[Partition, int]) -> list[object]:
    """Fold ``chunks`` (one poll each), then merge the fleet contributions produced, in the order produced."""
    producer = KeptProducer()
    batches = TelemetryBatches(
        deployment="dep",
        store=MemoryStore(),
        registry=default_registry(fleet_slot_s=5.0),
        producer=producer,
        consumer=TwoPartitions(ends),
        commit_interval_s=3600.0,
    )
    batches.resume_positions(sorted(ends), 2)
    for chunk in chunks:
        batches.process(chunk)
    batches.idle()
    aggregator = FleetAggregator(deployment="dep", kind="fleetopt", slot_s=5.0)
    contributions = [
        EstimateSnapshot.model_validate_json(value)
        for topic, value in producer.sent
        if topic == ESTIMATES_TOPIC and b"fleet_contribution" in value
    ]
    return [s.estimates for c in contributions for s in aggregator.add(c)]


def test_fleet_snapshots_are_the_same_whether_partitions_are_read_together_or_one_after_the_other() -> None:
    events = synthetic_stream(engines=4, requests=1200, deployment="dep", seed=4)
    offsets = {0: 0, 1: 0}
    records = []
    for event in events:
        partition = int(event.engine_id.rsplit("-", 1)[1]) % 2
        records.append(Record(TELEMETRY_TOPIC, partition, offsets[partition], b"k", encode_event(event)))
        offsets[partition] += 1
    ends = {(TELEMETRY_TOPIC, p): n for p, n in offsets.items()}
    by_partition = [[r for r in records if r.partition == p] for p in (0, 1)]
    live = [records[i : i + 40] for i in range(0, len(records), 40)]
    one_then_other = [by_partition[0][i : i + 500] for i in range(0, len(by_partition[0]), 500)] + [
        by_partition[1][i : i + 500] for i in range(0, len(by_partition[1]), 500)
    ]
    other_then_one = [by_partition[1], by_partition[0]]
    expected = _fleet_snapshots_when_read(live, ends)
    assert len(expected) >= 5
    assert _fleet_snapshots_when_read(one_then_other, ends) == expected
    assert _fleet_snapshots_when_read(other_then_one, ends) == expected


def _exported(metrics: ServiceMetrics, name: str) -> float:
    return sum(
        sample.value
        for family in metrics.registry.collect()
        if family.name == name
        for sample in family.samples
        if sample.name.endswith("_total")
    )


def test_a_retried_batch_produced_again_at_new_offsets_is_skipped_and_counted_not_folded_twice() -> None:
    """A producer without idempotence retries a batch the broker had taken: the records come twice."""
    events = synthetic_stream(engines=1, requests=60, deployment="dep", seed=2)
    values = [encode_event(event) for event in events]
    retried = values[:100] + values[70:100] + values[100:]
    store, metrics = MemoryStore(), ServiceMetrics("stream", "dep")
    batches = TelemetryBatches(
        deployment="dep",
        store=store,
        registry=default_registry(),
        producer=KeptProducer(),  # type: ignore[arg-type]
        consumer=Consumer(),
        metrics=metrics,
        commit_interval_s=3600.0,
    )
    batches.resume_positions([(TELEMETRY_TOPIC, 0)], 1)
    batches.process([Record(TELEMETRY_TOPIC, 0, offset, b"eng-0", value) for offset, value in enumerate(retried)])
    assert batches.commit()
    once = MemoryStore()
    clean = _batches(once, KeptProducer(), Consumer())
    clean.resume_positions([(TELEMETRY_TOPIC, 0)], 1)
    clean.process(_records("dep"))
    assert clean.commit()
    assert (batches.counters.folded, batches.counters.duplicates) == (len(values), 30)
    assert _exported(metrics, "governor_events_duplicate") == 30
    summary = EngineSummary.model_validate_json(once.summaries["gov:dep:est:eng-0:summary"])
    retried_summary = EngineSummary.model_validate_json(store.summaries["gov:dep:est:eng-0:summary"])
    assert retried_summary.duplicate_events == 30
    assert changed(retried_summary, duplicate_events=0) == summary


def test_gaps_and_restarts_are_counted_exported_and_logged() -> None:
    events = synthetic_stream(engines=1, requests=30, deployment="dep", seed=2)
    restarted = [
        changed(event, source_epoch=1, seq=event.seq - 60, event_id=f"{event.event_id}-b") for event in events[60:]
    ]
    stream = events[:20] + events[25:60] + restarted
    metrics = ServiceMetrics("stream", "dep")
    batches = TelemetryBatches(
        deployment="dep",
        store=MemoryStore(),
        registry=default_registry(),
        producer=KeptProducer(),  # type: ignore[arg-type]
        consumer=Consumer(),
        metrics=metrics,
        commit_interval_s=3600.0,
    )
    with structlog.testing.capture_logs() as logs:
        batches.process(
            [Record(TELEMETRY_TOPIC, 0, i, b"eng-0", encode_event(event)) for i, event in enumerate(stream)]
        )
    counters = batches.counters
    assert (counters.seq_gaps, counters.seq_missing, counters.restarts) == (1, 5, 1)
    assert _exported(metrics, "governor_seq_gaps") == 1
    assert _exported(metrics, "governor_seq_missing_events") == 5
    assert _exported(metrics, "governor_engine_restarts") == 1
    assert [e["source_epoch"] for e in logs if e["event"] == "engine_restarted"] == [1]


def _reference(records: list[Record]) -> tuple[dict[str, str], list[bytes]]:
    """The committed states and the snapshots of one uninterrupted pass over ``records``."""
    store, producer = MemoryStore(), KeptProducer()
    batches = _batches(store, producer, Consumer())
    batches.resume_positions([(TELEMETRY_TOPIC, 0)], 1)
    batches.process(records)
    assert batches.commit()
    return store.states, [value for topic, value in producer.sent if topic == ESTIMATES_TOPIC]


class TestOutboxOrder:
    def test_a_crash_mid_batch_commits_nothing_and_the_restart_gives_every_snapshot(self) -> None:
        """The crash unwinds through ``commit`` (as a service's close does); the batch is not half-committed."""
        store, records = MemoryStore(), _records("dep", requests=400)
        producer, consumer = KeptProducer(), Consumer()

        def crash(point: str) -> None:
            if point == "snapshots_folded":
                raise CrashError(point)

        crashing = _batches(store, producer, consumer, crash)
        crashing.resume_positions([(TELEMETRY_TOPIC, 0)], 1)
        with pytest.raises(CrashError):
            crashing.process(records)
        assert crashing.commit()
        assert store.applied_offsets(CONSUMER_NAME) == {}
        assert consumer.rewinds == [{(TELEMETRY_TOPIC, 0): 0}]
        assert crashing.counters.batches_discarded == 1
        restarted = _batches(store, producer, Consumer())
        restarted.resume_positions([(TELEMETRY_TOPIC, 0)], 1)
        restarted.process(records)
        assert restarted.commit()
        states, snapshots = _reference(records)
        assert store.states == states
        assert [value for topic, value in producer.sent if topic == ESTIMATES_TOPIC] == snapshots

    def test_a_discarded_batch_folded_again_counts_each_event_once(self) -> None:
        """``folded`` is what a caller waits on for "every event folded": a re-fold must not count twice.

        With metrics on, as in every service: the fold after the discard exports its folds whole.
        """
        store, records = MemoryStore(), _records("dep", requests=400)
        armed = [False]

        def crash_once(point: str) -> None:
            if armed[0] and point == "snapshots_folded":
                armed[0] = False
                raise CrashError(point)

        consumer, metrics = Consumer(), ServiceMetrics("stream", "dep")
        batches = TelemetryBatches(
            deployment="dep",
            store=store,
            registry=default_registry(),
            producer=KeptProducer(),  # type: ignore[arg-type]
            consumer=consumer,
            metrics=metrics,
            commit_interval_s=3600.0,
            checkpoint=crash_once,
        )
        batches.resume_positions([(TELEMETRY_TOPIC, 0)], 1)
        half, three_quarters = len(records) // 2, 3 * len(records) // 4
        batches.process(records[:half])
        assert batches.commit()
        batches.process(records[half:three_quarters])
        armed[0] = True
        with pytest.raises(CrashError):
            batches.process(records[three_quarters:])
        assert consumer.rewinds == [{(TELEMETRY_TOPIC, 0): half}]
        batches.process(records[half:])
        assert batches.commit()
        assert batches.counters.folded == len(records)
        assert batches.counters.folds_undone > 0
        # The exported counter never goes down: it counts every fold, the undone ones too.
        assert _exported(metrics, "governor_events_folded") == len(records) + batches.counters.folds_undone

    def test_a_refused_commit_undoes_only_the_folds_whose_records_are_read_again(self) -> None:
        """Partition 0 is already applied as far as this member folded it (its own earlier try, whose
        reply was lost): its folds stand. Partition 1 is rewound and read again: its folds come off."""
        events = synthetic_stream(engines=2, requests=120, deployment="dep", seed=2)
        engines = sorted({event.engine_id for event in events})
        by_partition: dict[int, list[Record]] = {0: [], 1: []}
        for event in events:
            partition = engines.index(event.engine_id)
            offset = len(by_partition[partition])
            by_partition[partition].append(
                Record(TELEMETRY_TOPIC, partition, offset, event.engine_id.encode(), encode_event(event))
            )
        store = MemoryStore()
        batches = _batches(store, KeptProducer(), Consumer())
        batches.resume_positions([(TELEMETRY_TOPIC, 0), (TELEMETRY_TOPIC, 1)], 2)
        batches.process(by_partition[0] + by_partition[1])
        assert store.commit(CONSUMER_NAME, {Partition(TELEMETRY_TOPIC, 0).field: len(by_partition[0]) - 1}, {}, {})
        assert not batches.commit()
        assert (batches.counters.folded, batches.counters.folds_undone) == (len(by_partition[0]), len(by_partition[1]))

    def test_snapshots_the_broker_did_not_take_discard_the_batch_and_it_folds_again_identically(self) -> None:
        store, records = MemoryStore(), _records("dep", requests=400)
        producer, consumer = KeptProducer(failing=True), Consumer()
        batches = _batches(store, producer, consumer)
        batches.resume_positions([(TELEMETRY_TOPIC, 0)], 1)
        with pytest.raises(BackendUnavailableError, match="kafka did not take"):
            batches.process(records)
        assert batches.commit()
        assert store.applied_offsets(CONSUMER_NAME) == {}
        producer.failing = False
        producer.sent.clear()
        batches.process(records)
        assert batches.commit()
        states, snapshots = _reference(records)
        assert store.states == states
        assert [value for topic, value in producer.sent if topic == ESTIMATES_TOPIC] == snapshots

    def test_a_commit_while_redis_is_down_keeps_its_writes_for_the_next_one(self) -> None:
        store, records = DownStore(), _records("dep", requests=400)
        batches = _batches(store, KeptProducer(), Consumer())
        batches.resume_positions([(TELEMETRY_TOPIC, 0)], 1)
        half = len(records) // 2
        batches.process(records[:half])
        store.down = True
        with pytest.raises(BackendUnavailableError):
            batches.commit()
        batches.process(records[half:])
        with pytest.raises(BackendUnavailableError):
            batches.commit()
        store.down = False
        assert batches.commit()
        states, _ = _reference(records)
        assert store.states == states
        assert store.applied_offsets(CONSUMER_NAME) == {f"{TELEMETRY_TOPIC}:0": len(records) - 1}

    def test_a_batch_failing_early_rewinds_the_partitions_it_never_reached(self) -> None:
        """Records after the failing one were consumed too; their partitions go back to their first record."""
        store, consumer = DownStore(), Consumer(partitions=(0, 1))
        engine_a = _records("dep", requests=100)
        engine_b = [
            Record(TELEMETRY_TOPIC, 1, r.offset, r.key, r.value.replace(b'"eng-0"', b'"eng-1"') if r.value else None)
            for r in _records("dep", requests=100)
        ]
        batches = _batches(store, KeptProducer(), consumer)
        batches.resume_positions([(TELEMETRY_TOPIC, 0), (TELEMETRY_TOPIC, 1)], 2)
        batches.process(engine_a[:10])
        assert batches.commit()
        store.down = True
        with pytest.raises(BackendUnavailableError):
            batches.process(engine_b[:20] + engine_a[10:30])
        assert consumer.rewinds == [{(TELEMETRY_TOPIC, 1): 0, (TELEMETRY_TOPIC, 0): 10}]
        store.down = False
        batches.process(engine_b + engine_a[10:])
        assert batches.commit()
        assert store.applied_offsets(CONSUMER_NAME) == {
            f"{TELEMETRY_TOPIC}:0": len(engine_a) - 1,
            f"{TELEMETRY_TOPIC}:1": len(engine_b) - 1,
        }


def _contributions(producer: KeptProducer) -> list[tuple[str, int, str]]:
    """The fleet contributions ``producer`` sent: (engine, slot, summary JSON)."""
    found = []
    for snapshot in (EstimateSnapshot.model_validate_json(v) for topic, v in producer.sent if topic == ESTIMATES_TOPIC):
        if isinstance(snapshot.estimates, FleetContribution):
            found.append((snapshot.scope, snapshot.estimates.slot_index, snapshot.estimates.model_dump_json()))
    return found


def test_contributions_a_member_died_holding_reach_the_fleet_from_its_successor_with_nothing_left_to_fold() -> None:
    events = synthetic_stream(engines=1, requests=400, deployment="dep", seed=3)
    assert engine_partition("eng-0", 2) == 0
    records = [Record(TELEMETRY_TOPIC, 0, offset, b"eng-0", encode_event(event)) for offset, event in enumerate(events)]
    assigned = [(TELEMETRY_TOPIC, 0), (TELEMETRY_TOPIC, 1)]

    def member(
        store: MemoryStore, producer: KeptProducer, partitions: tuple[int, ...], ends: dict[int, int]
    ) -> TelemetryBatches:
        return TelemetryBatches(
            deployment="dep",
            store=store,
            registry=default_registry(fleet_slot_s=5.0),
            producer=producer,  # type: ignore[arg-type]
            consumer=Consumer(partitions=partitions, ends=ends),
            commit_interval_s=3600.0,
        )

    uninterrupted_producer = KeptProducer()
    uninterrupted = member(MemoryStore(), uninterrupted_producer, (0,), {0: len(records)})
    uninterrupted.resume_positions(assigned[:1], 2)
    uninterrupted.process(records)
    uninterrupted.idle()
    expected = _contributions(uninterrupted_producer)
    assert len(expected) >= 3

    store, died_producer = MemoryStore(), KeptProducer()
    died = member(store, died_producer, (0, 1), {})
    died.resume_positions(assigned, 2)
    died.process(records)  # partition 1 not read yet: the watermark holds every contribution back
    assert died.commit()
    assert _contributions(died_producer) == []
    successor_producer = KeptProducer()
    successor = member(store, successor_producer, (0,), {0: len(records)})
    successor.resume_positions(assigned[:1], 2)
    successor.idle()  # every event is folded already: only the stored state knows the contributions
    assert _contributions(successor_producer) == expected


class LandsThenFails(MemoryStore):
    """A store whose next commit lands but answers with an error, as when Redis's reply is lost."""

    def __init__(self) -> None:
        super().__init__()
        self.lose_next = False

    def commit(  # type: ignore[override]
        self, consumer: str, offsets: object, states: object, summaries: object, expire_s: object = None
    ) -> bool:
        done = super().commit(consumer, offsets, states, summaries, expire_s)  # type: ignore[arg-type]
        if self.lose_next:
            self.lose_next = False
            msg = "redis commit failed: Timeout reading from socket"
            raise BackendUnavailableError(msg, backend="redis")
        return done


def test_contributions_of_engines_dropped_by_a_refused_retry_are_released_with_nothing_left_to_fold() -> None:
    events = synthetic_stream(engines=1, requests=400, deployment="dep", seed=3)
    records = [Record(TELEMETRY_TOPIC, 0, offset, b"eng-0", encode_event(event)) for offset, event in enumerate(events)]
    uninterrupted_producer = KeptProducer()
    uninterrupted = TelemetryBatches(
        deployment="dep",
        store=MemoryStore(),
        registry=default_registry(fleet_slot_s=5.0),
        producer=uninterrupted_producer,  # type: ignore[arg-type]
        consumer=Consumer(ends={0: len(records)}),
        commit_interval_s=3600.0,
    )
    uninterrupted.resume_positions([(TELEMETRY_TOPIC, 0)], 2)
    uninterrupted.process(records)
    uninterrupted.idle()
    expected = _contributions(uninterrupted_producer)
    assert len(expected) >= 3

    store, producer, consumer = LandsThenFails(), KeptProducer(), Consumer(partitions=(0, 1))
    batches = TelemetryBatches(
        deployment="dep",
        store=store,
        registry=default_registry(fleet_slot_s=5.0),
        producer=producer,  # type: ignore[arg-type]
        consumer=consumer,
        commit_interval_s=3600.0,
    )
    batches.resume_positions([(TELEMETRY_TOPIC, 0), (TELEMETRY_TOPIC, 1)], 2)
    batches.process(records)  # partition 1 not read yet: every contribution is held
    store.lose_next = True
    with pytest.raises(BackendUnavailableError):
        batches.commit()  # landed, with the held contributions in the engine's state
    assert not batches.commit()  # the retry offers the same offsets: refused, the engine dropped
    assert consumer.rewinds == [{(TELEMETRY_TOPIC, 0): len(records)}]  # nothing left to fold
    consumer.ends = {0: len(records), 1: 0}
    batches.idle()
    assert _contributions(producer) == expected


def test_an_empty_poll_releases_only_what_every_partition_still_behind_has_passed() -> None:
    """Under load a poll comes back empty while records wait on the broker: that is no watermark."""
    events = synthetic_stream(engines=1, requests=400, deployment="dep", seed=3)
    records = [Record(TELEMETRY_TOPIC, 0, offset, b"eng-0", encode_event(event)) for offset, event in enumerate(events)]
    producer, consumer = KeptProducer(), Consumer(partitions=(0, 1), ends={0: len(records), 1: 5})
    batches = TelemetryBatches(
        deployment="dep",
        store=MemoryStore(),
        registry=default_registry(fleet_slot_s=5.0),
        producer=producer,  # type: ignore[arg-type]
        consumer=consumer,
        commit_interval_s=3600.0,
    )
    batches.resume_positions([(TELEMETRY_TOPIC, 0), (TELEMETRY_TOPIC, 1)], 2)
    batches.process(records)
    batches.idle()  # partition 1 has five records not fetched yet
    assert _contributions(producer) == []
    consumer.ends[1] = 0
    batches.idle()
    assert len(_contributions(producer)) >= 3


def test_a_partition_read_to_its_end_holds_back_the_others_for_a_while_after_its_last_event() -> None:
    """Its end is that of its last fetch, which under load trails the others': its engine's next events may
    be on the broker. Released at once, the other engine's contributions reached the fleet first."""
    events = synthetic_stream(engines=2, requests=1200, deployment="dep", seed=3)
    partition = {engine: engine_partition(engine, 2) for engine in ("eng-0", "eng-1")}
    assert sorted(partition.values()) == [0, 1]
    records = {0: [], 1: []}
    for event in events:
        p = partition[event.engine_id]
        records[p].append(Record(TELEMETRY_TOPIC, p, len(records[p]), event.engine_id.encode(), encode_event(event)))
    lagging = partition["eng-1"]
    cut = len(records[lagging]) // 2
    now = [0.0]
    producer = KeptProducer()
    consumer = Consumer(partitions=(0, 1), ends={1 - lagging: len(records[1 - lagging]), lagging: cut})
    batches = TelemetryBatches(
        deployment="dep",
        store=MemoryStore(),
        registry=default_registry(fleet_slot_s=5.0),
        producer=producer,  # type: ignore[arg-type]
        consumer=consumer,
        commit_interval_s=3600.0,
        clock=lambda: now[0],
        at_end_hold_s=2.0,
    )
    batches.resume_positions([(TELEMETRY_TOPIC, 0), (TELEMETRY_TOPIC, 1)], 2)
    batches.process([*records[lagging][:cut], *records[1 - lagging]])
    held_at = records[lagging][cut - 1]
    held_ts = next(e.ts for e in events if encode_event(e) == held_at.value)
    slots_released = {slot for engine, slot, _ in _contributions(producer) if engine == "eng-0"}
    assert slots_released
    assert max(slots_released) <= held_ts / 5.0
    now[0] = 1.5
    batches.idle()
    assert {slot for engine, slot, _ in _contributions(producer) if engine == "eng-0"} == slots_released
    now[0] = 2.0
    batches.idle()
    assert max(slot for engine, slot, _ in _contributions(producer) if engine == "eng-0") > held_ts / 5.0 + 2


@pytest.mark.parametrize(
    "stored",
    [
        '{"format": 1, "entries": {}}',  # the policy service's ledger, which once shared the key
        "not json",
        "[1, 2]",
        json.dumps({"format": 3, "engine_id": "another-engine"}),
    ],
)
def test_an_unreadable_stored_engine_state_is_reported_and_replaced_not_a_crash(stored: str) -> None:
    """The probe's engine ``policy-config`` loaded the policy service's state (``KeyError: 'format'``) and
    crash-looped the processor; a state that cannot be read now starts the engine afresh, is counted and
    logged, and the next commit overwrites it."""
    store, producer = MemoryStore(), KeptProducer()
    store.states["eng-0"] = stored
    metrics = ServiceMetrics("stream", "dep")
    batches = TelemetryBatches(
        deployment="dep",
        store=store,
        registry=default_registry(),
        producer=producer,
        consumer=Consumer(),
        commit_interval_s=3600.0,
        metrics=metrics,
    )
    batches.resume_positions([(TELEMETRY_TOPIC, 0)], 1)
    records = _records("dep")
    with structlog.testing.capture_logs() as logs:
        batches.process(records)
    assert batches.commit()
    assert batches.counters.folded == len(records)
    assert batches.counters.states_unreadable == 1
    assert [e["engine_id"] for e in logs if e["event"] == "stored_state_unreadable"] == ["eng-0"]
    assert json.loads(store.states["eng-0"])["engine_id"] == "eng-0"
    value = metrics.registry.get_sample_value(
        "governor_store_values_unreadable_total", {"deployment": "dep", "service": "stream", "what": "engine_state"}
    )
    assert value == 1.0
