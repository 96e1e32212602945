"""``record`` and ``replay``: topic contents to a file, and a file back to Kafka or through the offline loop.

Replay to Kafka keeps the file's order and paces by event time: the gap between two events' ``ts``
is waited out divided by ``speed`` (``speed=None`` publishes as fast as possible). Offline replay
folds the same events through the same estimator and policy code in-process (``OfflineControlPlane``)
and returns the decision stream, which the determinism contract says equals the live one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from kafka import KafkaConsumer, TopicPartition
from pydantic import TypeAdapter, ValidationError

from decide.registry import PolicyRegistry
from schemas.envelope import Identifier
from schemas.errors import BackendUnavailableError, InvalidInputError
from schemas.events import Event
from schemas.records import DecisionRecord
from services.kafka_clients import reader, require_topic
from services.kafka_security import PLAINTEXT
from services.replay.offline import OfflineControlPlane
from services.sdk.protocol import TelemetrySink
from services.settings import KafkaSecurity

READ_POLL_MS = 200  # one empty poll of this long, at the end offsets, ends a read_topic
READ_STALL_S = 60.0  # a read to the end that gets no record for this long while behind fails, loudly

IDENTIFIER: TypeAdapter[str] = TypeAdapter(Identifier)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayStats:
    """What a replay did."""

    events: int
    wall_s: float
    event_span_s: float


def replay_events(
    events: Iterable[Event],
    sink: TelemetrySink,
    *,
    speed: float | None,
    progress: Callable[[int], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> ReplayStats:
    """Publish ``events`` to ``sink`` in order, paced by event time at ``speed`` (None: no pacing)."""
    started = clock()
    first_ts: float | None = None
    last_ts = 0.0
    count = 0
    for event in events:
        if first_ts is None:
            first_ts = event.ts
        if speed is not None:
            due = started + (event.ts - first_ts) / speed
            wait = due - clock()
            if wait > 0:
                sleep(wait)
        sink.publish(event)
        last_ts = event.ts
        count += 1
        if progress is not None:
            progress(count)
    return ReplayStats(
        events=count, wall_s=clock() - started, event_span_s=0.0 if first_ts is None else last_ts - first_ts
    )


def as_deployment(events: Iterable[Event], deployment: str) -> Iterator[Event]:
    """Yield ``events`` relabelled to ``deployment`` (a recording replayed into another deployment).

    Raises:
        InvalidInputError: ``deployment`` is not a valid identifier.
    """
    try:
        name = IDENTIFIER.validate_python(deployment)
    except ValidationError as exc:
        msg = f"--as-deployment {deployment!r}: {exc.errors(include_url=False)[0]['msg']}"
        raise InvalidInputError(msg, field="deployment", value=deployment) from exc
    for event in events:
        yield event.model_copy(update={"deployment": name})


def replay_offline(
    events: Iterable[Event], registry: PolicyRegistry, deployment: str | None = None
) -> OfflineControlPlane:
    """Fold ``events`` (of ``deployment``, default the first event's) through the offline control plane."""
    plane: OfflineControlPlane | None = None
    for event in events:
        if plane is None:
            plane = OfflineControlPlane(deployment or event.deployment, registry)
        if event.deployment == plane.deployment:
            plane.publish(event)
    return plane if plane is not None else OfflineControlPlane(deployment or "none", registry)


def decision_lines(decisions: Iterable[DecisionRecord]) -> Iterator[bytes]:
    """The JSON lines of a decision stream."""
    for decision in decisions:
        yield decision.model_dump_json().encode()


def read_topic(
    bootstrap: str,
    topic: str,
    *,
    idle_s: float = 3.0,
    timeout_s: float = 10.0,
    to_end: bool = True,
    security: KafkaSecurity = PLAINTEXT,
) -> Iterator[bytes]:
    """Yield every record value of ``topic`` from the beginning, each partition in order.

    With ``to_end`` it stops as soon as a poll brings nothing and every partition's position is at
    its end offset, asked again at that moment. The end alone is not enough: the Tansu broker
    reports as a partition's end the offset after its last record *batch's base*, so a reader
    stopping there would lose the rest of that batch. Every record of a fetched batch is handed out
    before a poll comes back empty, so "empty poll and at the end" loses nothing, and costs one poll.
    A quiet spell while behind (a loaded machine can hold a fetch for seconds) does not end such a
    read: it would end it short without a word; only ``READ_STALL_S`` without a record does, as an
    error. Without ``to_end`` (a tail of a live topic) it stops after ``idle_s`` without records.

    Raises:
        BackendUnavailableError: the broker does not answer, or sends nothing for ``READ_STALL_S``
            while records remain.
        InvalidInputError: the topic does not exist.
    """
    consumer = reader(bootstrap, timeout_s=timeout_s, security=security)
    try:
        assigned = require_topic(consumer, topic, bootstrap)
        consumer.assign(assigned)
        consumer.seek_to_beginning(*assigned)
        if not any(consumer.end_offsets(assigned).values()):
            return
        quiet_since = time.monotonic()
        while True:
            fetched = consumer.poll(timeout_ms=READ_POLL_MS)
            if fetched:
                quiet_since = time.monotonic()
                for partition in sorted(fetched):
                    for message in fetched[partition]:
                        if message.value is not None:  # a tombstone carries no event: nothing to record
                            yield message.value
                continue
            quiet_s = time.monotonic() - quiet_since
            if not to_end:
                if quiet_s >= idle_s:
                    return
            elif _at_end(consumer, assigned):
                return
            elif quiet_s >= READ_STALL_S:
                msg = f"{topic} on {bootstrap}: no record for {quiet_s:.0f} s while the read is behind its end offsets"
                raise BackendUnavailableError(msg, backend="kafka")
    finally:
        consumer.close()


def _at_end(consumer: KafkaConsumer, assigned: list[TopicPartition]) -> bool:
    ends = consumer.end_offsets(assigned)
    return all(consumer.position(partition) >= ends[partition] for partition in assigned)
