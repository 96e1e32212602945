"""services/kafka_clients.py: ``caught_up`` when no fetch reports a partition's end (incremental fetch sessions),
the log view's ends, and an idle loop's pace."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaTimeoutError
from kafka.structs import OffsetAndMetadata

from services.kafka_clients import (
    END_OFFSETS_TIMEOUT_MS,
    IDLE_AFTER_S,
    IDLE_FETCH_WAIT_MS,
    IDLE_POLL_TIMEOUT_MS,
    IdlePace,
    KafkaLogView,
    PartitionEnds,
    caught_up,
)

TOPIC = "gov.telemetry"
EMPTY = TopicPartition(TOPIC, 0)
FED = TopicPartition(TOPIC, 1)


class Subscription:
    """kafka-python's subscription state as far as positions go."""

    def __init__(self, positions: dict[TopicPartition, int]) -> None:
        self.positions = positions

    def position(self, tp: TopicPartition) -> OffsetAndMetadata:
        return OffsetAndMetadata(self.positions[tp], "", -1)


class SessionConsumer:
    """A member after a rebalance on Apache Kafka: the fetch session's responses left ``EMPTY`` out, so
    the client has no high watermark for it; the broker knows its end."""

    def __init__(self, ends: dict[TopicPartition, int], *, broker_answers: bool = True) -> None:
        self._subscription = Subscription({EMPTY: 0, FED: 9})
        self._high = {FED: 9}
        self._ends = ends
        self._broker_answers = broker_answers
        self.asked: list[tuple[list[TopicPartition], int | None]] = []

    def assignment(self) -> set[TopicPartition]:
        return set(self._subscription.positions)

    def highwater(self, tp: TopicPartition) -> int | None:
        return self._high.get(tp)

    def end_offsets(self, partitions: list[TopicPartition], timeout_ms: int | None = None) -> dict[TopicPartition, int]:
        self.asked.append((partitions, timeout_ms))
        if not self._broker_answers:
            msg = "no answer"
            raise KafkaTimeoutError(msg)
        return {tp: self._ends[tp] for tp in partitions}


class TestCaughtUpWithoutAReportedEnd:
    def test_a_partition_the_fetches_left_out_is_caught_up_when_the_broker_says_its_end_is_the_position(self) -> None:
        """An idle member kept waiting for a high watermark no fetch response would carry, and never exited."""
        consumer = SessionConsumer({EMPTY: 0})
        assert caught_up(consumer)
        assert consumer.asked == [([EMPTY], END_OFFSETS_TIMEOUT_MS)]

    def test_records_beyond_the_position_on_the_broker_are_not_caught_up(self) -> None:
        consumer = SessionConsumer({EMPTY: 3})
        assert not caught_up(consumer)

    def test_a_broker_that_does_not_answer_is_not_caught_up(self) -> None:
        consumer = SessionConsumer({EMPTY: 0}, broker_answers=False)
        assert not caught_up(consumer)

    def test_the_broker_is_not_asked_when_every_end_is_known(self) -> None:
        consumer = SessionConsumer({})
        consumer._high[EMPTY] = 0
        assert caught_up(consumer)
        assert consumer.asked == []


class TestLogViewEnds:
    def test_an_end_behind_what_the_consumer_already_read_is_not_reported(self) -> None:
        """Apache Kafka answered a fetch with 179 for a partition read up to 217; taken for a new log,
        the partition was rebuilt and its events folded twice."""
        consumer = SessionConsumer({})
        consumer._subscription.positions[FED] = 218
        consumer._high[FED] = 179
        assert KafkaLogView(consumer).highwater((TOPIC, FED.partition)) is None

    def test_an_end_at_or_past_the_position_is_reported(self) -> None:
        """A consumer reset to the beginning of a new, shorter log sees its true end: that is how the reset is found."""
        consumer = SessionConsumer({})
        consumer._subscription.positions[FED] = 0
        consumer._high[FED] = 179
        view = KafkaLogView(consumer)
        assert view.highwater((TOPIC, FED.partition)) == 179
        consumer._subscription.positions[FED] = 179
        assert view.highwater((TOPIC, FED.partition)) == 179


