"""The control loop's floor on this broker: the same two hops with no work, for bench_runtime's latency runs.

The control loop carries an event over two broker hops before a decision is readable: the processor
reads telemetry and produces a snapshot, the policy service reads the snapshot and writes Redis. This
relay does the same with nothing in between, as two processes with the services' client settings
(``services/kafka_clients.py``: fetches held at most the same wait, the same producer linger and ack):

- ``hop1`` reads ``gov.telemetry`` and, for every ``--every``-th record, produces its value unchanged to
  ``RELAY_TOPIC``, flushing once per poll as the processor confirms its snapshots once per batch;
- ``hop2`` reads ``RELAY_TOPIC`` and, for each record, sets a key in Redis and publishes the event's
  engine and time on ``--channel``, as the policy service writes a decision and announces it.

Neither parses more than hop2 needs to name the event. What the relay's latency leaves of the
services' own is what processing costs; what it measures itself is the broker, the clients and the
machine.

    python -m ops.bench.relay hop1|hop2 --bootstrap HOST:PORT [--redis-url URL] [--channel C] [--every K]
        [--fetch-wait-ms MS] [--linger-ms MS]
"""

from __future__ import annotations

import argparse
import json
import signal
from types import FrameType

import redis
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from schemas.names import TELEMETRY_TOPIC
from services.settings import LOCAL_BROKER_TIMEOUTS

RELAY_TOPIC = "bench.relay"


class _Stop:
    """Set by SIGTERM, so a hop leaves its loop and closes its clients."""

    def __init__(self) -> None:
        self.stopped = False
        signal.signal(signal.SIGTERM, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.stopped = True


def end_reader(bootstrap: str, topic: str, fetch_wait_ms: int) -> KafkaConsumer:
    """A group-less reader of every partition of ``topic``, positioned at its end (the benchmarks' readers too)."""
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        fetch_max_wait_ms=fetch_wait_ms,
        max_poll_records=2000,
    )
    partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
    consumer.assign(partitions)
    consumer.seek_to_end(*partitions)
    for partition in partitions:
        consumer.position(partition)
    return consumer


def hop1(bootstrap: str, every: int, *, fetch_wait_ms: int, linger_ms: int) -> None:
    """Forward every ``every``-th telemetry record to ``RELAY_TOPIC``, flushing once per poll."""
    stop = _Stop()
    consumer = end_reader(bootstrap, TELEMETRY_TOPIC, fetch_wait_ms)
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=linger_ms, acks=1)
    while not stop.stopped:
        sent = False
        for records in consumer.poll(timeout_ms=200).values():
            for record in records:
                if record.offset % every == 0 and record.value is not None:
                    producer.send(RELAY_TOPIC, record.value)
                    sent = True
        if sent:
            producer.flush()
    consumer.close()
    producer.close()


def hop2(bootstrap: str, redis_url: str, channel: str, *, fetch_wait_ms: int) -> None:
    """Write each relayed event to Redis and announce its engine and time on ``channel``."""
    stop = _Stop()
    consumer = end_reader(bootstrap, RELAY_TOPIC, fetch_wait_ms)
    client = redis.Redis.from_url(redis_url)
    while not stop.stopped:
        for records in consumer.poll(timeout_ms=200).values():
            for record in records:
                event = json.loads(record.value)
                note = json.dumps({"engine_id": event["engine_id"], "ts": event["ts"]})
                pipe = client.pipeline(transaction=False)
                pipe.set(f"{channel}:last", record.value)
                pipe.publish(channel, note)
                pipe.execute()
    consumer.close()
    client.close()


def main() -> int:
    """Run one hop until SIGTERM."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("hop", choices=["hop1", "hop2"])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--channel", default="bench.relay")
    parser.add_argument("--every", type=int, default=100, help="hop1 forwards one record in this many")
    parser.add_argument("--fetch-wait-ms", type=int, default=LOCAL_BROKER_TIMEOUTS.fetch_max_wait_ms)
    parser.add_argument("--linger-ms", type=int, default=LOCAL_BROKER_TIMEOUTS.linger_ms)
    args = parser.parse_args()
    if args.hop == "hop1":
        hop1(args.bootstrap, args.every, fetch_wait_ms=args.fetch_wait_ms, linger_ms=args.linger_ms)
    else:
        hop2(args.bootstrap, args.redis_url, args.channel, fetch_wait_ms=args.fetch_wait_ms)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
