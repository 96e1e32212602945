"""The local stack against the real broker and Redis: events through Kafka, keys through Redis."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import redis
from kafka import KafkaConsumer, KafkaProducer

from schemas.events import encode_event, parse_event
from schemas.names import TOPICS, estimate_key
from schemas.requests import RequestArrived
from services.settings import Settings
from services.stack.launcher import StackState, read_state, stack_down, stack_status, stack_up
from services.stack.processes import free_port, pid_alive

pytestmark = pytest.mark.integration


def test_events_round_trip_through_a_consumer_group_and_redis(
    stack: StackState, redis_client: redis.Redis, deployment: str
) -> None:
    topic = f"it-{uuid.uuid4().hex[:8]}"
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
        max_poll_interval_ms=3000,
        session_timeout_ms=3000,
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
