"""The stream processor's partition checkpoints (services/checkpoints.py): each engine's state and summary.

An engine's telemetry is on one partition (the SDK's rule, services/engine_partitions.py), so a
partition's checkpoint holds every engine that rule puts on it with a state in Redis: the estimator
state (with its event guard and held fleet contributions) and the summary readers see, both as the
last commit wrote them with the partition's applied offset. Engine acknowledgements are not in it:
each engine's next acknowledgement writes its key again.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

import structlog

from schemas.errors import BackendUnavailableError
from schemas.names import Partition, estimate_key
from services.checkpoints import CheckpointWriter, PartitionState
from services.engine_partitions import engine_partition
from services.store.protocol import Store
from services.stream.batches import CONSUMER_NAME, SUMMARY_NAME

log = structlog.get_logger(__name__)


def stream_checkpoint_states(
    store: Store,
    deployment: str,
    partitions: Iterable[Partition],
    partition_count: int,
    topic_id: str | None,
) -> dict[Partition, PartitionState]:
    """The committed state of each of ``partitions`` that has an applied offset, read back from ``store``.

    Raises:
        BackendUnavailableError: Redis failed.
    """
    applied = store.applied_offsets(CONSUMER_NAME)
    wanted = {tp: applied[tp.field] for tp in partitions if tp.field in applied}
    if not wanted or partition_count <= 0:
        return {}
    engines: dict[int, list[str]] = defaultdict(list)
    for engine in store.estimate_scopes(SUMMARY_NAME):
        engines[engine_partition(engine, partition_count)].append(engine)
    found: dict[Partition, PartitionState] = {}
    for tp, offset in sorted(wanted.items()):
        scopes = sorted(engines.get(tp.partition, []))
        found[tp] = PartitionState(
            offset=offset,
            topic_id=topic_id,
            states=store.load_states(CONSUMER_NAME, scopes),
            values=store.load_values([estimate_key(deployment, engine, SUMMARY_NAME) for engine in scopes]),
        )
    return found


def write_stream_checkpoints(
    writer: CheckpointWriter,
    store: Store,
    deployment: str,
    partitions: Iterable[Partition],
    *,
    partition_count: int,
    topic_id: str | None,
) -> None:
    """Write the committed state of ``partitions`` with ``writer`` when its interval is up (after a commit).

    Redis failing is logged and left to the next interval: a checkpoint never stops the fold.
    """
    if not writer.due():
        return
    try:
        states = stream_checkpoint_states(store, deployment, sorted(partitions), partition_count, topic_id)
    except BackendUnavailableError as exc:
        log.warning("checkpoint_failed", consumer=CONSUMER_NAME, error=str(exc)[:300])
        return
    writer.write(states)
