"""The local stack on Apache Kafka 4.x: a durable log, no topic auto-creation, and the live loop.

Tansu keeps its log in memory, so every reliability test written against it met a broker whose
restart empties the log. These run on the broker users run (services/stack/kafka_broker.py): a
stack stopped, or killed with SIGKILL, and started again in its state folder serves every record it
had acknowledged, under the same topic ids, so the services fold on and no log reset is counted.
"""

from __future__ import annotations

import os
import signal
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaTimeoutError

from decide.specs import default_registry
from schemas.names import DEADLETTER_TOPIC, TELEMETRY_TOPIC, TOPICS
from services.health import ServiceMetrics
from services.kafka_clients import KafkaLogView, close_producer, reader, record_producer
from services.policy.service import PolicyService
from services.sdk.policy_client import PolicyClient
from services.settings import LOCAL_BROKER_TIMEOUTS
from services.stack.launcher import StackState, create_topics, stack_down, stack_status, stack_up
from services.stack.processes import free_port, pid_alive
from services.store.redis_store import RedisStore
from services.stream.processor import StreamProcessor
from services.testing.streams import synthetic_stream
from tests.integration.processes import applied_total, log_resets, running_in_thread, summaries, wait_until
from tests.integration.publishing import publish_all

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack(kafka_stack: StackState) -> StackState:
    """This module's stack is the Kafka one, whatever ``GOVERNOR_BROKER`` says, so that the ``deployment``
    fixture removes its keys from that stack's Redis and no Tansu is started beside it."""
    return kafka_stack


def _topic_ids(bootstrap: str) -> dict[str, str | None]:
    """Each topic's id as the broker's metadata gives it (a recreated topic gets a new one)."""
    consumer = reader(bootstrap, timeout_s=10.0)
    try:
        consumer.topics()
        view = KafkaLogView(consumer)
        return {topic.name: view.topic_id(topic.name) for topic in TOPICS}
    finally:
        consumer.close()


def test_a_topic_no_one_created_stays_missing(kafka_stack: StackState) -> None:
    """Auto-creation is off: a consumer's metadata request and a producer's send for an unknown topic create
    nothing (Tansu creates it on the first metadata request), and the send fails instead of landing."""
    missing = f"it-missing-{uuid.uuid4().hex[:8]}"
    consumer = KafkaConsumer(bootstrap_servers=kafka_stack.kafka_bootstrap)
    producer = KafkaProducer(bootstrap_servers=kafka_stack.kafka_bootstrap, max_block_ms=2000)
    admin = KafkaAdminClient(bootstrap_servers=kafka_stack.kafka_bootstrap)
    try:
        assert not consumer.partitions_for_topic(missing)
        with pytest.raises(KafkaTimeoutError):
            producer.send(missing, b"lost").get(timeout=10)
        assert missing not in admin.list_topics()
    finally:
        consumer.close()
        producer.close()
        admin.close()


@pytest.mark.slow
def test_stack_down_and_up_again_serves_the_records_and_topic_ids_it_held(
    tmp_path: Path, kafka_stack: StackState
) -> None:
    stack_dir = tmp_path
    first = stack_up(stack_dir, kafka_stack.redis_url, free_port(), broker="kafka")
    sent = [f"record-{i}".encode() for i in range(200)]
    producer = record_producer(first.kafka_bootstrap)
    for value in sent:
        producer.send(TELEMETRY_TOPIC, key=b"eng-0", value=value)
    producer.flush(timeout=30)
    producer.close()
    ids_before = _topic_ids(first.kafka_bootstrap)
    try:
        stack_down(stack_dir)
        assert first.broker_pid is not None
        assert not pid_alive(first.broker_pid)
        port = int(first.kafka_bootstrap.rsplit(":", 1)[1])
        again = stack_up(stack_dir, kafka_stack.redis_url, port, broker="kafka")
        assert again.broker == "kafka"
        assert _topic_ids(again.kafka_bootstrap) == ids_before
        status = stack_status(stack_dir)
        assert sum(status.topic_offsets[TELEMETRY_TOPIC]) == len(sent)
        consumer = KafkaConsumer(
            bootstrap_servers=again.kafka_bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=10_000
        )
        consumer.assign([TopicPartition(TELEMETRY_TOPIC, p) for p in range(TOPICS[0].partitions)])
        read = [message.value for message in consumer]
        consumer.close()
        assert sorted(read) == sorted(sent)
    finally:
        stack_down(stack_dir)


