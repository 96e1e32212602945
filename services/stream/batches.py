"""The stream processor's batch handling, shared by both runtimes (kafka-python and faust-streaming).

A runtime is only its consumer loop: it hands each batch of ``gov.telemetry`` records to
``TelemetryBatches.process`` and tells it of partition assignment and revocation. Everything else
happens here, once:

1. every record is read by ``read_record``, which never raises: a record of any shape that is not a
   valid event (no value, not JSON, oversized, against the contract) goes to ``gov.deadletter`` with
   its code, reason and source offset, and is counted;
2. a record at or below its partition's applied offset (kept in Redis) is skipped, so a restarted
   processor never folds an event twice;
3. valid events are checked by their engine's guard (fold/event_guard.py): a duplicate
   ``event_id`` is skipped and counted, ``seq`` gaps and restarts are counted, and an event of an
   older producer generation or out of event-time bounds is dead-lettered; the others are folded
   (fold/folder.py) into their engine's estimates, loading the engine's stored state the
   first time this processor sees it after an assignment; an event the loaded state already holds
   (the previous owner committed after this one read the offsets) is skipped, so the window between
   reading offsets and loading states cannot fold anything twice;
4. the snapshots the fold took (and the dead letters) are produced, each handed to the producer as
   soon as it is taken, and confirmed delivered at the end of the batch (services/delivery.py); fleet contributions
   are held until the member's event-time watermark (the least event time folded among the assigned
   partitions it has not read to their end) passes them, then produced in event-time order, all
   under the key ``fleet`` (one partition: fold/fleet.py says why);
5. at most every ``commit_interval_s`` (and when idle, on revocation and on close) the touched
   engines' states, their summaries and the folded offsets are committed to Redis in one atomic,
   offset-fenced write. Committing at an interval rather than per batch keeps the serialisation of
   estimator state off the per-event path; it only widens what a crash re-folds;
6. state stays bounded (``EngineLifecycle``): an engine's keys live ``retention_s`` after its last commit (an engine not
   yet admitted by the fold, ``UNADMITTED_RETENTION_S``), and engines not admitted, or whose latest
   event is ``retention_s`` of event time behind the newest one folded, are forgotten from memory
   after each commit (they reload from Redis if they speak again).

The outbox order: a state is committed only after every snapshot it took is on ``gov.estimates``
(fleet contributions it still holds are part of the state, and are produced once released). A
batch that fails anywhere before its delivery is confirmed (Redis down while loading an engine,
the broker not taking a record, any error) is discarded whole: the engines folded since the last
commit are forgotten, the partitions rewound to what was last committed, so nothing a later commit
(or ``close``) writes includes events whose snapshots were never produced. A failed commit keeps
what it would have written, for the next one. A crash between a produce and the next commit
re-folds those events after restart and re-produces the same snapshots, which the policy service
recognises as duplicates (same scope, version and id). On assignment the runtime seeks each
partition to ``resume_positions`` (the applied offset + 1); on revocation the engines of revoked
partitions are forgotten, so their new owner rebuilds them from Redis. Engines whose stored state
holds fleet contributions are loaded eagerly, at assignment and before the batch after a refused
commit or a discarded batch forgot them, never only at their next event, which may never come.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import structlog
from kafka import KafkaProducer

from fold.event_guard import DEFAULT_LIMITS, Admission, GuardLimits
from fold.folder import Folder
from fold.triggers import TriggerSpec
from schemas.engines import PolicyApplied
from schemas.errors import BackendUnavailableError, InvalidInputError
from schemas.events import Event, parse_event
from schemas.names import (
    DEADLETTER_TOPIC,
    ESTIMATES_TOPIC,
    STREAM_CONSUMER,
    TELEMETRY_TOPIC,
    Partition,
    RecordPosition,
    ack_key,
    estimate_key,
    partition_field,
)
from schemas.policy_docs.base import SourceOffset
from schemas.records import DeadLetter, EstimateSnapshot
from schemas.signing import PolicyKeyring, sign_snapshot
from services.delivery import Checkpoint, Delivery, no_checkpoint
from services.engine_partitions import engine_partition
from services.health import ServiceMetrics
from services.kafka_clients import ConsumedRecord
from services.settings import DEFAULT_LIFECYCLE, STREAM_COMMIT_INTERVAL_S, EngineLifecycle
from services.store.protocol import Store

log = structlog.get_logger(__name__)

AT_END_HOLD_S = 2.0  # four of Apache Kafka's 500 ms fetch waits: a fetch a round behind arrives within it
CONSUMER_NAME = STREAM_CONSUMER
SUMMARY_NAME = "summary"
FOREIGN_SOURCES_LOGGED = 1000  # (deployment, engine) pairs warned about once each
RAW_BYTES_KEPT = 70_000  # of a dead letter's value: DeadLetter.raw's bound (a byte decodes to at most one character)
UNADMITTED_RETENTION_S = 600
FLEET_KEY = b"fleet"  # the key of every fleet contribution: one partition, one order, one owner


class ConsumerView(Protocol):
    """What the batch handling needs of a runtime's consumer: its assignment, high waters, and seeks."""

    def assigned(self) -> list[Partition]:
        """The partitions this member holds now."""
        ...

    def highwater(self, partition: Partition) -> int | None:
        """The partition's end offset as last fetched, or None when not known yet."""
        ...

    def rewind(self, positions: dict[Partition, int]) -> None:
        """Make the next records of each partition start at the given offset (after a refused commit)."""
        ...


