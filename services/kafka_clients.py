"""The Kafka clients the control-plane services use, configured once.

Group members commit nothing to Kafka that matters (offsets that count live in Redis, beside the
state they produced), poll often, and use a short rebalance timeout: on the Tansu broker a
kafka-python member joins only after ``max_poll_interval_ms`` (DESIGN section 7), so a few seconds
keeps joins and restarts quick. Fetches wait at most 10 ms on the broker, because on this broker
the default long poll (500 ms) showed up whole in the event-to-decision latency. Producers ask for
a leader ack and no idempotence (Tansu and the control plane's own dedup make it unnecessary).
"""

from __future__ import annotations

from collections.abc import Callable

from kafka import ConsumerRebalanceListener, KafkaConsumer, KafkaProducer, TopicPartition

REBALANCE_TIMEOUT_MS = 5000
FETCH_MAX_WAIT_MS = 10  # a fetch returns at once when data is there; the broker's default 500 ms holds it back


def group_consumer(bootstrap: str, group_id: str, *, max_poll_records: int = 500) -> KafkaConsumer:
    """A consumer-group member that reads from the earliest offset and never auto-commits."""
    return KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_poll_records=max_poll_records,
        max_poll_interval_ms=REBALANCE_TIMEOUT_MS,
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
        fetch_max_wait_ms=FETCH_MAX_WAIT_MS,
    )


def record_producer(bootstrap: str) -> KafkaProducer:
    """A producer for the control plane's own records (snapshots, decisions, dead letters)."""
    return KafkaProducer(bootstrap_servers=bootstrap, linger_ms=2, acks=1, enable_idempotence=False)


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
    """Records between the consumer's positions and the ends of its assigned partitions (0 when unknown)."""
    lag = 0
    for tp in consumer.assignment():
        high = consumer.highwater(tp)
        if high is not None:
            lag += max(0, high - consumer.position(tp))
    return lag
