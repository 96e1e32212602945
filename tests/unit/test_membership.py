"""services/membership.py: a member whose partitions go unfetched or unread past any rebalance rejoins."""

from __future__ import annotations

from dataclasses import dataclass

from kafka import TopicPartition
from kafka.errors import KafkaTimeoutError

from services.membership import STALL_FLOOR_S, FetchStallWatch, ReadStallWatch, stall_bound_s, unfetched
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


@dataclass(frozen=True)
class Position:
    offset: int


class Reading:
    """kafka-python's subscription state as ``ReadStallWatch`` reads it: positions and pauses."""

    def __init__(self, positions: dict[TopicPartition, int]) -> None:
        self.positions = positions
        self.paused: set[TopicPartition] = set()

    def position(self, tp: TopicPartition) -> Position | None:
        offset = self.positions.get(tp)
        return None if offset is None else Position(offset)

    def is_paused(self, tp: TopicPartition) -> bool:
        return tp in self.paused


class ReadingConsumer:
    """Two assigned partitions, their positions, and the ends the broker reports (or a broker that does not answer)."""

    def __init__(self, positions: dict[TopicPartition, int], ends: dict[TopicPartition, int]) -> None:
        self._subscription = Reading(positions)
        self.ends = ends
        self.answers = True
        self.asked: list[list[TopicPartition]] = []

    def assignment(self) -> set[TopicPartition]:
        return {STUCK, READING}

    def end_offsets(self, partitions: list[TopicPartition], timeout_ms: int) -> dict[TopicPartition, int]:
        self.asked.append(partitions)
        if not self.answers:
            raise KafkaTimeoutError("ListOffsets")
        return {tp: self.ends[tp] for tp in partitions}


class TestReadStallWatch:
    def test_a_partition_that_stays_behind_the_brokers_end_for_the_bound_asks_once_for_a_rejoin(self) -> None:
        consumer = ReadingConsumer({STUCK: 40, READING: 10}, ends={STUCK: 90, READING: 500})
        watch = ReadStallWatch("stream", bound_s=30.0)
        assert not watch.rejoin_due(consumer, 100.0, waiting=False)
        consumer._subscription.positions[READING] = 20
        assert not watch.rejoin_due(consumer, 129.9, waiting=False)
        assert consumer.asked == []
        consumer._subscription.positions[READING] = 30
        assert watch.rejoin_due(consumer, 130.0, waiting=False)
        assert consumer.asked == [[STUCK]]  # only the partition that did not move is asked about
        watch.rejoined()
        assert not watch.rejoin_due(consumer, 131.0, waiting=False)  # the rejoined member gets its own bound
        assert not watch.rejoin_due(consumer, 160.9, waiting=False)
        assert watch.rejoin_due(consumer, 161.0, waiting=False)

    def test_a_partition_read_to_the_brokers_end_is_idle_and_asked_again_only_after_another_bound(self) -> None:
        consumer = ReadingConsumer({STUCK: 90, READING: 10}, ends={STUCK: 90, READING: 10})
        watch = ReadStallWatch("stream", bound_s=30.0)
        watch.rejoin_due(consumer, 100.0, waiting=False)
        assert not watch.rejoin_due(consumer, 130.0, waiting=False)
        assert not watch.rejoin_due(consumer, 140.0, waiting=False)
        assert consumer.asked == [[STUCK, READING]]  # each asked about at most once per bound
        consumer.ends[STUCK] = 95  # records arrive, and no fetch returns them
        assert not watch.rejoin_due(consumer, 159.9, waiting=False)
        assert watch.rejoin_due(consumer, 160.0, waiting=False)

    def test_a_paused_partition_and_a_redis_outage_start_the_wait_again(self) -> None:
        consumer = ReadingConsumer({STUCK: 40, READING: 10}, ends={STUCK: 90, READING: 500})
        watch = ReadStallWatch("stream", bound_s=30.0)
        watch.rejoin_due(consumer, 100.0, waiting=False)
        consumer._subscription.paused = {STUCK, READING}
        watch.rejoin_due(consumer, 120.0, waiting=False)
        consumer._subscription.paused = set()
        assert not watch.rejoin_due(consumer, 140.0, waiting=False)
        assert not watch.rejoin_due(consumer, 160.0, waiting=True)
        assert not watch.rejoin_due(consumer, 170.0, waiting=False)
        assert not watch.rejoin_due(consumer, 199.9, waiting=False)
        assert watch.rejoin_due(consumer, 200.0, waiting=False)

    def test_a_broker_that_does_not_answer_asks_for_no_rejoin_until_it_says_records_wait(self) -> None:
        consumer = ReadingConsumer({STUCK: 40, READING: 10}, ends={STUCK: 90, READING: 10})
        consumer.answers = False
        watch = ReadStallWatch("stream", bound_s=30.0)
        watch.rejoin_due(consumer, 100.0, waiting=False)
        assert not watch.rejoin_due(consumer, 130.0, waiting=False)
        consumer.answers = True
        assert not watch.rejoin_due(consumer, 140.0, waiting=False)
        assert watch.rejoin_due(consumer, 160.0, waiting=False)
