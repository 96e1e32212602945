"""Hostile names, values and records against the real broker and Redis: no engine id, stored value, version or
forged snapshot can stop a service or freeze a policy (docs/contracts.md, "Identifiers and key namespaces",
"Failure behaviour"; docs/security.md, "Snapshots are signed")."""

from __future__ import annotations

import json
import threading
import time

import pytest
import redis
import structlog.testing
from kafka import KafkaProducer

from decide.specs import default_registry
from schemas.errors import BackendUnavailableError, InvalidInputError
from schemas.estimates import FleetSummary
from schemas.events import Event
from schemas.names import (
    DEADLETTER_TOPIC,
    DECISIONS_TOPIC,
    ESTIMATES_TOPIC,
    POLICY_CONSUMER,
    STREAM_CONSUMER,
    TELEMETRY_TOPIC,
    policy_history_key,
    policy_key,
)
from schemas.policy_docs import AdmissionPayload, AdmissionPolicy, AdmissionState, InputsDigest
from schemas.policy_docs.base import MAX_VERSION
from schemas.records import DeadLetter, DecisionRecord, EstimateSnapshot
from schemas.signing import PolicyKeyring, SigningKey, signature_problem
from services.health import HealthServer, ServiceMetrics
from services.policy.decisions import DecisionMaker
from services.policy.handler import config_scope, ledger_scope
from services.policy.intake import SnapshotLedger
from services.policy.service import PolicyService
from services.replay.replay import read_topic
from services.stack.launcher import StackState
from services.store.redis_store import RedisStore
from services.stream.processor import StreamProcessor
from services.testing.streams import synthetic_stream
from tests.fixtures import admission_snapshot, synthetic_engine_summary
from tests.integration.publishing import publish_all

KEYRING = PolicyKeyring(signing=SigningKey("hostile-names", b"the services' shared signing secret"))


def _document(deployment: str, version: int) -> AdmissionPolicy:
    return AdmissionPolicy(
        scope="eng-0",
        deployment=deployment,
        version=version,
        computed_at=0.0,
        valid_until=1e6,
        inputs=InputsDigest(snapshot_id="sha256:x"),
        payload=AdmissionPayload(pressure=0.2, level="ok", admit_fraction=1.0),
        state=AdmissionState(smoothed_pressure=0.2, level="ok"),
    )


def _json(deployment: str, version: float) -> str:
    """A document's JSON carrying ``version`` (the compare-and-set reads the stored value's own version)."""
    return json.dumps(json.loads(_document(deployment, 1).model_dump_json()) | {"version": version})


@pytest.fixture
def store(stack: StackState, deployment: str) -> RedisStore:
    return RedisStore(redis.Redis.from_url(stack.redis_url, socket_timeout=5.0), deployment)


def test_an_engine_named_like_the_policy_services_state_keeps_its_own_key(store: RedisStore) -> None:
    """The probe's engines ``policy-config`` and ``policy-ledger`` overwrote the policy service's committed state."""
    ledger = SnapshotLedger().to_json()
    assert store.commit(POLICY_CONSUMER, {"gov.estimates:0": 3}, {config_scope(0): "{}", ledger_scope(0): ledger}, {})
    engine_states = {"policy-config": '{"engine": 1}', "policy-ledger": '{"engine": 2}'}
    assert store.commit(STREAM_CONSUMER, {"gov.telemetry:0": 9}, engine_states, {})
    assert store.load_states(POLICY_CONSUMER, [config_scope(0), ledger_scope(0)]) == {
        config_scope(0): "{}",
        ledger_scope(0): ledger,
    }
    assert store.load_states(STREAM_CONSUMER, ["policy-config", "policy-ledger"]) == engine_states


