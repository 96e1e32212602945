"""The stream processor on kafka-python (``--runtime kafka``, the default): a plain consumer-group member.

Only the consumer loop lives here: each poll of ``gov.telemetry`` is one batch for the shared batch
handling (services/stream/batches.py: parse, dead-letter, fold, snapshots, offset-fenced commit,
metrics); an empty poll commits what is folded. Partition assignment seeks each partition to its
applied offset + 1 (kept in Redis) and revocation commits and forgets the revoked partitions'
engines. The faust-streaming runtime (services/stream/faust_runtime.py) feeds the same batch handling.

Each poll takes as many records as the processor folds within a quarter of its poll interval
(services/stream/batch_size.py), so a slow machine does not take it out of its group.

Redis and broker outages of any length are waited out, never raised: a failed batch is discarded
and rewound by the batch handling, a failed commit kept for the next; the loop pauses its
partitions and retries with ``BackendOutage``'s pacing (one log line when the outage starts, one
when it ends). Partitions assigned while Redis is down stay paused until their applied offsets
can be read.

Every poll also measures the lag (for /healthz: lag with nothing folded is a stall) and checks each
assigned partition against the log its applied offset came from (services/log_reset.py); a
partition found on a new log is rebuilt from that log's beginning (services/stream/log_rebuild.py),
and its records of that poll are dropped, since they are read again. When the topic's layout
changes (recreated, with another partition count or not) and then holds still, the member commits,
gives its partitions back and rejoins its group as a new consumer (a fresh member id), so that the
group's assignment is computed from the new layout (services/log_reset.py, ``LayoutWatch``). It
rejoins the same way when a partition it holds, positioned and not paused by itself, has gone unfetched
for longer than any rebalance takes (services/membership.py).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from functools import partial

import structlog
from kafka import KafkaConsumer, TopicPartition
from kafka.consumer.fetcher import ConsumerRecord
from kafka.errors import KafkaError

from fold.event_guard import DEFAULT_LIMITS, GuardLimits
from fold.triggers import TriggerSpec
from schemas.errors import BackendUnavailableError
from schemas.names import TELEMETRY_TOPIC, Partition
from schemas.signing import PolicyKeyring
from services.backends import BackendOutage
from services.checkpoints import CheckpointSource, CheckpointWriter, resume_from_checkpoints
from services.delivery import Checkpoint, no_checkpoint
from services.health import ServiceMetrics
from services.kafka_clients import (
    IdlePace,
    KafkaLogView,
    PartitionEnds,
    Rebalance,
    caught_up,
    close_producer,
    consumer_lag,
    group_consumer,
    record_producer,
    subscribe,
)
from services.kafka_security import PLAINTEXT
from services.log_reset import LayoutWatch, LogWatch, TopicLayout
from services.membership import FetchStallWatch, ReadStallWatch, stall_bound_s, unfetched
from services.settings import (
    DEFAULT_LIFECYCLE,
    LOCAL_BROKER_TIMEOUTS,
    STREAM_COMMIT_INTERVAL_S,
    EngineLifecycle,
    KafkaClientTimeouts,
    KafkaSecurity,
)
from services.store.protocol import Store
from services.stream.batch_size import BatchSizer
from services.stream.batches import CONSUMER_NAME, StreamCounters, TelemetryBatches
from services.stream.log_rebuild import rebuild_partition
from services.stream.state_checkpoints import write_stream_checkpoints

log = structlog.get_logger(__name__)

POLL_TIMEOUT_MS = 200  # while records flow; an idle loop polls longer (services/kafka_clients.py, ``IdlePace``)


class _KafkaConsumerView:
    """The batch handling's view of a kafka-python consumer (ends it was not sent are asked of the broker)."""

    def __init__(self, consumer: KafkaConsumer) -> None:
        self.consumer = consumer
        self.ends = PartitionEnds(consumer)

    def assigned(self) -> list[Partition]:
        return [Partition(tp.topic, tp.partition) for tp in self.consumer.assignment()]

    def highwater(self, partition: Partition) -> int | None:
        return self.ends.highwater(TopicPartition(*partition))

    def rewind(self, positions: dict[Partition, int]) -> None:
        for partition, offset in positions.items():
            self.consumer.seek(TopicPartition(*partition), offset)


