"""Operator controls on the real broker and Redis: a config record, a shadow policy and its report, pin and unpin."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import redis
from kafka import KafkaProducer

from decide.specs import default_registry
from schemas.estimates import EngineSummary, LastStep
from schemas.names import ESTIMATES_TOPIC, estimate_key, policy_key
from schemas.policy_docs import AdmissionPolicy
from schemas.records import DecisionRecord, EstimateSnapshot
from services.cli.main import main
from services.cli.shadow import read_decisions
from services.policy.config import config_digest, read_config
from services.policy.config_records import LIVE, file_record, publish_configs
from services.policy.intake import read_record
from services.policy.pins import SUMMARY_NAME, RedisPins
from services.policy.service import PolicyService
from services.replay.replay import read_topic
from services.sdk.policy_client import PolicyClient
from services.stack.launcher import StackState
from services.store.redis_store import RedisStore
from services.stream.processor import StreamProcessor
from services.testing.models import changed
from services.testing.streams import synthetic_stream
from tests.fixtures import admission_snapshot, synthetic_engine_summary
from tests.integration.publishing import publish_all

pytestmark = pytest.mark.integration

LIVE_CONFIG = '[admission]\napplies_to = { engines = ["eng-0"] }\n'
SHADOW_CONFIG = "[admission]\nkv_comfort_frac = 0.3\nbusy_at = 0.2\noverloaded_at = 0.25\n[slai]\ndelta_lo = 2.0\n"


def _run_policy(stack: StackState, deployment: str, group_id: str | None = None) -> PolicyService:
    store = RedisStore.from_url(stack.redis_url, deployment, 5.0)
    pins = RedisPins.from_url(stack.redis_url, deployment, 5.0)
    service = PolicyService(
        deployment=deployment,
        bootstrap=stack.kafka_bootstrap,
        store=store,
        registry=default_registry(),
        pins=pins,
        group_id=group_id,
    )
    try:
        service.run(idle_exit_s=4.0)
    finally:
        service.close()
        store.close()
        pins.close()
    return service


def _run_stream(stack: StackState, deployment: str) -> None:
    store = RedisStore.from_url(stack.redis_url, deployment, 5.0)
    processor = StreamProcessor(
        deployment=deployment, bootstrap=stack.kafka_bootstrap, store=store, registry=default_registry()
    )
    try:
        processor.run(idle_exit_s=4.0)
    finally:
        processor.close()
        store.close()


def _publish_telemetry(stack: StackState, deployment: str) -> None:
    publish_all(stack.kafka_bootstrap, synthetic_stream(engines=2, requests=300, deployment=deployment))


def _busy_summary() -> EngineSummary:
    """A real folded summary with a short queue and balanced flow."""
    busy = LastStep(running_requests=10, waiting_requests=0, kv_use_frac=0.2, kv_capacity_tokens=1_000_000)
    return changed(
        synthetic_engine_summary(), last_step=busy, arrival_rate_short_per_s=1.0, completion_rate_short_per_s=1.0
    )


def _admission_snapshot(deployment: str, version: int, ts: float, scope: str = "eng-0") -> EstimateSnapshot:
    return admission_snapshot(_busy_summary(), version=version, ts=ts, deployment=deployment, scope=scope)


def _next_snapshot(stack: StackState, deployment: str, ts: float, scope: str = "eng-0") -> EstimateSnapshot:
    """An admission snapshot that continues ``scope``'s snapshots on the log: the next version, one offset on.

    The policy service refuses a snapshot that jumps ahead of the ones it took (services/policy/intake.py).
    """
    taken = [
        snapshot
        for raw in read_topic(stack.kafka_bootstrap, ESTIMATES_TOPIC)
        if isinstance(snapshot := read_record(raw), EstimateSnapshot)
        and (snapshot.deployment, snapshot.scope) == (deployment, scope)
    ]
    last = max(taken, key=lambda snapshot: snapshot.version)
    position = last.offsets[-1]
    return changed(
        _admission_snapshot(deployment, last.version + 1, ts, scope),
        offsets=[changed(position, offset=position.offset + 1)],
    )


def _send_snapshots(stack: StackState, snapshots: list[EstimateSnapshot]) -> None:
    producer = KafkaProducer(bootstrap_servers=stack.kafka_bootstrap)
    try:
        for snapshot in snapshots:
            producer.send(ESTIMATES_TOPIC, key=snapshot.scope.encode(), value=snapshot.model_dump_json().encode())
        producer.flush(timeout=10)
    finally:
        producer.close(timeout=5)


def _stored(redis_client: redis.Redis, deployment: str) -> AdmissionPolicy:
    raw = redis_client.get(policy_key(deployment, "admission", "eng-0"))
    assert isinstance(raw, bytes)
    return AdmissionPolicy.model_validate_json(raw)


def _cli(stack: StackState, deployment: str, *argv: str) -> int:
    flags = ["--deployment", deployment, "--kafka-bootstrap", stack.kafka_bootstrap]
    if argv[0] in ("pin", "unpin"):
        flags += ["--redis-url", stack.redis_url]
    return main([*argv, *flags])


def test_a_config_record_scopes_the_live_policy_and_a_shadow_is_recorded_never_written_and_reported(
    stack: StackState, deployment: str, tmp_path: Path, redis_client: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "live.toml").write_text(LIVE_CONFIG)
    (tmp_path / "candidate.toml").write_text(SHADOW_CONFIG)
    records = [
        file_record(deployment, LIVE, tmp_path / "live.toml"),
        file_record(deployment, "candidate", tmp_path / "candidate.toml"),
    ]
    publish_configs(stack.kafka_bootstrap, records, 10.0)
    _publish_telemetry(stack, deployment)
    _run_stream(stack, deployment)
    service = _run_policy(stack, deployment)
    assert service.counters.configs == 2
    assert service.counters.shadow_decisions > 0

    decisions = read_decisions(stack.kafka_bootstrap, deployment)
    live = [r for r in decisions if r.shadow is None]
    shadow = [r for r in decisions if r.shadow == "candidate"]
    _, live_data = read_config(tmp_path / "live.toml")
    assert {r.config for r in live} == {config_digest(live_data)}
    assert {r.scope for r in live if r.kind == "admission"} == {"eng-0"}  # applies_to: eng-1 gets none
    assert {r.scope for r in shadow if r.kind == "admission"} == {"eng-0", "eng-1"}
    assert not any(r.accepted for r in shadow)
    assert redis_client.get(policy_key(deployment, "admission", "eng-1")) is None
    stored = _stored(redis_client, deployment)
    written = [r for r in live if r.kind == "admission" and r.accepted]
    assert stored.version == written[-1].version
    assert json.loads(stored.model_dump_json()) == written[-1].document

    capsys.readouterr()
    assert _cli(stack, deployment, "shadow", "report", "--json") == 0
    report = json.loads(capsys.readouterr().out)["shadows"][0]
    assert report["shadow"] == "candidate"
    admission = report["kinds"]["admission"]
    assert admission["snapshots"] == sum(1 for r in live if r.kind == "admission")
    assert admission["shadow_only"] == sum(1 for r in shadow if r.kind == "admission" and r.scope == "eng-1")
    assert admission["differ"] == admission["snapshots"]
    assert report["kinds"]["slai"]["differ"] > 0
    assert "delta_lo" in report["kinds"]["slai"]["keys"]

    assert _cli(stack, deployment, "shadow", "stop", "candidate") == 0
    _send_snapshots(
        stack,
        [_next_snapshot(stack, deployment, 100.0), _next_snapshot(stack, deployment, 100.0, "eng-1")],
    )
    after = _run_policy(stack, deployment)  # restarted: resumes with the committed live config
    assert after.shadows == {}
    assert after.counters.shadow_decisions == 0
    assert after.counters.decisions == 1  # eng-0 only: the live applies_to still holds
    last = read_decisions(stack.kafka_bootstrap, deployment)[-1]
    assert (last.scope, last.config, last.shadow) == ("eng-0", config_digest(live_data), None)


def test_reading_the_log_from_the_start_reproduces_every_decision_config_changes_included(
    stack: StackState, deployment: str, tmp_path: Path
) -> None:
    (tmp_path / "live.toml").write_text(LIVE_CONFIG)
    (tmp_path / "candidate.toml").write_text(SHADOW_CONFIG)
    publish_configs(stack.kafka_bootstrap, [file_record(deployment, "candidate", tmp_path / "candidate.toml")], 10.0)
    _publish_telemetry(stack, deployment)
    _run_stream(stack, deployment)
    publish_configs(stack.kafka_bootstrap, [file_record(deployment, LIVE, tmp_path / "live.toml")], 10.0)
    _send_snapshots(stack, [_next_snapshot(stack, deployment, 100.0, scope) for scope in ("eng-0", "eng-1")])
    _run_policy(stack, deployment)
    first = read_decisions(stack.kafka_bootstrap, deployment)
    assert {r.config for r in first if r.shadow is None} == {
        None,
        config_digest(read_config(tmp_path / "live.toml")[1]),
    }

    store = RedisStore.from_url(stack.redis_url, deployment, 5.0)
    try:
        assert store.flush_deployment() > 0
    finally:
        store.close()
    _run_policy(stack, deployment, group_id=f"rebuild-{deployment}")
    second = read_decisions(stack.kafka_bootstrap, deployment)[len(first) :]

    def seen(records: list[DecisionRecord]) -> list[tuple[object, ...]]:
        return [(r.kind, r.scope, r.version, r.accepted, r.config, r.shadow, json.dumps(r.document)) for r in records]

    assert seen(second) == seen(first)


def test_a_pin_is_obeyed_held_against_the_service_recorded_and_released_by_unpin(
    stack: StackState, deployment: str, redis_client: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    _send_snapshots(stack, [_admission_snapshot(deployment, 1, 10.0)])
    _run_policy(stack, deployment)
    before = _stored(redis_client, deployment)
    assert before.payload.admit_fraction == 1.0

    assert _cli(stack, deployment, "pin", "admission", "eng-0", "--set", "admit_fraction=0.1", "--for", "10m") == 0
    assert f"pinned admission eng-0 at version {before.version + 1}" in capsys.readouterr().out
    pinned = _stored(redis_client, deployment)
    assert (pinned.version, pinned.payload.admit_fraction) == (before.version + 1, 0.1)
    client = PolicyClient(stack.redis_url, deployment, poll_interval_s=0.1)
    try:
        client.watch("admission", "eng-0")
        deadline = time.monotonic() + 5.0
        seen = client.current("admission", "eng-0", now_s=20.0)
        while (seen is None or seen.version != pinned.version) and time.monotonic() < deadline:
            time.sleep(0.05)
            seen = client.current("admission", "eng-0", now_s=20.0)
    finally:
        client.close()
    assert seen is not None
    assert seen.version == pinned.version  # the engine obeys the pin like any document

    _send_snapshots(stack, [_admission_snapshot(deployment, 2, 15.0)])
    held = _run_policy(stack, deployment)
    assert held.counters.decisions == 1
    assert _stored(redis_client, deployment) == pinned  # decided, recorded, not written

    assert _cli(stack, deployment, "unpin", "admission", "eng-0") == 0
    assert "unpinned admission eng-0" in capsys.readouterr().out
    assert _cli(stack, deployment, "unpin", "admission", "eng-0") == 1
    _send_snapshots(stack, [_admission_snapshot(deployment, 3, 20.0)])
    _run_policy(stack, deployment)
    released = _stored(redis_client, deployment)
    assert released.version == pinned.version + 1
    assert released.payload.admit_fraction == 1.0

    records: list[DecisionRecord] = read_decisions(stack.kafka_bootstrap, deployment)
    trail = [(r.origin, r.version, r.accepted, r.held_by_pin) for r in records]
    assert trail == [
        ("policy", before.version, True, False),
        ("pin", pinned.version, True, False),
        ("policy", pinned.version + 1, False, True),
        ("unpin", pinned.version, False, False),
        ("policy", pinned.version + 1, True, False),
    ]
    pin_record = records[1].pin
    assert pin_record is not None
    assert (pin_record.values, pin_record.for_s, pin_record.replaced_version) == ({"admit_fraction": 0.1}, 600.0, 1)


def test_a_pin_expires_with_its_duration(stack: StackState, deployment: str) -> None:
    _send_snapshots(stack, [_admission_snapshot(deployment, 1, 10.0)])
    _run_policy(stack, deployment)
    assert _cli(stack, deployment, "pin", "admission", "eng-0", "--set", 'level="busy"', "--for", "1s") == 0
    pins = RedisPins.from_url(stack.redis_url, deployment, 5.0)
    try:
        assert pins.holds("admission", "eng-0")
        deadline = time.monotonic() + 10.0
        while pins.holds("admission", "eng-0") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not pins.holds("admission", "eng-0")
    finally:
        pins.close()


def test_a_pin_is_timed_from_the_engines_latest_event_in_its_summary(
    stack: StackState, deployment: str, redis_client: redis.Redis
) -> None:
    summary = synthetic_engine_summary()
    assert summary.ts_s is not None
    redis_client.set(estimate_key(deployment, "eng-0", SUMMARY_NAME), summary.model_dump_json())
    redis_client.set(estimate_key(deployment, "eng-1", SUMMARY_NAME), b'{"format": 1}')
    pins = RedisPins.from_url(stack.redis_url, deployment, 5.0)
    try:
        assert pins.engine_event_time("eng-0") == summary.ts_s
        assert pins.engine_event_time("eng-1") is None  # a summary it cannot read
        assert pins.engine_event_time("eng-2") is None  # no summary
    finally:
        pins.close()
