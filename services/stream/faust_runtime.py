"""The stream processor on faust-streaming (``--runtime faust``): a table-less faust app with one agent.

The agent takes ``gov.telemetry`` in batches (``stream.take_events``) and hands each to the same
batch handling as the kafka-python runtime (services/stream/batches.py): the same pure fold, the
same dead letters, snapshots, metrics and offset-fenced Redis commit. Only the consumer loop differs:

- the exactly-once effect needs each assigned partition to resume at its applied offset + 1 in
  Redis. A seek from an ``on_partitions_assigned`` handler is undone by faust's recovery step,
  which seeks back to the offsets committed in Kafka; so the consumer's ``perform_seek`` (the
  step that does that seek) is overridden to seek to Redis's positions instead. The offsets faust
  commits to Kafka are never read back;
- revocation commits to Redis after faust has drained the agent (faust acks a taken batch only
  after the agent's loop body returns), then forgets the revoked partitions' engines;
- Redis and broker outages of any length are waited out, never raised, with ``BackendOutage``'s
  pacing (one log line when an outage starts, one when it ends). faust cannot be rewound mid-stream
  (it keeps events buffered past a seek), so the worker keeps the records it handed to the batch
  handling since the last commit: a batch that failed before its delivery was confirmed (the batch
  handling then forgets everything uncommitted) is retried by folding those kept records again from
  the committed state, and a failed commit by committing again. The agent (or the timer) holds its
  turn while it retries, so nothing else folds or commits in between and faust's flow control stops
  fetching once its buffers are full. Partitions assigned while Redis is down stay paused until
  their applied offsets can be read;
- a timer commits when no batch came for a tick, reports progress and ends an ``idle_exit_s`` run;
  every tick it also measures the lag (health: lag with nothing folded is a stall) and checks each
  assigned partition's log end against its applied offset (services/log_reset.py; aiokafka gives
  no topic ids). A partition on a new log is reset in Redis (services/stream/log_rebuild.py) and
  the worker stops with ``LogResetRestartError``, for the same reason a fenced worker does: faust
  keeps events buffered past a seek, so the restart from Redis is what reads the new log from its
  beginning;
- its consumer group is ``governor-stream-faust-{deployment}``, not the kafka runtime's: a group
  keeps its assignment protocol (Tansu refused faust's join to a group the kafka-python members had
  used, InconsistentGroupProtocol). Switching runtimes is stop one, start the other: both resume
  from the offsets applied in Redis;
- a refused commit (a newer owner of a partition committed past this worker, so this worker is a
  zombie of an old generation) stops the worker with an error: faust keeps events buffered past
  any seek, so the only safe resume point is a restart from Redis, which the supervisor (compose's
  ``restart: unless-stopped``) provides. A refusal that leaves every partition where this worker
  had folded it is not that: it is the retry of this worker's own commit, which a stalled Redis
  applied after the reply was lost, and the worker goes on.

The broker-dependent timeouts are the services' (``GOVERNOR_KAFKA_*``, services/settings.py); their
local-broker defaults were measured on Tansu (DESIGN section 7, docs/contracts.md "Runtimes"):
fetches that wait at most 10 ms (faust fixes 1500 ms, which showed up whole in the event ->
estimate latency); a 6 s session timeout and 1 s heartbeat (faust's 60 s default made joins take
about 30 s). faust's own max-poll interval is kept (shorter ones left a worker draining a backlog
out of its group for good); no web server (a second worker on one host dies on its port); no
leader topic and no tables (faust still makes a data directory: a temporary one, removed on
close); no faust exactly-once mode (its transactional producer does not start on this broker; the
Redis offset fence gives the effect).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import aiokafka
import faust
import structlog
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread, Transport
from faust.transport.drivers.aiokafka import Consumer as AIOKafkaConsumer
from faust.types import TP, StreamT
from faust.types.transports import ConsumerT
from kafka.errors import KafkaError
from mode.types.signals import BaseSignalT

from fold.event_guard import DEFAULT_LIMITS, GuardLimits
from fold.triggers import TriggerSpec
from schemas.errors import BackendUnavailableError, GovernorError
from schemas.names import TELEMETRY_TOPIC, Partition
from schemas.signing import PolicyKeyring
from services.backends import BackendOutage
from services.checkpoints import CheckpointSource, CheckpointWriter, resume_from_checkpoints
from services.health import ServiceMetrics
from services.kafka_clients import IDLE_AFTER_S, IDLE_FETCH_WAIT_MS, ConsumedRecord, close_producer, record_producer
from services.log_reset import LogWatch
from services.settings import (
    DEFAULT_LIFECYCLE,
    LOCAL_BROKER_TIMEOUTS,
    STREAM_COMMIT_INTERVAL_S,
    EngineLifecycle,
    KafkaClientTimeouts,
)
from services.store.protocol import Store
from services.stream.batches import CONSUMER_NAME, StreamCounters, TelemetryBatches
from services.stream.log_rebuild import rebuild_partition
from services.stream.state_checkpoints import write_stream_checkpoints

TAKE_MAX = 2000  # events per batch handed to the fold; the fastest measured form
TAKE_WITHIN_S = 0.2  # the longest a partial batch waits for more events
TICK_S = 0.2  # idle commits, progress and the idle-exit check
QUIET_LOGGERS = ("faust", "mode", "aiokafka")  # their INFO lines narrate every rebalance step

log = structlog.get_logger(__name__)


class FencedWorkerError(GovernorError):
    """A newer owner of a partition committed past this worker; restart it to resume from Redis."""


class LogResetRestartError(GovernorError):
    """A partition was found on a new log and reset in Redis; restart the worker to read it from its beginning."""


class _ShortPollConsumerThread(AIOKafkaConsumerThread):
    """faust's aiokafka consumer thread with the services' fetch wait instead of faust's fixed 1500 ms.

    faust builds its aiokafka consumer with ``fetch_max_wait_ms=1500`` and no setting to change it;
    on this broker a fetch waits that long whole when a partition has little data, which put the
    event -> estimate latency at seconds. Both runtimes use ``GOVERNOR_KAFKA_FETCH_MAX_WAIT_MS``.
    """

    def _create_worker_consumer(self, transport: Transport) -> aiokafka.AIOKafkaConsumer:
        consumer = super()._create_worker_consumer(transport)
        app: _GovernorApp = self.app  # type: ignore[assignment]
        consumer._fetch_max_wait_ms = app.fetch_max_wait_ms
        app.worker_consumer = consumer
        return consumer


class _RedisPositionConsumer(AIOKafkaConsumer):
    """faust's aiokafka consumer, seeking assigned partitions to the applied offsets in Redis."""

    logger = logging.getLogger("faust.transport.consumer")

    def _new_consumer_thread(self) -> AIOKafkaConsumerThread:
        return _ShortPollConsumerThread(self, loop=self.loop, beacon=self.beacon)

    async def perform_seek(self) -> None:
        """Do faust's seek to the Kafka-committed offsets, then override it with Redis's positions.

        faust's own step keeps its bookkeeping of committed offsets; the seek that follows moves
        the fetch position and faust's read offset, so no record after the applied one is dropped.
        A partition with nothing applied starts at offset 0 (out of range -> the earliest offset).
        With Redis down the partitions are paused instead; the worker's timer positions and resumes
        them once Redis answers.
        """
        await super().perform_seek()
        assigned = self.assignment()
        app: _GovernorApp = self.app  # type: ignore[assignment]
        positions = app.resume_positions(assigned)
        if positions is None:
            self.pause_partitions(assigned)
            return
        await self.seek_wait({tp: positions.get(tp, 0) for tp in assigned})


