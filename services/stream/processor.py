"""The stream processor on kafka-python (``--runtime kafka``, the default): a plain consumer-group member.

Being a member of the group is the partition loop's (services/runtime/partition_loop.py: poll, pace,
outage pauses, rejoins, log resets, idle exit); this module is what the processor does with its
partitions of ``gov.telemetry``. Each poll is one batch for the shared batch handling
(services/stream/batches.py: parse, dead-letter, fold, snapshots, offset-fenced commit, metrics); an
empty poll commits what is folded. Assignment seeks each partition to its applied offset + 1 (kept in
Redis, or the checkpoint it resumes from), revocation commits and forgets the revoked partitions'
engines, and a partition found on a new log is rebuilt from that log's beginning
(services/stream/log_rebuild.py). The faust-streaming runtime (services/stream/faust_runtime.py) feeds
the same batch handling.

Each poll takes as many records as the processor folds within a quarter of its poll interval
(services/runtime/batch_size.py), so a slow machine does not take it out of its group. A failed batch
is discarded and rewound by the batch handling, a failed commit kept for the next. After every commit
each partition's committed state goes to ``gov.checkpoints`` when the checkpoint interval is up.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable

import structlog

from fold.event_guard import DEFAULT_LIMITS, GuardLimits
from fold.triggers import TriggerSpec
from schemas.errors import BackendUnavailableError
from schemas.names import TELEMETRY_TOPIC, Partition
from schemas.signing import PolicyKeyring
from services.backends import BackendOutage
from services.checkpoints import CheckpointSource, CheckpointWriter, resume_from_checkpoints
from services.delivery import Checkpoint, no_checkpoint
from services.health import ServiceMetrics
from services.kafka_clients import ConsumedRecord, close_producer, record_producer
from services.kafka_security import PLAINTEXT
from services.log_reset import LogReset
from services.runtime.batch_size import BatchSizer
from services.runtime.partition_loop import PartitionLoop
from services.runtime.source import KafkaSource, RecordSource
from services.settings import (
    DEFAULT_LIFECYCLE,
    LOCAL_BROKER_TIMEOUTS,
    STREAM_COMMIT_INTERVAL_S,
    EngineLifecycle,
    KafkaClientTimeouts,
    KafkaSecurity,
)
from services.store.protocol import Store
from services.stream.batches import CONSUMER_NAME, StreamCounters, TelemetryBatches
from services.stream.log_rebuild import rebuild_partition
from services.stream.state_checkpoints import write_stream_checkpoints

log = structlog.get_logger(__name__)

POLL_TIMEOUT_MS = 200  # while records flow; an idle loop polls longer (services/kafka_clients.py, ``IdlePace``)


class _SourceView:
    """The batch handling's view of the loop's source: its partitions, their ends for the watermark, rewinds."""

    def __init__(self, source: RecordSource) -> None:
        self._source = source

    def assigned(self) -> list[Partition]:
        return self._source.assigned()

    def highwater(self, partition: Partition) -> int | None:
        return self._source.end_offset(partition)

    def rewind(self, positions: dict[Partition, int]) -> None:
        for partition, offset in positions.items():
            self._source.seek(partition, offset)


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
        self.outage = BackendOutage("stream", clock=clock)
        self._source = KafkaSource(
            service="stream",
            topic=TELEMETRY_TOPIC,
            bootstrap=bootstrap,
            group_id=group_id or f"governor-stream-{deployment}",
            timeouts=kafka_timeouts,
            security=security,
            poll_timeout_ms=POLL_TIMEOUT_MS,
            max_poll_records=max_poll_records,
        )
        self._loop = PartitionLoop(
            consumer_name=CONSUMER_NAME,
            source=self._source,
            work=self,
            store=store,
            outage=self.outage,
            clock=clock,
            metrics=metrics,
            sizer=BatchSizer(
                max_records=max_poll_records, max_poll_interval_s=kafka_timeouts.max_poll_interval_ms / 1000.0
            ),
        )
        self._producer = record_producer(bootstrap, timeouts=kafka_timeouts, security=security)
        self._view = _SourceView(self._source)
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
        self._commits_seen = 0

    @property
    def counters(self) -> StreamCounters:
        """What the processor has done so far."""
        return self._batches.counters

    def position(self, partitions: list[Partition]) -> dict[Partition, int]:
        """Resume each newly assigned partition at its applied offset + 1 (from its checkpoint when Redis has none)."""
        resume_from_checkpoints(
            self._store,
            CONSUMER_NAME,
            self._checkpoint_source,
            partitions,
            self._source,
            expire_s=math.ceil(self._retention_s),
        )
        return self._batches.resume_positions(partitions, self._source.partition_count())

    def revoked(self, partitions: list[Partition]) -> None:
        """Commit, then forget the engines of revoked partitions."""
        self._batches.revoked(partitions)

    def finish_pending(self) -> None:
        """Nothing: a failed batch was discarded and rewound, a failed commit is retried by the next one."""

    def next_offsets(self, assigned: list[Partition]) -> dict[Partition, int]:
        """The next offset to fold of each partition the batch handling holds."""
        return self._batches.next_offsets()

    def rebuild(self, reset: LogReset, partition_count: int) -> None:
        """Rebuild the partition's engines from the new log's beginning (services/stream/log_rebuild.py)."""
        rebuild_partition(self._batches, self._store, reset, partition_count)

    def polled(self, now_s: float) -> None:
        """Nothing: the processor keeps no wall-clock wait."""

    def process(self, records: list[ConsumedRecord]) -> None:
        """Fold one poll's records (parse, dead-letter, fold, snapshots, commit when due)."""
        self._batches.process(records)
        self.outage.succeeded("kafka")
        if self._metrics is not None:
            self._metrics.folded()

    def idle(self) -> None:
        """Commit what is folded."""
        self._batches.idle()

    def settled(self) -> bool:
        """Whether nothing folded is waiting for its commit."""
        return not self._batches.pending

    def after_turn(self) -> None:
        """After a turn that committed: Redis answered, and the checkpoints are written when their interval is up."""
        commits = self.counters.commits + self.counters.commits_refused
        if commits > self._commits_seen:
            self.outage.succeeded("redis")
            write_stream_checkpoints(
                self._checkpoints,
                self._store,
                self._deployment,
                self._source.assigned(),
                partition_count=self._source.partition_count(),
                topic_id=self._source.topic_id(TELEMETRY_TOPIC),
            )
        self._commits_seen = commits

    def stop(self) -> None:
        """Ask ``run`` to return after the current batch."""
        self._loop.stop()

    def close(self) -> None:
        """Commit what is folded (with Redis down a restart re-folds it instead), leave the group, close the clients."""
        try:
            self._batches.commit()
        except BackendUnavailableError as exc:
            log.warning("final_commit_failed", error=str(exc)[:300])
        self._loop.close()
        close_producer(self._producer, timeout_s=5.0)

    def run(self, *, idle_exit_s: float | None = None) -> StreamCounters:
        """Process batches until ``stop`` (or ``idle_exit_s`` quiet, assigned and caught up); return the counters."""
        self._loop.run(idle_exit_s=idle_exit_s)
        return self.counters
