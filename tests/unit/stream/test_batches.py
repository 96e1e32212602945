"""The batch handling both stream-processor runtimes share: skip at the fence, dead letters, refused commits,
and the outbox order: nothing is committed whose snapshots were not delivered.

A real in-memory store (same compare-and-set rules as Redis) and a producer that keeps what it is
given stand in for Redis and Kafka; the integration tests run the same code on both for real.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from kafka.errors import KafkaTimeoutError

from schemas.errors import BackendUnavailableError
from schemas.events import encode_event
from schemas.names import DEADLETTER_TOPIC, ESTIMATES_TOPIC, TELEMETRY_TOPIC
from services.delivery import no_checkpoint
from services.policy.specs import default_registry
from services.store.memory_store import MemoryStore
from services.stream.batches import CONSUMER_NAME, Partition, TelemetryBatches
from tests.unit.stream.synthetic import synthetic_stream


@dataclass(frozen=True, slots=True)
class Record:
    """A consumed record as both runtimes hand it over."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


@dataclass(frozen=True, slots=True)
class Sent:
    """A send's future, already completed: delivered, or failed with ``exception``."""

    exception: Exception | None = None

    def succeeded(self) -> bool:
        return self.exception is None


@dataclass
class KeptProducer:
    """Keeps every (topic, value) sent; ``flush`` delivers nothing further; ``failing`` fails every send."""

    sent: list[tuple[str, bytes]] = field(default_factory=list)
    failing: bool = False

    def send(self, topic: str, key: bytes | None, value: bytes) -> Sent:
        self.sent.append((topic, value))
        return Sent(KafkaTimeoutError("broker gone") if self.failing else None)

    def flush(self, timeout: float) -> None:
        return None


@dataclass
class Consumer:
    """A consumer holding partition 0 (or ``partitions``) of the telemetry topic; remembers rewinds."""

    rewinds: list[dict[Partition, int]] = field(default_factory=list)
    partitions: tuple[int, ...] = (0,)

    def assigned(self) -> list[Partition]:
        return [(TELEMETRY_TOPIC, p) for p in self.partitions]

    def highwater(self, partition: Partition) -> int | None:
        return None

    def rewind(self, positions: dict[Partition, int]) -> None:
        self.rewinds.append(positions)


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

    def load_states(self, scopes: list[str]) -> dict[str, str]:
        if self.down:
            msg = "redis MGET failed: Timeout reading from socket"
            raise BackendUnavailableError(msg, backend="redis")
        return super().load_states(scopes)

    def commit(self, consumer: str, offsets: object, states: object, summaries: object) -> bool:  # type: ignore[override]
        if self.down:
            msg = "redis commit failed: Timeout reading from socket"
            raise BackendUnavailableError(msg, backend="redis")
        return super().commit(consumer, offsets, states, summaries)  # type: ignore[arg-type]


def test_a_restart_resumes_after_the_applied_offset_and_skips_what_is_at_or_below_it() -> None:
    store, records = MemoryStore(), _records("dep")
    first = _batches(store, KeptProducer(), Consumer())
    assert first.resume_positions([(TELEMETRY_TOPIC, 0)]) == {}
    first.process(records[:40])
    assert first.commit()
    second = _batches(store, KeptProducer(), Consumer())
    assert second.resume_positions([(TELEMETRY_TOPIC, 0)]) == {(TELEMETRY_TOPIC, 0): 40}
    second.process(records)
    assert second.counters.skipped == 40
    assert second.counters.folded == len(records) - 40
    assert second.commit()
    assert store.applied_offsets(CONSUMER_NAME) == {f"{TELEMETRY_TOPIC}:0": len(records) - 1}


def test_an_invalid_record_is_dead_lettered_with_its_source_offset_and_still_advances_the_offset() -> None:
    store, producer = MemoryStore(), KeptProducer()
    batches = _batches(store, producer, Consumer())
    batches.resume_positions([(TELEMETRY_TOPIC, 0)])
    batches.process([Record(TELEMETRY_TOPIC, 0, 7, b"k", b'{"event_type": "nope"')])
    assert batches.commit()
    letters = [json.loads(value) for topic, value in producer.sent if topic == DEADLETTER_TOPIC]
    assert [letter["source"]["offset"] for letter in letters] == [7]
    assert batches.counters.dead_lettered == 1
    assert store.applied_offsets(CONSUMER_NAME) == {f"{TELEMETRY_TOPIC}:0": 7}


def test_a_commit_refused_at_the_fence_drops_the_folded_state_and_rewinds_to_what_the_store_holds() -> None:
    store, records, consumer = MemoryStore(), _records("dep"), Consumer()
    stale = _batches(store, KeptProducer(), consumer)
    stale.resume_positions([(TELEMETRY_TOPIC, 0)])
    newer = _batches(store, KeptProducer(), Consumer())
    newer.resume_positions([(TELEMETRY_TOPIC, 0)])
    newer.process(records[:50])
    assert newer.commit()
    stale.process(records[:30])
    assert not stale.commit()
    assert consumer.rewinds == [{(TELEMETRY_TOPIC, 0): 50}]
    assert stale.counters.commits_refused == 1
    stale.process(records)
    assert stale.counters.skipped == 50
    assert stale.commit()
    assert store.applied_offsets(CONSUMER_NAME) == {f"{TELEMETRY_TOPIC}:0": len(records) - 1}


def test_snapshots_go_to_the_estimates_topic() -> None:
    producer = KeptProducer()
    batches = _batches(MemoryStore(), producer, Consumer())
    batches.resume_positions([(TELEMETRY_TOPIC, 0)])
    batches.process(_records("dep", requests=400))
    estimates = [json.loads(value) for topic, value in producer.sent if topic == ESTIMATES_TOPIC]
    assert estimates
    assert len(estimates) == batches.counters.snapshots
    assert all(snapshot["deployment"] == "dep" for snapshot in estimates)


def _reference(records: list[Record]) -> tuple[dict[str, str], list[bytes]]:
    """The committed states and the snapshots of one uninterrupted pass over ``records``."""
    store, producer = MemoryStore(), KeptProducer()
    batches = _batches(store, producer, Consumer())
    batches.resume_positions([(TELEMETRY_TOPIC, 0)])
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
        crashing.resume_positions([(TELEMETRY_TOPIC, 0)])
        with pytest.raises(CrashError):
            crashing.process(records)
        assert crashing.commit()
        assert store.applied_offsets(CONSUMER_NAME) == {}
        assert consumer.rewinds == [{(TELEMETRY_TOPIC, 0): 0}]
        assert crashing.counters.batches_discarded == 1
        restarted = _batches(store, producer, Consumer())
        restarted.resume_positions([(TELEMETRY_TOPIC, 0)])
        restarted.process(records)
        assert restarted.commit()
        states, snapshots = _reference(records)
        assert store.states == states
        assert [value for topic, value in producer.sent if topic == ESTIMATES_TOPIC] == snapshots

    def test_snapshots_the_broker_did_not_take_discard_the_batch_and_it_folds_again_identically(self) -> None:
        store, records = MemoryStore(), _records("dep", requests=400)
        producer, consumer = KeptProducer(failing=True), Consumer()
        batches = _batches(store, producer, consumer)
        batches.resume_positions([(TELEMETRY_TOPIC, 0)])
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
        batches.resume_positions([(TELEMETRY_TOPIC, 0)])
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
        batches.resume_positions([(TELEMETRY_TOPIC, 0), (TELEMETRY_TOPIC, 1)])
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
