"""The Kafka clients the control-plane services use, configured once.

Group members commit nothing to Kafka that matters (offsets that count live in Redis, beside the
state they produced). The timeouts that depend on the broker come from ``Settings``
(``KafkaClientTimeouts``, services/settings.py); their defaults are tuned for the local Tansu
broker: a short rebalance timeout, because on Tansu a kafka-python member joins only after
``max_poll_interval_ms`` (DESIGN section 7), and fetches that wait at most 10 ms, because Tansu
held a fetch for the whole wait when that was set and the default long poll (500 ms) showed up
whole in the event-to-decision latency (the bundled Tansu 0.6.0 answers a held fetch when records
arrive: ``KafkaClientTimeouts``). docker-compose.yml sets the Apache Kafka clients' defaults instead.
The control plane's own records (decisions, estimates and snapshots, configuration records, dead
letters) go through one producer with ``acks=all``, idempotent where the broker keeps producer state
(``KafkaClientTimeouts.idempotent_producer``: on for Apache Kafka, off for Tansu): on a replicated
cluster a leader ack alone loses an acknowledged decision at a leader change, and a retried batch
without idempotence can land after the next one and reorder ``gov.estimates`` (docs/operations.md,
"Producer settings").
Group members refresh metadata every ``METADATA_MAX_AGE_MS``, so a topic's new id (a recreated topic,
or an in-memory broker restarted) is seen within seconds (services/log_reset.py). A consumer loop
idle for ``IDLE_AFTER_S`` lets its fetches and polls wait longer (``IdlePace``), so that an idle
control plane does not spend a tenth of a core per service on empty fetches.

The clients are built by services/kafka_security.py, which adds the deployment's security settings.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Protocol

import structlog
from kafka import ConsumerRebalanceListener, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError, KafkaTimeoutError

from schemas.errors import BackendUnavailableError, InvalidInputError
from schemas.names import CHECKPOINT_MAX_BYTES, Partition
from services.backends import kafka_answers
from services.engine_partitions import EnginePartitioner
from services.kafka_security import PLAINTEXT, kafka_consumer, kafka_producer
from services.settings import LOCAL_BROKER_TIMEOUTS, KafkaClientTimeouts, KafkaSecurity

METADATA_MAX_AGE_MS = 10_000
END_OFFSETS_TIMEOUT_MS = 2_000  # caught_up's question to the broker; an idle loop asks again at its next turn
IDLE_AFTER_S = 1.0  # a consumer loop that got no record for this long is idle (``IdlePace``)
IDLE_FETCH_WAIT_MS = 1000  # one fetch per idle poll; both brokers answer a held fetch when records arrive
IDLE_POLL_TIMEOUT_MS = 1000
RECONNECT_BACKOFF_MAX_MS = 1000  # the Java clients' default; kafka-python's 30 s outlasted a broker restart

log = structlog.get_logger(__name__)


class ConsumedRecord(Protocol):
    """What the services read of a consumed record (kafka-python's and faust's records both have it)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...


def group_consumer(
    bootstrap: str,
    group_id: str,
    *,
    max_poll_records: int = 500,
    timeouts: KafkaClientTimeouts = LOCAL_BROKER_TIMEOUTS,
    security: KafkaSecurity = PLAINTEXT,
) -> KafkaConsumer:
    """A consumer-group member that reads from the earliest offset and never auto-commits."""
    return kafka_consumer(
        bootstrap,
        security,
        group_id=group_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_poll_records=max_poll_records,
        max_poll_interval_ms=timeouts.max_poll_interval_ms,
        session_timeout_ms=timeouts.session_timeout_ms,
        heartbeat_interval_ms=timeouts.heartbeat_interval_ms,
        fetch_max_wait_ms=timeouts.fetch_max_wait_ms,
        metadata_max_age_ms=METADATA_MAX_AGE_MS,
        reconnect_backoff_max_ms=RECONNECT_BACKOFF_MAX_MS,
    )


