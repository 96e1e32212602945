"""The same round trip against the official Kafka and Redis images, where a Docker daemon exists."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from schemas.events import encode_event, parse_event
from schemas.requests import RequestArrived

pytestmark = pytest.mark.integration


def _docker_reason() -> str | None:
    """Return why Docker is unusable here, or None when its daemon socket accepts a connection."""
    path = Path("/var/run/docker.sock")
    if not path.exists():
        return f"no Docker daemon socket at {path}; testcontainers tests need a running Docker daemon"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(2.0)
        try:
            sock.connect(str(path))
        except OSError as exc:
            return f"the Docker daemon at {path} does not answer ({exc}); testcontainers tests need one"
    return None


@pytest.fixture(scope="module")
def docker_ready() -> None:
    reason = _docker_reason()
    if reason is not None:
        print(f"\nskipping testcontainers tests: {reason}")
        pytest.skip(reason)


def test_round_trip_on_official_kafka_and_redis_images(docker_ready: None) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from testcontainers.kafka import KafkaContainer
    from testcontainers.redis import RedisContainer

    with KafkaContainer().with_kraft() as kafka, RedisContainer() as redis_container:
        bootstrap = kafka.get_bootstrap_server()
        producer = KafkaProducer(bootstrap_servers=bootstrap)
        events = [
            RequestArrived(
                event_id=f"e{i}",
                ts=float(i),
                deployment="tc",
                engine_id="eng",
                seq=i,
                request_id=f"r{i}",
                prompt_tokens=i,
            )
            for i in range(200)
        ]
        for event in events:
            producer.send("tc.telemetry", value=encode_event(event))
        producer.flush()
        consumer = KafkaConsumer(
            "tc.telemetry",
            bootstrap_servers=bootstrap,
            group_id="tc",
            auto_offset_reset="earliest",
            consumer_timeout_ms=30_000,
        )
        received = [parse_event(m.value) for _, m in zip(range(len(events)), consumer, strict=False)]
        consumer.close()
        assert received == events
        client = redis_container.get_client()
        client.set("gov:tc:est:fleet:n", len(received))
        assert client.get("gov:tc:est:fleet:n") == b"200"