@dataclass(slots=True)
class StreamCounters:
    """What the processor has done, for logs, metrics and tests."""

    folded: int = 0
    folds_undone: int = 0
    dead_lettered: int = 0
    skipped: int = 0
    duplicates: int = 0
    seq_gaps: int = 0
    seq_missing: int = 0
    restarts: int = 0
    foreign: int = 0
    snapshots: int = 0
    batches: int = 0
    commits: int = 0
    commits_refused: int = 0
    batches_discarded: int = 0
    states_unreadable: int = 0
    last_batch_latency_s: float = 0.0
    first_batch_at_s: float | None = None
    last_batch_at_s: float | None = None
    lag: dict[str, int] = field(default_factory=dict)


def _holds_contributions(stored: str) -> bool:
    """True when a stored engine state holds fleet contributions; False for one that cannot be read (nothing held)."""
    try:
        state = json.loads(stored)
    except ValueError:
        return False
    return isinstance(state, dict) and bool(state.get("held_contributions"))


def read_record(record: ConsumedRecord) -> Event | DeadLetter:
    """Turn one consumed record into the event to fold, or the dead letter that says why it is none.

    It never raises, whatever the record holds: a null or non-bytes value, bytes that are not UTF-8
    or not JSON, an oversized value, JSON of the wrong types or of another schema.
    """
    try:
        return parse_event(record.value, source=lambda: record_source(record))
    except InvalidInputError as exc:
        return dead_letter(record.value, exc, read_position(record))


def record_source(record: ConsumedRecord) -> str:
    """``topic:partition@offset``: where a refused record was read, as its message says."""
    return f"{partition_field(record.topic, record.partition)}@{record.offset}"


def dead_letter(value: object, exc: InvalidInputError, position: SourceOffset) -> DeadLetter:
    """The dead letter of a record's ``value`` refused with ``exc``, read at ``position``."""
    if isinstance(value, bytes):
        raw = value[:RAW_BYTES_KEPT].decode("utf-8", errors="replace")
    elif isinstance(value, str):
        raw = value[:RAW_BYTES_KEPT]
    else:
        raw = "" if value is None else repr(value)[:RAW_BYTES_KEPT]
    return DeadLetter(code=exc.code, reason=str(exc)[:2048], field=exc.field, source=position, raw=raw)


def read_position(record: ConsumedRecord) -> SourceOffset:
    """Where ``record`` was read."""
    return SourceOffset(topic=record.topic, partition=record.partition, offset=record.offset)


