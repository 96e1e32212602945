"""Retention on Apache Kafka, shortened to seconds: telemetry expires, the policy configuration does not.

The topics are created as ``governor stack up`` creates them (services/stack/topic_configs.py), with
the retention cut from days to seconds and the broker checking it every half second instead of every
five minutes. Past the retention the telemetry is gone from the log while ``gov.estimates``, compacted,
still holds every deployment's live configuration and each shadow's, and the last snapshot of each
scope: a policy service started on a wiped Redis decides with the live configuration.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType

from decide.specs import default_registry
from schemas.errors import ConfigError
from schemas.estimates import EngineSummary
from schemas.names import ESTIMATES_TOPIC, TELEMETRY_TOPIC, TOPICS
from schemas.records import EstimateSnapshot, PolicyConfigRecord
from services.cli.shadow import read_decisions
from services.policy.config import config_digest
from services.policy.config_records import LIVE, config_record, publish_configs
from services.policy.intake import read_record
from services.policy.service import PolicyService
from services.replay.replay import read_topic
from services.settings import Settings
from services.stack.kafka_broker import locate_kafka
from services.stack.launcher import StackState, stack_down, stack_up
from services.stack.processes import free_port
from services.stack.topic_configs import TopicRetention, topic_configs
from services.store.redis_store import RedisStore
from services.stream.processor import StreamProcessor
from services.testing.streams import synthetic_stream
from tests.integration.processes import wait_until
from tests.integration.publishing import publish_all

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# Decisions keep theirs long: the test reads those the policy service makes at its end.
SHORT = TopicRetention(telemetry_ms=4000, decisions_ms=600_000, segment_ms=1000)
# The broker's retention and compaction threads run every 5 minutes and 15 s by default.
CHECKS = {"log.retention.check.interval.ms": "500", "log.cleaner.backoff.ms": "500"}
LIVE_CONFIG = {"admission": {"applies_to": {"engines": ["eng-0"]}}}
SHADOW_CONFIG = {"admission": {"kv_comfort_frac": 0.3}}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackState]:
    """Apache Kafka with the short retention, and the Redis the other fixtures use (``deployment`` cleans it)."""
    try:
        locate_kafka()
    except ConfigError as exc:
        pytest.skip(f"Apache Kafka is not installed: {exc}")
    state_dir = tmp_path_factory.mktemp("stack-retention")
    settings = Settings.load({"state_dir": str(state_dir)})
    state = stack_up(
        state_dir, settings.redis_url, free_port(), broker="kafka", retention=SHORT, kafka_overrides=CHECKS
    )
    yield state
    stack_down(state_dir)


def test_every_topic_is_created_with_its_retention_and_clean_up_policy(stack: StackState) -> None:
    admin = KafkaAdminClient(bootstrap_servers=stack.kafka_bootstrap)
    try:
        resources = [ConfigResource(ConfigResourceType.TOPIC, topic.name) for topic in TOPICS]
        described = admin.describe_configs(resources)["topic"]
    finally:
        admin.close()
    found = {name: {key: data["value"] for key, data in configs.items()} for name, configs in described.items()}
    for topic in TOPICS:
        wanted = topic_configs(topic.name, SHORT)
        assert {key: found[topic.name][key] for key in wanted} == wanted
    assert found[ESTIMATES_TOPIC]["cleanup.policy"] == "compact"
    assert found[TELEMETRY_TOPIC]["retention.ms"] == "4000"


def _log_start_and_end(bootstrap: str, topic: str) -> dict[int, tuple[int, int]]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        starts, ends = consumer.beginning_offsets(parts), consumer.end_offsets(parts)
        return {tp.partition: (starts[tp], ends[tp]) for tp in parts}
    finally:
        consumer.close()


def _estimates(bootstrap: str, deployment: str) -> tuple[list[PolicyConfigRecord], list[EstimateSnapshot]]:
    configs: list[PolicyConfigRecord] = []
    snapshots: list[EstimateSnapshot] = []
    for raw in read_topic(bootstrap, ESTIMATES_TOPIC):
        record = read_record(raw)
        if isinstance(record, PolicyConfigRecord) and record.deployment == deployment:
            configs.append(record)
        elif (
            isinstance(record, EstimateSnapshot)
            and record.deployment == deployment
            and isinstance(record.estimates, EngineSummary)
        ):
            snapshots.append(record)  # an engine's own, keyed by its id; fleet records share the key ``fleet``
    return configs, snapshots


def _compacted(bootstrap: str, deployment: str) -> bool:
    """Whether each scope of ``deployment`` has one snapshot left, and gov.estimates has grown past the
    snapshots it compacted (a later record rolls the segment they are in)."""
    publish_configs(bootstrap, [config_record(deployment, "roller", None, "test")], 10.0)
    _, snapshots = _estimates(bootstrap, deployment)
    scopes = [snapshot.scope for snapshot in snapshots]
    return len(scopes) == len(set(scopes))


def test_past_the_retention_telemetry_is_gone_and_the_configuration_and_last_snapshots_stay(
    stack: StackState, deployment: str, redis_client: redis.Redis
) -> None:
    live = config_record(deployment, LIVE, LIVE_CONFIG, "live.toml")
    shadow = config_record(deployment, "candidate", SHADOW_CONFIG, "candidate.toml")
    other = config_record(f"{deployment}-other", LIVE, SHADOW_CONFIG, "other.toml")
    publish_configs(stack.kafka_bootstrap, [live, shadow, other], 10.0)
    events = synthetic_stream(engines=2, requests=300, deployment=deployment)
    publish_all(stack.kafka_bootstrap, events)
    store = RedisStore.from_url(stack.redis_url, deployment, 5.0)
    processor = StreamProcessor(
        deployment=deployment, bootstrap=stack.kafka_bootstrap, store=store, registry=default_registry()
    )
    try:
        processor.run(idle_exit_s=4.0)
    finally:
        processor.close()
    _, taken = _estimates(stack.kafka_bootstrap, deployment)
    last_of_scope = {snapshot.scope: snapshot.version for snapshot in taken}
    assert len(taken) > len(last_of_scope), "several snapshots per scope, so compaction has some to remove"

    wait_until(
        lambda: all(start == end for start, end in _log_start_and_end(stack.kafka_bootstrap, TELEMETRY_TOPIC).values()),
        120.0,
        "every telemetry record to expire",
    )
    wait_until(lambda: _compacted(stack.kafka_bootstrap, deployment), 120.0, "gov.estimates to be compacted")

    configs, kept = _estimates(stack.kafka_bootstrap, deployment)
    assert {snapshot.scope: snapshot.version for snapshot in kept} == last_of_scope
    assert {(config.name, config.digest) for config in configs} >= {
        (LIVE, config_digest(LIVE_CONFIG)),
        ("candidate", config_digest(SHADOW_CONFIG)),
    }
    assert [config.name for config in configs].count(LIVE) == 1
    other_configs, _ = _estimates(stack.kafka_bootstrap, f"{deployment}-other")
    assert [(config.name, config.digest) for config in other_configs] == [(LIVE, config_digest(SHADOW_CONFIG))]

    keys = list(redis_client.scan_iter(match=f"gov:{deployment}:*", count=1000))
    assert keys
    redis_client.delete(*keys)
    service = PolicyService(
        deployment=deployment, bootstrap=stack.kafka_bootstrap, store=store, registry=default_registry()
    )
    try:
        service.run(idle_exit_s=4.0)
    finally:
        service.close()
        store.close()
    decided = [record for record in read_decisions(stack.kafka_bootstrap, deployment) if record.shadow is None]
    assert decided
    assert {record.config for record in decided} == {config_digest(LIVE_CONFIG)}
