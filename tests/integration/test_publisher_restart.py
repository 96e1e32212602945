"""An engine's telemetry resumes by itself after the broker restarts under it.

The engine's publisher is idempotent: its producer holds a producer id and epoch that a restarted
broker does not know. Before the fix, the first delivery after the restart failed with
``UnknownProducerIdError`` and every later send failed the same way: the engine kept serving but
its telemetry never reached the log again. The publisher now rebuilds its producer after a failed
delivery (with backoff), so the engine's events appear on the new broker within seconds.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from schemas.events import parse_event
from schemas.names import TELEMETRY_TOPIC
from services.kafka_security import kafka_consumer
from services.sdk.publisher import TelemetryPublisher
from services.stack.launcher import StackState, stack_down, stack_up
from services.stack.processes import free_port
from services.testing.streams import synthetic_stream
from tests.integration.processes import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _event_ids_on_the_log(bootstrap: str) -> set[str]:
    """Every event id on ``gov.telemetry`` of the broker at ``bootstrap``, read from the beginning."""
    consumer = kafka_consumer(bootstrap, auto_offset_reset="earliest", enable_auto_commit=False, group_id=None)
    try:
        consumer.subscribe([TELEMETRY_TOPIC])
        ids: set[str] = set()
        idle_polls = 0
        while idle_polls < 3:
            batch = consumer.poll(timeout_ms=500)
            records = [record for records in batch.values() for record in records]
            idle_polls = 0 if records else idle_polls + 1
            ids.update(parse_event(record.value).event_id for record in records)
        return ids
    finally:
        consumer.close()


def test_telemetry_published_after_a_broker_restart_reaches_the_new_broker(stack: StackState, stack_dir: Path) -> None:
    events = synthetic_stream(engines=1, requests=120, seed=11)
    before, during, after = events[:100], events[100:200], events[200:300]
    port = free_port()
    own = stack_up(stack_dir, stack.redis_url, port)
    publisher = TelemetryPublisher(own.kafka_bootstrap, send_timeout_s=2.0)
    try:
        for event in before:
            publisher.publish(event)
        assert publisher.flush(30.0)
        assert publisher.stats().delivered == len(before)

        stack_down(stack_dir)
        for event in during:
            publisher.publish(event)
        publisher.flush(10.0)
        restarted = stack_up(stack_dir, stack.redis_url, port)
        assert restarted.kafka_bootstrap == own.kafka_bootstrap

        wanted = {event.event_id for event in after}

        def resumed() -> bool:
            """Publish ``after`` (again); true once all of it is on the new log."""
            for event in after:
                publisher.publish(event)
            publisher.flush(5.0)
            return wanted <= _event_ids_on_the_log(restarted.kafka_bootstrap)

        wait_until(resumed, 60.0, "the engine's events after the broker restart to reach the new broker")
        assert publisher.stats().dropped >= 1
    finally:
        publisher.close(timeout_s=5.0)
        stack_down(stack_dir)
