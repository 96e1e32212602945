"""The faust-streaming runtime of the stream processor, on the real broker and Redis.

Both runtimes feed the same batch handling (services/stream/batches.py), so they must leave the same
trace: the same estimates and states in Redis, the same snapshots on ``gov.estimates`` and the same
dead letters, for the same records. The faust runtime must also keep the exactly-once effect through
a SIGKILL, a SIGSTOP longer than its session timeout, and a rebalance between two workers; the
reference is the pure fold of the same events in one uninterrupted pass. Records of every bad shape
(on a broker of its own: other tests read the shared topic as JSON) are dead-lettered with their code,
and the event guard (duplicates, restarts, event-time bounds, stale epochs) holds as it does under the
kafka runtime.
"""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path

import pytest
import redis
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from decide.specs import default_registry
from schemas.estimates import EngineSummary
from schemas.events import MAX_EVENT_BYTES, Event, encode_event
from schemas.names import DEADLETTER_TOPIC, ESTIMATES_TOPIC, TELEMETRY_TOPIC, estimate_key
from schemas.records import DeadLetter
from services.settings import LOCAL_BROKER_TIMEOUTS
from services.stack.launcher import StackState, stack_down, stack_up
from services.stack.processes import free_port
from services.store.redis_store import RedisStore
from services.stream.batches import SUMMARY_NAME
from services.stream.faust_runtime import FaustStreamProcessor
from services.testing.streams import restart_case, synthetic_stream
from tests.integration.decision_streams import folded_summaries
from tests.integration.processes import applied_total, start_stream, summaries, wait_until
from tests.integration.publishing import publish_all

pytestmark = [pytest.mark.integration, pytest.mark.slow]

Marks = dict[TopicPartition, int]


def _ends(bootstrap: str, topic: str) -> Marks:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        ends: Marks = consumer.end_offsets(partitions)
    finally:
        consumer.close()
    return ends


def _values_since(bootstrap: str, topic: str, start: Marks) -> list[bytes]:
    """The record values of ``topic`` from ``start`` on, partition by partition, until a second brings none.

    Reading up to the end offsets read once missed the last snapshots of a run here, so it reads until quiet.
    """
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    values: dict[int, list[bytes]] = {tp.partition: [] for tp in start}
    try:
        consumer.assign(list(start))
        for tp, offset in start.items():
            consumer.seek(tp, offset)
        while batch := consumer.poll(timeout_ms=1000):
            for tp, records in batch.items():
                values[tp.partition] += [r.value for r in records if r.value is not None]
    finally:
        consumer.close()
    return [value for partition in sorted(values) for value in values[partition]]


def _snapshots_by_version(bootstrap: str, deployment: str, start: Marks) -> dict[tuple[str, str, int], list[object]]:
    """The deployment's snapshots since ``start``, by (scope, summary type, version), in the order read.

    Each run folds from empty state, so every run takes each of them once; fleet contributions sit in
    their own partition and are numbered by slot, so runs are told apart by version, not by position.
    """
    found: dict[tuple[str, str, int], list[object]] = {}
    for value in _values_since(bootstrap, ESTIMATES_TOPIC, start):
        snapshot = json.loads(value)
        if snapshot["deployment"] == deployment:
            key = (snapshot["scope"], snapshot["estimates"]["summary_type"], snapshot["version"])
            found.setdefault(key, []).append(snapshot)
    return found


def _dead_letters_by_source(bootstrap: str, deployment: str, start: Marks) -> dict[tuple[int, int], list[object]]:
    """The dead letters since ``start`` whose raw record names the deployment, by source (partition, offset)."""
    letters: dict[tuple[int, int], list[object]] = {}
    for value in _values_since(bootstrap, DEADLETTER_TOPIC, start):
        if deployment.encode() in value:
            letter = json.loads(value)
            letters.setdefault((letter["source"]["partition"], letter["source"]["offset"]), []).append(letter)
    return letters


