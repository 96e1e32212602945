"""Replay at full speed loses nothing: a publisher that waits for room delivers every event of the file."""

from __future__ import annotations

import collections

import pytest
from kafka import KafkaConsumer

from schemas.events import parse_event
from schemas.names import TELEMETRY_TOPIC
from services.replay.replay import replay_events
from services.sdk.publisher import TelemetryPublisher
from services.stack.launcher import StackState
from tests.unit.stream.synthetic import synthetic_stream

pytestmark = pytest.mark.integration


def test_a_max_speed_replay_through_a_small_queue_delivers_every_event_of_every_engine(
    stack: StackState, deployment: str
) -> None:
    events = synthetic_stream(engines=4, requests=1500, deployment=deployment, seed=11)
    # A queue of 64 is far smaller than the file: without waiting for room most events would be dropped.
    publisher = TelemetryPublisher(stack.kafka_bootstrap, max_queue=64, block_when_full=True)
    stats = replay_events(events, publisher, speed=None)
    assert publisher.flush(60.0)
    publisher.close()
    assert stats.events == len(events)
    assert publisher.stats().dropped == 0
    assert publisher.stats().delivered == len(events)
    consumer = KafkaConsumer(
        TELEMETRY_TOPIC, bootstrap_servers=stack.kafka_bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=3000
    )
    received: collections.Counter[str] = collections.Counter()
    for message in consumer:
        if message.value is not None and deployment.encode() in message.value:
            received[parse_event(message.value).engine_id] += 1
    consumer.close()
    assert received == collections.Counter(event.engine_id for event in events)