class TestPartitionEnds:
    def test_an_end_no_fetch_reported_is_the_brokers_asked_once_per_assignment(self) -> None:
        """The stream processor's watermark counted such a partition unread and held fleet contributions for good."""
        consumer = SessionConsumer({EMPTY: 4})
        ends = PartitionEnds(consumer)
        assert (ends.highwater(EMPTY), ends.highwater(EMPTY), ends.highwater(FED)) == (4, 4, 9)
        assert consumer.asked == [([EMPTY], END_OFFSETS_TIMEOUT_MS)]
        ends.assigned()
        assert ends.highwater(EMPTY) == 4
        assert len(consumer.asked) == 2

    def test_a_reported_end_takes_over_from_the_brokers_answer(self) -> None:
        consumer = SessionConsumer({EMPTY: 4})
        ends = PartitionEnds(consumer)
        assert ends.highwater(EMPTY) == 4
        consumer._high[EMPTY] = 7
        assert ends.highwater(EMPTY) == 7

    def test_a_broker_that_does_not_answer_leaves_the_end_unknown_and_is_asked_again(self) -> None:
        consumer = SessionConsumer({EMPTY: 4}, broker_answers=False)
        ends = PartitionEnds(consumer)
        assert ends.highwater(EMPTY) is None
        assert ends.highwater(EMPTY) is None
        assert len(consumer.asked) == 2

    def test_an_end_behind_the_position_is_kept_so_the_partition_counts_as_read(self) -> None:
        """The log view drops such an end; the watermark needs it, since no later fetch may report the partition."""
        consumer = SessionConsumer({})
        consumer._subscription.positions[FED] = 218
        consumer._high[FED] = 179
        assert PartitionEnds(consumer).highwater(FED) == 179
        assert consumer.asked == []


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def fetch_wait_ms(consumer: KafkaConsumer) -> int:
    """The wait kafka-python puts in its next fetch request."""
    wait: int = consumer._fetcher.config["fetch_max_wait_ms"]
    return wait


@pytest.fixture
def consumer() -> Iterator[KafkaConsumer]:
    """A kafka-python consumer that never reaches a broker (its API version given, it connects on first use)."""
    client = KafkaConsumer(bootstrap_servers="127.0.0.1:1", api_version=(2, 8, 0), fetch_max_wait_ms=10)
    yield client
    client.close()


class TestIdlePace:
    def test_polls_and_fetches_wait_longer_once_no_record_came_for_a_while(self, consumer: KafkaConsumer) -> None:
        """An idle service sent 50 empty fetches a second and took 12-16 % of a core."""
        clock = Clock()
        pace = IdlePace(consumer, fetch_wait_ms=10, poll_timeout_ms=200, clock=clock)
        pace.polled(0)
        assert (pace.poll_timeout_ms, fetch_wait_ms(consumer)) == (200, 10)
        clock.now_s = IDLE_AFTER_S
        pace.polled(0)
        assert pace.idle
        assert (pace.poll_timeout_ms, fetch_wait_ms(consumer)) == (IDLE_POLL_TIMEOUT_MS, IDLE_FETCH_WAIT_MS)

    def test_the_first_records_bring_back_the_configured_waits(self, consumer: KafkaConsumer) -> None:
        clock = Clock()
        pace = IdlePace(consumer, fetch_wait_ms=10, poll_timeout_ms=100, clock=clock)
        clock.now_s = 5.0
        pace.polled(0)
        pace.polled(3)
        assert not pace.idle
        assert (pace.poll_timeout_ms, fetch_wait_ms(consumer)) == (100, 10)
        clock.now_s += IDLE_AFTER_S / 2
        pace.polled(0)
        assert not pace.idle

    def test_a_longer_configured_fetch_wait_is_kept_when_idle(self, consumer: KafkaConsumer) -> None:
        clock = Clock()
        pace = IdlePace(consumer, fetch_wait_ms=2000, poll_timeout_ms=100, clock=clock)
        clock.now_s = IDLE_AFTER_S
        pace.polled(0)
        assert fetch_wait_ms(consumer) == 2000

    def test_a_replacing_consumer_starts_busy(self, consumer: KafkaConsumer) -> None:
        """A rejoin builds a new consumer with the configured wait; the pace starts over with it."""
        clock = Clock()
        pace = IdlePace(consumer, fetch_wait_ms=10, poll_timeout_ms=200, clock=clock)
        clock.now_s = IDLE_AFTER_S
        pace.polled(0)
        replacement = KafkaConsumer(bootstrap_servers="127.0.0.1:1", api_version=(2, 8, 0), fetch_max_wait_ms=10)
        try:
            pace.replaced(replacement)
            assert (pace.idle, pace.poll_timeout_ms) == (False, 200)
            clock.now_s += IDLE_AFTER_S
            pace.polled(0)
            assert fetch_wait_ms(replacement) == IDLE_FETCH_WAIT_MS
        finally:
            replacement.close()