def _publish_with_bad_records(stack: StackState, events: list[Event]) -> int:
    """Produce ``events`` with an invalid copy of every 500th one (``seq`` not a number); return how many are bad.

    The bad records stay JSON objects: other tests read the shared telemetry topic as JSON.
    """
    producer = KafkaProducer(bootstrap_servers=stack.kafka_bootstrap, linger_ms=5)
    bad = 0
    for i, event in enumerate(events):
        raw = encode_event(event)
        producer.send(TELEMETRY_TOPIC, key=event.engine_id.encode(), value=raw)
        if i % 500 == 0:
            invalid = json.loads(raw) | {"seq": "not-a-number"}
            producer.send(TELEMETRY_TOPIC, key=event.engine_id.encode(), value=json.dumps(invalid).encode())
            bad += 1
    producer.flush()
    producer.close()
    return bad


def _fold_until_idle(stack: StackState, deployment: str, log_path: Path, runtime: str) -> None:
    process = start_stream(stack, deployment, log_path, idle_exit_s=4.0, runtime=runtime)
    assert process.wait(timeout=180) == 0, log_path.read_text(errors="replace")[-2000:]


def _folded(log_path: Path) -> int:
    """How many events the processor that wrote ``log_path`` folded (its ``service_stopped`` counters)."""
    found = re.findall(r"StreamCounters\(folded=(\d+)", log_path.read_text(errors="replace"))
    return int(found[-1]) if found else 0


def test_both_runtimes_fold_the_same_records_to_identical_redis_state_snapshots_and_dead_letters(
    stack: StackState, deployment: str, tmp_path: Path
) -> None:
    events = synthetic_stream(engines=3, requests=1500, deployment=deployment, seed=11)
    before = {topic: _ends(stack.kafka_bootstrap, topic) for topic in (ESTIMATES_TOPIC, DEADLETTER_TOPIC)}
    bad = _publish_with_bad_records(stack, events)
    engines = sorted({e.engine_id for e in events})
    store = RedisStore.from_url(stack.redis_url, deployment, 5.0)
    _fold_until_idle(stack, deployment, tmp_path / "kafka.log", "kafka")
    kafka_summaries = summaries(store, deployment, engines)
    kafka_states = store.load_states("stream", engines)
    kafka_offsets = store.applied_offsets("stream")
    assert store.flush_deployment() > 0
    _fold_until_idle(stack, deployment, tmp_path / "faust.log", "faust")

    assert kafka_summaries == folded_summaries(events, deployment)
    assert summaries(store, deployment, engines) == kafka_summaries
    assert store.load_states("stream", engines) == kafka_states
    assert store.applied_offsets("stream") == kafka_offsets

    def snapshots_twice_alike() -> bool:
        found = _snapshots_by_version(stack.kafka_bootstrap, deployment, before[ESTIMATES_TOPIC])
        return sorted({scope for scope, _, _ in found}) == engines and all(
            len(pair) == 2 and pair[0] == pair[1] for pair in found.values()
        )

    wait_until(snapshots_twice_alike, 30.0, "both runtimes' snapshots, identical, on gov.estimates")

    def letters_twice_alike() -> bool:
        letters = _dead_letters_by_source(stack.kafka_bootstrap, deployment, before[DEADLETTER_TOPIC])
        return len(letters) == bad and all(len(pair) == 2 and pair[0] == pair[1] for pair in letters.values())

    wait_until(letters_twice_alike, 30.0, "both runtimes' dead letters, identical, on gov.deadletter")
    store.close()


