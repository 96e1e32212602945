"""The same round trip against the official Kafka and Redis images, where a Docker daemon exists."""

from __future__ import annotations

import pytest

from schemas.events import encode_event, parse_event
from schemas.requests import RequestArrived

pytestmark = pytest.mark.integration


def _docker_reason() -> str | None:
    import docker

    try:
        client = docker.from_env()
    except Exception as exc:  # any failure to reach a daemon means: skip, with the reason
        return f"no Docker daemon reachable ({type(exc).__name__}); testcontainers tests need one"
    try:
        client.ping()
    except Exception as exc:
        return f"the Docker daemon does not answer ({type(exc).__name__}); testcontainers tests need one"
    finally:
        client.close()
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