def test_engines_named_like_service_state_or_history_keys_stop_nothing(
    stack: StackState, deployment: str, store: RedisStore
) -> None:
    """The probe's engines ``policy-config`` and ``policy-ledger`` crash-looped the stream processor (20 crashes
    in 150 s, nothing folded for any engine); one named ``eng-1:history`` is refused at the edge now."""
    names = {"eng-0": "policy-config", "eng-1": "policy-ledger"}
    events = [
        _moved(e, names[e.engine_id], 0.0) for e in synthetic_stream(engines=2, requests=300, deployment=deployment)
    ]
    publish_all(stack.kafka_bootstrap, events)
    hostile = json.loads(events[0].model_dump_json()) | {"engine_id": "eng-1:history", "event_id": "hostile-1"}
    producer = KafkaProducer(bootstrap_servers=stack.kafka_bootstrap)
    producer.send(TELEMETRY_TOPIC, key=b"eng-1:history", value=json.dumps(hostile).encode()).get(timeout=10.0)
    producer.close()
    for _ in range(2):  # the second run restarts both services from what the first committed
        processor = StreamProcessor(
            deployment=deployment,
            bootstrap=stack.kafka_bootstrap,
            store=store,
            registry=default_registry(),
            group_id=f"stream-{deployment}",
        )
        processor.run(idle_exit_s=4.0)
        processor.close()
        service = PolicyService(
            deployment=deployment,
            bootstrap=stack.kafka_bootstrap,
            store=store,
            registry=default_registry(),
            group_id=f"policy-{deployment}",
        )
        service.run(idle_exit_s=4.0)
        service.close()
        assert processor.counters.states_unreadable == 0
        assert service.counters.states_unreadable == 0
    assert store.estimate_scopes("summary") == ["policy-config", "policy-ledger"]
    assert store.load_states(POLICY_CONSUMER, [config_scope(0), ledger_scope(0)]).keys() == {
        config_scope(0),
        ledger_scope(0),
    }
    assert store.get_policy("admission", "policy-config") is not None
    letters = [
        DeadLetter.model_validate_json(raw)
        for raw in read_topic(stack.kafka_bootstrap, DEADLETTER_TOPIC)
        if b"hostile-1" in raw
    ]
    assert [(letter.code, letter.field) for letter in letters] == [("contract", "engine_id")]


def test_a_policy_key_of_another_type_is_reported_and_overwritten_not_retried_as_an_outage(
    store: RedisStore, deployment: str, redis_client: redis.Redis
) -> None:
    """The probe's engine ``x:history`` made another engine's policy key a list: WRONGTYPE, retried for ever."""
    redis_client.rpush(policy_key(deployment, "admission", "eng-0"), "not a document")
    redis_client.set(policy_history_key(deployment, "admission", "eng-0"), "not a list")
    snapshot = admission_snapshot(synthetic_engine_summary(), version=1, ts=10.0, deployment=deployment)
    with structlog.testing.capture_logs() as logs:
        handled = DecisionMaker(default_registry(), store).on_snapshot(snapshot)
    assert [(r.version, r.accepted) for r in handled.records] == [(1, True)]
    assert [e["event"] for e in logs].count("policy_key_unreadable") == 1
    stored = store.get_policy("admission", "eng-0")
    assert stored is not None
    assert json.loads(stored)["version"] == 1
    assert len(store.policy_history("admission", "eng-0")) == 1


def test_a_huge_stored_version_does_not_freeze_the_policy(
    store: RedisStore, deployment: str, redis_client: redis.Redis
) -> None:
    """An unsigned document with version 2**62 made every later decision look older (doubles in Lua): 10 of 10
    refused. A version past the bound is not a version: the value is replaced by the next decision."""
    forged = json.loads(_document(deployment, 1).model_dump_json()) | {"version": 2**62}
    redis_client.set(policy_key(deployment, "admission", "eng-0"), json.dumps(forged))
    decider = DecisionMaker(default_registry(), store)
    summary = synthetic_engine_summary()
    versions = []
    for version in range(1, 11):
        snapshot = admission_snapshot(summary, version=version, ts=10.0 * version, deployment=deployment)
        versions += [(r.version, r.accepted) for r in decider.on_snapshot(snapshot).records]
    assert versions == [(v, True) for v in range(1, 11)]
    stored = store.get_policy("admission", "eng-0")
    assert stored is not None
    assert json.loads(stored)["version"] == 10


