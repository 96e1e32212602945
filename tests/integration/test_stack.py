"""The local stack on Tansu, the zero-Java broker, and the real Redis: events through the broker, keys through Redis.

The rest of the suite runs on the broker ``GOVERNOR_BROKER`` names (Apache Kafka in CI); this module
keeps Tansu, ``governor stack up``'s default, met in every run.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import redis
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer

from schemas.events import encode_event, parse_event
from schemas.names import TOPICS, TopicSpec, estimate_key
from schemas.requests import RequestArrived
from services.settings import Settings
from services.stack.launcher import StackState, create_topics, read_state, stack_down, stack_status, stack_up
from services.stack.processes import free_port, pid_alive

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack(tansu_stack: StackState) -> StackState:
    """This module's stack is the Tansu one, whatever ``GOVERNOR_BROKER`` says (the ``deployment`` and
    ``redis_client`` fixtures then use its Redis)."""
    return tansu_stack


def test_events_round_trip_through_a_consumer_group_and_redis(
    stack: StackState, redis_client: redis.Redis, deployment: str
) -> None:
    topic = f"it-{uuid.uuid4().hex[:8]}"
    create_topics(stack.kafka_bootstrap, 30.0, (TopicSpec(name=topic, partitions=3),))
    producer = KafkaProducer(bootstrap_servers=stack.kafka_bootstrap, linger_ms=5)
    sent = [
        RequestArrived(
            event_id=f"e{i}",
            ts=float(i),
            deployment=deployment,
            engine_id=f"eng-{i % 3}",
            seq=i,
            request_id=f"r{i}",
            prompt_tokens=i,
        )
        for i in range(300)
    ]
    for event in sent:
        producer.send(topic, key=event.engine_id.encode(), value=encode_event(event))
    producer.flush(timeout=10)
    producer.close()

    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=stack.kafka_bootstrap,
        group_id=f"g-{deployment}",
        auto_offset_reset="earliest",
        max_poll_interval_ms=6000,
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
        consumer_timeout_ms=20_000,
    )
    received = []
    for message in consumer:
        received.append(parse_event(message.value))
        if len(received) == len(sent):
            break
    consumer.close()
    assert sorted(received, key=lambda e: e.seq) == sent

    key = estimate_key(deployment, "fleet", "arrivals")
    redis_client.set(key, str(len(received)))
    assert redis_client.get(key) == b"300"
    redis_client.delete(key)


def test_up_twice_reports_the_running_stack_and_down_stops_only_what_it_started(tmp_path: Path) -> None:
    settings = Settings.load({"state_dir": str(tmp_path)})
    first = stack_up(tmp_path, settings.redis_url, free_port())
    second = stack_up(tmp_path, settings.redis_url, None)
    assert second == first
    status = stack_status(tmp_path)
    assert status.kafka_ok
    assert status.redis_ok
    assert set(status.topic_offsets) == {t.name for t in TOPICS}
    assert [len(v) for v in status.topic_offsets.values()] == [t.partitions for t in TOPICS]
    assert first.broker_pid is not None
    assert pid_alive(first.broker_pid)
    stack_down(tmp_path)
    assert read_state(tmp_path) is None
    assert not pid_alive(first.broker_pid)
    if first.redis_pid is None:
        client = redis.Redis.from_url(first.redis_url)
        assert client.ping()
        client.close()


def test_a_new_brokers_topics_a_client_created_first_get_their_counts_unless_they_hold_records(
    stack: StackState,
) -> None:
    """Tansu creates a topic (4 partitions) on any client's metadata request for it: a client reconnecting
    to a restarted broker before ``stack_up`` creates the topics must not leave them miscounted. (Apache
    Kafka runs with auto-creation off: test_kafka_broker.py checks it.)"""
    assert stack.broker == "tansu"
    empty, written = f"it-empty-{uuid.uuid4().hex[:8]}", f"it-written-{uuid.uuid4().hex[:8]}"
    consumer = KafkaConsumer(bootstrap_servers=stack.kafka_bootstrap)
    producer = KafkaProducer(bootstrap_servers=stack.kafka_bootstrap)
    try:
        consumer.subscribe([empty])
        consumer.poll(timeout_ms=500)
        producer.send(written, b"kept").get(timeout=30)
    finally:
        consumer.close()
        producer.close()
    specs = (TopicSpec(name=empty, partitions=1), TopicSpec(name=written, partitions=1))
    admin = KafkaAdminClient(bootstrap_servers=stack.kafka_bootstrap)
    try:
        auto = {d["name"]: len(d["partitions"]) for d in admin.describe_topics([empty, written])}
        assert min(auto[empty], auto[written]) > 1
        create_topics(stack.kafka_bootstrap, 30.0, specs)
        assert {d["name"]: len(d["partitions"]) for d in admin.describe_topics([empty])} == {empty: auto[empty]}
        create_topics(stack.kafka_bootstrap, 30.0, specs, new_broker=True)
        counts = {d["name"]: len(d["partitions"]) for d in admin.describe_topics([empty, written])}
    finally:
        admin.close()
    assert counts == {empty: 1, written: auto[written]}
