"""Bad input loses nothing and is dead-lettered with a reason; engines are safe when backends go away."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest
import redis
import structlog.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka import KafkaProducer

from decide.specs import default_registry
from schemas.estimates import EngineSummary
from schemas.events import Event, encode_event
from schemas.names import DEADLETTER_TOPIC, ESTIMATES_TOPIC, TELEMETRY_TOPIC, estimate_key, policy_key
from schemas.policy_docs import AdmissionPayload, AdmissionPolicy, AdmissionState, InputsDigest
from schemas.records import DeadLetter
from services.health import ServiceMetrics
from services.policy.decisions import DecisionMaker
from services.replay.replay import read_topic
from services.sdk.policy_client import PolicyClient
from services.sdk.publisher import TelemetryPublisher
from services.stack.launcher import StackState, stack_down, stack_up
from services.stack.processes import free_port, stop
from services.store.redis_store import RedisStore
from services.stream.batches import SUMMARY_NAME, UNADMITTED_RETENTION_S
from services.stream.processor import StreamProcessor
from services.testing.streams import restart_case, synthetic_stream
from tests.fixtures import admission_snapshot, synthetic_engine_summary

pytestmark = pytest.mark.integration

MUTATIONS = ("drop", "wrong_type", "negative", "nan", "unknown_type", "huge_string", "not_json")


def _mutate(raw: bytes, mutation: str, pick: int) -> bytes:
    data = json.loads(raw)
    keys = sorted(k for k in data if k not in {"deployment", "event_type", "engine_id"})
    key = keys[pick % len(keys)]
    if mutation == "drop":
        data["event_id"] = None
    elif mutation == "wrong_type":
        data["seq"] = "seven"
    elif mutation == "negative":
        data["seq"] = -1 - pick
    elif mutation == "nan":
        data["ts"] = math.nan
    elif mutation == "unknown_type":
        data["event_type"] = f"request.unknown{pick}"
    elif mutation == "huge_string":
        data[key] = "x" * 5000
    else:
        return b"{not json " + raw[:20]
    return json.dumps(data, allow_nan=True).encode()


@settings(max_examples=1, deadline=None, suppress_health_check=list(HealthCheck))
@given(picks=st.lists(st.tuples(st.sampled_from(MUTATIONS), st.integers(0, 1000)), min_size=120, max_size=120))
def test_a_stream_with_ten_percent_malformed_events_loses_no_valid_event(
    stack: StackState, deployment: str, picks: list[tuple[str, int]]
) -> None:
    valid = synthetic_stream(engines=2, requests=360, deployment=deployment, seed=9)
    producer = KafkaProducer(bootstrap_servers=stack.kafka_bootstrap, linger_ms=5)
    bad_count = 0
    for i, event in enumerate(valid):
        raw = encode_event(event)
        producer.send(TELEMETRY_TOPIC, key=event.engine_id.encode(), value=raw)
        if i % 9 == 0 and bad_count < len(picks):
            mutation, pick = picks[bad_count]
            producer.send(TELEMETRY_TOPIC, key=event.engine_id.encode(), value=_mutate(raw, mutation, pick))
            bad_count += 1
    producer.flush()
    producer.close()
    assert bad_count / (bad_count + len(valid)) >= 0.09
    store = RedisStore.from_url(stack.redis_url, deployment, 5.0)
    processor = StreamProcessor(
        deployment=deployment, bootstrap=stack.kafka_bootstrap, store=store, registry=default_registry()
    )
    processor.run(idle_exit_s=4.0)
    processor.close()
    assert processor.counters.folded == len(valid)
    dead = read_topic(stack.kafka_bootstrap, DEADLETTER_TOPIC)
    ours = [json.loads(value) for value in dead if deployment.encode() in value]
    by_offset = {(d["source"]["partition"], d["source"]["offset"]): d for d in ours}
    assert len(by_offset) == bad_count
    assert all(d["reason"] and d["source"]["topic"] == TELEMETRY_TOPIC for d in by_offset.values())
    store.close()


def _records(events: list[Event]) -> list[tuple[str, bytes | None]]:
    return [(event.engine_id, encode_event(event)) for event in events]


def _fold_records(
    stack: StackState,
    deployment: str,
    records: list[tuple[str, bytes | None]],
    metrics: ServiceMetrics | None = None,
) -> StreamProcessor:
    """Produce (key, value) records to the telemetry topic, then fold them with one processor until idle."""
    producer = KafkaProducer(bootstrap_servers=stack.kafka_bootstrap, linger_ms=5)
    for key, value in records:
        producer.send(TELEMETRY_TOPIC, key=key.encode(), value=value)
    producer.flush()
    producer.close()
    store = RedisStore.from_url(stack.redis_url, deployment, 5.0)
    processor = StreamProcessor(
        deployment=deployment,
        bootstrap=stack.kafka_bootstrap,
        store=store,
        registry=default_registry(),
        metrics=metrics,
    )
    processor.run(idle_exit_s=4.0)
    processor.close()
    store.close()
    return processor


def test_a_tombstone_record_is_dead_lettered_and_the_stream_goes_on(stack: StackState, deployment: str) -> None:
    valid = synthetic_stream(engines=1, requests=40, deployment=deployment, seed=3)
    processor = _fold_records(stack, deployment, [(valid[0].engine_id, None), *_records(valid)])
    assert processor.counters.folded == len(valid)
    assert processor.counters.dead_lettered >= 1


def test_events_of_another_deployment_are_counted_and_named_once_per_engine(stack: StackState, deployment: str) -> None:
    other = f"{deployment}-other"
    stray = synthetic_stream(engines=2, requests=30, deployment=other, seed=4)
    metrics = ServiceMetrics("stream", deployment)
    with structlog.testing.capture_logs() as logs:
        processor = _fold_records(stack, deployment, _records(stray), metrics)
    assert processor.counters.foreign >= len(stray)
    assert processor.counters.folded == 0
    named = [(e["deployment"], e["engine_id"]) for e in logs if e["event"] == "foreign_deployment_events"]
    assert sorted(n for n in named if n[0] == other) == [(other, "eng-0"), (other, "eng-1")]
    exported = [
        sample.value
        for family in metrics.registry.collect()
        if family.name == "governor_foreign_events"
        for sample in family.samples
        if sample.name.endswith("_total")
    ]
    assert sum(exported) == processor.counters.foreign


def _document(deployment: str, version: int, valid_until: float) -> AdmissionPolicy:
    return AdmissionPolicy(
        scope="eng-0",
        deployment=deployment,
        version=version,
        computed_at=0.0,
        valid_until=valid_until,
        inputs=InputsDigest(snapshot_id="sha256:x"),
        payload=AdmissionPayload(pressure=0.2, level="ok", admit_fraction=1.0),
        state=AdmissionState(smoothed_pressure=0.2, level="ok"),
    )


def test_engine_calls_never_raise_when_redis_or_the_broker_stop(tmp_path: Path) -> None:
    own = stack_up(tmp_path, "redis://127.0.0.1:1/0", free_port())
    try:
        assert own.redis_pid is not None
        assert own.broker_pid is not None
        store = RedisStore(redis.Redis.from_url(own.redis_url), "safety")
        store.put_policy("admission", "eng-0", 1, _document("safety", 1, 100.0).model_dump_json())
        client = PolicyClient(own.redis_url, "safety", poll_interval_s=0.05, timeout_s=0.2)
        client.watch("admission", "eng-0")
        deadline = time.monotonic() + 5.0
        while client.current("admission", "eng-0", 1.0) is None and time.monotonic() < deadline:
            time.sleep(0.02)
        cached = client.current("admission", "eng-0", 1.0)
        assert cached is not None
        store.close()

        stop(own.redis_pid)
        time.sleep(0.3)
        assert client.current("admission", "eng-0", 50.0) == cached
        assert client.current("admission", "eng-0", 100.5) is None
        client.refresh()
        assert client.stats().backend_errors >= 1
        client.close()

        publisher = TelemetryPublisher(own.kafka_bootstrap, send_timeout_s=1.0, max_queue=500)
        events = synthetic_stream(engines=1, requests=10, deployment="safety")
        for event in events:
            publisher.publish(event)
        assert publisher.flush(10.0)
        stop(own.broker_pid)
        for _ in range(2000):
            publisher.publish(events[0])
        publisher.close(timeout_s=5.0)
        stats = publisher.stats()
        assert stats.published == len(events) + 2000
        assert stats.dropped > 0
    finally:
        stack_down(tmp_path)


def test_events_of_engines_that_never_registered_make_no_snapshot_and_their_keys_expire(
    stack: StackState, deployment: str
) -> None:
    registered = synthetic_stream(engines=1, requests=120, deployment=deployment, seed=5)
    template = json.loads(encode_event(registered[1]))
    strays = [
        (f"made-up-{i % 40}", json.dumps(template | {"engine_id": f"made-up-{i % 40}", "event_id": f"s{i}"}).encode())
        for i in range(400)
    ]
    _fold_records(stack, deployment, [*_records(registered), *strays])
    scopes = {
        json.loads(value)["scope"]
        for value in read_topic(stack.kafka_bootstrap, ESTIMATES_TOPIC)
        if json.loads(value).get("deployment") == deployment
    }
    assert scopes == {registered[0].engine_id}
    client = redis.Redis.from_url(stack.redis_url)
    stray_ttls = [client.ttl(estimate_key(deployment, f"made-up-{i}", "state")) for i in range(40)]
    registered_ttl = client.ttl(estimate_key(deployment, registered[0].engine_id, "state"))
    client.close()
    assert all(0 < ttl <= UNADMITTED_RETENTION_S for ttl in stray_ttls)
    assert registered_ttl > UNADMITTED_RETENTION_S


def _dead_letters(stack: StackState, deployment: str) -> list[DeadLetter]:
    dead = read_topic(stack.kafka_bootstrap, DEADLETTER_TOPIC)
    return [DeadLetter.model_validate_json(value) for value in dead if deployment.encode() in value]


def test_duplicates_are_skipped_and_an_old_epoch_and_a_far_future_event_are_dead_lettered_with_their_codes(
    stack: StackState, deployment: str, redis_client: redis.Redis
) -> None:
    """One stream carries every case: each event of a slice produced twice (a retried batch), a
    request.arrived 700 s ahead, and after the engine's restart an event of its old epoch."""
    first, restarted, future, stale = restart_case(deployment)
    records = _records([*first, *first[100:140], future, *restarted[:10], stale, *restarted[10:]])
    metrics = ServiceMetrics("stream", deployment)
    processor = _fold_records(stack, deployment, records, metrics)
    counters = processor.counters
    assert (counters.folded, counters.duplicates, counters.restarts) == (len(first) + len(restarted), 40, 1)
    assert sorted(letter.code for letter in _dead_letters(stack, deployment)) == ["event_time_ahead", "stale_epoch"]
    stored = redis_client.get(estimate_key(deployment, "eng-0", SUMMARY_NAME))
    assert isinstance(stored, bytes)
    summary = EngineSummary.model_validate_json(stored)
    assert (summary.duplicate_events, summary.restarts, summary.seq_gaps) == (40, 1, 0)
    assert summary.events_folded == len(first) + len(restarted)