class _GovernorApp(faust.App):
    """A faust app whose consumer resumes from Redis (``resume_positions`` is set by the processor).

    ``resume_positions`` returns None when Redis does not answer: the partitions are then paused.
    """

    logger = logging.getLogger("faust.app")

    resume_positions: Callable[[set[TP]], Mapping[TP, int] | None]
    fetch_max_wait_ms: int
    worker_consumer: aiokafka.AIOKafkaConsumer | None = None  # the aiokafka consumer, once its thread built it

    def _new_consumer(self) -> ConsumerT:
        return _RedisPositionConsumer(
            self.transport,
            callback=self.topics.on_message,
            on_partitions_revoked=self._on_partitions_revoked,
            on_partitions_assigned=self._on_partitions_assigned,
            beacon=self.beacon,
            loop=self.transport.loop,
        )


class _FaustConsumerView:
    """The batch handling's view of the faust app's consumer."""

    def __init__(self, app: _GovernorApp) -> None:
        self._app = app

    def assigned(self) -> list[Partition]:
        return [Partition(tp.topic, tp.partition) for tp in self._app.consumer.assignment()]

    def highwater(self, partition: Partition) -> int | None:
        high: int | None = self._app.consumer.highwater(TP(*partition))
        return high

    def rewind(self, positions: dict[Partition, int]) -> None:
        """Nothing to seek: the worker folds its kept records again after a failed batch, and stops when fenced."""

    def topic_id(self, topic: str) -> str | None:
        return None

    def partitions(self, topic: str) -> int:
        return self._app.consumer.topic_partitions(topic) or 0