def record_producer(
    bootstrap: str, *, timeouts: KafkaClientTimeouts = LOCAL_BROKER_TIMEOUTS, security: KafkaSecurity = PLAINTEXT
) -> KafkaProducer:
    """A producer for the control plane's own records (snapshots, decisions, dead letters).

    ``acks=all``: a record is acknowledged only once every in-sync replica has it. Idempotent when
    ``timeouts.idempotent_producer`` says so (Apache Kafka): the broker then drops a retried batch it
    already holds and refuses one out of sequence, so up to five requests in flight keep their
    order. Not on Tansu, which forgets producer ids when it restarts without its log and then fails
    the producer for good (services/settings.py, ``KafkaClientTimeouts``).

    Records keyed by an engine's scope go where the engine rule puts them (services/engine_partitions.py),
    so a partitioned ``gov.estimates`` spreads a numbered fleet's snapshots evenly too. A request may be
    as large as a partition's state checkpoint (``CHECKPOINT_MAX_BYTES``); each topic's own limit holds.
    """
    return kafka_producer(
        bootstrap,
        security,
        linger_ms=timeouts.linger_ms,
        acks="all",
        enable_idempotence=timeouts.idempotent_producer,
        partitioner=EnginePartitioner(),
        max_request_size=CHECKPOINT_MAX_BYTES,
        reconnect_backoff_max_ms=RECONNECT_BACKOFF_MAX_MS,
    )


def close_producer(producer: KafkaProducer, timeout_s: float) -> bool:
    """Close ``producer``, giving its pending records ``timeout_s``; False when some were still pending.

    kafka-python's ``close(timeout)`` raises when its flush times out and leaves the producer's I/O
    thread running (its ``__del__`` then raises again, into whatever runs at the time); the Java
    client aborts the pending batches instead, as this does. A service loses nothing by it: a batch
    whose records were not confirmed was not committed, and the partition's next owner produces it
    again (services/delivery.py). A broker killed mid-stream left a policy service's decision record
    pending at its close (CI, 2026-11-28).
    """
    try:
        producer.close(timeout=timeout_s)
    except KafkaTimeoutError:
        log.warning("producer_closed_with_records_pending", timeout_s=timeout_s)
        producer._sender.force_close()  # kafka-python 3.0 has no public way to abort pending batches
        producer.close(timeout=timeout_s)
        return False
    return True


def subscribe(consumer: KafkaConsumer, topic: str, listener: ConsumerRebalanceListener) -> None:
    """Subscribe ``consumer`` to ``topic`` with its metadata already fetched.

    A kafka-python group leader that learns the topic's partitions only after it joined rejoins at
    once, and every join waits out the broker's initial rebalance delay (3 s on Tansu): fetching the
    metadata first makes the first join the only one. A broker that does not answer yet is left to
    the join itself.
    """
    with contextlib.suppress(KafkaError):
        consumer.partitions_for_topic(topic)
    consumer.subscribe([topic], listener=listener)


class Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    """Forwards partition assignment and revocation to a service's callbacks."""

    def __init__(
        self,
        on_assigned: Callable[[list[TopicPartition]], None],
        on_revoked: Callable[[list[TopicPartition]], None] | None = None,
    ) -> None:
        self._on_assigned = on_assigned
        self._on_revoked = on_revoked

    def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        """Call the service's revocation callback, if it has one."""
        if self._on_revoked is not None:
            self._on_revoked(revoked)

    def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        """Call the service's assignment callback."""
        self._on_assigned(assigned)


def consumer_lag(consumer: KafkaConsumer) -> int:
    """Records between the consumer's positions and the ends of its assigned partitions (0 when unknown).

    Both are local to the client (no broker round trip): the high watermark is the one the last
    fetch response carried, so it is cheap enough to measure on every poll. A partition just sought
    (a log reset rebuilds from the beginning) has no position until a later poll resolves it, and
    counts 0 until then.
    """
    lag = 0
    for tp in consumer.assignment():
        high = consumer.highwater(tp)
        position = known_position(consumer, tp)
        if high is not None and position is not None:
            lag += max(0, high - position)
    return lag


def caught_up(consumer: KafkaConsumer) -> bool:
    """Whether every assigned partition has been fetched and read to the end its last fetch reported.

    A service asked to exit when idle (tests, batch runs) exits only when this holds as well: a quiet
    poll alone can be a fetch that a loaded machine holds for seconds while records wait on the broker.
    Local to the client, like ``consumer_lag``, except for partitions whose end no fetch has reported:
    their end offsets are asked of the broker (``ListOffsets``). Apache Kafka's incremental fetch
    sessions leave a partition with nothing new out of their responses, so after a rebalance an
    empty partition, fetched from the same offset as before, never gets its high watermark back
    (the client forgets it with the old assignment); waiting for it kept an idle member from ever
    exiting. A partition without a known position, or whose end the broker does not give, is not
    caught up.
    """
    unreported: dict[TopicPartition, int] = {}
    for tp in consumer.assignment():
        high = consumer.highwater(tp)
        position = known_position(consumer, tp)
        if position is None:
            return False
        if high is None:
            unreported[tp] = position
        elif position < high:
            return False
    if not unreported:
        return True
    try:
        ends = consumer.end_offsets(list(unreported), timeout_ms=END_OFFSETS_TIMEOUT_MS)
    except KafkaError:
        return False
    return all(tp in ends and position >= ends[tp] for tp, position in unreported.items())


