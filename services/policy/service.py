"""The live policy service: ``gov.estimates`` snapshots -> decisions in Redis and on ``gov.policy.decisions``.

It reads its partitions of the snapshot topic in order: an engine's snapshots all travel on its
scope's partition and every fleet contribution on the ``fleet`` partition, so every policy sees its
snapshots in the order the processors took them, however many members share the topic (each
member restores and commits the state of its own partitions only: services/policy/handler.py).
Each poll is one batch, handled in the outbox order (services/delivery.py):

1. every record is read (services/policy/intake.py); one it cannot read, or an inconsistent
   snapshot (the snapshot ledger), goes to ``gov.deadletter`` with its reason and offset;
2. each snapshot is decided (``DecisionMaker.stage``): decision records, the fleet snapshots that
   fleet aggregators close, and the documents to write, not yet written;
3. the records are produced and confirmed delivered (services/delivery.py);
4. only then are the documents compare-and-set into Redis (which announces them);
5. the fleet aggregators' states, the applied configs, the shadows, the ledger and the batch's
   offsets are committed to Redis in one atomic, offset-fenced write, as the stream processor does.

So a decision is on ``gov.policy.decisions`` before its document is in Redis, and a service killed
anywhere re-decides, after restart, every snapshot of its last uncommitted batch: one whose
document was written is skipped as a duplicate (its record is already on the topic); one whose
document was not is decided again, identically, and its record may appear twice (readers keep the
last record per kind, scope and version). On assignment each partition is sought past its applied
offset. For the record, the service skips fleet-scope snapshots it reads back.

Outages of Redis or the broker never stop the service: a batch that fails before step 3 is
forgotten (state back to the last commit, partitions sought back) and polled again; a batch that
fails in step 4 or 5 is retried from where it stopped. Either way the partitions are paused and the
retries paced by ``BackendOutage``, which logs the outage once when it starts and once when it ends.

Policy configuration records (``PolicyConfigRecord``, appended to the same topic by
``governor run policy --config``/``--shadow`` and ``governor config apply``) are applied in log
order: the live one replaces the params and scopes every following snapshot is decided with, a
named one starts (or stops) a shadow policy (services/policy/shadow.py). The applied records are
committed with the offsets, so a restarted service decides with the configuration it had.

Every poll measures the lag (health: lag with nothing decided is a stall) and checks the partition
against the log its applied offset came from (services/log_reset.py). On a new log (the broker
restarted without storage, the topic was recreated) the partition is read again from its
beginning, the fleet aggregators and the snapshot ledger start empty; the applied configuration,
the shadows and every policy document are kept (docs/operations.md, "Log resets"). When the
topic's layout changes (its id or partition count) and holds still, the service rejoins its group
as a new member, as the stream processor does, so that its assignment covers the new partitions. It
rejoins the same way when a positioned partition has gone unfetched for longer than any rebalance takes
(services/membership.py).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from functools import partial

import structlog
from kafka import TopicPartition
from kafka.consumer.fetcher import ConsumerRecord
from kafka.errors import KafkaError

from decide.registry import PolicyRegistry
from decide.wiring.fleetopt import FLEET_SLOT_S
from policies.fleetopt.kernels import warm_up as warm_up_fleetopt
from schemas.errors import BackendUnavailableError
from schemas.names import ESTIMATES_TOPIC, POLICY_CONSUMER, Partition
from schemas.signing import PolicyKeyring
from services.backends import BackendOutage
from services.checkpoints import (
    CheckpointSource,
    CheckpointWriter,
    PartitionState,
    resume_from_checkpoints,
)
from services.delivery import Checkpoint, Delivery, no_checkpoint
from services.engine_partitions import key_partition
from services.health import ServiceMetrics
from services.kafka_clients import (
    ConsumedRecord,
    IdlePace,
    KafkaLogView,
    Rebalance,
    caught_up,
    close_producer,
    consumer_lag,
    group_consumer,
    record_producer,
    subscribe,
)
from services.kafka_security import PLAINTEXT
from services.log_reset import LayoutWatch, LogReset, LogWatch
from services.membership import FetchStallWatch, ReadStallWatch, stall_bound_s, unfetched
from services.policy.handler import (
    FLEET_SCOPE,
    PendingBatch,
    PolicyCounters,
    PolicyHandler,
    ledger_scope,
)
from services.policy.pins import PinBoard
from services.policy.shadow import ShadowPolicy
from services.policy.stored_states import load_policy_states
from services.settings import FLEET_SILENCE_WAIT_S, LOCAL_BROKER_TIMEOUTS, KafkaClientTimeouts, KafkaSecurity
from services.store.protocol import Store

log = structlog.get_logger(__name__)

CONSUMER_NAME = POLICY_CONSUMER
KAFKA_COMMIT_TIMEOUT_MS = 2000
POLL_TIMEOUT_MS = 100  # while records flow; an idle loop polls longer (services/kafka_clients.py, ``IdlePace``)


class PolicyService:
    """One policy-service process of a deployment."""

    def __init__(
        self,
        *,
        deployment: str,
        bootstrap: str,
        store: Store,
        registry: PolicyRegistry,
        group_id: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        metrics: ServiceMetrics | None = None,
        pins: PinBoard | None = None,
        fleet_slot_s: float = FLEET_SLOT_S,
        fleet_silence_wait_s: float = FLEET_SILENCE_WAIT_S,
        kafka_timeouts: KafkaClientTimeouts = LOCAL_BROKER_TIMEOUTS,
        security: KafkaSecurity = PLAINTEXT,
        keyring: PolicyKeyring | None = None,
        checkpoint: Checkpoint = no_checkpoint,
        checkpoint_interval_s: float = 0.0,
        checkpoint_source: CheckpointSource | None = None,
    ) -> None:
        """Build the clients and subscribe; nothing is read until ``run``.

        ``checkpoint`` is called with the name of each step a batch that decided something passes
        (``decisions_flushed``, ``decisions_written``, ``committed``): the crash tests kill the process there.
        With ``checkpoint_interval_s`` above 0 the committed state of each partition is written to
        ``gov.checkpoints`` that often; with ``checkpoint_source`` a partition with no applied offset in
        Redis resumes from its checkpoint (services/checkpoints.py).
        """
        self._store = store
        self._clock = clock
        self._metrics = metrics
        self._checkpoint = checkpoint
        self.outage = BackendOutage("policy", clock=clock)
        self._applied: dict[str, int] = {}
        self._committed_states: dict[str, str] = {}
        self._unpositioned: list[TopicPartition] = []
        self._unfinished: PendingBatch | None = None
        self._silence_wait_s = fleet_silence_wait_s
        self._overdue_since: dict[tuple[str, str, int], float] = {}
        self._new_consumer = partial(
            group_consumer,
            bootstrap,
            group_id or f"governor-policy-{deployment}",
            timeouts=kafka_timeouts,
            security=security,
        )
        self._consumer = self._new_consumer()
        self._pace = IdlePace(
            self._consumer, fetch_wait_ms=kafka_timeouts.fetch_max_wait_ms, poll_timeout_ms=POLL_TIMEOUT_MS
        )
        self._producer = record_producer(bootstrap, timeouts=kafka_timeouts, security=security)
        self._delivery = Delivery(self._producer)
        self._checkpoints = CheckpointWriter(
            self._producer, deployment=deployment, consumer=CONSUMER_NAME, interval_s=checkpoint_interval_s, clock=clock
        )
        self._checkpoint_source = checkpoint_source
        self._log_view = KafkaLogView(self._consumer)
        self._log_watch = LogWatch(consumer=CONSUMER_NAME, store=store, metrics=metrics)
        self._layout_watch = LayoutWatch(ESTIMATES_TOPIC)
        self._stall_watch = FetchStallWatch("policy", stall_bound_s(kafka_timeouts))
        self._read_watch = ReadStallWatch("policy", stall_bound_s(kafka_timeouts))
        self.handler = PolicyHandler(
            deployment=deployment,
            store=store,
            registry=registry,
            sink=self._delivery,
            clock=clock,
            metrics=metrics,
            pins=pins,
            fleet_slot_s=fleet_slot_s,
            keyring=keyring,
        )
        subscribe(self._consumer, ESTIMATES_TOPIC, Rebalance(self.on_assigned))
        warm_up_fleetopt()  # its compiled kernels load (or compile) here, not inside the first fleet decision
        self._stopped = False

    @property
    def counters(self) -> PolicyCounters:
        """What the service has done so far."""
        return self.handler.counters

    @property
    def shadows(self) -> dict[str, ShadowPolicy]:
        """The shadow policies running now, by name."""
        return self.handler.shadows

    def on_assigned(self, partitions: list[TopicPartition]) -> None:
        """Reload the configuration, shadows, fleet aggregators and ledger; seek past the applied offsets.

        With Redis down the partitions stay paused, and the loop loads them once it answers.
        """
        self._unfinished = None
        try:
            self._load(partitions)
        except BackendUnavailableError as exc:
            self._unpositioned = list(partitions)
            self._consumer.pause(*partitions)
            self.outage.failed(exc, exc.backend)

    def fleet_partition(self) -> int:
        """The ``gov.estimates`` partition the ``fleet`` key puts fleet contributions on: its owner owns the fleet."""
        partitions = len(self._consumer.partitions_for_topic(ESTIMATES_TOPIC) or ()) or 1
        return key_partition(FLEET_SCOPE.encode(), partitions)

    def _load(self, partitions: list[TopicPartition]) -> None:
        """Restore the state of the assigned ``partitions`` only.

        That is their configurations, shadows and ledgers, and the fleet aggregators where this member
        owns the ``fleet`` partition; on the first start after the upgrade to the service-state
        namespace, from the engines' layout it used before (services/policy/stored_states.py).
        """
        resume_from_checkpoints(
            self._store,
            CONSUMER_NAME,
            self._checkpoint_source,
            [Partition(tp.topic, tp.partition) for tp in partitions],
            self._log_view,
        )
        applied = self._store.applied_offsets(CONSUMER_NAME)
        owned = sorted({tp.partition for tp in partitions})
        fleet_partition = self.fleet_partition()
        fleet = fleet_partition if fleet_partition in owned else None
        self.handler.restore(load_policy_states(self._store, self.handler, owned, applied, fleet))
        self._applied = applied
        self._committed_states = self.handler.states()
        for tp in partitions:
            position = self._applied.get(Partition(tp.topic, tp.partition).field)
            if position is not None:
                self._consumer.seek(tp, position + 1)
        self._log_watch.assigned(self._log_view, [Partition(tp.topic, tp.partition) for tp in partitions])
        self._consumer.resume(*partitions)
        self._unpositioned = []
        self.outage.succeeded("redis")
        log.info(
            "partitions_assigned",
            partitions=sorted(tp.partition for tp in partitions),
            aggregators=sorted(self.handler.decider.aggregators),
            configs=[self.handler.policy_set(p).digest for p in owned],
            shadows=sorted(self.handler.shadows),
            ledger_scopes=sum(len(self.handler.ledger(p)) for p in owned),
            fleet_owner=fleet_partition in owned,
        )

    def stop(self) -> None:
        """Ask ``run`` to return after the current batch."""
        self._stopped = True

    def close(self) -> None:
        """Leave the group and close the clients."""
        self._consumer.close()
        close_producer(self._producer, timeout_s=5.0)

    def run(self, *, idle_exit_s: float | None = None) -> PolicyCounters:
        """Decide from snapshots until ``stop`` (or ``idle_exit_s`` without records while assigned and caught up).

        Redis and broker outages are waited out (``BackendOutage``), never raised.
        """
        idle_since = self._clock()
        while not self._stopped:
            try:
                if self._unpositioned:
                    self._load(self._unpositioned)
                if self._unfinished is not None:
                    self._finish(self._unfinished)
                batch = self._consumer.poll(timeout_ms=self._pace.poll_timeout_ms)
                self._pace.polled(sum(len(part) for part in batch.values()))
                now_s = self._clock()
                if self._layout_watch.rejoin_due(self._log_view.layout(ESTIMATES_TOPIC), now_s) or (
                    self._stall_watch.rejoin_due(unfetched(self._consumer), now_s)
                    or self._read_watch.rejoin_due(self._consumer, now_s, waiting=self.outage.redis_down)
                ):
                    self._rejoin()
                    continue
                records = self._on_current_logs([record for part in batch.values() for record in part])
                self._declare_overdue(now_s)
                if self._metrics is not None:
                    self._metrics.lag_measured(consumer_lag(self._consumer), len(self._consumer.assignment()))
                if not records:
                    if not self._consumer.assignment():
                        idle_since = self._clock()
                    elif (
                        idle_exit_s is not None
                        and self._clock() - idle_since > idle_exit_s
                        and self._unfinished is None
                        and not self._unpositioned
                        and caught_up(self._consumer)
                    ):
                        break
                    continue
                idle_since = self._clock()
                self._process(records)
            except BackendUnavailableError as exc:
                self._failed()
                self._pause(self.outage.failed(exc, exc.backend))
                idle_since = self._clock()
            except KafkaError as exc:
                self._failed()
                self._pause(self.outage.failed(exc, "kafka"))
                idle_since = self._clock()
        return self.counters

    def _declare_overdue(self, now_s: float) -> None:
        """Declare silent each engine the fleet has waited on for ``fleet_silence_wait_s`` (fold/fleet.py).

        The wait is wall-clock time, the one thing that tells a dead engine from a late reading, so it
        is spent here, in the shell; the declaration goes to the log and counts only where it is read
        back. Each engine is timed from when this member first found it overdue at its current slot
        (a restart or a new owner waits again); one declared is not declared again at the same slot.
        """
        overdue = self.handler.overdue()
        waiting = {(kind, engine, slots[0]) for (kind, engine), slots in overdue.items()}
        self._overdue_since = {key: since for key, since in self._overdue_since.items() if key in waiting}
        declared = []
        for (kind, engine), slots in overdue.items():
            key = (kind, engine, slots[0])
            waited_s = now_s - self._overdue_since.setdefault(key, now_s)
            if waited_s >= self._silence_wait_s:
                self.handler.declare_silent(kind, engine, slots, waited_s)
                log.warning("engine_overdue", kind=kind, engine_id=engine, engine_slot=slots[0], fleet_slot=slots[1])
                declared.append(key)
        if declared:
            self._delivery.confirm()
            self._overdue_since.update(dict.fromkeys(declared, math.inf))

    def _rejoin(self) -> None:
        """Rejoin the group under a fresh member id: ``gov.estimates``' layout changed and held still, or a
        partition went unfetched past any rebalance (services/membership.py).

        After a broker restart without its log the topic can come back with another partition count
        (auto-created by a reconnecting client before ``stack up`` recreates it), and the Tansu broker
        kept handing the same member its earlier assignment however often it rejoined (the stream
        processor does the same, services/stream/processor.py). Nothing is lost: the records of the
        poll that saw the change are dropped unprocessed and read again from the applied offsets by the
        partitions' next owner, which reloads their state at assignment.
        """
        self._unpositioned = []
        self._read_watch.rejoined()
        self._consumer.close()
        self._consumer = self._new_consumer()
        self._pace.replaced(self._consumer)
        self._log_view = KafkaLogView(self._consumer)
        subscribe(self._consumer, ESTIMATES_TOPIC, Rebalance(self.on_assigned))

    def _failed(self) -> None:
        """Tell health a batch failed and is retried: only a committed batch counts as progress."""
        if self._metrics is not None:
            self._metrics.batch_failed()

    def _on_current_logs(self, records: list[ConsumerRecord]) -> list[ConsumerRecord]:
        """Rebuild every partition found on a new log (read again from its beginning); keep the others' records."""
        next_offsets: dict[Partition, int] = {}
        for tp in self._consumer.assignment():
            partition = Partition(tp.topic, tp.partition)
            applied = self._applied.get(partition.field)
            if applied is not None:
                next_offsets[partition] = applied + 1
        resets = self._log_watch.check(self._log_view, next_offsets)
        for reset in resets:
            self._rebuild(reset)
        rebuilt = {(reset.topic, reset.partition) for reset in resets}
        return [record for record in records if (record.topic, record.partition) not in rebuilt]

    def _rebuild(self, reset: LogReset) -> None:
        """Forget the partition's applied offset and ledger (and the fleet aggregators on the fleet's partition).

        The ledger goes too: the processors rebuilt from a new telemetry log take snapshots at new
        (lower) positions, which it would otherwise refuse as out of order.
        """
        self._applied.pop(reset.field, None)
        fleet = reset.partition == self.fleet_partition()
        dropped = [*(self.handler.fleet_scopes(reset.partition) if fleet else []), ledger_scope(reset.partition)]
        self.handler.reset_fleet_and_ledger(reset.partition, fleet=fleet)
        self._store.reset_partition(CONSUMER_NAME, reset.field, reset.topic_id, {}, dropped)
        self._committed_states = self.handler.states()
        self._consumer.seek_to_beginning(TopicPartition(reset.topic, reset.partition))
        log.warning("partition_rebuilding", topic=reset.topic, partition=reset.partition, states_reset=dropped)

    def _pause(self, pause_s: float) -> None:
        """Wait ``pause_s`` with the partitions paused, polling so that the group keeps this member."""
        self._consumer.pause(*self._consumer.assignment())
        self._consumer.poll(timeout_ms=int(pause_s * 1000))
        self._consumer.resume(*(tp for tp in self._consumer.assignment() if tp not in self._unpositioned))

    def _process(self, records: list[ConsumedRecord]) -> None:
        """Steps 1-3 of the outbox order; an outage in them forgets the batch and seeks back to its start."""
        starts: dict[TopicPartition, int] = {}
        for record in records:
            tp = TopicPartition(record.topic, record.partition)
            starts[tp] = min(starts.get(tp, record.offset), record.offset)
        batch = PendingBatch(started_s=self._clock())
        try:
            for record in records:
                field_name = Partition(record.topic, record.partition).field
                if record.offset <= self._applied.get(field_name, -1):
                    self.counters.skipped_offsets += 1
                    continue
                batch.offsets[field_name] = max(batch.offsets.get(field_name, -1), record.offset)
                self.handler.handle(record, batch)
            self._delivery.confirm()
        except BackendUnavailableError:
            self._forget(starts)
            raise
        if batch.writes:
            self._checkpoint("decisions_flushed")
        self._unfinished = batch
        self._finish(batch)

    def _refused_commit(self, offsets: dict[str, int]) -> None:
        """Redis holds offsets at or past the batch's: reload state and positions from Redis before going on.

        Either a newer member committed past this one, or this very commit landed on an earlier try
        whose reply was lost (a timeout while Redis was paused): in both cases what Redis holds is
        the truth to resume from. The partitions stay paused until the loop has loaded them.
        """
        log.warning("commit_refused", offsets=offsets)
        self._unpositioned = list(self._consumer.assignment())
        self._consumer.pause(*self._unpositioned)

    def _write_checkpoints(self) -> None:
        """Write each owned partition's committed state to ``gov.checkpoints`` when the interval is up.

        Called right after a commit, so the handler's states are the committed ones.
        """
        if not self._checkpoints.due():
            return
        fleet_partition = self.fleet_partition()
        topic_id = self._log_view.topic_id(ESTIMATES_TOPIC)
        owned = sorted(
            partition
            for partition in (Partition(tp.topic, tp.partition) for tp in self._consumer.assignment())
            if partition.field in self._applied
        )
        try:
            documents = self._store.policy_documents()
        except BackendUnavailableError as exc:
            log.warning("checkpoint_failed", consumer=CONSUMER_NAME, error=str(exc)[:300])
            return
        self._checkpoints.write(
            {
                tp: PartitionState(
                    offset=self._applied[tp.field],
                    topic_id=topic_id,
                    states=self.handler.partition_states(tp.partition, fleet=tp.partition == fleet_partition),
                    documents=self._documents_of(tp.partition, documents, fleet_partition),
                )
                for tp in owned
            }
        )

    def _documents_of(
        self, partition: int, documents: dict[tuple[str, str], str], fleet_partition: int
    ) -> dict[tuple[str, str], str]:
        """The documents whose next decisions ``partition`` makes: those of the scopes its ledger holds; the
        fleet's partition also takes every other one (fleet plans, a data-parallel group's bundle)."""
        ledgers = {p: set(self.handler.ledger(p).scopes()) for p in self.handler.partitions()}
        mine = ledgers.get(partition, set())
        others = set().union(*(scopes for p, scopes in ledgers.items() if p != partition))
        return {
            (kind, scope): document
            for (kind, scope), document in documents.items()
            if scope in mine or (partition == fleet_partition and scope not in others)
        }

    def _forget(self, starts: dict[TopicPartition, int]) -> None:
        """Return to the last commit: state restored, nothing staged, partitions sought back to ``starts``."""
        self.handler.restore(self._committed_states)
        assigned = self._consumer.assignment()
        for tp, offset in starts.items():
            if tp in assigned:
                self._consumer.seek(tp, offset)
        self.counters.batches_retried += 1

    def _finish(self, batch: PendingBatch) -> None:
        """Steps 4-5: write the documents (their records are delivered), then commit; safe to repeat."""
        writes = bool(batch.writes)
        if self.handler.apply(batch):
            self._delivery.confirm()
        if writes:
            self._checkpoint("decisions_written")
        if batch.offsets:
            states = self.handler.states()
            if self._store.commit(CONSUMER_NAME, batch.offsets, states, {}):
                self._applied.update(batch.offsets)
                self._committed_states = states
                if self._metrics is not None:
                    self._metrics.folded()
                self._write_checkpoints()
            else:
                self._refused_commit(batch.offsets)
        self._unfinished = None
        self.outage.succeeded("kafka")
        self.outage.succeeded("redis")
        self._checkpoint("committed")
        try:  # Kafka's group offsets only inform lag tools; Redis holds the ones that count
            self._consumer.commit(timeout_ms=KAFKA_COMMIT_TIMEOUT_MS)
        except KafkaError as exc:
            log.debug("kafka_offset_commit_skipped", error=str(exc))
        if self._metrics is not None:
            self._metrics.lag.set(consumer_lag(self._consumer))