class TestVersionBound:
    """Versions are integers in [0, 2**53 - 1], compared exactly by put_policy.lua."""

    def test_versions_next_to_the_bound_compare_exactly(self, store: RedisStore, deployment: str) -> None:
        for version, written in [
            (MAX_VERSION - 2, True),
            (MAX_VERSION - 1, True),
            (MAX_VERSION - 1, False),
            (MAX_VERSION - 2, False),
            (MAX_VERSION, True),
            (MAX_VERSION, False),
            (MAX_VERSION - 1, False),
        ]:
            assert store.put_policy("admission", "eng-0", version, _json(deployment, version)) is written, version

    def test_zero_is_the_lowest_version(self, store: RedisStore, deployment: str) -> None:
        assert store.put_policy("admission", "eng-0", 0, _json(deployment, 0))
        assert not store.put_policy("admission", "eng-0", 0, _json(deployment, 0))
        assert store.put_policy("admission", "eng-0", 1, _json(deployment, 1))

    @pytest.mark.parametrize("version", [-1, MAX_VERSION + 1, 2**62])
    def test_an_out_of_bound_version_is_refused_at_write(
        self, store: RedisStore, deployment: str, redis_client: redis.Redis, version: int
    ) -> None:
        with pytest.raises(InvalidInputError, match="policy version"):
            store.put_policy("admission", "eng-0", version, _json(deployment, version))
        assert redis_client.exists(policy_key(deployment, "admission", "eng-0")) == 0

    def test_the_script_itself_refuses_an_out_of_bound_version(self, store: RedisStore, deployment: str) -> None:
        """A caller that skips the Python check still cannot store a version Lua cannot compare."""
        keys = [policy_key(deployment, "admission", "eng-0"), policy_history_key(deployment, "admission", "eng-0")]
        with pytest.raises(redis.ResponseError, match="version out of bounds"):
            store._put_policy(keys=keys, args=[MAX_VERSION + 1, "{}", 50, "channel", "{}", MAX_VERSION + 1])

    @pytest.mark.parametrize("stored", [MAX_VERSION + 1, 2**53 + 1, 2**62, -5, 1e308])
    def test_an_out_of_bound_stored_version_counts_as_absent_at_read(
        self, store: RedisStore, deployment: str, redis_client: redis.Redis, stored: float
    ) -> None:
        redis_client.set(policy_key(deployment, "admission", "eng-0"), _json(deployment, stored))
        assert store.put_policy("admission", "eng-0", 1, _json(deployment, 1))


def test_a_forged_snapshot_before_an_engines_first_is_refused_and_the_engine_keeps_being_decided(
    stack: StackState, deployment: str, store: RedisStore
) -> None:
    """The probe's forged snapshot on gov.estimates before an engine's first genuine one froze its policy
    for good, and the policy service signed the decision it made from it."""
    forged = admission_snapshot(synthetic_engine_summary(), version=1_000_000, ts=1.0, deployment=deployment)
    producer = KafkaProducer(bootstrap_servers=stack.kafka_bootstrap)
    producer.send(ESTIMATES_TOPIC, key=b"eng-0", value=forged.model_dump_json().encode()).get(timeout=10.0)
    producer.close()
    publish_all(stack.kafka_bootstrap, synthetic_stream(engines=1, requests=300, deployment=deployment))
    processor = StreamProcessor(
        deployment=deployment,
        bootstrap=stack.kafka_bootstrap,
        store=store,
        registry=default_registry(),
        keyring=KEYRING,
        group_id=f"stream-{deployment}",
    )
    processor.run(idle_exit_s=4.0)
    processor.close()
    service = PolicyService(
        deployment=deployment,
        bootstrap=stack.kafka_bootstrap,
        store=store,
        registry=default_registry(),
        keyring=KEYRING,
        group_id=f"policy-{deployment}",
    )
    service.run(idle_exit_s=4.0)
    service.close()
    assert (service.counters.unsigned, service.counters.inconsistent) == (1, 0)
    decisions = [
        DecisionRecord.model_validate_json(raw)
        for raw in read_topic(stack.kafka_bootstrap, DECISIONS_TOPIC)
        if deployment.encode() in raw
    ]
    assert [d for d in decisions if d.kind == "admission" and d.scope == "eng-0"]
    assert all(d.document["inputs"]["snapshot_id"] != forged.snapshot_id for d in decisions)
    stored = AdmissionPolicy.model_validate_json(store.get_policy("admission", "eng-0") or "")
    assert signature_problem(stored, KEYRING) is None
    letters = [
        DeadLetter.model_validate_json(raw)
        for raw in read_topic(stack.kafka_bootstrap, DEADLETTER_TOPIC)
        if deployment.encode() in raw
    ]
    assert [(letter.field, letter.reason) for letter in letters] == [
        ("signature", "snapshot not validly signed by the stream service (unsigned)")
    ]


class FailingWrites(RedisStore):
    """The real store, but every policy write times out: the batch that decided is retried for ever."""

    def put_policy(self, kind: str, scope: str, version: int, document_json: str) -> bool:
        msg = "redis put_policy failed: Timeout reading from socket"
        raise BackendUnavailableError(msg, backend="redis")