@dataclass(frozen=True, slots=True, kw_only=True)
class _CommitMarks:
    """The batch handling's commit counts and next offsets before a step, to tell what its commits did."""

    commits: int
    refused: int
    next_offsets: dict[Partition, int]


class FaustStreamProcessor:
    """One faust worker of the stream-processor consumer group of a deployment."""

    def __init__(
        self,
        *,
        deployment: str,
        bootstrap: str,
        store: Store,
        registry: Iterable[TriggerSpec],
        group_id: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        metrics: ServiceMetrics | None = None,
        commit_interval_s: float = STREAM_COMMIT_INTERVAL_S,
        lifecycle: EngineLifecycle = DEFAULT_LIFECYCLE,
        take_max: int = TAKE_MAX,
        take_within_s: float = TAKE_WITHIN_S,
        kafka_timeouts: KafkaClientTimeouts = LOCAL_BROKER_TIMEOUTS,
        limits: GuardLimits = DEFAULT_LIMITS,
        keyring: PolicyKeyring | None = None,
        checkpoint_interval_s: float = 0.0,
        checkpoint_source: CheckpointSource | None = None,
    ) -> None:
        """Build the app, its agent and timer; the checkpoint settings are the kafka runtime's.

        With ``checkpoint_interval_s`` above 0 the committed state of each assigned partition is
        written to ``gov.checkpoints`` after a commit that often; with ``checkpoint_source`` a
        partition with no applied offset in Redis resumes from its checkpoint (services/checkpoints.py).
        aiokafka gives no topic ids, so this runtime's checkpoints carry none and are matched to the
        log by their offset alone (below the log's end).
        """
        for name in QUIET_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)
        self._clock = clock
        self.outage = BackendOutage("stream", clock=clock)
        self._loop = asyncio.new_event_loop()
        self._datadir = tempfile.TemporaryDirectory(prefix="governor-faust-")
        self._app = _GovernorApp(
            group_id or f"governor-stream-faust-{deployment}",
            broker=f"kafka://{bootstrap}",
            loop=self._loop,
            datadir=self._datadir.name,
            web_enabled=False,
            topic_disable_leader=True,
            topic_allow_declare=False,
            consumer_auto_offset_reset="earliest",
            broker_session_timeout=kafka_timeouts.session_timeout_ms / 1000.0,
            broker_heartbeat_interval=kafka_timeouts.heartbeat_interval_ms / 1000.0,
            autodiscover=False,
        )
        self._producer = record_producer(bootstrap, timeouts=kafka_timeouts)
        self._view = _FaustConsumerView(self._app)
        self._batches = TelemetryBatches(
            deployment=deployment,
            store=store,
            registry=registry,
            producer=self._producer,
            consumer=self._view,
            clock=clock,
            metrics=metrics,
            commit_interval_s=commit_interval_s,
            limits=limits,
            lifecycle=lifecycle,
            keyring=keyring,
        )
        self._store = store
        self._metrics = metrics
        self._deployment = deployment
        self._retention_s = lifecycle.retention_s
        self._checkpoints = CheckpointWriter(
            self._producer, deployment=deployment, consumer=CONSUMER_NAME, interval_s=checkpoint_interval_s, clock=clock
        )
        self._checkpoint_source = checkpoint_source
        self._log_watch = LogWatch(consumer=CONSUMER_NAME, store=store, metrics=metrics)
        self._log_reset = False
        self._app.resume_positions = self._resume_positions
        self._app.fetch_max_wait_ms = kafka_timeouts.fetch_max_wait_ms
        self._app.on_partitions_revoked.connect(self._on_revoked)
        topic = self._app.topic(TELEMETRY_TOPIC, key_serializer="raw", value_serializer="raw")
        self._app.agent(topic, name="governor-stream-fold")(self._fold)
        self._app.timer(TICK_S)(self._tick)
        self._take_max = take_max
        self._take_within_s = take_within_s
        self._stopping = False
        self._fenced_worker = False
        self._stop_requested = asyncio.Event()
        self._idle_exit_s: float | None = None
        self._last_records_at = clock()
        self._records_at_s = time.monotonic()  # real time, as the fetches' waits run on it
        self._had_batch = False
        self._turn = asyncio.Lock()  # held by the agent or the timer while it folds, commits or retries
        self._uncommitted: list[ConsumedRecord] = []  # handed to the batch handling since the last commit
        self._unpositioned: set[TP] = set()  # assigned while Redis was down: paused until positioned

    @property
    def counters(self) -> StreamCounters:
        """What the processor has done so far."""
        return self._batches.counters

    def stop(self) -> None:
        """Ask ``run`` to return (safe from a signal handler)."""
        self._loop.call_soon_threadsafe(self._stop_requested.set)

    def close(self) -> None:
        """Commit what is folded (unless fenced; with Redis down a restart re-folds it), close the clients and loop."""
        if not self._fenced_worker:
            self._final_commit()
        close_producer(self._producer, timeout_s=5.0)
        self._loop.close()
        self._datadir.cleanup()

    def run(self, *, idle_exit_s: float | None = None) -> StreamCounters:
        """Run the faust app until ``stop`` (or ``idle_exit_s`` without records while assigned).

        Raises:
            FencedWorkerError: a commit was refused because a newer owner committed past this worker.
        """
        self._idle_exit_s = idle_exit_s
        self._loop.run_until_complete(self._serve())
        if self._fenced_worker:
            msg = "a newer owner of a partition committed past this stream worker; restart it to resume from Redis"
            raise FencedWorkerError(msg)
        if self._log_reset:
            msg = "a partition was found on a new log and reset in Redis; restart the stream worker to read it"
            raise LogResetRestartError(msg)
        return self.counters

    async def _serve(self) -> None:
        await self._app.start()
        try:
            await self._stop_requested.wait()
            self._stopping = True
            async with self._turn:
                if not self._fenced_worker:
                    self._final_commit()
        finally:
            await self._app.stop()

    def _final_commit(self) -> None:
        before = self._commit_marks()
        try:
            self._batches.commit()
        except BackendUnavailableError as exc:
            log.warning("final_commit_failed", error=str(exc)[:300])
        self._settle_commits(before)

    async def _fold(self, stream: StreamT[Any]) -> None:
        taken = cast(faust.Stream[Any], stream).take_events(self._take_max, self._take_within_s)
        async for events in taken:
            if self._stopping or self._fenced_worker:
                continue
            records: list[ConsumedRecord] = [event.message for event in events]
            self._records_at_s = time.monotonic()
            self._pace_fetches(idle=False)
            async with self._turn:
                self._last_records_at = self._clock()
                self._had_batch = True
                self._uncommitted.extend(records)
                await self._until_done(functools.partial(self._batches.process, records))
            if self._metrics is not None:
                self._metrics.folded()

    async def _until_done(self, step: Callable[[], object]) -> None:
        """Run one step of the batch handling; through an outage, retry it with ``BackendOutage``'s pacing.

        A failed batch (the batch handling discarded everything uncommitted) is retried by folding
        every record kept since the last commit again, then committing; a failed commit by
        committing again. Only a stop or a fenced commit ends the retries early.
        """
        failed_backend: str | None = None
        fold_again = False
        while not (self._stopping or self._fenced_worker):
            discarded = self.counters.batches_discarded
            before = self._commit_marks()
            try:
                step()
            except (BackendUnavailableError, KafkaError) as exc:
                failed_backend = exc.backend if isinstance(exc, BackendUnavailableError) else "kafka"
                if self._metrics is not None:
                    self._metrics.batch_failed()
                pause_s = self.outage.failed(exc, failed_backend)
                fold_again = fold_again or self.counters.batches_discarded > discarded
                step = self._fold_uncommitted_again if fold_again else self._batches.commit
                self._settle_commits(before)
                await asyncio.sleep(pause_s)
                self._last_records_at = self._clock()
                continue
            self._settle_commits(before)
            if failed_backend is not None:
                self.outage.succeeded(failed_backend)
            return

    def _fold_uncommitted_again(self) -> None:
        """Fold the kept records of the assigned partitions again from the committed state, then commit them.

        A cheap read of Redis goes first: while Redis is down nothing is folded (nor discarded again).
        """
        self._store.applied_offsets(CONSUMER_NAME)
        assigned = set(self._view.assigned())
        self._uncommitted = [r for r in self._uncommitted if (r.topic, r.partition) in assigned]
        self._batches.process(self._uncommitted)
        self._batches.commit()

    def _commit_marks(self) -> _CommitMarks:
        return _CommitMarks(
            commits=self.counters.commits,
            refused=self.counters.commits_refused,
            next_offsets=self._batches.next_offsets(),
        )

    def _settle_commits(self, before: _CommitMarks) -> None:
        """Account for the commits since ``before``: drop the kept records they applied, or stop when fenced.

        A refused commit that leaves every partition where this worker had folded it is this worker's
        own earlier try, applied by Redis after its reply was lost (a stalled Redis does that): the
        store holds what the worker folded, so it goes on. A refusal that moves a partition means a
        newer owner committed past this worker: it stops (``FencedWorkerError``).
        """
        if self.counters.commits_refused > before.refused and self._batches.next_offsets() != before.next_offsets:
            self._fenced()
        elif self.counters.commits > before.commits or self.counters.commits_refused > before.refused:
            self._uncommitted.clear()
            self._write_checkpoints()

    def _write_checkpoints(self) -> None:
        """Write each assigned partition's committed state to ``gov.checkpoints`` when the interval is up."""
        write_stream_checkpoints(
            self._checkpoints,
            self._store,
            self._deployment,
            self._view.assigned(),
            partition_count=self._view.partitions(TELEMETRY_TOPIC),
            topic_id=None,
        )

    def _pace_fetches(self, *, idle: bool) -> None:
        """Let the consumer's fetches wait ``IDLE_FETCH_WAIT_MS`` while idle, the configured wait otherwise.

        The kafka runtime's ``IdlePace`` for this runtime: with the 10 ms wait an idle worker's
        consumer thread sent fetches back to back and took about 8 % of a core with no record to
        read. A held fetch is answered as soon as records arrive, and the first ones bring the
        configured wait back. aiokafka's fetcher reads the wait whenever it builds a fetch and has
        no setter for it, so this writes it there (from the app's thread: one attribute store).
        """
        consumer = self._app.worker_consumer
        fetcher = None if consumer is None else consumer._fetcher
        if fetcher is not None:
            busy_ms = self._app.fetch_max_wait_ms
            fetcher._fetch_max_wait_ms = max(busy_ms, IDLE_FETCH_WAIT_MS) if idle else busy_ms

    async def _tick(self) -> None:
        if self._stopping or self._fenced_worker or self._turn.locked():
            return
        self._pace_fetches(idle=time.monotonic() - self._records_at_s > IDLE_AFTER_S)
        async with self._turn:
            if self._unpositioned:
                await self._position_paused()
            await self._until_done(self._watch_logs)
            if self._had_batch:
                self._had_batch = False
                return
            await self._until_done(self._batches.idle)
            if not self._app.consumer.assignment() or self._unpositioned:
                self._last_records_at = self._clock()
            elif (
                self._idle_exit_s is not None
                and self._clock() - self._last_records_at > self._idle_exit_s
                and not self._batches.pending
                and not await self._behind()
            ):
                self._stop_requested.set()

    async def _behind(self) -> bool:
        """Whether an assigned partition holds records past what this worker has folded.

        A worker starved of CPU can go ``idle_exit_s`` without a fetch returning records while its
        partitions still hold some; it must not end then. The last fetches' ends answer for the
        partitions it has folded from; the broker is asked for the others (their ends and log
        starts, where a partition with nothing folded resumes) and for any end no fetch reported:
        a worker whose first fetch had not come back within ``idle_exit_s``, at load average 4-12
        on Apache Kafka, ended having folded nothing. A broker that does not answer holds the exit
        back until it does.
        """
        next_offsets = self._batches.next_offsets()
        if self._lag(next_offsets) > 0:
            return True
        unknown = [
            TP(*partition)
            for partition in self._view.assigned()
            if partition not in next_offsets or self._view.highwater(partition) is None
        ]
        if not unknown:
            return False
        try:
            ends = await self._app.consumer.highwaters(*unknown)
            starts = await self._app.consumer.earliest_offsets(*unknown)
        except (aiokafka.errors.KafkaError, TimeoutError):
            return True
        for tp in unknown:
            start = starts.get(tp, 0)
            position = max(start, next_offsets.get(Partition(tp.topic, tp.partition), start))
            if ends.get(tp, position) > position:
                return True
        return False

    def _lag(self, next_offsets: dict[Partition, int]) -> int:
        """Records the last fetches reported past ``next_offsets`` (partitions of unknown end count none)."""
        lag = 0
        for partition, next_offset in next_offsets.items():
            high = self._view.highwater(partition)
            lag += max(0, high - next_offset) if high is not None else 0
        return lag

    async def _position_paused(self) -> None:
        """Seek the partitions paused at assignment to their applied offsets + 1 and resume them, once Redis answers."""
        while self._unpositioned and not self._stopping:
            assigned = self._unpositioned & self._app.consumer.assignment()
            try:
                positions = self._read_positions(assigned)
            except BackendUnavailableError as exc:
                if self._metrics is not None:
                    self._metrics.batch_failed()
                await asyncio.sleep(self.outage.failed(exc, exc.backend))
                continue
            await self._app.consumer.seek_wait({tp: positions.get(Partition(*tp), 0) for tp in assigned})
            self._app.consumer.resume_partitions(assigned)
            self._unpositioned = set()
            self._last_records_at = self._clock()
            self.outage.succeeded("redis")

    def _watch_logs(self) -> None:
        """Measure the lag; reset every partition found on a new log and stop the worker for a restart."""
        next_offsets = self._batches.next_offsets()
        if self._metrics is not None:
            self._metrics.lag_measured(self._lag(next_offsets), len(self._view.assigned()))
        resets = self._log_watch.check(self._view, next_offsets)
        for reset in resets:
            rebuild_partition(self._batches, self._store, reset, self._view.partitions(reset.topic))
        if resets:
            self._log_reset = True
            self._stop_requested.set()

    def _resume_positions(self, assigned: set[TP]) -> dict[TP, int] | None:
        """Where each assigned partition resumes; None (they stay paused) while Redis does not answer.

        faust reads every assigned partition again from these positions, so the records kept for a
        retry are dropped: they are read again.
        """
        self._last_records_at = self._clock()
        self._uncommitted.clear()
        try:
            positions = self._read_positions(assigned)
        except BackendUnavailableError as exc:
            self.outage.failed(exc, exc.backend)
            self._unpositioned = set(assigned)
            return None
        self._unpositioned = set()
        return {TP(topic, partition): offset for (topic, partition), offset in positions.items()}

    def _read_positions(self, assigned: set[TP]) -> dict[Partition, int]:
        """The batch handling's resume positions of ``assigned``, after the checkpoints of those with none in Redis.

        Raises:
            BackendUnavailableError: Redis or the broker failed.
        """
        partitions = [Partition(tp.topic, tp.partition) for tp in assigned]
        resume_from_checkpoints(
            self._store,
            CONSUMER_NAME,
            self._checkpoint_source,
            partitions,
            self._view,
            expire_s=math.ceil(self._retention_s),
        )
        return self._batches.resume_positions(partitions, self._view.partitions(TELEMETRY_TOPIC))

    async def _on_revoked(self, sender: object, /, *args: Any, signal: BaseSignalT[Any], **kwargs: Any) -> None:
        revoked: set[TP] = args[0]
        if not self._fenced_worker:
            before = self._commit_marks()
            self._batches.revoked(Partition(tp.topic, tp.partition) for tp in revoked)
            self._settle_commits(before)

    def _fenced(self) -> None:
        self._fenced_worker = True
        self._stop_requested.set()