def test_a_faust_worker_killed_mid_stream_then_restarted_gives_the_uninterrupted_estimates(
    stack: StackState, deployment: str, tmp_path: Path
) -> None:
    events = synthetic_stream(engines=4, requests=5000, deployment=deployment, seed=5)
    publish_all(stack.kafka_bootstrap, events)
    store = RedisStore.from_url(stack.redis_url, deployment, 5.0)
    first = start_stream(stack, deployment, tmp_path / "first.log", runtime="faust")
    wait_until(lambda: applied_total(store) > 0, 90.0, "the first faust worker to commit a batch")
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    second_log = tmp_path / "second.log"
    second = start_stream(stack, deployment, second_log, idle_exit_s=4.0, runtime="faust")
    assert second.wait(timeout=180) == 0
    assert _folded(second_log) > 0
    engines = sorted({e.engine_id for e in events})
    assert summaries(store, deployment, engines) == folded_summaries(events, deployment)
    store.close()


def test_a_faust_worker_stopped_past_its_session_timeout_resumes_without_doubling_or_losing(
    stack: StackState, deployment: str, tmp_path: Path
) -> None:
    """Tansu evicts a silent member after about 60 s, not the session timeout; on Kafka this pause is a rejoin."""
    events = synthetic_stream(engines=4, requests=5000, deployment=deployment, seed=6)
    half = len(events) // 2
    publish_all(stack.kafka_bootstrap, events[:half])
    store = RedisStore.from_url(stack.redis_url, deployment, 5.0)
    worker = start_stream(stack, deployment, tmp_path / "worker.log", idle_exit_s=60.0, runtime="faust")
    wait_until(lambda: applied_total(store) > 0, 90.0, "the faust worker to commit a batch")
    worker.send_signal(signal.SIGSTOP)
    publish_all(stack.kafka_bootstrap, events[half:])
    time.sleep(LOCAL_BROKER_TIMEOUTS.session_timeout_ms / 1000.0 + 3.0)
    worker.send_signal(signal.SIGCONT)
    engines = sorted({e.engine_id for e in events})
    expected = folded_summaries(events, deployment)
    wait_until(lambda: summaries(store, deployment, engines) == expected, 150.0, "the worker to fold every event once")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0
    assert summaries(store, deployment, engines) == expected
    store.close()


def test_two_faust_workers_share_the_stream_and_rebalances_lose_and_double_nothing(
    stack: StackState, deployment: str, tmp_path: Path
) -> None:
    events = synthetic_stream(engines=8, requests=4500, deployment=deployment, seed=8)
    third = len(events) // 3
    engines = sorted({e.engine_id for e in events})
    publish_all(stack.kafka_bootstrap, events[:third])
    store = RedisStore.from_url(stack.redis_url, deployment, 5.0)
    survivor = start_stream(stack, deployment, tmp_path / "survivor.log", idle_exit_s=100.0, runtime="faust")
    joiner = None
    try:
        wait_until(lambda: applied_total(store) > 0, 90.0, "the first faust worker to commit a batch")
        joiner_log = tmp_path / "joiner.log"
        joiner = start_stream(stack, deployment, joiner_log, runtime="faust")
        wait_until(
            lambda: _assigned_some(joiner_log),
            90.0,
            "the second faust worker to get partitions",
        )
        publish_all(stack.kafka_bootstrap, events[third : 2 * third])
        two_thirds = folded_summaries(events[: 2 * third], deployment)
        wait_until(lambda: summaries(store, deployment, engines) == two_thirds, 150.0, "the two workers to fold 2/3")
        joiner.send_signal(signal.SIGTERM)
        assert joiner.wait(timeout=30) == 0
        assert _folded(joiner_log) > 0
        publish_all(stack.kafka_bootstrap, events[2 * third :])
        expected = folded_summaries(events, deployment)
        wait_until(
            lambda: summaries(store, deployment, engines) == expected,
            150.0,
            "the survivor to take the leaver's partitions back and fold every event exactly once",
        )
        survivor.send_signal(signal.SIGTERM)
        assert survivor.wait(timeout=30) == 0
    finally:
        for process in (survivor, joiner):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait(timeout=30)
    store.close()