@pytest.mark.slow
def test_a_broker_killed_mid_stream_loses_no_record_and_triggers_no_log_reset(
    tmp_path: Path, kafka_stack: StackState, deployment: str
) -> None:
    """SIGKILL gives Kafka no controlled shutdown: the restart recovers the log from disk, and the
    services, which kept running with idempotent producers, fold the events of both sides of it
    exactly once. A producer closed while the broker is down aborts what it holds instead of
    raising (kafka-python's own ``close`` raises and leaves its I/O thread running)."""
    timeouts = replace(LOCAL_BROKER_TIMEOUTS, idempotent_producer=True)
    stack_dir = tmp_path
    own = stack_up(stack_dir, kafka_stack.redis_url, free_port(), broker="kafka")
    port = int(own.kafka_bootstrap.rsplit(":", 1)[1])
    events = synthetic_stream(engines=4, requests=600, deployment=deployment, seed=13)
    before, after = events[: len(events) // 2], events[len(events) // 2 :]
    store = RedisStore.from_url(own.redis_url, deployment, 5.0)
    stream_metrics = ServiceMetrics("stream", deployment)
    policy_metrics = ServiceMetrics("policy", deployment)
    processor = StreamProcessor(
        deployment=deployment,
        bootstrap=own.kafka_bootstrap,
        store=store,
        registry=default_registry(),
        metrics=stream_metrics,
        kafka_timeouts=timeouts,
    )
    policy = PolicyService(
        deployment=deployment,
        bootstrap=own.kafka_bootstrap,
        store=RedisStore.from_url(own.redis_url, deployment, 5.0),
        registry=default_registry(),
        metrics=policy_metrics,
        kafka_timeouts=timeouts,
    )
    try:
        with running_in_thread(processor), running_in_thread(policy):
            publish_all(own.kafka_bootstrap, before)
            wait_until(lambda: applied_total(store) == len(before), 120.0, "the events before the kill")
            ids_before = _topic_ids(own.kafka_bootstrap)
            decided_before = policy.counters.decisions
            stranded = record_producer(own.kafka_bootstrap, timeouts=timeouts)
            stranded.send(DEADLETTER_TOPIC, key=b"test", value=b"before").get(timeout=30)
            assert own.broker_pid is not None
            os.kill(own.broker_pid, signal.SIGKILL)
            os.waitpid(own.broker_pid, 0)  # the broker is this process's child: reaped once every thread is gone
            stranded.send(DEADLETTER_TOPIC, key=b"test", value=b"while down")
            assert not close_producer(stranded, timeout_s=1.0)
            assert not stranded._sender.is_alive()

            restarted = stack_up(stack_dir, own.redis_url, port, broker="kafka")
            assert restarted.broker_pid != own.broker_pid
            assert _topic_ids(own.kafka_bootstrap) == ids_before
            publish_all(own.kafka_bootstrap, after)
            wait_until(lambda: applied_total(store) == len(events), 180.0, "every event after the restart")
            wait_until(
                lambda: policy.counters.decisions > decided_before and not policy.outage.ongoing,
                120.0,
                "the policy service's decisions on the restarted broker",
            )
        assert log_resets(stream_metrics) == 0
        assert log_resets(policy_metrics) == 0
        assert processor.counters.skipped == 0
        assert processor.counters.folded == len(events)
    finally:
        store.close()
        stack_down(stack_dir)


def test_events_become_estimates_and_a_decision_the_engine_reads(kafka_stack: StackState, deployment: str) -> None:
    """The live loop on Kafka: telemetry -> stream processor -> Redis -> policy service -> the engine's client."""
    events = synthetic_stream(engines=2, requests=300, deployment=deployment)
    publish_all(kafka_stack.kafka_bootstrap, events)
    store = RedisStore.from_url(kafka_stack.redis_url, deployment, 5.0)
    processor = StreamProcessor(
        deployment=deployment, bootstrap=kafka_stack.kafka_bootstrap, store=store, registry=default_registry()
    )
    processor.run(idle_exit_s=4.0)
    processor.close()
    assert processor.counters.folded == len(events)
    summary = summaries(store, deployment, ["eng-0"])["eng-0"]
    assert isinstance(summary, dict)
    assert summary["completions_total"] == 150
    policy = PolicyService(
        deployment=deployment,
        bootstrap=kafka_stack.kafka_bootstrap,
        store=RedisStore.from_url(kafka_stack.redis_url, deployment, 5.0),
        registry=default_registry(),
    )
    policy.run(idle_exit_s=4.0)
    policy.close()
    assert policy.counters.decisions > 0
    client = PolicyClient(kafka_stack.redis_url, deployment, start=False)
    try:
        client.watch("ebplus", "eng-0")
        client.refresh()
        document = client.current("ebplus", "eng-0", now_s=events[-1].ts)
        assert document is not None
        assert (document.kind, document.scope, document.version) == ("ebplus", "eng-0", 1)
    finally:
        client.close()
        store.close()


def _services(
    bootstrap: str, redis_url: str, deployment: str
) -> tuple[StreamProcessor, PolicyService, ServiceMetrics, ServiceMetrics]:
    """A stream processor and a policy service of ``deployment``, and the metrics of each."""
    stream_metrics, policy_metrics = ServiceMetrics("stream", deployment), ServiceMetrics("policy", deployment)
    processor = StreamProcessor(
        deployment=deployment,
        bootstrap=bootstrap,
        store=RedisStore.from_url(redis_url, deployment, 5.0),
        registry=default_registry(),
        metrics=stream_metrics,
    )
    policy = PolicyService(
        deployment=deployment,
        bootstrap=bootstrap,
        store=RedisStore.from_url(redis_url, deployment, 5.0),
        registry=default_registry(),
        metrics=policy_metrics,
    )
    return processor, policy, stream_metrics, policy_metrics


@pytest.mark.slow
def test_topics_deleted_and_created_again_are_a_log_reset_and_every_new_event_is_folded(
    tmp_path: Path, kafka_stack: StackState, deployment: str
) -> None:
    """On a durable log a reset is an operator's act, not a restart: with the services stopped, the
    topics are deleted and created again (new ids); the services started afterwards count the reset
    and fold every event published to the new log."""
    own = stack_up(tmp_path, kafka_stack.redis_url, free_port(), broker="kafka")
    events = synthetic_stream(engines=4, requests=600, deployment=deployment, seed=17)
    before, after = events[: len(events) // 2], events[len(events) // 2 :]
    store = RedisStore.from_url(own.redis_url, deployment, 5.0)
    admin = KafkaAdminClient(bootstrap_servers=own.kafka_bootstrap)
    names = [topic.name for topic in TOPICS]
    try:
        processor, policy, stream_metrics, policy_metrics = _services(own.kafka_bootstrap, own.redis_url, deployment)
        with running_in_thread(processor), running_in_thread(policy):
            publish_all(own.kafka_bootstrap, before)
            wait_until(lambda: applied_total(store) == len(before), 120.0, "the events before the reset")
            wait_until(lambda: policy.counters.decisions > 0, 60.0, "a decision before the reset")
        ids_before = _topic_ids(own.kafka_bootstrap)
        admin.delete_topics(names)
        wait_until(lambda: not set(names) & set(admin.list_topics()), 60.0, "the topics' deletion")
        create_topics(own.kafka_bootstrap, 60.0)
        ids_after = _topic_ids(own.kafka_bootstrap)
        assert all(ids_after[name] != ids_before[name] for name in names)

        processor, policy, stream_metrics, policy_metrics = _services(own.kafka_bootstrap, own.redis_url, deployment)
        with running_in_thread(processor), running_in_thread(policy):
            publish_all(own.kafka_bootstrap, after)
            wait_until(lambda: applied_total(store) == len(after), 180.0, "every event after the reset")
            wait_until(lambda: policy.counters.decisions > 0, 120.0, "a decision from the new log")
            wait_until(lambda: log_resets(policy_metrics) >= 1, 60.0, "the policy service to notice its new log")
        assert log_resets(stream_metrics) >= 1
        assert processor.counters.skipped == 0
        assert processor.counters.folded == len(after)
    finally:
        admin.close()
        store.close()
        stack_down(tmp_path)
