"""services/log_reset.py: a partition on a new log is told by its topic id or by a log end behind it."""

from __future__ import annotations

from kafka import TopicPartition
from kafka.structs import OffsetAndMetadata

from services.health import ServiceMetrics
from services.kafka_clients import caught_up, consumer_lag
from services.log_reset import LayoutWatch, LogWatch
from services.store.memory_store import MemoryStore

TOPIC = "gov.telemetry"


class FakeLog:
    """High watermarks and topic ids as a consumer would report them."""

    def __init__(self, topic_id: str | None, high: dict[int, int]) -> None:
        self.topic_id_now = topic_id
        self.high = high

    def highwater(self, partition: tuple[str, int]) -> int | None:
        return self.high.get(partition[1])

    def topic_id(self, topic: str) -> str | None:
        return self.topic_id_now


def _watch(store: MemoryStore) -> tuple[LogWatch, ServiceMetrics]:
    metrics = ServiceMetrics("stream", "prod")
    return LogWatch(consumer="stream", store=store, metrics=metrics), metrics


class TestLogWatch:
    def test_the_first_assignment_records_the_topic_id_and_reports_nothing(self) -> None:
        store = MemoryStore()
        watch, metrics = _watch(store)
        log = FakeLog("id-1", {0: 100})
        watch.assigned(log, [(TOPIC, 0), (TOPIC, 1)])
        assert store.log_ids("stream") == {f"{TOPIC}:0": "id-1", f"{TOPIC}:1": "id-1"}
        assert watch.check(log, {(TOPIC, 0): 100}) == []
        assert metrics.log_resets == 0

    def test_a_changed_topic_id_is_a_reset_even_when_the_new_log_is_longer(self) -> None:
        store = MemoryStore()
        watch, metrics = _watch(store)
        watch.assigned(FakeLog("id-1", {}), [(TOPIC, 0)])
        (reset,) = watch.check(FakeLog("id-2", {0: 5000}), {(TOPIC, 0): 300})
        assert (reset.reason, reset.applied_offset, reset.recorded_topic_id, reset.topic_id) == (
            "topic_id_changed",
            299,
            "id-1",
            "id-2",
        )
        assert metrics.log_resets == 1

    def test_a_log_end_behind_the_next_offset_is_a_reset_without_topic_ids(self) -> None:
        store = MemoryStore()
        watch, _ = _watch(store)
        watch.assigned(FakeLog(None, {}), [(TOPIC, 0), (TOPIC, 1)])
        resets = watch.check(FakeLog(None, {0: 40, 1: 301}), {(TOPIC, 0): 301, (TOPIC, 1): 301})
        assert [(r.partition, r.reason, r.log_end) for r in resets] == [(0, "log_end_behind_applied", 40)]

    def test_a_log_end_at_the_next_offset_is_a_caught_up_log_not_a_reset(self) -> None:
        store = MemoryStore()
        watch, _ = _watch(store)
        watch.assigned(FakeLog("id-1", {}), [(TOPIC, 0)])
        assert watch.check(FakeLog("id-1", {0: 301}), {(TOPIC, 0): 301}) == []
        assert watch.check(FakeLog("id-1", {}), {(TOPIC, 0): 301}) == []

    def test_a_reset_is_reported_once_then_the_new_id_is_the_recorded_one(self) -> None:
        store = MemoryStore()
        watch, metrics = _watch(store)
        watch.assigned(FakeLog("id-1", {}), [(TOPIC, 0)])
        assert len(watch.check(FakeLog("id-2", {}), {(TOPIC, 0): 10})) == 1
        assert watch.check(FakeLog("id-2", {}), {(TOPIC, 0): 10}) == []
        assert metrics.log_resets == 1

    def test_a_log_end_seen_before_the_new_id_rebuilds_once_and_then_records_the_new_id(self) -> None:
        """A fetch from the restarted broker shows the short log while the client's metadata still names the
        old topic id; when the metadata is refreshed, the new id is the same reset, not a second one (which
        read every event after a broker restart twice in the log-reset integration test)."""
        store = MemoryStore()
        watch, metrics = _watch(store)
        watch.assigned(FakeLog("id-1", {}), [(TOPIC, 0)])
        (reset,) = watch.check(FakeLog("id-1", {0: 40}), {(TOPIC, 0): 301})
        assert (reset.reason, reset.topic_id) == ("log_end_behind_applied", "id-1")
        assert watch.check(FakeLog("id-1", {0: 40}), {(TOPIC, 0): 40}) == []
        assert watch.check(FakeLog("id-2", {0: 500}), {(TOPIC, 0): 480}) == []
        assert store.log_ids("stream") == {f"{TOPIC}:0": "id-2"}
        assert metrics.log_resets == 1
        (again,) = watch.check(FakeLog("id-3", {0: 500}), {(TOPIC, 0): 480})
        assert (again.reason, again.recorded_topic_id) == ("topic_id_changed", "id-2")