class StreamProcessor:
    """One member of the stream-processor consumer group of a deployment, on kafka-python."""

    def __init__(
        self,
        *,
        deployment: str,
        bootstrap: str,
        store: Store,
        registry: Iterable[TriggerSpec],
        group_id: str | None = None,
        max_poll_records: int = 2000,
        clock: Callable[[], float] = time.monotonic,
        metrics: ServiceMetrics | None = None,
        commit_interval_s: float = STREAM_COMMIT_INTERVAL_S,
        lifecycle: EngineLifecycle = DEFAULT_LIFECYCLE,
        kafka_timeouts: KafkaClientTimeouts = LOCAL_BROKER_TIMEOUTS,
        security: KafkaSecurity = PLAINTEXT,
        limits: GuardLimits = DEFAULT_LIMITS,
        checkpoint: Checkpoint = no_checkpoint,
        keyring: PolicyKeyring | None = None,
        checkpoint_interval_s: float = 0.0,
        checkpoint_source: CheckpointSource | None = None,
    ) -> None:
        """Build the clients and subscribe; ``checkpoint`` is the batch handling's (the crash tests' hook).

        With ``keyring`` every snapshot is signed (``TelemetryBatches``). With ``checkpoint_interval_s``
        above 0 the committed state of each partition is written to ``gov.checkpoints`` that often; with
        ``checkpoint_source`` a partition with no applied offset in Redis resumes from its checkpoint
        (services/checkpoints.py)."""
        self._clock = clock
        self.outage = BackendOutage("stream", clock=clock)
        self._unpositioned: list[TopicPartition] = []
        self._new_consumer = partial(
            group_consumer,
            bootstrap,
            group_id or f"governor-stream-{deployment}",
            max_poll_records=max_poll_records,
            timeouts=kafka_timeouts,
            security=security,
        )
        self._consumer = self._new_consumer()
        self._pace = IdlePace(
            self._consumer, fetch_wait_ms=kafka_timeouts.fetch_max_wait_ms, poll_timeout_ms=POLL_TIMEOUT_MS
        )
        self._producer = record_producer(bootstrap, timeouts=kafka_timeouts, security=security)
        self._view = _KafkaConsumerView(self._consumer)
        self._sizer = BatchSizer(
            max_records=max_poll_records, max_poll_interval_s=kafka_timeouts.max_poll_interval_ms / 1000.0
        )
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
            checkpoint=checkpoint,
            keyring=keyring,
        )
        self._store = store
        self._deployment = deployment
        self._retention_s = lifecycle.retention_s
        self._checkpoints = CheckpointWriter(
            self._producer, deployment=deployment, consumer=CONSUMER_NAME, interval_s=checkpoint_interval_s, clock=clock
        )
        self._checkpoint_source = checkpoint_source
        self._metrics = metrics
        self._log_view = KafkaLogView(self._consumer)
        self._log_watch = LogWatch(consumer=CONSUMER_NAME, store=store, metrics=metrics)
        self._layout_watch = LayoutWatch(TELEMETRY_TOPIC)
        self._stall_watch = FetchStallWatch("stream", stall_bound_s(kafka_timeouts))
        self._read_watch = ReadStallWatch("stream", stall_bound_s(kafka_timeouts))
        subscribe(self._consumer, TELEMETRY_TOPIC, Rebalance(self.on_assigned, self.on_revoked))
        self._stopped = False

    @property
    def counters(self) -> StreamCounters:
        """What the processor has done so far."""
        return self._batches.counters

    def on_assigned(self, partitions: list[TopicPartition]) -> None:
        """Seek every newly assigned partition to its applied offset + 1 (paused until Redis answers)."""
        try:
            self._position(partitions)
        except BackendUnavailableError as exc:
            self._unpositioned = list(partitions)
            self._consumer.pause(*partitions)
            self.outage.failed(exc, exc.backend)

    def _position(self, partitions: list[TopicPartition]) -> None:
        self._view.ends.assigned()
        count = len(self._consumer.partitions_for_topic(TELEMETRY_TOPIC) or ())
        resume_from_checkpoints(
            self._store,
            CONSUMER_NAME,
            self._checkpoint_source,
            [Partition(tp.topic, tp.partition) for tp in partitions],
            self._log_view,
            expire_s=math.ceil(self._retention_s),
        )
        positions = self._batches.resume_positions((Partition(tp.topic, tp.partition) for tp in partitions), count)
        for (topic, partition), offset in positions.items():
            self._consumer.seek(TopicPartition(topic, partition), offset)
        self._log_watch.assigned(self._log_view, [Partition(tp.topic, tp.partition) for tp in partitions])
        self._consumer.resume(*partitions)
        self._unpositioned = []
        self.outage.succeeded("redis")

    def on_revoked(self, partitions: list[TopicPartition]) -> None:
        """Commit, then forget the engines of revoked partitions."""
        self._batches.revoked(Partition(tp.topic, tp.partition) for tp in partitions)

    def stop(self) -> None:
        """Ask ``run`` to return after the current batch."""
        self._stopped = True

    def close(self) -> None:
        """Commit what is folded (with Redis down a restart re-folds it instead), leave the group, close the clients."""
        try:
            self._batches.commit()
        except BackendUnavailableError as exc:
            log.warning("final_commit_failed", error=str(exc)[:300])
        self._consumer.close()
        close_producer(self._producer, timeout_s=5.0)

    def run(self, *, idle_exit_s: float | None = None) -> StreamCounters:
        """Process batches until ``stop`` (or ``idle_exit_s`` quiet, assigned and caught up); return the counters."""
        idle_since = self._clock()
        while not self._stopped:
            commits = self.counters.commits + self.counters.commits_refused
            try:
                if self._unpositioned:
                    self._position(self._unpositioned)
                batch = self._consumer.poll(timeout_ms=self._pace.poll_timeout_ms, max_records=self._sizer.records)
                self._pace.polled(sum(len(part) for part in batch.values()))
                layout = self._log_view.layout(TELEMETRY_TOPIC)
                now_s = self._clock()
                if self._layout_watch.rejoin_due(layout, now_s) or (
                    self._stall_watch.rejoin_due(unfetched(self._consumer), now_s)
                    or self._read_watch.rejoin_due(self._consumer, now_s, waiting=self.outage.redis_down)
                ):
                    self._rejoin()
                    continue
                records = self._on_current_logs([record for part in batch.values() for record in part], layout)
                self._measure()
                if not records:
                    self._batches.idle()
                    if not self._consumer.assignment():
                        idle_since = self._clock()
                    elif (
                        idle_exit_s is not None
                        and self._clock() - idle_since > idle_exit_s
                        and not self._unpositioned
                        and not self._batches.pending
                        and caught_up(self._consumer)
                    ):
                        break
                else:
                    idle_since = self._clock()
                    started = time.monotonic()  # the client's poll deadline runs on real time, not on self._clock
                    self._batches.process(records)
                    self._sizer.observe(len(records), time.monotonic() - started)
                    self.outage.succeeded("kafka")
                    if self._metrics is not None:
                        self._metrics.folded()
            except BackendUnavailableError as exc:
                self._failed()
                self._pause(self.outage.failed(exc, exc.backend))
                idle_since = self._clock()
            except KafkaError as exc:
                self._failed()
                self._pause(self.outage.failed(exc, "kafka"))
                idle_since = self._clock()
            if self.counters.commits + self.counters.commits_refused > commits:
                self.outage.succeeded("redis")
                self._write_checkpoints()
        return self.counters

    def _write_checkpoints(self) -> None:
        """Write each assigned partition's committed state to ``gov.checkpoints`` when the interval is up."""
        write_stream_checkpoints(
            self._checkpoints,
            self._store,
            self._deployment,
            (Partition(tp.topic, tp.partition) for tp in self._consumer.assignment()),
            partition_count=len(self._consumer.partitions_for_topic(TELEMETRY_TOPIC) or ()),
            topic_id=self._log_view.topic_id(TELEMETRY_TOPIC),
        )

    def _rejoin(self) -> None:
        """Give the assigned partitions back (committed first) and rejoin the group under a fresh member id.

        Done when the topic's layout changed and held still, or a partition went unfetched past any
        rebalance (services/membership.py).

        The member rejoins as a new consumer: unsubscribing and subscribing again on the same client
        during a rebalance left it without partitions for the rest of a 3-minute test on Tansu. The
        records of the poll that saw the new layout are dropped unfolded: the next owner of their
        partitions reads them again from the applied offsets.
        """
        self.on_revoked(list(self._consumer.assignment()))
        self._unpositioned = []
        self._read_watch.rejoined()
        self._consumer.close()
        self._consumer = self._new_consumer()
        self._pace.replaced(self._consumer)
        self._view.consumer = self._consumer
        self._view.ends = PartitionEnds(self._consumer)
        self._log_view = KafkaLogView(self._consumer)
        subscribe(self._consumer, TELEMETRY_TOPIC, Rebalance(self.on_assigned, self.on_revoked))

    def _failed(self) -> None:
        """Tell health a batch (or positioning) failed and is retried: the loop turning is no progress then."""
        if self._metrics is not None:
            self._metrics.batch_failed()

    def _on_current_logs(self, records: list[ConsumerRecord], layout: TopicLayout | None) -> list[ConsumerRecord]:
        """Rebuild every partition found on a new log (read again from its beginning); keep the others' records.

        Only partitions the topic has now are checked: one missing from a short-lived topic with fewer
        partitions (auto-created after a broker restart) is on no log, and recording that topic's id
        for it made the real topic's log look new again once it was back, so its records were read twice.
        """
        next_offsets = self._batches.next_offsets()
        if layout is not None:
            next_offsets = {tp: offset for tp, offset in next_offsets.items() if tp[1] in layout[1]}
        resets = self._log_watch.check(self._log_view, next_offsets)
        for reset in resets:
            partitions = len(self._consumer.partitions_for_topic(reset.topic) or ())
            rebuild_partition(self._batches, self._store, reset, partitions)
            self._consumer.seek_to_beginning(TopicPartition(reset.topic, reset.partition))
        rebuilt = {(reset.topic, reset.partition) for reset in resets}
        return [record for record in records if (record.topic, record.partition) not in rebuilt]

    def _measure(self) -> None:
        """Export the lag at this poll (with the time of the last fold, health tells a stall from an idle log)."""
        if self._metrics is not None:
            self._metrics.lag_measured(consumer_lag(self._consumer), len(self._consumer.assignment()))

    def _pause(self, pause_s: float) -> None:
        """Wait ``pause_s`` with the partitions paused, polling so that the group keeps this member."""
        self._consumer.pause(*self._consumer.assignment())
        self._consumer.poll(timeout_ms=int(pause_s * 1000))
        self._consumer.resume(*(tp for tp in self._consumer.assignment() if tp not in self._unpositioned))