def test_the_engine_publisher_is_idempotent_and_a_batch_sent_twice_folds_once(
    stack: StackState, deployment: str
) -> None:
    """The SDK's producer runs with idempotence on this broker; a batch that reaches the log twice
    anyway (a second producer session resending it) is skipped by the processor."""
    valid = synthetic_stream(engines=2, requests=100, deployment=deployment, seed=8)
    publisher = TelemetryPublisher(stack.kafka_bootstrap)
    for event in valid:
        publisher.publish(event)
    assert publisher.flush(10.0)
    producer = publisher._producer
    assert producer is not None
    assert producer.config["enable_idempotence"]
    publisher.close()
    again = TelemetryPublisher(stack.kafka_bootstrap)
    for event in valid[60:120]:
        again.publish(event)
    assert again.flush(10.0)
    again.close()
    assert (publisher.stats().delivered, again.stats().delivered) == (len(valid), 60)
    processor = _fold_records(stack, deployment, [])
    assert (processor.counters.folded, processor.counters.duplicates) == (len(valid), 60)


def test_a_non_json_policy_key_is_ignored_by_engines_and_overwritten_by_the_policy_service(
    stack: StackState, deployment: str, redis_client: redis.Redis
) -> None:
    """Engines keep the last good document (and say so once); the next decision replaces the bad value above it."""
    store = RedisStore(redis.Redis.from_url(stack.redis_url), deployment)
    for version in (1, 2):
        store.put_policy("admission", "eng-0", version, _document(deployment, version, 1e6).model_dump_json())
    client = PolicyClient(stack.redis_url, deployment, start=False)
    client.watch("admission", "eng-0")
    client.refresh()
    redis_client.set(policy_key(deployment, "admission", "eng-0"), b"\xff\xfe not json")
    with structlog.testing.capture_logs() as logs:
        for _ in range(3):
            client.refresh()
    served = client.current("admission", "eng-0", 10.0)
    assert served is not None
    assert served.version == 2
    assert client.stats().rejected == 3
    assert [e["event"] for e in logs].count("policy_rejected") == 1

    snapshot = admission_snapshot(synthetic_engine_summary(), version=1, ts=10.0, deployment=deployment)
    with structlog.testing.capture_logs() as logs:
        handled = DecisionMaker(default_registry(), store).on_snapshot(snapshot)
    assert [(r.version, r.accepted) for r in handled.records] == [(3, True)]
    assert [e["event"] for e in logs].count("policy_key_unreadable") == 1
    client.refresh()
    replaced = client.current("admission", "eng-0", 10.0)
    assert replaced is not None
    assert (replaced.version, replaced.previous_version) == (3, 2)
    client.close()
    store.close()