class TestResetPartition:
    def test_the_reset_forgets_the_offset_records_the_id_and_rewrites_states(self) -> None:
        store = MemoryStore()
        store.commit("stream", {f"{TOPIC}:0": 99, f"{TOPIC}:1": 50}, {"eng-0": "old", "fleet-x": "agg"}, {})
        store.reset_partition("stream", f"{TOPIC}:0", "id-2", {"eng-0": "fresh"}, ["fleet-x"])
        assert store.applied_offsets("stream") == {f"{TOPIC}:1": 50}
        assert store.log_ids("stream") == {f"{TOPIC}:0": "id-2"}
        assert store.load_states("stream", ["eng-0", "fleet-x"]) == {"eng-0": "fresh"}
        assert store.commit("stream", {f"{TOPIC}:0": 0}, {}, {})


class Subscription:
    """kafka-python's subscription state as far as the position goes: an offset holder, or None once sought."""

    def __init__(self, positions: dict[TopicPartition, int | None]) -> None:
        self.positions = positions

    def position(self, tp: TopicPartition) -> OffsetAndMetadata | None:
        offset = self.positions[tp]
        return None if offset is None else OffsetAndMetadata(offset, "", -1)


class SoughtConsumer:
    """A consumer right after a rebuild sought partition 1 to its beginning: no position until a later poll.

    ``position`` would resolve it over the network; the lag must not call it (it blocked the processor).
    """

    def __init__(self) -> None:
        self._subscription = Subscription({TopicPartition(TOPIC, 0): 5, TopicPartition(TOPIC, 1): None})

    def assignment(self) -> set[TopicPartition]:
        return set(self._subscription.positions)

    def highwater(self, tp: TopicPartition) -> int | None:
        return 9

    def position(self, tp: TopicPartition) -> int | None:
        raise AssertionError("KafkaConsumer.position waits on the network")


class TestLagAfterASeek:
    def test_a_partition_without_a_position_counts_no_lag_and_is_not_caught_up(self) -> None:
        """The processor measures its lag on every poll, right after a rebuild's seek: it must neither fail
        there (a TypeError stopped its thread) nor wait on the network (``position`` blocked its loop)."""
        consumer = SoughtConsumer()
        assert consumer_lag(consumer) == 4  # type: ignore[arg-type]
        assert not caught_up(consumer)  # type: ignore[arg-type]
        consumer._subscription.positions[TopicPartition(TOPIC, 1)] = 9
        consumer._subscription.positions[TopicPartition(TOPIC, 0)] = 9
        assert consumer_lag(consumer) == 0  # type: ignore[arg-type]
        assert caught_up(consumer)  # type: ignore[arg-type]


class TestLayoutWatch:
    def test_the_first_layout_is_recorded_without_a_rejoin(self) -> None:
        watch = LayoutWatch(TOPIC, settle_s=10.0)
        assert watch.rejoin_due(("id-1", frozenset(range(8))), 0.0) is False
        assert watch.rejoin_due(("id-1", frozenset(range(8))), 60.0) is False

    def test_a_changed_layout_is_rejoined_once_it_has_held_for_the_settle_time(self) -> None:
        """A topic auto-created with 4 partitions, then recreated with its 8 by ``stack up``."""
        watch = LayoutWatch(TOPIC, settle_s=10.0)
        watch.rejoin_due(("id-1", frozenset(range(4))), 0.0)
        assert watch.rejoin_due(("id-2", frozenset(range(8))), 1.0) is False
        assert watch.rejoin_due(("id-2", frozenset(range(8))), 10.9) is False
        assert watch.rejoin_due(("id-2", frozenset(range(8))), 11.0) is True
        assert watch.rejoin_due(("id-2", frozenset(range(8))), 30.0) is False

    def test_each_further_change_restarts_the_settle_time(self) -> None:
        watch = LayoutWatch(TOPIC, settle_s=10.0)
        watch.rejoin_due(("id-1", frozenset(range(8))), 0.0)
        watch.rejoin_due(("id-2", frozenset(range(4))), 1.0)
        watch.rejoin_due(("id-3", frozenset(range(4))), 2.0)
        assert watch.rejoin_due(("id-4", frozenset(range(8))), 5.0) is False
        assert watch.rejoin_due(("id-4", frozenset(range(8))), 14.0) is False
        assert watch.rejoin_due(("id-4", frozenset(range(8))), 15.0) is True

    def test_a_recreated_topic_is_a_change_even_with_the_same_partitions(self) -> None:
        watch = LayoutWatch(TOPIC, settle_s=0.0)
        watch.rejoin_due(("id-1", frozenset(range(8))), 0.0)
        assert watch.rejoin_due(("id-2", frozenset(range(8))), 1.0) is True

    def test_a_topic_missing_from_the_metadata_for_a_moment_is_no_change(self) -> None:
        watch = LayoutWatch(TOPIC, settle_s=0.0)
        watch.rejoin_due(("id-1", frozenset(range(8))), 0.0)
        assert watch.rejoin_due(None, 1.0) is False
        assert watch.rejoin_due(("id-1", frozenset()), 2.0) is False
        assert watch.rejoin_due(("id-1", frozenset(range(8))), 3.0) is False
