"""services/stack/topic_configs.py: each topic's retention and clean-up policy."""

from __future__ import annotations

from schemas.names import DEADLETTER_TOPIC, DECISIONS_TOPIC, ESTIMATES_TOPIC, TELEMETRY_TOPIC, TOPICS
from services.stack.topic_configs import DAY_MS, DEFAULT_RETENTION, TopicRetention, topic_configs


class TestTopicConfigs:
    def test_telemetry_and_dead_letters_are_deleted_after_a_week_never_by_size(self) -> None:
        for topic in (TELEMETRY_TOPIC, DEADLETTER_TOPIC):
            configs = topic_configs(topic)
            assert (configs["cleanup.policy"], configs["retention.ms"], configs["retention.bytes"]) == (
                "delete",
                str(7 * DAY_MS),
                "-1",
            )

    def test_decisions_are_kept_a_month(self) -> None:
        assert topic_configs(DECISIONS_TOPIC)["retention.ms"] == str(30 * DAY_MS)

    def test_estimates_are_compacted_never_deleted_and_nothing_is_compacted_before_the_telemetry_expires(
        self,
    ) -> None:
        """Every snapshot stays while the telemetry it came from does; past it, the last of each key stays."""
        retention = TopicRetention(telemetry_ms=5000, decisions_ms=9000, segment_ms=100)
        configs = topic_configs(ESTIMATES_TOPIC, retention)
        assert configs == {"cleanup.policy": "compact", "min.compaction.lag.ms": "5000", "segment.ms": "100"}

    def test_every_topic_of_governor_has_a_policy_and_rolls_daily(self) -> None:
        for topic in TOPICS:
            configs = topic_configs(topic.name)
            assert configs["cleanup.policy"] in ("delete", "compact")
            assert configs["segment.ms"] == str(DEFAULT_RETENTION.segment_ms) == str(DAY_MS)

    def test_a_topic_not_of_governor_keeps_the_broker_defaults(self) -> None:
        assert topic_configs("someone.else") == {}
