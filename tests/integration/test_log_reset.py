"""A broker that restarts without its log (the embedded broker's memory storage) mid-stream.

Before the restart both services have applied offsets in Redis that are ahead of the new, empty
log. The rule (services/log_reset.py, docs/operations.md "Log resets"): each service says so,
counts it, and rebuilds the partition from the new log's beginning, so every event published after
the restart is folded and the policies keep deciding; none is skipped silently.

A topic recreated with more partitions than the stream processor was assigned (a client created it
with the broker's default count first) is read on all of them: the processor rejoins its group
under a fresh member id when its topic's layout changes.
Both run with one core kept busy by a CPU burner (``busy_core``).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError

from decide.specs import default_registry
from schemas.events import Event
from schemas.names import TELEMETRY_TOPIC
from services.health import ServiceMetrics
from services.kafka_security import kafka_admin
from services.policy.service import PolicyService
from services.sdk.publisher import TelemetryPublisher
from services.stack.launcher import StackState, stack_down, stack_up
from services.stack.processes import free_port
from services.store.redis_store import RedisStore
from services.stream.processor import StreamProcessor
from services.testing.streams import synthetic_stream
from tests.integration.processes import applied_total, log_resets, running_in_thread, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.usefixtures("busy_core")]


def _publish(bootstrap: str, events: list[Event]) -> None:
    publisher = TelemetryPublisher(bootstrap, max_queue=len(events) + 1)
    for event in events:
        publisher.publish(event)
    assert publisher.flush(60.0)
    stats = publisher.stats()
    publisher.close()
    assert stats.dropped == 0


def test_broker_restart_without_its_log_is_reported_and_every_new_event_is_folded(
    stack: StackState, stack_dir: Path, deployment: str
) -> None:
    redis_url = stack.redis_url
    own = stack_up(stack_dir, redis_url, free_port())
    port = int(own.kafka_bootstrap.rsplit(":", 1)[1])
    events = synthetic_stream(engines=4, requests=1500, deployment=deployment, seed=11)
    before, after = events[: len(events) * 2 // 3], events[len(events) * 2 // 3 :]
    store = RedisStore.from_url(redis_url, deployment, 5.0)
    stream_metrics = ServiceMetrics("stream", deployment)
    policy_metrics = ServiceMetrics("policy", deployment)
    processor = StreamProcessor(
        deployment=deployment,
        bootstrap=own.kafka_bootstrap,
        store=store,
        registry=default_registry(),
        metrics=stream_metrics,
    )
    policy = PolicyService(
        deployment=deployment,
        bootstrap=own.kafka_bootstrap,
        store=RedisStore.from_url(redis_url, deployment, 5.0),
        registry=default_registry(),
        metrics=policy_metrics,
    )
    try:
        with running_in_thread(processor), running_in_thread(policy):
            _publish(own.kafka_bootstrap, before)
            wait_until(lambda: applied_total(store) == len(before), 120.0, "the events before the restart")
            wait_until(lambda: policy.counters.decisions > 0, 60.0, "a decision before the restart")
            applied_before = store.applied_offsets("stream")
            decisions_before = policy.counters.decisions
            assert log_resets(stream_metrics) == 0

            stack_down(stack_dir)
            restarted = stack_up(stack_dir, redis_url, port)
            assert restarted.kafka_bootstrap == own.kafka_bootstrap
            _publish(own.kafka_bootstrap, after)

            wait_until(lambda: applied_total(store) == len(after), 180.0, "every event after the restart to be applied")
            wait_until(lambda: policy.counters.decisions > decisions_before, 120.0, "a decision from the new log")
            wait_until(lambda: log_resets(policy_metrics) >= 1, 30.0, "the policy service to notice its new log")
        assert processor.counters.skipped == 0
        assert log_resets(stream_metrics) >= 1
        assert processor.counters.folded == len(before) + len(after)
        applied_after = store.applied_offsets("stream")
        assert set(applied_after) == set(applied_before)
        assert all(applied_after[tp] < applied_before[tp] for tp in applied_before)
    finally:
        store.close()
        stack_down(stack_dir)


def _recreate_telemetry(bootstrap: str, partitions: int) -> None:
    """Delete ``gov.telemetry`` and create it with ``partitions`` (Tansu creates it again on any metadata
    request in between, with its default count: the deletion is repeated until the created one holds)."""
    admin = kafka_admin(bootstrap)
    try:
        deadline = time.monotonic() + 60.0
        while time.monotonic() < deadline:
            if TELEMETRY_TOPIC in admin.list_topics():
                admin.delete_topics([TELEMETRY_TOPIC])
            try:
                admin.create_topics([NewTopic(TELEMETRY_TOPIC, partitions, 1)])
            except TopicAlreadyExistsError:  # created again by a client's metadata request meanwhile
                continue
            (described,) = admin.describe_topics([TELEMETRY_TOPIC])
            if len(described["partitions"]) == partitions:
                return
        msg = f"{TELEMETRY_TOPIC} not created with {partitions} partitions within 60 s"
        raise AssertionError(msg)
    finally:
        admin.close()


def test_a_topic_recreated_with_more_partitions_is_read_on_all_of_them(
    stack: StackState, stack_dir: Path, deployment: str
) -> None:
    """Assigned the 4 partitions of a first topic, the member ends up assigned the 8 of the next one.

    On Tansu a rejoin under the same member id kept the 4-partition assignment (services/log_reset.py),
    so events on partitions 4-7 waited unread.
    """
    own = stack_up(stack_dir, stack.redis_url, free_port())
    events = synthetic_stream(engines=8, requests=600, deployment=deployment, seed=5)
    before, after = events[: len(events) // 3], events[len(events) // 3 :]
    store = RedisStore.from_url(stack.redis_url, deployment, 5.0)
    metrics = ServiceMetrics("stream", deployment)
    try:
        _recreate_telemetry(own.kafka_bootstrap, 4)
        processor = StreamProcessor(
            deployment=deployment,
            bootstrap=own.kafka_bootstrap,
            store=store,
            registry=default_registry(),
            metrics=metrics,
        )
        with running_in_thread(processor):
            _publish(own.kafka_bootstrap, before)
            wait_until(lambda: applied_total(store) == len(before), 120.0, "the events on the 4-partition topic")
            assert metrics.assigned == 4

            _recreate_telemetry(own.kafka_bootstrap, 8)
            _publish(own.kafka_bootstrap, after)
            wait_until(lambda: metrics.assigned == 8, 120.0, "the 8 partitions of the recreated topic")
            wait_until(lambda: applied_total(store) == len(after), 120.0, "every event on the recreated topic")
        assert len(store.applied_offsets("stream")) == 8
        # A record read at its old offset on the new log before the reset was seen is folded again after the
        # rebuild, so folds may exceed the events; none is skipped.
        assert processor.counters.folded >= len(before) + len(after)
        assert processor.counters.skipped == 0
    finally:
        store.close()
        stack_down(stack_dir)
