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

Being a member of the group is the partition loop's, as for the stream processor
(services/runtime/partition_loop.py: poll, outage pauses, lag, rejoins when the topic's layout
changes or a partition stalls, log-reset checks, idle exit). On a new log (the broker restarted
without storage, the topic was recreated) the partition is read again from its beginning, the fleet
aggregators and the snapshot ledger start empty; the applied configuration, the shadows and every
policy document are kept (docs/operations.md, "Log resets").
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import structlog

from decide.registry import PolicyRegistry
from decide.wiring.fleetopt import FLEET_SLOT_S
from policies.fleetopt.kernels import warm_up as warm_up_fleetopt
from schemas.errors import BackendUnavailableError
from schemas.names import ESTIMATES_TOPIC, POLICY_CONSUMER, Partition, partition_field
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
    close_producer,
    record_producer,
)
from services.kafka_security import PLAINTEXT
from services.log_reset import LogReset
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
from services.runtime.partition_loop import PartitionLoop
from services.runtime.source import KafkaSource
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
        self._unfinished: PendingBatch | None = None
        self._silence_wait_s = fleet_silence_wait_s
        self._overdue_since: dict[tuple[str, str, int], float] = {}
        self._source = KafkaSource(
            service="policy",
            topic=ESTIMATES_TOPIC,
            bootstrap=bootstrap,
            group_id=group_id or f"governor-policy-{deployment}",
            timeouts=kafka_timeouts,
            security=security,
            poll_timeout_ms=POLL_TIMEOUT_MS,
            commit_timeout_ms=KAFKA_COMMIT_TIMEOUT_MS,
        )
        self._loop = PartitionLoop(
            consumer_name=CONSUMER_NAME,
            source=self._source,
            work=self,
            store=store,
            outage=self.outage,
            clock=clock,
            metrics=metrics,
        )
        self._producer = record_producer(bootstrap, timeouts=kafka_timeouts, security=security)
        self._delivery = Delivery(self._producer)
        self._checkpoints = CheckpointWriter(
            self._producer, deployment=deployment, consumer=CONSUMER_NAME, interval_s=checkpoint_interval_s, clock=clock
        )
        self._checkpoint_source = checkpoint_source
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
        warm_up_fleetopt()  # its compiled kernels load (or compile) here, not inside the first fleet decision

    @property
    def counters(self) -> PolicyCounters:
        """What the service has done so far."""
        return self.handler.counters

    @property
    def shadows(self) -> dict[str, ShadowPolicy]:
        """The shadow policies running now, by name."""
        return self.handler.shadows

    def fleet_partition(self) -> int:
        """The ``gov.estimates`` partition the ``fleet`` key puts fleet contributions on: its owner owns the fleet."""
        return key_partition(FLEET_SCOPE.encode(), self._source.partition_count() or 1)

    def position(self, partitions: list[Partition]) -> dict[Partition, int]:
        """Restore the state of the newly assigned ``partitions`` only, and read each from past its applied offset.

        That is their configurations, shadows and ledgers, and the fleet aggregators where this member
        owns the ``fleet`` partition; on the first start after the upgrade to the service-state
        namespace, from the engines' layout it used before (services/policy/stored_states.py). A batch
        left unfinished is dropped: the partitions' state is Redis's now.
        """
        self._unfinished = None
        resume_from_checkpoints(self._store, CONSUMER_NAME, self._checkpoint_source, partitions, self._source)
        applied = self._store.applied_offsets(CONSUMER_NAME)
        owned = sorted({partition for _, partition in partitions})
        fleet_partition = self.fleet_partition()
        fleet = fleet_partition if fleet_partition in owned else None
        self.handler.restore(load_policy_states(self._store, self.handler, owned, applied, fleet))
        self._applied = applied
        self._committed_states = self.handler.states()
        log.info(
            "partitions_assigned",
            partitions=owned,
            aggregators=sorted(self.handler.decider.aggregators),
            configs=[self.handler.policy_set(p).digest for p in owned],
            shadows=sorted(self.handler.shadows),
            ledger_scopes=sum(len(self.handler.ledger(p)) for p in owned),
            fleet_owner=fleet_partition in owned,
        )
        return self.next_offsets(partitions)

    def revoked(self, partitions: list[Partition]) -> None:
        """Nothing: every committed batch is in Redis, and the next owner reloads the partitions' state from there."""

    def finish_pending(self) -> None:
        """Steps 4-5 of a batch an outage interrupted after its records were delivered."""
        if self._unfinished is not None:
            self._finish(self._unfinished)

    def next_offsets(self, assigned: list[Partition]) -> dict[Partition, int]:
        """The next offset to decide of each assigned partition with an applied offset."""
        return {
            partition: self._applied[partition.field] + 1 for partition in assigned if partition.field in self._applied
        }

    def polled(self, now_s: float) -> None:
        """Declare silent the engines the fleet has waited on too long (wall-clock time, spent in this shell)."""
        self._declare_overdue(now_s)

    def idle(self) -> None:
        """Nothing: a batch commits as soon as it is decided."""

    def settled(self) -> bool:
        """Whether no batch waits for its documents or its commit."""
        return self._unfinished is None

    def after_turn(self) -> None:
        """Nothing: a commit writes its checkpoints itself."""

    def stop(self) -> None:
        """Ask ``run`` to return after the current batch."""
        self._loop.stop()

    def close(self) -> None:
        """Leave the group and close the clients."""
        self._loop.close()
        close_producer(self._producer, timeout_s=5.0)

    def run(self, *, idle_exit_s: float | None = None) -> PolicyCounters:
        """Decide from snapshots until ``stop`` (or ``idle_exit_s`` without records while assigned and caught up).

        Redis and broker outages are waited out (the partition loop), never raised.
        """
        self._loop.run(idle_exit_s=idle_exit_s)
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

    def rebuild(self, reset: LogReset, partition_count: int) -> None:
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
        log.warning("partition_rebuilding", topic=reset.topic, partition=reset.partition, states_reset=dropped)

    def process(self, records: list[ConsumedRecord]) -> None:
        """Steps 1-3 of the outbox order; an outage in them forgets the batch and seeks back to its start."""
        starts: dict[Partition, int] = {}
        for record in records:
            partition = Partition(record.topic, record.partition)
            starts[partition] = min(starts.get(partition, record.offset), record.offset)
        batch = PendingBatch(started_s=self._clock())
        try:
            for record in records:
                field_name = partition_field(record.topic, record.partition)
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
        self._loop.reposition()

    def _write_checkpoints(self) -> None:
        """Write each owned partition's committed state to ``gov.checkpoints`` when the interval is up.

        Called right after a commit, so the handler's states are the committed ones.
        """
        if not self._checkpoints.due():
            return
        fleet_partition = self.fleet_partition()
        topic_id = self._source.topic_id(ESTIMATES_TOPIC)
        owned = sorted(partition for partition in self._source.assigned() if partition.field in self._applied)
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

    def _forget(self, starts: dict[Partition, int]) -> None:
        """Return to the last commit: state restored, nothing staged, partitions sought back to ``starts``."""
        self.handler.restore(self._committed_states)
        assigned = set(self._source.assigned())
        for partition, offset in starts.items():
            if partition in assigned:
                self._source.seek(partition, offset)
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
        self._source.commit()  # Kafka's group offsets only inform lag tools; Redis holds the ones that count
        if self._metrics is not None:
            self._metrics.lag.set(self._source.lag())
