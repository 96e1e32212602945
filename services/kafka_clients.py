"""The Kafka clients the control-plane services use, configured once.

Group members commit nothing to Kafka that matters (offsets that count live in Redis, beside the
state they produced). The timeouts that depend on the broker come from ``Settings``
(``KafkaClientTimeouts``, services/settings.py); their defaults are tuned for the local Tansu
broker: a short rebalance timeout, because on Tansu a kafka-python member joins only after
``max_poll_interval_ms`` (DESIGN section 7), and fetches that wait at most 10 ms, because Tansu
holds a fetch for the whole wait and the default long poll (500 ms) showed up whole in the
event-to-decision latency. docker-compose.yml sets the Apache Kafka clients' defaults instead.
Producers ask for a leader ack and no idempotence (the control plane's own dedup makes it unnecessary).
"""

from __future__ import annotations

from collections.abc import Callable

from kafka import ConsumerRebalanceListener, KafkaConsumer, KafkaProducer, TopicPartition

from services.settings import LOCAL_BROKER_TIMEOUTS, KafkaClientTimeouts


def group_consumer(
    bootstrap: str,
    group_id: str,
    *,
    max_poll_records: int = 500,
    timeouts: KafkaClientTimeouts = LOCAL_BROKER_TIMEOUTS,
) -> KafkaConsumer:
    """A consumer-group member that reads from the earliest offset and never auto-commits."""
    return KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_poll_records=max_poll_records,
        max_poll_interval_ms=timeouts.max_poll_interval_ms,
        session_timeout_ms=timeouts.session_timeout_ms,
        heartbeat_interval_ms=timeouts.heartbeat_interval_ms,
        fetch_max_wait_ms=timeouts.fetch_max_wait_ms,
    )


def record_producer(bootstrap: str, *, timeouts: KafkaClientTimeouts = LOCAL_BROKER_TIMEOUTS) -> KafkaProducer:
    """A producer for the control plane's own records (snapshots, decisions, dead letters)."""
    return KafkaProducer(bootstrap_servers=bootstrap, linger_ms=timeouts.linger_ms, acks=1, enable_idempotence=False)


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
