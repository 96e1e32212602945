"""``Delivery``: the records a batch produces, and proof that every one reached the broker.

The outbox order of both services needs "flushed" to mean delivered: a snapshot
is on ``gov.estimates`` before the state that took it is committed, a decision record is on
``gov.policy.decisions`` before its document is written to Redis. ``KafkaProducer.flush`` returns
once every record has *completed*, which includes failing; so ``Delivery`` keeps each send's future
and, after the flush, raises when any record failed or the flush timed out. The caller then
treats the whole batch as not done (a retry may produce some records twice; the services recognise
those duplicates). ``Checkpoint`` names the steps of that order, so tests can stop a service between them.
"""

from __future__ import annotations

from collections.abc import Callable

from kafka import KafkaProducer
from kafka.errors import KafkaError
from kafka.producer.future import FutureRecordMetadata

from schemas.errors import BackendUnavailableError

FLUSH_TIMEOUT_S = 10.0

Checkpoint = Callable[[str], None]
"""Called with the name of each outbox step a batch passes; the crash tests kill the process there."""


def no_checkpoint(point: str) -> None:
    """The services' default checkpoint: nothing happens between the steps of a batch."""


class Delivery:
    """Records sent through one producer for one batch."""

    def __init__(self, producer: KafkaProducer) -> None:
        self._producer = producer
        self._futures: list[FutureRecordMetadata] = []

    def __len__(self) -> int:
        return len(self._futures)

    def send(self, topic: str, key: bytes | None, value: bytes) -> None:
        """Send one record (asynchronously; ``confirm`` waits for it).

        Raises:
            BackendUnavailableError: the producer refused it (no metadata for the topic in time, buffer full).
        """
        try:
            self._futures.append(self._producer.send(topic, key=key, value=value))
        except KafkaError as exc:
            msg = f"kafka refused a record for {topic}: {exc}"
            raise BackendUnavailableError(msg, backend="kafka") from exc

    def confirm(self, timeout_s: float = FLUSH_TIMEOUT_S) -> None:
        """Flush and check every record sent since the last ``confirm``.

        Raises:
            BackendUnavailableError: the flush timed out, or the broker did not take a record.
        """
        futures, self._futures = self._futures, []
        try:
            self._producer.flush(timeout=timeout_s)
        except KafkaError as exc:
            msg = f"kafka did not take {len(futures)} records within {timeout_s:g} s: {exc}"
            raise BackendUnavailableError(msg, backend="kafka") from exc
        failed = [future for future in futures if not future.succeeded()]
        if failed:
            msg = f"kafka did not take {len(failed)} of {len(futures)} records: {failed[0].exception}"
            raise BackendUnavailableError(msg, backend="kafka")
