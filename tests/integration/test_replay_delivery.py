"""Replay at full speed loses nothing: a publisher that waits for room delivers every event of the file.

The second test replays a 100k-event file through ``governor replay --max-speed`` and counts, per
partition, what reached the broker against where the engine rule puts each event's engine
(services/engine_partitions.py).
"""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest
from kafka import KafkaConsumer, TopicPartition

from schemas.events import parse_event
from schemas.names import TELEMETRY_TOPIC
from services.cli.main import main
from services.engine_partitions import engine_partition
from services.replay.files import write_events
from services.replay.replay import read_topic, replay_events
from services.sdk.publisher import TelemetryPublisher
from services.stack.launcher import StackState
from services.testing.streams import synthetic_stream

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
    received: collections.Counter[str] = collections.Counter()
    for value in read_topic(stack.kafka_bootstrap, TELEMETRY_TOPIC):
        if deployment.encode() in value:
            received[parse_event(value).engine_id] += 1
    assert received == collections.Counter(event.engine_id for event in events)


def test_governor_replay_at_max_speed_delivers_a_100k_event_file_partition_by_partition(
    stack: StackState, deployment: str, tmp_path: Path
) -> None:
    events = synthetic_stream(engines=6, requests=34_000, deployment="recorded-elsewhere", seed=13)
    assert len(events) >= 100_000
    path = tmp_path / "big.jsonl.gz"
    write_events(path, events)
    argv = [
        "replay",
        str(path),
        "--max-speed",
        "--as-deployment",
        deployment,
        "--kafka-bootstrap",
        stack.kafka_bootstrap,
    ]
    assert main(argv) == 0
    consumer = KafkaConsumer(bootstrap_servers=stack.kafka_bootstrap, consumer_timeout_ms=5000)
    partitions = sorted(consumer.partitions_for_topic(TELEMETRY_TOPIC) or [])
    consumer.assign([TopicPartition(TELEMETRY_TOPIC, p) for p in partitions])
    consumer.seek_to_beginning()
    received: collections.Counter[int] = collections.Counter()
    for message in consumer:
        if message.value is not None and json.loads(message.value).get("deployment") == deployment:
            received[message.partition] += 1
    consumer.close()
    expected = collections.Counter(engine_partition(event.engine_id, len(partitions)) for event in events)
    assert received == expected
