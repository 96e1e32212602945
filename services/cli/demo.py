"""``governor demo``: the README's main command.

Starts the local stack, then proves the loop end to end with a smoke round trip: telemetry
events produced to ``gov.telemetry``, consumed back, validated, and counted into Redis.
"""

from __future__ import annotations

import argparse
import uuid

import redis
from kafka import KafkaConsumer, KafkaProducer

from schemas.events import encode_event, parse_event
from schemas.names import TELEMETRY_TOPIC, estimate_key
from schemas.requests import RequestArrived
from services.cli.options import add_settings_flags, settings_from_args
from services.stack.launcher import stack_up


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``demo`` command."""
    demo = commands.add_parser("demo", help="start the local stack and run events through Kafka into Redis")
    demo.add_argument("--events", type=int, default=500, help="events in the smoke round trip (default 500)")
    add_settings_flags(demo, ["state_dir", "redis_url", "deployment", "log_format"])
    demo.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Bring the stack up and run the smoke round trip; print what arrived where."""
    settings = settings_from_args(args)
    state = stack_up(settings.state_dir, settings.redis_url, None, settings.kafka_timeout_s)
    print(f"stack: kafka {state.kafka_bootstrap}, redis {state.redis_url}")
    run_id = uuid.uuid4().hex[:8]
    producer = KafkaProducer(bootstrap_servers=state.kafka_bootstrap, linger_ms=5)
    for i in range(args.events):
        event = RequestArrived(
            event_id=f"demo-{run_id}-{i}",
            ts=float(i),
            deployment=settings.deployment,
            engine_id=f"demo-engine-{i % 4}",
            seq=i // 4,
            request_id=f"{run_id}-{i}",
            prompt_tokens=100 + i,
        )
        producer.send(TELEMETRY_TOPIC, key=event.engine_id.encode(), value=encode_event(event))
    producer.flush(timeout=settings.kafka_timeout_s)
    producer.close()
    consumer = KafkaConsumer(
        TELEMETRY_TOPIC,
        bootstrap_servers=state.kafka_bootstrap,
        auto_offset_reset="earliest",
        consumer_timeout_ms=10_000,
    )
    client = redis.Redis.from_url(state.redis_url, socket_timeout=settings.redis_timeout_s)
    key = estimate_key(settings.deployment, "fleet", f"demo-arrivals-{run_id}")
    folded = 0
    for message in consumer:
        received = parse_event(message.value)
        if received.event_id.startswith(f"demo-{run_id}-"):
            client.incr(key)
            folded += 1
            if folded == args.events:
                break
    consumer.close()
    stored = int(client.get(key) or 0)
    client.close()
    print(f"round trip: {args.events} events produced, {folded} consumed, redis {key} = {stored}")
    return 0 if stored == args.events else 1
