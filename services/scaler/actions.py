"""Where the scaler's actions go: ``gov.scaling`` on Kafka (keyed by pool), or a list in tests.

The log is the record of every size a pool had and why (DESIGN principle 1 and 6): an action is
appended before the scaler moves on, and the delivery is awaited, since actions are rare (at
most one per pool per cool-down) and one lost would leave a resize nobody can explain. A record
the broker did not take is logged as an error and counted; the resize itself is not undone.
"""

from __future__ import annotations

import contextlib
import time
from typing import Protocol

import structlog
from kafka.admin import NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError
from pydantic import ValidationError

from schemas.errors import BackendUnavailableError
from schemas.scaling import SCALING_TOPIC, ScalingAction
from services.kafka_clients import close_producer, reader, require_topic
from services.kafka_security import PLAINTEXT, kafka_admin, kafka_producer
from services.settings import KafkaSecurity

log = structlog.get_logger(__name__)


class ActionSink(Protocol):
    """Appends scaling actions to the log."""

    def record(self, action: ScalingAction) -> bool:
        """Append ``action``; return whether the log took it. Never raises."""
        ...

    def close(self) -> None:
        """Release the connection."""
        ...


class ListActionSink:
    """An ``ActionSink`` keeping actions in a list (tests, advisory runs read in-process)."""

    def __init__(self) -> None:
        self.actions: list[ScalingAction] = []

    def record(self, action: ScalingAction) -> bool:
        """Append ``action`` to ``actions``."""
        self.actions.append(action)
        return True

    def close(self) -> None:
        """Nothing to release."""


def encode_action(action: ScalingAction) -> bytes:
    """The record value of ``action``: its JSON."""
    return action.model_dump_json().encode()


class KafkaActionSink:
    """Appends actions to ``gov.scaling``, keyed by pool, waiting for the broker's acknowledgement."""

    def __init__(self, bootstrap: str, *, timeout_s: float, security: KafkaSecurity = PLAINTEXT) -> None:
        """Create ``gov.scaling`` where it is missing (one partition: actions are rare) and connect a producer.

        Raises:
            BackendUnavailableError: the broker refused the admin or producer connection.
        """
        self._timeout_s = timeout_s
        try:
            admin = kafka_admin(bootstrap, security, request_timeout_ms=int(timeout_s * 1000))
            try:
                if SCALING_TOPIC not in set(admin.list_topics()):
                    with contextlib.suppress(TopicAlreadyExistsError):
                        admin.create_topics([NewTopic(SCALING_TOPIC, 1, 1)])
            finally:
                admin.close()
            self._producer = kafka_producer(bootstrap, security, acks="all", linger_ms=0)
        except KafkaError as exc:
            msg = f"kafka at {bootstrap} refused the scaler's connection: {exc}"
            raise BackendUnavailableError(msg, backend="kafka") from exc
        self.unrecorded = 0

    def record(self, action: ScalingAction) -> bool:
        """Send ``action`` and wait up to the timeout for the acknowledgement."""
        try:
            future = self._producer.send(SCALING_TOPIC, key=action.pool.encode(), value=encode_action(action))
            future.get(timeout=self._timeout_s)
        except KafkaError as exc:
            self.unrecorded += 1
            log.error("scaling_action_unrecorded", pool=action.pool, seq=action.seq, error=str(exc))
            return False
        return True

    def close(self) -> None:
        """Flush and close the producer."""
        close_producer(self._producer, timeout_s=self._timeout_s)


def read_actions(
    bootstrap: str, deployment: str, *, timeout_s: float, security: KafkaSecurity = PLAINTEXT
) -> list[ScalingAction]:
    """Every action of ``deployment`` on ``gov.scaling``, in log order (what ``governor scale --history`` prints).

    A record that is not a ``ScalingAction`` is skipped and logged.

    Raises:
        BackendUnavailableError: no broker answers.
        InvalidInputError: the broker has no ``gov.scaling`` (no scaler ever ran against it).
    """
    consumer = reader(bootstrap, timeout_s=timeout_s, security=security)
    try:
        partitions = require_topic(consumer, SCALING_TOPIC, bootstrap)
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        end = consumer.end_offsets(partitions)
        actions: list[ScalingAction] = []
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < end[tp] for tp in partitions) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                for record in records:
                    try:
                        action = ScalingAction.model_validate_json(record.value)
                    except ValidationError as exc:
                        log.warning("scaling_record_skipped", offset=record.offset, reason=str(exc).splitlines()[0])
                        continue
                    if action.deployment == deployment:
                        actions.append(action)
        return actions
    finally:
        consumer.close()
