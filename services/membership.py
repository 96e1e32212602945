"""A group member whose partitions are no longer fetched: seen, and mended by rejoining under a fresh member id.

Seen on Apache Kafka with kafka-python 3.0.12 (about one run in ten of the topic-recreation test on a
loaded machine, and once in a CI run): right after the group coordinator had been marked dead
(``NotCoordinatorError``), the policy service's one partition stayed assigned, positioned and not
paused, yet kafka-python's own state kept it from being fetched; no snapshot was read for the two
minutes the test waited, and nothing in the service's loop failed. A fresh consumer joins again and
reads on, as the layout rejoin does (services/log_reset.py, ``LayoutWatch``).

A legitimate rebalance holds a member's partitions at most the group's rebalance timeout (the max
poll interval) plus one session, so the bound is longer than that, and never under
``STALL_FLOOR_S``. Partitions the service paused itself (an outage, a load that waits for Redis) and
partitions waiting for their position to be reset are not counted: those are waits with their own
handling, not stalls.
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog
from kafka import KafkaConsumer, TopicPartition

from schemas.names import Partition
from services.settings import KafkaClientTimeouts

log = structlog.get_logger(__name__)

STALL_FLOOR_S = 30.0


def stall_bound_s(timeouts: KafkaClientTimeouts) -> float:
    """How long a positioned partition may go unfetched before its member rejoins: past any legitimate rebalance."""
    return max(STALL_FLOOR_S, (timeouts.max_poll_interval_ms + timeouts.session_timeout_ms) / 1000)


def unfetched(consumer: KafkaConsumer) -> list[TopicPartition]:
    """The assigned partitions with a position, not paused, that the client will not fetch from now.

    kafka-python has no public accessor for this: it reads the client's subscription state, as
    ``known_position`` does (services/kafka_clients.py).
    """
    subscription = consumer._subscription
    return sorted(
        tp
        for tp in consumer.assignment()
        if subscription.has_valid_position(tp) and not subscription.is_paused(tp) and not subscription.is_fetchable(tp)
    )


class FetchStallWatch:
    """Tells a member to rejoin once the same wait for a fetchable partition has lasted ``bound_s``."""

    def __init__(self, service: str, bound_s: float) -> None:
        self._service = service
        self._bound_s = bound_s
        self._since_s: float | None = None

    def rejoin_due(self, unfetched: Sequence[TopicPartition], now_s: float) -> bool:
        """Record the partitions not fetched at ``now_s``; True once they have been for ``bound_s`` without a break."""
        if not unfetched:
            self._since_s = None
            return False
        if self._since_s is None:
            self._since_s = now_s
            return False
        if now_s - self._since_s < self._bound_s:
            return False
        log.warning(
            "group_member_stalled",
            service=self._service,
            partitions=[Partition(tp.topic, tp.partition).field for tp in unfetched],
            stalled_s=round(now_s - self._since_s, 1),
            rule="rejoin the group under a fresh member id",
        )
        self._since_s = None
        return True