def _assigned_some(log_path: Path) -> bool:
    """True once the worker logging to ``log_path`` has been assigned at least one partition."""
    for line in log_path.read_text().splitlines():
        if '"partitions_assigned"' in line and json.loads(line).get("partitions"):
            return True
    return False


def _poisoned_stream(deployment: str) -> tuple[list[Event], list[tuple[bytes | None, bytes | None]], list[str]]:
    """Valid events of one engine, with every bad record shape and every case of the event guard among them.

    Two events are left out (a ``seq`` gap); 40 are sent twice; the engine restarts (a new epoch) and
    an event of its old epoch follows; one event lies 700 s ahead.

    Returns the valid events produced, the (key, value) records to produce, and the dead-letter codes expected.
    """
    first, restarted, future, stale = restart_case(deployment)
    wrong_schema = json.loads(encode_event(first[3])) | {"seq": "seven"}
    key = first[0].engine_id.encode()
    poison: list[tuple[bytes | None, bytes | None]] = [
        (key, None),
        (None, b"\xff\xfe not utf-8"),
        (key, b"{not json"),
        (key, encode_event(first[4]) + b" " * MAX_EVENT_BYTES),
        (key, json.dumps(wrong_schema).encode()),
    ]
    events = [*first[:60], *first[62:150], *first[100:140], future, *restarted[:10], stale]
    records = [(e.engine_id.encode(), encode_event(e)) for e in events[:50]] + poison[:3]
    records += [(e.engine_id.encode(), encode_event(e)) for e in events[50:]] + poison[3:]
    records += [(e.engine_id.encode(), encode_event(e)) for e in restarted[10:]]
    codes = ["contract", "event_time_ahead", "no_value", "not_json", "not_json", "oversized", "stale_epoch"]
    return [*first[:60], *first[62:], *restarted], records, codes


def test_a_faust_worker_dead_letters_every_bad_record_shape_keeps_going_and_folds_through_the_event_guard(
    stack: StackState, deployment: str, tmp_path: Path, redis_client: redis.Redis
) -> None:
    valid, records, codes = _poisoned_stream(deployment)
    own = stack_up(tmp_path / "stack", stack.redis_url, free_port())
    try:
        producer = KafkaProducer(bootstrap_servers=own.kafka_bootstrap, linger_ms=5)
        for key, value in records:
            producer.send(TELEMETRY_TOPIC, key=key, value=value)
        producer.flush()
        producer.close()
        store = RedisStore.from_url(stack.redis_url, deployment, 5.0)
        worker = FaustStreamProcessor(
            deployment=deployment, bootstrap=own.kafka_bootstrap, store=store, registry=default_registry()
        )
        counters = worker.run(idle_exit_s=4.0)
        worker.close()
        letters = [
            DeadLetter.model_validate_json(value)
            for value in _values_since(own.kafka_bootstrap, DEADLETTER_TOPIC, _starts(own.kafka_bootstrap))
        ]
        store.close()
    finally:
        stack_down(tmp_path / "stack")
    assert (counters.folded, counters.duplicates, counters.restarts) == (len(valid), 40, 1)
    assert (counters.seq_gaps, counters.seq_missing) == (1, 2)
    assert sorted(letter.code for letter in letters) == codes
    assert {letter.source.topic for letter in letters} == {TELEMETRY_TOPIC}
    stored = redis_client.get(estimate_key(deployment, valid[0].engine_id, SUMMARY_NAME))
    assert isinstance(stored, bytes)
    summary = EngineSummary.model_validate_json(stored)
    assert (summary.duplicate_events, summary.restarts, summary.seq_gaps) == (40, 1, 1)
    assert summary.events_folded == len(valid)


def _starts(bootstrap: str) -> Marks:
    """Offset 0 of every partition of the dead-letter topic."""
    return dict.fromkeys(_ends(bootstrap, DEADLETTER_TOPIC), 0)
