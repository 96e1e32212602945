"""``KafkaSource.wait``: a rebalance inside the wait's poll must not consume records unseen.

The loop pauses every partition and waits out an outage with ``wait``, which polls so the group keeps
the member. A member that overran its poll interval (a delivery stuck on a paused broker) rejoins in
that poll; the loop's assignment callback positions the partitions and resumes them, and the same
poll then returns records. Dropped, they were never folded: a seq gap of 1,416 events on one engine
in tests/integration/test_backend_outages.py. A stand-in for kafka-python's consumer, built where
``KafkaSource`` builds its consumer, returns such a poll.
"""

from __future__ import annotations

from typing import Any

import pytest
from kafka import TopicPartition

from schemas.names import TELEMETRY_TOPIC
from services.kafka_security import PLAINTEXT
from services.runtime import source as source_module
from services.runtime.source import KafkaSource
from services.settings import LOCAL_BROKER_TIMEOUTS
from services.testing.memory_source import MemoryRecord


class _PolledThrough:
    """A consumer whose next poll returns ``batch`` (a rebalance resumed the partitions mid-wait)."""

    def __init__(self, batch: dict[TopicPartition, list[MemoryRecord]]) -> None:
        self.batch = batch
        self.seeks: list[tuple[TopicPartition, int]] = []

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> dict[TopicPartition, list[MemoryRecord]]:
        batch, self.batch = self.batch, {}
        return batch

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.seeks.append((tp, offset))


def _source(monkeypatch: pytest.MonkeyPatch, consumer: _PolledThrough) -> KafkaSource:
    def built(*args: Any, **kwargs: Any) -> _PolledThrough:
        return consumer

    monkeypatch.setattr(source_module, "group_consumer", built)
    return KafkaSource(
        service="stream",
        topic=TELEMETRY_TOPIC,
        bootstrap="127.0.0.1:9",
        group_id="g",
        timeouts=LOCAL_BROKER_TIMEOUTS,
        security=PLAINTEXT,
        poll_timeout_ms=200,
    )


def test_records_a_wait_fetched_are_sought_back_to_be_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    p5, p7, p2 = (TopicPartition(TELEMETRY_TOPIC, number) for number in (5, 7, 2))
    consumer = _PolledThrough(
        {
            p5: [MemoryRecord(TELEMETRY_TOPIC, 5, offset, b"eng-1", b"{}") for offset in (40, 41, 42)],
            p7: [MemoryRecord(TELEMETRY_TOPIC, 7, 2001, b"eng-3", b"{}")],
            p2: [],
        }
    )
    source = _source(monkeypatch, consumer)
    source.wait(0.5)
    assert sorted(consumer.seeks) == sorted([(p5, 40), (p7, 2001)])


def test_a_wait_that_fetched_nothing_moves_no_position(monkeypatch: pytest.MonkeyPatch) -> None:
    consumer = _PolledThrough({})
    source = _source(monkeypatch, consumer)
    source.wait(0.5)
    assert consumer.seeks == []
