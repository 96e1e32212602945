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

A second wedge is invisible to that state: in the Kafka SIGKILL test of one CI run, after the broker
came back the stream processor folded four engines' batches and then nothing for the 165 s left,
while the events were on the broker and every partition stayed assigned, positioned, unpaused and
"fetchable" (one way kafka-python 3.0.12 gets there: it sends no new fetch to a node while it still
counts one in flight there; which way it took that run is not known). ``ReadStallWatch`` looks at
the outcome instead of the client's state: a partition whose position has not moved for the bound,
and whose end the broker reports past that position, is stalled whatever the client believes.
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog
from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaError

from schemas.names import Partition
from services.kafka_clients import END_OFFSETS_TIMEOUT_MS, known_position
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


class ReadStallWatch:
    """Tells a member to rejoin once a partition behind the broker's end has not moved for ``bound_s``.

    Positions are read from the client (no request); the broker is asked for the ends (``ListOffsets``)
    only of partitions that have not moved for the bound, and then at most once per bound each. A
    partition that is paused or has no position starts its wait again when it comes back.
    """

    def __init__(self, service: str, bound_s: float) -> None:
        self._service = service
        self._bound_s = bound_s
        self._still_since: dict[TopicPartition, tuple[int, float]] = {}

    def rejoined(self) -> None:
        """Start every wait again: the member has a fresh consumer, which has not had its chance to fetch."""
        self._still_since = {}

    def rejoin_due(self, consumer: KafkaConsumer, now_s: float, *, waiting: bool) -> bool:
        """Record each reading partition's position at ``now_s``; True once one is stalled behind the broker's end.

        ``waiting``: the service is waiting out a Redis outage (it rereads the same records on purpose, and
        pauses its partitions only while it sleeps), so every wait starts again once it is over. A broker
        outage is no reason to wait: asking the broker fails then, and a client wedged by it is what
        this watch is for.
        """
        if waiting:
            self._still_since = {}
            return False
        subscription = consumer._subscription
        watched: dict[TopicPartition, tuple[int, float]] = {}
        for tp in consumer.assignment():
            position = known_position(consumer, tp)
            if position is None or subscription.is_paused(tp):
                continue
            before = self._still_since.get(tp)
            watched[tp] = before if before is not None and before[0] == position else (position, now_s)
        still = {tp: (position, now_s - since_s) for tp, (position, since_s) in watched.items()}
        still = {tp: waited for tp, waited in still.items() if waited[1] >= self._bound_s}
        self._still_since = watched | {tp: (position, now_s) for tp, (position, _) in still.items()}
        if not still:
            return False
        try:
            ends: dict[TopicPartition, int] = consumer.end_offsets(sorted(still), timeout_ms=END_OFFSETS_TIMEOUT_MS)
        except KafkaError:
            return False
        behind = sorted(tp for tp, (position, _) in still.items() if ends.get(tp, 0) > position)
        if not behind:
            return False
        log.warning(
            "group_member_stalled",
            service=self._service,
            partitions=[Partition(tp.topic, tp.partition).field for tp in behind],
            unread=sum(ends[tp] - still[tp][0] for tp in behind),
            stalled_s=round(max(still[tp][1] for tp in behind), 1),
            rule="records wait on the broker and none were read: rejoin the group under a fresh member id",
        )
        return True
