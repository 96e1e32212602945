"""Reading ``gov.checkpoints`` (services/checkpoints.py): the last checkpoint of each of a service's partitions."""

from __future__ import annotations

import structlog
from pydantic import ValidationError

from schemas.errors import InvalidInputError
from schemas.names import CHECKPOINTS_TOPIC, Partition
from schemas.records import StateCheckpoint
from services.replay.replay import read_topic
from services.settings import KafkaSecurity

log = structlog.get_logger(__name__)


def read_checkpoints(
    bootstrap: str, *, deployment: str, consumer: str, security: KafkaSecurity, timeout_s: float = 10.0
) -> dict[Partition, StateCheckpoint]:
    """The last checkpoint of each partition of ``consumer`` in ``deployment``.

    A broker without the topic (a stack created before it) has none; a record that does not read as
    a checkpoint is skipped with a warning.

    Raises:
        BackendUnavailableError: the broker does not answer.
    """
    found: dict[Partition, StateCheckpoint] = {}
    unreadable = 0
    try:
        for raw in read_topic(bootstrap, CHECKPOINTS_TOPIC, timeout_s=timeout_s, security=security):
            try:
                checkpoint = StateCheckpoint.model_validate_json(raw)
            except ValidationError:
                unreadable += 1
                continue
            if checkpoint.deployment == deployment and checkpoint.consumer == consumer:
                found[Partition(checkpoint.topic, checkpoint.partition)] = checkpoint
    except InvalidInputError as exc:
        log.warning("checkpoints_topic_missing", topic=CHECKPOINTS_TOPIC, reason=str(exc)[:300])
        return {}
    if unreadable:
        log.warning("checkpoints_unreadable", topic=CHECKPOINTS_TOPIC, records=unreadable)
    return found