class PartitionEnds:
    """The end offsets of a consumer's assigned partitions: the last fetch's, else the broker's answer.

    Apache Kafka's incremental fetch sessions leave a partition with nothing new out of their
    responses, so after a rebalance the client never learns the high watermark of an empty
    partition again (it forgets the old assignment's). The stream processor's event-time watermark
    counts such a partition as unread, so the fleet contributions it held were never released (a
    broker paused past the session timeout rebalanced the member, and the first snapshots of every
    engine never reached ``gov.estimates``). A partition without a reported end is asked of the
    broker (``ListOffsets``) once per assignment: records arriving later come back in a fetch,
    whose high watermark then takes over. ``assigned`` must be called on every assignment.

    An end behind the consumer's position is returned as it is, unlike ``KafkaLogView.highwater``:
    the watermark then counts the partition as read to its end, which it is up to what any response
    has said. Holding the partition back instead would wait for a fetch that reports a later end, and
    an incremental fetch session leaves a partition with nothing new out of its responses for good;
    the log view must not take such an end for a new log, the watermark only needs a bound.
    """

    def __init__(self, consumer: KafkaConsumer) -> None:
        self.consumer = consumer
        self._asked: dict[TopicPartition, int] = {}

    def assigned(self) -> None:
        """Forget the broker's answers: a partition assigned again may have grown while another member held it."""
        self._asked.clear()

    def highwater(self, tp: TopicPartition) -> int | None:
        """The partition's end offset, or None while neither a fetch nor the broker has given it."""
        high: int | None = self.consumer.highwater(tp)
        if high is not None:
            return high
        if tp not in self._asked:
            self._ask()
        return self._asked.get(tp)

    def _ask(self) -> None:
        """Ask the broker the ends of the assigned partitions no fetch reported (after a failure: at the next call)."""
        unreported = [tp for tp in self.consumer.assignment() if self.consumer.highwater(tp) is None]
        try:
            self._asked.update(self.consumer.end_offsets(unreported, timeout_ms=END_OFFSETS_TIMEOUT_MS))
        except KafkaError:
            return


def known_position(consumer: KafkaConsumer, tp: TopicPartition) -> int | None:
    """The next offset the consumer will fetch from ``tp``, as the client knows it now, or None.

    ``KafkaConsumer.position`` resolves an unknown position over the network and, without a timeout,
    waits for it: called after a seek, between polls, it blocked the stream processor's loop (and so
    its group membership) until the consumer closed. kafka-python has no public accessor for the
    position it holds: this reads its subscription state.
    """
    position = consumer._subscription.position(tp)
    return None if position is None else int(position.offset)


class KafkaLogView:
    """A kafka-python consumer as services/log_reset.py reads it: high watermarks and topic ids."""

    def __init__(self, consumer: KafkaConsumer) -> None:
        self._consumer = consumer

    def highwater(self, partition: Partition) -> int | None:
        """The partition's end offset as the last fetch response gave it; None when it is behind the position.

        A fetch response's end behind what this consumer has already read from the partition says
        nothing about the log: Apache Kafka reported 179 for a partition read up to 217 seconds after
        its topic was created again (its leader's high watermark catching up), and taken for a new log
        it had the processor rebuild the partition and fold 218 events twice. A new log is still seen:
        a consumer positioned past the end of a new log is reset to its beginning first.
        """
        tp = TopicPartition(*partition)
        high: int | None = self._consumer.highwater(tp)
        position = known_position(self._consumer, tp)
        if high is not None and position is not None and position > high:
            return None
        return high

    def topic_id(self, topic: str) -> str | None:
        """The topic's id in the client's metadata (kafka-python has no public accessor: its cluster's)."""
        topic_id = self._consumer._cluster.topic_id(topic)
        return None if topic_id is None else str(topic_id)

    def layout(self, topic: str) -> tuple[str | None, frozenset[int]] | None:
        """The topic's id and partitions in the client's metadata, None when it has none.

        Read from the client's cluster metadata: ``KafkaConsumer.partitions_for_topic`` fetches
        metadata and waits when the topic is unknown, which a poll loop must not.
        """
        partitions = self._consumer._cluster.partitions_for_topic(topic)
        if partitions is None:
            return None
        return self.topic_id(topic), frozenset(partitions)


