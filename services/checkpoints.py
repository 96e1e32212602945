"""State checkpoints on ``gov.checkpoints``: what a rebuild resumes from once the log has expired.

"Wipe Redis and replay the log" rebuilds every estimate and decision only while the log holds every
record since the first: ``gov.telemetry`` is deleted after its retention (7 days) and ``gov.estimates``
keeps only the last record of each key once compacted (services/stack/topic_configs.py). So each
service also writes, every ``checkpoint_interval_s`` after a commit, the state it has just committed
for each of its partitions, with the offset it covers, as one ``StateCheckpoint`` record keyed by
deployment, service, topic and partition on a compacted topic: the last one of each partition stays.

A service assigned a partition for which Redis holds no applied offset (Redis wiped, or a new
Redis) resumes from that partition's checkpoint instead of the log's beginning: the checkpoint's
states go back into Redis with its offset, through the same commit as any batch, and the log is read
from the next offset. Estimates and decisions from there on are those of the live run, because a
checkpoint is the committed state at its offset, and the fold and the decisions are functions of
state and records. A checkpoint is used only on the log it was taken from: its topic id must be the
log's, and its offset below the log's end; otherwise (a topic deleted and created again) the
partition is read from its beginning, as before.

A checkpoint is one record per partition, so that its states and offset are one write. Its size is
about the partition's engines times their state (tens of kilobytes each), bounded by
``CHECKPOINT_MAX_BYTES``; a checkpoint the broker refuses is logged and skipped, never stops the service.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import structlog
from kafka import KafkaProducer

from schemas.errors import BackendUnavailableError
from schemas.names import CHECKPOINTS_TOPIC, Partition
from schemas.records import CheckpointDocument, StateCheckpoint
from services.delivery import Delivery
from services.log_reset import LogView
from services.store.policy_versions import stored_version
from services.store.protocol import Store

log = structlog.get_logger(__name__)

CheckpointSource = Callable[[], dict[Partition, StateCheckpoint]]


def checkpoint_key(checkpoint: StateCheckpoint) -> bytes:
    """The compaction key: one checkpoint kept per deployment, service, topic and partition."""
    return f"{checkpoint.deployment}:{checkpoint.consumer}:{checkpoint.topic}:{checkpoint.partition}".encode()


@dataclass(frozen=True, slots=True)
class PartitionState:
    """What one partition's checkpoint holds: the applied offset, the log's id, the states, values and documents."""

    offset: int
    topic_id: str | None
    states: Mapping[str, str]
    values: Mapping[str, str] = field(default_factory=dict)
    documents: Mapping[tuple[str, str], str] = field(default_factory=dict)


class CheckpointWriter:
    """Writes a service's partition checkpoints, at most every ``interval_s`` (0: never)."""

    def __init__(
        self,
        producer: KafkaProducer,
        *,
        deployment: str,
        consumer: str,
        interval_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._producer = producer
        self._deployment = deployment
        self._consumer = consumer
        self._interval_s = interval_s
        self._clock = clock
        self._last_s = clock()

    def due(self) -> bool:
        """Whether the next commit should be followed by checkpoints."""
        return self._interval_s > 0 and self._clock() - self._last_s >= self._interval_s

    def write(self, partitions: Mapping[Partition, PartitionState]) -> None:
        """Write one checkpoint per partition and wait for the broker to take them.

        A checkpoint that fails (the broker down, the record too large) is logged; the next interval
        tries again. The service's own work never waits on it beyond the flush.
        """
        self._last_s = self._clock()
        if not partitions:
            return
        delivery = Delivery(self._producer)
        try:
            for (topic, partition), state in sorted(partitions.items()):
                checkpoint = StateCheckpoint(
                    deployment=self._deployment,
                    consumer=self._consumer,
                    topic=topic,
                    partition=partition,
                    offset=state.offset,
                    topic_id=state.topic_id,
                    states=dict(state.states),
                    values=dict(state.values),
                    documents=[
                        CheckpointDocument(kind=kind, scope=scope, document=document)
                        for (kind, scope), document in sorted(state.documents.items())
                    ],
                )
                delivery.send(CHECKPOINTS_TOPIC, checkpoint_key(checkpoint), checkpoint.model_dump_json().encode())
            delivery.confirm()
        except BackendUnavailableError as exc:
            log.warning("checkpoint_failed", consumer=self._consumer, partitions=len(partitions), error=str(exc)[:300])
            return
        log.info(
            "checkpoint_written",
            consumer=self._consumer,
            offsets={tp.field: state.offset for tp, state in sorted(partitions.items())},
        )


def usable(checkpoint: StateCheckpoint, topic_id: str | None, log_end: int | None) -> bool:
    """Whether ``checkpoint`` was taken from the log that is there now.

    Its topic id must be the log's where both are known, and its offset below the log's end (a log
    created again starts empty, so an offset of the old one lies past its end).
    """
    if checkpoint.topic_id is not None and topic_id is not None and checkpoint.topic_id != topic_id:
        return False
    return log_end is None or checkpoint.offset < log_end


def resume_from_checkpoints(
    store: Store,
    consumer: str,
    source: CheckpointSource | None,
    partitions: Iterable[Partition],
    logs: LogView,
    *,
    expire_s: int = 0,
) -> list[Partition]:
    """Put back into ``store`` the checkpoint of each of ``partitions`` that has no applied offset there.

    Each checkpoint found on the log it was taken from (``usable``) is committed as a batch would be
    (its states and values, its offset as the applied offset, ``expire_s`` as their time to live when
    above 0), and its policy documents written back (the next decision of each key builds on its
    document and numbers its version above it), so the caller then resumes the partition from the
    next offset. Each one used, and each
    one found but not of this log, is logged.

    Returns:
        The partitions resumed from a checkpoint.

    Raises:
        BackendUnavailableError: Redis or the broker failed.
    """
    applied = store.applied_offsets(consumer)
    unapplied = sorted(tp for tp in partitions if tp.field not in applied)
    if source is None or not unapplied:
        return []
    found = source()
    resumed: list[Partition] = []
    for partition in unapplied:
        checkpoint = found.get(partition)
        if checkpoint is None:
            continue
        topic_id, end = logs.topic_id(partition.topic), logs.highwater(partition)
        if not usable(checkpoint, topic_id, end):
            log.warning(
                "checkpoint_not_of_this_log",
                consumer=consumer,
                topic=partition.topic,
                partition=partition.partition,
                checkpoint_offset=checkpoint.offset,
                checkpoint_topic_id=checkpoint.topic_id,
                topic_id=topic_id,
                log_end=end,
                action="read_from_beginning",
            )
            continue
        expiries = dict.fromkeys([*checkpoint.states, *checkpoint.values], expire_s) if expire_s > 0 else None
        if not store.commit(
            consumer, {partition.field: checkpoint.offset}, checkpoint.states, checkpoint.values, expiries
        ):
            continue  # another member committed the partition meanwhile: its state is newer
        for document in checkpoint.documents:
            version = stored_version(document.document)
            if version is not None:
                store.put_policy(document.kind, document.scope, version, document.document)
        resumed.append(partition)
        log.warning(
            "resumed_from_checkpoint",
            consumer=consumer,
            topic=partition.topic,
            partition=partition.partition,
            offset=checkpoint.offset,
            scopes=len(checkpoint.states),
        )
    return resumed