class TelemetryBatches:
    """Parse, dead-letter, fold, produce snapshots and commit, for whichever consumer loop feeds it."""

    def __init__(
        self,
        *,
        deployment: str,
        store: Store,
        registry: Iterable[TriggerSpec],
        producer: KafkaProducer,
        consumer: ConsumerView,
        clock: Callable[[], float] = time.monotonic,
        metrics: ServiceMetrics | None = None,
        commit_interval_s: float = STREAM_COMMIT_INTERVAL_S,
        lifecycle: EngineLifecycle = DEFAULT_LIFECYCLE,
        limits: GuardLimits = DEFAULT_LIMITS,
        checkpoint: Checkpoint = no_checkpoint,
        keyring: PolicyKeyring | None = None,
        at_end_hold_s: float = AT_END_HOLD_S,
    ) -> None:
        """Handle batches for ``deployment``; ``checkpoint`` is called at ``snapshots_folded`` and
        ``snapshots_flushed`` of each batch that took snapshots, and at each ``committed`` (the crash
        tests kill the process there). With ``keyring`` every snapshot is signed with its signing key
        as the stream processor's (schemas/signing.py): the policy service decides from no other."""
        self._deployment = deployment
        self._keyring = keyring
        self._store = store
        self._folder = Folder(deployment, registry, registration_grace_s=lifecycle.registration_grace_s, limits=limits)
        self._retention_s = lifecycle.retention_s
        self._delivery = Delivery(producer)
        self._checkpoint = checkpoint
        self._consumer = consumer
        self._clock = clock
        self._metrics = metrics
        self._commit_interval_s = commit_interval_s
        self.counters = StreamCounters()
        self._applied: dict[str, int] = {}
        self._folded: dict[str, int] = {}
        self._engine_partition: dict[str, str] = {}
        self._last_commit_s = clock()
        self._pending_offsets: dict[str, int] = {}
        self._pending_from: dict[str, int] = {}
        self._pending_engines: set[str] = set()
        self._pending_acks: dict[str, str] = {}
        self._pending_folds: dict[str, int] = {}  # partition field -> events folded since its last commit
        self._metrics_folded = 0
        self._metrics_dead = 0
        self._foreign_sources: set[tuple[str, str]] = set()
        self._partition_ts: dict[str, float] = {}
        self._partition_folded_at: dict[str, float] = {}
        self._at_end_hold_s = at_end_hold_s
        self._dropped: dict[str, str] = {}  # engine -> its partition's field, forgotten by ``_drop``

    @property
    def pending(self) -> bool:
        """True while folded offsets wait for a commit (an idle exit now would leave them to a restart)."""
        return bool(self._pending_offsets)

    def engines_in_memory(self) -> list[str]:
        """The engines whose estimates this member holds in memory now."""
        return sorted(self._folder.engines)

    def resume_positions(self, partitions: Iterable[Partition], partition_count: int) -> dict[Partition, int]:
        """Read the applied offsets from Redis; return where each assigned partition resumes (applied + 1).

        A partition without an applied offset is left out: the runtime reads it from its earliest
        offset. The engines of the assigned partitions whose stored state holds fleet contributions
        are loaded now (``partition_count``: the telemetry topic's partitions, to tell which engines
        are whose), not at their next event.

        Raises:
            BackendUnavailableError: Redis failed.
        """
        self._applied = self._store.applied_offsets(CONSUMER_NAME)
        self._folded = dict(self._applied)
        assigned = sorted(Partition(*tp) for tp in partitions)
        positions = {tp: self._applied[tp.field] + 1 for tp in assigned if tp.field in self._applied}
        holding = self._load_holding(assigned, partition_count)
        log.info("partitions_assigned", partitions=sorted(tp.partition for tp in assigned), holding=holding)
        return positions

    def _load_holding(self, assigned: list[Partition], partition_count: int) -> int:
        """Load the assigned partitions' engines whose stored state holds fleet contributions; return how many.

        A contribution held at the last commit reaches the fleet only when its engine is in memory
        and the watermark passes it. An engine loaded lazily, at its next event, would keep it from
        the fleet for as long as the engine stays quiet, and for good when the previous owner had
        folded the engine's last event before it died: the fleet slot would close without it.
        """
        numbers = {partition for topic, partition in assigned if topic == TELEMETRY_TOPIC}
        if partition_count <= 0 or not numbers:
            return 0
        placed = {
            engine: engine_partition(engine, partition_count) for engine in self._store.estimate_scopes(SUMMARY_NAME)
        }
        return self._load_if_holding(
            {engine: Partition(TELEMETRY_TOPIC, number).field for engine, number in placed.items() if number in numbers}
        )

    def _load_if_holding(self, candidates: dict[str, str]) -> int:
        """Load those of ``candidates`` (engine -> its partition's field) not in memory whose stored state
        holds fleet contributions; return how many.

        Raises:
            BackendUnavailableError: Redis failed.
        """
        engines = sorted(engine for engine in candidates if not self._folder.has(engine))
        loaded = 0
        for engine, stored in self._store.load_states(CONSUMER_NAME, engines).items():
            if not _holds_contributions(stored):
                continue
            self._load(engine, stored)
            self._engine_partition[engine] = candidates[engine]
            loaded += 1
        return loaded

    def _load(self, engine: str, stored: str | None) -> None:
        """Install ``engine``'s stored state; one that cannot be read is reported and replaced by a fresh state.

        A malformed value under an engine's key (written by hand, by another tool, or left by a
        release whose keys collided) must never stop the processor: retrying cannot fix it, and
        every engine of the deployment would wait behind it. The engine starts afresh and the next
        commit overwrites the value.
        """
        try:
            self._folder.load(engine, stored)
        except InvalidInputError as exc:
            self.counters.states_unreadable += 1
            if self._metrics is not None:
                self._metrics.stored_value_unreadable("engine_state")
            log.warning("stored_state_unreadable", engine_id=engine, reason=str(exc)[:300], action="start_afresh")
            self._folder.load(engine, None)

    def _drop(self, engines: list[str]) -> None:
        """Forget ``engines`` folded since the last commit; they are reloaded before the next batch (``_reload``).

        Loaded lazily, at its next event, an engine whose stored state holds fleet contributions
        would keep them from the fleet for as long as it stays quiet (the same hole as at assignment).
        """
        for engine in engines:
            tp = self._engine_partition.pop(engine, None)
            if tp is not None:
                self._dropped[engine] = tp
        self._folder.drop(engines)

    def _reload(self) -> None:
        """Reload the engines ``_drop`` forgot whose stored state holds fleet contributions.

        Raises:
            BackendUnavailableError: Redis failed (they stay to be reloaded).
        """
        if self._dropped:
            self._load_if_holding(self._dropped)
            self._dropped.clear()

    def revoked(self, partitions: Iterable[Partition]) -> None:
        """Commit, then forget the engines of revoked partitions: their next owner loads them from Redis.

        With Redis down the uncommitted work is discarded instead: the next owner re-folds it.
        """
        try:
            self.commit()
        except BackendUnavailableError as exc:
            log.warning("commit_failed_on_revocation", error=str(exc)[:300])
            self._discard(set(), {})
        revoked = {Partition(*tp).field for tp in partitions}
        engines = [e for e, tp in self._engine_partition.items() if tp in revoked]
        self._folder.drop(engines)
        for engine in engines:
            del self._engine_partition[engine]
        self._dropped = {e: tp for e, tp in self._dropped.items() if tp not in revoked}
        log.info(
            "partitions_revoked",
            partitions=sorted(Partition.parse(tp).partition for tp in revoked),
            engines=len(engines),
        )

    def next_offsets(self) -> dict[Partition, int]:
        """The next offset to fold of each assigned partition that has folded or applied one."""
        folded = self._folded
        assigned = [Partition(*tp) for tp in self._consumer.assigned()]
        return {tp: folded[tp.field] + 1 for tp in assigned if tp.field in folded}

    def forget_partition(self, partition: Partition) -> dict[str, int]:
        """Drop what was folded from ``partition`` and not committed, and its engines (a log reset).

        Returns:
            The snapshot version each dropped engine had reached in memory.
        """
        field_name = Partition(*partition).field
        for offsets in (self._applied, self._folded, self._pending_offsets, self._pending_from, self._pending_folds):
            offsets.pop(field_name, None)
        engines = sorted(e for e, tp in self._engine_partition.items() if tp == field_name)
        versions = {e: self._folder.engines[e].snapshot_version for e in engines if self._folder.has(e)}
        self._folder.drop(engines)
        self._dropped = {e: tp for e, tp in self._dropped.items() if tp != field_name}
        for engine in engines:
            del self._engine_partition[engine]
            self._pending_engines.discard(engine)
        return versions

    def idle(self) -> None:
        """Called by the consumer loop when a poll brought nothing: release what the watermark passed, commit, report.

        An empty poll does not mean every partition is read to its end: under load a fetch can come
        back late while records wait on the broker. Releasing everything held then let one engine's
        contributions reach the fleet slots before the others' (the fleet closed slots with that
        engine alone), so the watermark is the same as after a batch; it holds nothing back once
        every partition's high watermark is reached.
        """
        try:
            self._reload()
            if self._release(self._watermark()):
                self._delivery.confirm()
        except BaseException:
            self._discard(set(), {})
            raise
        self.commit()
        if self._metrics is not None:
            self._metrics.progressed()

    def process(self, records: Sequence[ConsumedRecord]) -> None:
        """Fold one batch and confirm its snapshots delivered; commit when the commit interval has passed.

        Raises:
            BackendUnavailableError: Redis or the broker failed before the snapshots were delivered (the
                batch and everything uncommitted are discarded and the partitions rewound), or the
                commit failed (kept for the next one).
        """
        started = self._clock()
        if self.counters.first_batch_at_s is None:
            self.counters.first_batch_at_s = started
        snapshots: list[EstimateSnapshot] = []
        last_ts: dict[str, float] = {}
        touched: set[str] = set()
        batch_from: dict[str, int] = {}
        for record in records:
            tp = partition_field(record.topic, record.partition)
            if record.offset > self._folded.get(tp, -1):
                batch_from[tp] = min(batch_from.get(tp, record.offset), record.offset)
        try:
            self._reload()
            for record in records:
                tp = partition_field(record.topic, record.partition)
                if record.offset <= self._folded.get(tp, -1):
                    self.counters.skipped += 1
                    continue
                self._folded[tp] = record.offset
                self._pending_offsets[tp] = record.offset
                self._pending_from.setdefault(tp, record.offset)
                read = read_record(record)
                if isinstance(read, DeadLetter):
                    self._send_dead_letter(record, read)
                    continue
                event = read
                if event.deployment != self._deployment:
                    self._foreign(event)
                    continue
                touched.add(event.engine_id)
                self._ensure_loaded(event, tp)
                position = RecordPosition(record.topic, record.partition, record.offset)
                if self._folder.already_folded(event.engine_id, position):
                    self.counters.skipped += 1
                    continue
                self._pending_engines.add(event.engine_id)
                try:
                    admission = self._folder.admit(event, position)
                except InvalidInputError as exc:
                    self._send_dead_letter(record, dead_letter(record.value, exc, read_position(record)))
                    continue
                if admission.duplicate:
                    self.counters.duplicates += 1
                    if self._metrics is not None:
                        self._metrics.duplicates.inc()
                    continue
                self._admitted(event, admission)
                last_ts[event.engine_id] = event.ts
                self._partition_ts[tp] = max(self._partition_ts.get(tp, event.ts), event.ts)
                self._partition_folded_at[tp] = started
                taken = self._folder.apply(event, position)
                if taken:
                    if not snapshots:
                        self._checkpoint("snapshots_folded")
                    self._send_snapshots(taken)
                    snapshots.extend(taken)
                self.counters.folded += 1
                self._pending_folds[tp] = self._pending_folds.get(tp, 0) + 1
            released = self._release(self._watermark())
            self._delivery.confirm()
        except BaseException:
            self._discard(touched, batch_from)
            raise
        if snapshots:
            self._checkpoint("snapshots_flushed")
        self.counters.snapshots += len(snapshots) + released
        self.counters.batches += 1
        if self._clock() - self._last_commit_s >= self._commit_interval_s:
            self.commit()
        self.counters.last_batch_at_s = self._clock()
        self.counters.last_batch_latency_s = self.counters.last_batch_at_s - started
        self._observe(len(snapshots), started, last_ts)

    def _send_snapshots(self, snapshots: list[EstimateSnapshot]) -> None:
        """Hand the snapshots one event took to the producer now, not after the rest of the batch.

        A batch that holds a trigger for every engine (their heartbeats cross a policy's period
        together) builds a summary per engine, about a millisecond each; sent at the end of the
        batch, the first engine's snapshot waited for all the others (12 ms p50 at 5k events/s,
        docs/performance.md). The batch still confirms delivery before anything is committed, so a
        failure later in the batch discards it as before, and the snapshots already sent are
        produced again by the re-fold, as after a crash, and recognised as duplicates downstream.
        The caller passes ``snapshots_folded`` once per batch, before its first snapshot is sent.
        """
        for snapshot in snapshots:
            self._delivery.send(ESTIMATES_TOPIC, snapshot.scope.encode(), self._signed(snapshot))

    def _signed(self, snapshot: EstimateSnapshot) -> bytes:
        """The record value of ``snapshot``: signed as the stream processor's where the deployment has a key."""
        if self._keyring is not None:
            snapshot = sign_snapshot(snapshot, self._keyring.signing, "stream")
        return snapshot.model_dump_json().encode()

    def _discard(self, touched: set[str], batch_from: dict[str, int]) -> None:
        """Forget everything folded since the last commit and rewind to it (a batch failed before delivery).

        Every partition of the failed batch is rewound too, to its first record in the batch: records
        the batch never reached were consumed all the same.
        """
        engines = sorted(self._pending_engines | touched)
        self._drop(engines)
        starts = dict(self._pending_from)
        for field_name, first in batch_from.items():
            starts[field_name] = min(starts.get(field_name, first), first)
        assigned = set(self._consumer.assigned())
        rewind: dict[Partition, int] = {}
        for field_name, first in starts.items():
            self._folded[field_name] = first - 1
            partition = Partition.parse(field_name)
            if partition in assigned:
                rewind[partition] = first
        self._pending_offsets.clear()
        self._pending_from.clear()
        self._pending_engines.clear()
        self._pending_acks.clear()
        self._undo_folds()
        self._consumer.rewind(rewind)
        self.counters.batches_discarded += 1
        log.warning("batch_discarded", engines=len(engines), partitions=sorted(p for _, p in rewind))

    def _undo_folds(self, kept: Iterable[str] = ()) -> None:
        """Take the folds since the last commit off ``folded``: they were dropped, and their records are read again.

        ``folded`` then counts each event once however often a failure made it fold again, which is
        what a caller waiting for "every event folded" needs; ``folds_undone`` says how many were undone.
        The partitions ``kept`` are not read again (Redis already holds what was folded from them), so
        their folds stand.
        """
        for field_name in kept:
            self._pending_folds.pop(field_name, None)
        undone = sum(self._pending_folds.values())
        self.counters.folded -= undone
        self.counters.folds_undone += undone
        self._pending_folds.clear()

    def commit(self) -> bool:
        """Write the folded engines' states and summaries with their offsets, atomically (step 5).

        Raises:
            BackendUnavailableError: Redis failed; what it would have written stays for the next commit.

        Returns:
            False when the store refused (a newer owner of a partition committed past us): the
            folded state is dropped and the runtime rewinds the partitions to what the store holds.
        """
        self._last_commit_s = self._clock()
        if not self._pending_offsets:
            return True
        engines = sorted(self._pending_engines)
        states = {engine: self._folder.state_json(engine) for engine in engines}
        summaries = {
            estimate_key(self._deployment, engine, SUMMARY_NAME): self._folder.summary_json(engine)
            for engine in engines
        } | self._pending_acks
        expire_s = self._expiries(engines, summaries)
        offsets = dict(self._pending_offsets)
        committed = self._store.commit(CONSUMER_NAME, offsets, states, summaries, expire_s)
        self._pending_offsets.clear()
        self._pending_from.clear()
        self._pending_engines.clear()
        self._pending_acks.clear()
        if committed:
            self._pending_folds.clear()
            self._applied.update(offsets)
            self.counters.commits += 1
            self._forget_idle()
            log.debug("batch_committed", engines=len(engines), partitions=len(offsets))
            self._checkpoint("committed")
            return True
        self.counters.commits_refused += 1
        log.warning("commit_refused", offsets=offsets)
        self._applied = self._store.applied_offsets(CONSUMER_NAME)
        self._drop(engines)
        self._undo_folds(kept=[tp for tp, offset in offsets.items() if self._applied.get(tp, -1) >= offset])
        assigned = set(self._consumer.assigned())
        rewind: dict[Partition, int] = {}
        for field_name in offsets:
            applied = self._applied.get(field_name, -1)
            self._folded[field_name] = applied
            partition = Partition.parse(field_name)
            if partition in assigned:
                rewind[partition] = applied + 1
        self._consumer.rewind(rewind)
        return False

    def _watermark(self) -> float | None:
        """The least event time folded among the assigned partitions that may still bring older events (None: none).

        A partition not fetched yet, or not folded yet, holds everything back. One read to its end
        holds back at its last event time for ``at_end_hold_s`` after it last folded an event: its end
        is the high watermark of its last fetch, and under load that fetch can be a round behind the
        others' while its engine's next events wait on the broker. Released at once, the other
        engines' contributions reached the fleet slots ahead of that engine's first ones, and the
        fleet closed its first slots without it (a whole engine missing from FleetOpt's first plan,
        which the same log read at full speed did not miss). A partition that never had an event
        holds nothing back.
        """
        behind: list[float] = []
        now_s = self._clock()
        for partition in self._consumer.assigned():
            tp = Partition(*partition).field
            high = self._consumer.highwater(partition)
            if high is not None and self._folded.get(tp, -1) + 1 >= high:
                folded_at = self._partition_folded_at.get(tp)  # set with _partition_ts, at every fold
                if folded_at is not None and now_s - folded_at < self._at_end_hold_s:
                    behind.append(self._partition_ts[tp])
                continue
            ts = self._partition_ts.get(tp)
            if ts is None:
                return -math.inf
            behind.append(ts)
        return min(behind) if behind else None

    def _release(self, watermark_ts: float | None) -> int:
        """Produce the held fleet contributions the watermark has passed, in event-time order; return how many."""
        released = self._folder.release(watermark_ts)
        for snapshot in released:
            self._delivery.send(ESTIMATES_TOPIC, FLEET_KEY, self._signed(snapshot))
            self._pending_engines.add(snapshot.scope)
        return len(released)

    def _expiries(self, engines: list[str], summaries: dict[str, str]) -> dict[str, int]:
        """Time to live of each key written: the retention, or the short one of engines not admitted yet."""
        retention = math.ceil(self._retention_s)
        expire_s: dict[str, int] = {}
        for engine in engines:
            ttl = retention if self._folder.admitted(engine) else min(retention, UNADMITTED_RETENTION_S)
            expire_s[engine] = ttl
            expire_s[estimate_key(self._deployment, engine, SUMMARY_NAME)] = ttl
        for key in summaries:
            expire_s.setdefault(key, retention)
        return expire_s

    def _forget_idle(self) -> None:
        """Drop from memory the engines not admitted, and those silent for the retention in event time."""
        pending = self._pending_engines
        holding = set(self._folder.holding())
        last = {engine: estimates.last_ts for engine, estimates in self._folder.engines.items()}
        newest = max((ts for ts in last.values() if ts is not None), default=None)
        idle = [
            engine
            for engine, ts in last.items()
            if engine not in pending
            and engine not in holding
            and (
                not self._folder.admitted(engine)
                or (newest is not None and ts is not None and newest - ts > self._retention_s)
            )
        ]
        self._folder.drop(idle)
        for engine in idle:
            self._engine_partition.pop(engine, None)

    def _observe(self, snapshots: int, started: float, last_ts: dict[str, float]) -> None:
        if self._metrics is None:
            return
        self._metrics.engines_seen(last_ts)
        # The exported counter counts every fold, those a failure undid included: a Prometheus counter never goes down.
        folds = self.counters.folded + self.counters.folds_undone
        self._metrics.events_folded.inc(folds - self._metrics_folded)
        self._metrics.events_dead_lettered.inc(self.counters.dead_lettered - self._metrics_dead)
        self._metrics_folded, self._metrics_dead = folds, self.counters.dead_lettered
        self._metrics.snapshots.inc(snapshots)
        self._metrics.loop_latency.observe(self._clock() - started)
        lag = 0
        for tp in self._consumer.assigned():
            high = self._consumer.highwater(tp)
            if high is not None:
                lag += max(0, high - self._folded.get(Partition(*tp).field, -1) - 1)
        self._metrics.lag.set(lag)
        self._metrics.progressed()

    def _foreign(self, event: Event) -> None:
        """Count an event of another deployment; say so once per (deployment, engine), loudly.

        A wrong ``GOVERNOR_DEPLOYMENT`` on an engine otherwise looks like an engine that never speaks.
        The set of sources logged is capped, so a stream of made-up names cannot grow it without bound.
        """
        self.counters.foreign += 1
        if self._metrics is not None:
            self._metrics.foreign(event.deployment)
        source = (event.deployment, event.engine_id)
        if source not in self._foreign_sources and len(self._foreign_sources) < FOREIGN_SOURCES_LOGGED:
            self._foreign_sources.add(source)
            log.warning(
                "foreign_deployment_events",
                deployment=event.deployment,
                engine_id=event.engine_id,
                ours=self._deployment,
            )

    def _ensure_loaded(self, event: Event, tp: str) -> None:
        engine = event.engine_id
        if not self._folder.has(engine):
            self._load(engine, self._store.load_states(CONSUMER_NAME, [engine]).get(engine))
        self._engine_partition[engine] = tp

    def _admitted(self, event: Event, admission: Admission) -> None:
        """Count what the guard saw of an admitted event; keep a policy ack for the commit."""
        if admission.seq_missing:
            self.counters.seq_gaps += 1
            self.counters.seq_missing += admission.seq_missing
            log.info("seq_gap", engine_id=event.engine_id, seq=event.seq, missing=admission.seq_missing)
            if self._metrics is not None:
                self._metrics.seq_gaps.inc()
                self._metrics.seq_missing.inc(admission.seq_missing)
        if admission.restart:
            self.counters.restarts += 1
            if self._metrics is not None:
                self._metrics.restarts.inc()
            log.info("engine_restarted", engine_id=event.engine_id, source_epoch=event.source_epoch)
        if isinstance(event, PolicyApplied):
            self._pending_acks[ack_key(self._deployment, event.kind, event.engine_id)] = event.model_dump_json()
            if self._metrics is not None:
                self._metrics.acked(event)

    def _send_dead_letter(self, record: ConsumedRecord, letter: DeadLetter) -> None:
        key = record.key if isinstance(record.key, bytes) else None
        self._delivery.send(DEADLETTER_TOPIC, key, letter.model_dump_json().encode())
        self.counters.dead_lettered += 1
        if self._metrics is not None:
            self._metrics.dead_lettered(letter.code)
        log.info(
            "event_dead_lettered",
            code=letter.code,
            reason=letter.reason[:200],
            partition=record.partition,
            offset=record.offset,
        )
