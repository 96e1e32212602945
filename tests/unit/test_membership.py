"""services/membership.py: a member whose positioned partitions go unfetched past any rebalance rejoins."""

from __future__ import annotations

from kafka import TopicPartition

from services.membership import STALL_FLOOR_S, FetchStallWatch, stall_bound_s, unfetched
from services.settings import APACHE_KAFKA_TIMEOUTS, LOCAL_BROKER_TIMEOUTS

TOPIC = "gov.estimates"
STUCK = TopicPartition(TOPIC, 0)
PAUSED = TopicPartition(TOPIC, 1)
RESETTING = TopicPartition(TOPIC, 2)
READING = TopicPartition(TOPIC, 3)


class Subscription:
    """kafka-python's subscription state: which partitions have a position, are paused, are fetchable."""

    def __init__(self) -> None:
        self.positioned = {STUCK, PAUSED, READING}
        self.paused = {PAUSED}
        self.fetchable = {READING}

    def has_valid_position(self, tp: TopicPartition) -> bool:
        return tp in self.positioned

    def is_paused(self, tp: TopicPartition) -> bool:
        return tp in self.paused

    def is_fetchable(self, tp: TopicPartition) -> bool:
        return tp in self.fetchable and tp not in self.paused


class Consumer:
    def __init__(self) -> None:
        self._subscription = Subscription()

    def assignment(self) -> set[TopicPartition]:
        return {STUCK, PAUSED, RESETTING, READING}


def test_only_a_positioned_partition_not_paused_and_not_fetched_counts() -> None:
    """Paused by the service (an outage) and waiting for a position reset are waits with their own handling."""
    assert unfetched(Consumer()) == [STUCK]


def test_the_bound_outlasts_a_rebalance_and_has_a_floor() -> None:
    assert stall_bound_s(LOCAL_BROKER_TIMEOUTS) == STALL_FLOOR_S
    apache = (APACHE_KAFKA_TIMEOUTS.max_poll_interval_ms + APACHE_KAFKA_TIMEOUTS.session_timeout_ms) / 1000
    assert stall_bound_s(APACHE_KAFKA_TIMEOUTS) == apache > STALL_FLOOR_S


class TestFetchStallWatch:
    def test_a_stall_that_lasts_the_bound_asks_once_for_a_rejoin(self) -> None:
        watch = FetchStallWatch("policy", bound_s=30.0)
        assert not watch.rejoin_due([STUCK], 100.0)
        assert not watch.rejoin_due([STUCK], 129.9)
        assert watch.rejoin_due([STUCK], 130.0)
        assert not watch.rejoin_due([STUCK], 131.0)  # the rejoined member gets its own bound

    def test_a_fetch_in_between_starts_the_wait_again(self) -> None:
        watch = FetchStallWatch("policy", bound_s=30.0)
        watch.rejoin_due([STUCK], 100.0)
        watch.rejoin_due([], 120.0)
        assert not watch.rejoin_due([STUCK], 125.0)
        assert not watch.rejoin_due([STUCK], 150.0)
        assert watch.rejoin_due([STUCK], 155.0)
