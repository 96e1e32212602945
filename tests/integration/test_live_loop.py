"""The live control loop on the real broker and Redis: SDK -> stream processor -> Redis -> policy -> SDK."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from decide.specs import default_registry
from schemas.names import DECISIONS_TOPIC, estimate_key
from services.policy.service import PolicyService
from services.replay.files import read_events
from services.replay.replay import read_topic, replay_events, replay_offline
from services.sdk.policy_client import PolicyClient, acknowledge
from services.sdk.publisher import TelemetryPublisher
from services.stack.launcher import StackState
from services.store.redis_store import RedisStore
from services.stream.processor import StreamProcessor
from services.testing.streams import synthetic_stream
from tests.fixtures import recorded_sim_stream
from tests.integration.publishing import publish_all

pytestmark = pytest.mark.integration


def _publish(stack: StackState, events: list) -> None:
    publish_all(stack.kafka_bootstrap, events)


def _run_stream(stack: StackState, deployment: str, **kwargs: object) -> StreamProcessor:
    store = RedisStore.from_url(stack.redis_url, deployment, 5.0)
    processor = StreamProcessor(
        deployment=deployment, bootstrap=stack.kafka_bootstrap, store=store, registry=default_registry(), **kwargs
    )  # type: ignore[arg-type]
    processor.run(idle_exit_s=4.0)
    processor.close()
    return processor


def _run_policy(stack: StackState, deployment: str) -> PolicyService:
    store = RedisStore.from_url(stack.redis_url, deployment, 5.0)
    service = PolicyService(
        deployment=deployment, bootstrap=stack.kafka_bootstrap, store=store, registry=default_registry()
    )
    service.run(idle_exit_s=4.0)
    service.close()
    return service


def _decisions(stack: StackState, deployment: str) -> list[tuple[str, str, int, str]]:
    found = []
    for value in read_topic(stack.kafka_bootstrap, DECISIONS_TOPIC):
        record = json.loads(value)
        if record["deployment"] == deployment and record["accepted"]:
            found.append(
                (
                    record["kind"],
                    record["scope"],
                    record["version"],
                    json.dumps(record["document"]["payload"], sort_keys=True),
                )
            )
    return found


def test_events_become_estimates_and_a_decision_the_engine_reads_and_acks(stack: StackState, deployment: str) -> None:
    events = synthetic_stream(engines=2, requests=300, deployment=deployment)
    _publish(stack, events)
    processor = _run_stream(stack, deployment)
    assert processor.counters.folded == len(events)
    store = RedisStore.from_url(stack.redis_url, deployment, 5.0)
    summary = json.loads(store._client.get(estimate_key(deployment, "eng-0", "summary")))
    assert summary["completions_total"] == 150
    service = _run_policy(stack, deployment)
    assert service.counters.decisions > 0

    client = PolicyClient(stack.redis_url, deployment, poll_interval_s=0.1)
    client.watch("ebplus", "eng-0")
    deadline = time.monotonic() + 5.0
    document = None
    while document is None and time.monotonic() < deadline:
        document = client.current("ebplus", "eng-0", now_s=events[-1].ts)
        time.sleep(0.05)
    assert document is not None
    assert document.version == 1
    publisher = TelemetryPublisher(stack.kafka_bootstrap)
    acknowledge(publisher, document, engine_id="eng-0", seq=10_000, ts=events[-1].ts, event_id="ack-1")
    assert publisher.flush(10.0)
    publisher.close()
    client.close()
    again = _run_stream(stack, deployment)
    assert again.counters.folded == 1  # only the ack is new: everything else is at or below the applied offsets
    store.close()


def test_live_decisions_equal_the_offline_replay_of_a_recorded_simulator_stream(
    stack: StackState, deployment: str, tmp_path: Path
) -> None:
    events = recorded_sim_stream(tmp_path / "fleet.jsonl.gz", duration_s=40.0, deployment=deployment)
    assert len(events) >= 10_000
    publisher = TelemetryPublisher(stack.kafka_bootstrap, block_when_full=True)  # a tool's publisher: loses nothing
    stats = replay_events(read_events(tmp_path / "fleet.jsonl.gz"), publisher, speed=None)
    assert publisher.flush(120.0)
    publisher.close()
    assert stats.events == len(events)
    assert publisher.stats().dropped == 0
    _run_stream(stack, deployment)
    _run_policy(stack, deployment)
    live = _decisions(stack, deployment)
    offline = replay_offline(events, default_registry())
    expected = [
        (d.kind, d.scope, d.version, json.dumps(d.document["payload"], sort_keys=True))
        for d in offline.decisions
        if d.accepted
    ]
    assert len(expected) > 20
    assert sorted(live) == sorted(expected)


def test_flushing_redis_and_replaying_the_log_rebuilds_identical_estimates_and_policies(
    stack: StackState, deployment: str
) -> None:
    events = synthetic_stream(engines=2, requests=400, deployment=deployment, seed=5)
    _publish(stack, events)
    _run_stream(stack, deployment)
    _run_policy(stack, deployment)
    store = RedisStore.from_url(stack.redis_url, deployment, 5.0)
    keys = [estimate_key(deployment, e, n) for e in ("eng-0", "eng-1") for n in ("summary", "state")]
    before = {k: store._client.get(k) for k in keys}
    policies_before = {k: store.get_policy(k, "eng-0") for k in ("admission", "ebplus")}
    assert store.flush_deployment() > 0
    _run_stream(stack, deployment, group_id=f"rebuild-{deployment}")
    store_after = RedisStore.from_url(stack.redis_url, deployment, 5.0)
    service = PolicyService(
        deployment=deployment,
        bootstrap=stack.kafka_bootstrap,
        store=store_after,
        registry=default_registry(),
        group_id=f"rebuild-policy-{deployment}",
    )
    service.run(idle_exit_s=4.0)
    service.close()
    after = {k: store_after._client.get(k) for k in keys}
    assert after == before
    assert {k: store_after.get_policy(k, "eng-0") for k in ("admission", "ebplus")} == policies_before
    store.close()
    store_after.close()


def test_run_stream_serves_health_in_a_thread(stack: StackState, deployment: str) -> None:
    from services.health import HealthServer, ServiceMetrics

    metrics = ServiceMetrics("stream", deployment)
    server = HealthServer(metrics, 0)
    server.start()
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz", timeout=5) as response:
        body = json.loads(response.read())
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5) as response:
        text = response.read().decode()
    server.close()
    assert body["healthy"] is True
    assert "governor_events_folded_total" in text