class IdlePace:
    """How long a consumer loop's polls and its fetches wait: as configured while records flow, longer once idle.

    With the local broker's 10 ms fetch wait an idle member sent about 50 empty fetches a second,
    and the client's network thread handling them, with the loop's own turns, took 12-16 % of a core
    per service (docs/performance.md, "Idle services"). Once no record has come for
    ``IDLE_AFTER_S``, fetches wait up to ``IDLE_FETCH_WAIT_MS`` and polls ``IDLE_POLL_TIMEOUT_MS``.
    Neither delays the first records of new traffic: a poll returns as soon as a fetch brings
    records, and both local brokers (Tansu 0.6.0 and Apache Kafka) answer a held fetch as soon as
    records arrive. What waits for the end of an idle poll is only the loop's bookkeeping (the
    layout, stall and log-reset checks, the idle exit, ``stop``), at most a second later. The first
    records bring back the configured wait, which steady traffic keeps.

    kafka-python reads the fetch wait from its fetcher's configuration whenever it builds a fetch
    and has no public setter for it, so this writes it there.
    """

    def __init__(
        self,
        consumer: KafkaConsumer,
        *,
        fetch_wait_ms: int,
        poll_timeout_ms: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Pace ``consumer`` (built with ``fetch_wait_ms``); the loop polls ``poll_timeout_ms`` while records flow.

        ``clock`` is real time by default: the client's waits run on it, whatever clock the service keeps.
        """
        self._consumer = consumer
        self._busy_fetch_wait_ms = fetch_wait_ms
        self._idle_fetch_wait_ms = max(fetch_wait_ms, IDLE_FETCH_WAIT_MS)
        self._busy_poll_timeout_ms = poll_timeout_ms
        self._clock = clock
        self._records_at_s = clock()
        self.idle = False

    @property
    def poll_timeout_ms(self) -> int:
        """How long the loop's next poll may wait for records."""
        return max(self._busy_poll_timeout_ms, IDLE_POLL_TIMEOUT_MS) if self.idle else self._busy_poll_timeout_ms

    def polled(self, records: int) -> None:
        """Record that a poll brought ``records`` records; become idle, or busy again, as they say."""
        now_s = self._clock()
        if records:
            self._records_at_s = now_s
        idle = now_s - self._records_at_s >= IDLE_AFTER_S
        if idle != self.idle:
            self.idle = idle
            self._set_fetch_wait(self._idle_fetch_wait_ms if idle else self._busy_fetch_wait_ms)

    def replaced(self, consumer: KafkaConsumer) -> None:
        """Pace ``consumer``, which replaced the last one (a rejoin): it starts as busy, with the configured wait."""
        self._consumer = consumer
        self._records_at_s = self._clock()
        self.idle = False

    def _set_fetch_wait(self, wait_ms: int) -> None:
        self._consumer._fetcher.config["fetch_max_wait_ms"] = wait_ms


def reader(bootstrap: str, *, timeout_s: float, security: KafkaSecurity = PLAINTEXT) -> KafkaConsumer:
    """A group-less consumer for the command-line tools (record, status, explain): it never creates topics.

    Raises:
        BackendUnavailableError: no broker of ``bootstrap`` answers.
    """
    if not kafka_answers(bootstrap):
        msg = f"kafka at {bootstrap} did not answer"
        raise BackendUnavailableError(msg, backend="kafka")
    try:
        return kafka_consumer(
            bootstrap,
            security,
            enable_auto_commit=False,
            allow_auto_create_topics=False,
            request_timeout_ms=int(timeout_s * 1000) + 1000,
            bootstrap_timeout_ms=int(timeout_s * 1000),
        )
    except KafkaError as exc:
        msg = f"kafka at {bootstrap} did not answer ({type(exc).__name__})"
        raise BackendUnavailableError(msg, backend="kafka") from exc


def require_topic(consumer: KafkaConsumer, topic: str, bootstrap: str) -> list[TopicPartition]:
    """Return the partitions of ``topic``, sorted.

    Raises:
        InvalidInputError: the broker has no such topic (the message lists the ones it has).
    """
    topics = consumer.topics()
    if topic not in topics:
        known = ", ".join(sorted(t for t in topics if not t.startswith("__"))) or "none"
        msg = f"topic {topic!r} does not exist on {bootstrap} (topics: {known})"
        raise InvalidInputError(msg, field="topic", value=topic)
    return [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