def test_a_policy_service_retrying_the_same_batch_turns_health_red_within_the_bound(
    stack: StackState, deployment: str, store: RedisStore
) -> None:
    """The probe's policy service retried one batch for ever while /healthz said 200: received records
    counted as progress, and the retried batch held the whole backlog, so the lag read 0."""
    publish_all(stack.kafka_bootstrap, synthetic_stream(engines=1, requests=300, deployment=deployment))
    processor = StreamProcessor(
        deployment=deployment,
        bootstrap=stack.kafka_bootstrap,
        store=store,
        registry=default_registry(),
        group_id=f"stream-{deployment}",
    )
    processor.run(idle_exit_s=4.0)
    processor.close()
    metrics = ServiceMetrics("policy", deployment)
    server = HealthServer(metrics, 0, stall_after_s=2.0)
    server.start()
    service = PolicyService(
        deployment=deployment,
        bootstrap=stack.kafka_bootstrap,
        store=FailingWrites(redis.Redis.from_url(stack.redis_url, socket_timeout=5.0), deployment),
        registry=default_registry(),
        metrics=metrics,
        group_id=f"policy-{deployment}",
    )
    thread = threading.Thread(target=service.run, name="policy-under-test")
    thread.start()
    try:
        deadline = time.monotonic() + 60.0
        while metrics.failing_since is None or server.status(ready=True)[0]:
            assert time.monotonic() < deadline, "health stayed green while the batch was retried"
            time.sleep(0.05)
        healthy, body = server.status(ready=False)
        assert not healthy
        assert [p for p in body["problems"] if str(p).startswith("batches failing and retried for")]
        assert service.counters.decisions > 0  # it decided, and keeps failing to write
    finally:
        service.stop()
        thread.join(timeout=30.0)
        service.close()
        server.close()
    assert not thread.is_alive()


def _moved(event: Event, engine_id: str, lead_s: float) -> Event:
    """``event`` as engine ``engine_id`` sent it, ``lead_s`` later (validated again)."""
    body = event.model_dump() | {
        "engine_id": engine_id,
        "ts": event.ts + lead_s,
        "event_id": f"{engine_id}-{event.seq}",
    }
    return type(event).model_validate(body)


def test_an_engine_registered_far_ahead_cannot_take_over_the_fleet(
    stack: StackState, deployment: str, store: RedisStore
) -> None:
    """The probe: a registered ghost engine 70 slots ahead made the real engines silent, got 16 of their
    contributions dropped as late and had FleetOpt plan from the ghost alone. It is quarantined now."""
    slot_s = 10.0
    real = synthetic_stream(engines=7, requests=2100, deployment=deployment, seed=11)
    ghost = [_moved(e, "ghost", 70 * slot_s) for e in synthetic_stream(engines=1, requests=300, deployment=deployment)]
    publish_all(stack.kafka_bootstrap, [*real, *ghost])
    registry = default_registry(fleet_slot_s=slot_s)
    processor = StreamProcessor(
        deployment=deployment,
        bootstrap=stack.kafka_bootstrap,
        store=store,
        registry=registry,
        group_id=f"stream-{deployment}",
    )
    processor.run(idle_exit_s=4.0)
    processor.close()
    with structlog.testing.capture_logs() as logs:
        service = PolicyService(
            deployment=deployment,
            bootstrap=stack.kafka_bootstrap,
            store=store,
            registry=registry,
            fleet_slot_s=slot_s,
            group_id=f"policy-{deployment}",
        )
        service.run(idle_exit_s=4.0)
        service.close()
    fleet = [
        snapshot.estimates
        for raw in read_topic(stack.kafka_bootstrap, ESTIMATES_TOPIC)
        if deployment.encode() in raw
        and (snapshot := EstimateSnapshot.model_validate_json(raw)).scope == "fleet"
        and isinstance(snapshot.estimates, FleetSummary)
    ]
    real_engines = sorted({e.engine_id for e in real})
    last_real_slot = int(max(e.ts for e in real) // slot_s)
    assert fleet
    assert len(fleet) <= last_real_slot + 1
    assert all(summary.engines == real_engines for summary in fleet[1:])
    assert all((summary.silent_engines, summary.late_contributions) == ([], 0) for summary in fleet)
    aggregator = service.handler.decider.aggregators["fleetopt"]
    assert (sorted(aggregator.quarantined), aggregator.late_contributions) == (["ghost"], 0)
    assert aggregator.quarantined_contributions > 0
    assert [e["engine_id"] for e in logs if e["event"] == "engine_quarantined"] == ["ghost"]
