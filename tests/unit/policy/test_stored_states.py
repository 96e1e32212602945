"""The policy service's stored state: apart from every engine's, and read once from the old layout after an upgrade.

Before the service-state namespace the service kept its state under the engines' layout ``gov:{dep}:est:{scope}:state``,
so an engine named ``policy-config``, ``policy-ledger``, ``fleet-fleetopt`` or ``shadow-canary`` and the
service overwrote each other. Every test runs on the in-memory store and on a Redis server of its own.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import redis
import structlog.testing

from decide.specs import default_registry
from schemas.events import Event, encode_event
from schemas.names import (
    ESTIMATES_TOPIC,
    POLICY_CONSUMER,
    STREAM_CONSUMER,
    TELEMETRY_TOPIC,
    legacy_state_key,
    state_key,
)
from services.policy.config_records import config_record
from services.policy.handler import PendingBatch, PolicyHandler, config_scope, ledger_scope
from services.policy.stored_states import load_policy_states
from services.store.memory_store import MemoryStore
from services.store.redis_store import RedisStore
from services.stream.batches import TelemetryBatches
from services.testing.memory_source import MemoryRecord as Record
from services.testing.streams import synthetic_stream
from tests.unit.policy.fakes import ListSink
from tests.unit.stream.fakes import Consumer, KeptProducer

# Each engine is named like one scope of the policy service's own state.
ENGINES = {"eng-0": "policy-config", "eng-1": "policy-ledger", "eng-2": "fleet-fleetopt", "eng-3": "shadow-canary"}
NAMES = sorted(ENGINES.values())
FLEET_SLOT_S = 5.0
LIVE = config_record("dep", "live", {"admission": {"kv_comfort_frac": 0.3}}, "live.toml")
CANARY = config_record("dep", "canary", {"admission": {"kv_comfort_frac": 0.4}}, "canary.toml")


@pytest.fixture(params=["memory", "redis"])
def store(request: pytest.FixtureRequest) -> Iterator[MemoryStore | RedisStore]:
    if request.param == "memory":
        yield MemoryStore()
        return
    own_redis: tuple[str, subprocess.Popen[bytes]] = request.getfixturevalue("own_redis")
    client = redis.Redis.from_url(own_redis[0], socket_timeout=5.0)
    yield RedisStore(client, "dep")
    client.close()


def _renamed(event: Event) -> Event:
    """``event`` as the engine named like a service scope sent it."""
    engine_id = ENGINES[event.engine_id]
    return type(event).model_validate(
        event.model_dump() | {"engine_id": engine_id, "event_id": f"{engine_id}-{event.seq}"}
    )


def _handler(store: MemoryStore | RedisStore) -> PolicyHandler:
    return PolicyHandler(
        deployment="dep",
        store=store,
        registry=default_registry(fleet_slot_s=FLEET_SLOT_S),
        sink=ListSink(),
        fleet_slot_s=FLEET_SLOT_S,
    )


@dataclass
class Fleet:
    """The stream fold of the four engines and the policy handler deciding its snapshots, on one store."""

    store: MemoryStore | RedisStore
    producer: KeptProducer
    batches: TelemetryBatches
    handler: PolicyHandler
    records: list[Record]
    decided: int = 0

    @classmethod
    def on(cls, store: MemoryStore | RedisStore) -> Fleet:
        producer = KeptProducer()
        batches = TelemetryBatches(
            deployment="dep",
            store=store,
            registry=default_registry(fleet_slot_s=FLEET_SLOT_S),
            producer=producer,  # type: ignore[arg-type]
            consumer=Consumer(),
            commit_interval_s=3600.0,
        )
        batches.resume_positions([(TELEMETRY_TOPIC, 0)], 1)
        events = [_renamed(e) for e in synthetic_stream(engines=4, requests=400, deployment="dep", seed=8)]
        records = [
            Record(TELEMETRY_TOPIC, 0, offset, e.engine_id.encode(), encode_event(e)) for offset, e in enumerate(events)
        ]
        return cls(store, producer, batches, _handler(store), records)

    def fold(self, start: int, stop: int) -> None:
        """Fold telemetry records ``start:stop`` and commit the engines' states, as the stream processor does."""
        self.batches.process(self.records[start:stop])
        self.batches.idle()
        assert self.batches.commit()

    def decide(self, configs: list[bytes]) -> dict[str, str]:
        """Decide ``configs`` and every snapshot not decided yet; commit the service's state with its offset."""
        snapshots = [value for topic, value in self.producer.sent if topic == ESTIMATES_TOPIC]
        values = configs + snapshots[self.decided :]
        self.decided = len(snapshots)
        batch = PendingBatch()
        first = max(self.store.applied_offsets(POLICY_CONSUMER).values(), default=-1) + 1
        for offset, value in enumerate(values, start=first):
            self.handler.handle(Record(ESTIMATES_TOPIC, 0, offset, None, value), batch)
        self.handler.apply(batch)
        states = self.handler.states()
        assert self.store.commit(POLICY_CONSUMER, {f"{ESTIMATES_TOPIC}:0": first + len(values) - 1}, states, {})
        return states


def _configs() -> list[bytes]:
    return [LIVE.model_dump_json().encode(), CANARY.model_dump_json().encode()]


def _restored(store: MemoryStore | RedisStore) -> PolicyHandler:
    """A new handler restored as the service restores it on assignment of partition 0 (the ``fleet`` one)."""
    handler = _handler(store)
    handler.restore(load_policy_states(store, handler, [0], store.applied_offsets(POLICY_CONSUMER), 0))
    return handler


class TestEnginesNamedLikeServiceState:
    def test_they_fold_and_are_stored_while_the_policy_services_state_stays_intact(
        self, store: MemoryStore | RedisStore
    ) -> None:
        fleet = Fleet.on(store)
        half = len(fleet.records) // 2
        fleet.fold(0, half)
        service_states = fleet.decide(_configs())
        assert set(NAMES) <= set(service_states)  # every engine id is a scope of the service's own state
        fleet.fold(half, len(fleet.records))  # the engines commit after the service
        assert store.load_states(POLICY_CONSUMER, NAMES) == {name: service_states[name] for name in NAMES}
        engine_states = store.load_states(STREAM_CONSUMER, NAMES)
        assert {name: json.loads(state)["engine_id"] for name, state in engine_states.items()} == {n: n for n in NAMES}
        fleet.decide([])  # and the service commits after the engines
        assert store.load_states(STREAM_CONSUMER, NAMES) == engine_states
        assert store.estimate_scopes("summary") == NAMES
        restarted = _restored(store)
        assert restarted.policy_set(0).digest == LIVE.digest
        assert sorted(restarted.shadows) == ["canary"]
        assert sorted(restarted.decider.aggregators) == ["fleetopt"]
        assert len(restarted.ledger(0)) == len(NAMES)
        assert restarted.counters.states_unreadable == 0

    def test_redis_keeps_them_in_two_namespaces_and_a_flush_removes_both(self, own_redis: tuple[str, object]) -> None:
        client = redis.Redis.from_url(own_redis[0], socket_timeout=5.0)
        store = RedisStore(client, "dep")
        fleet = Fleet.on(store)
        fleet.fold(0, len(fleet.records))
        fleet.decide(_configs())
        for name in NAMES:
            engine = json.loads(client.get(f"gov:dep:est:{name}:state") or b"{}")
            assert engine["engine_id"] == name
            assert client.exists(f"gov:dep:service-state:policy:{name}") == 1
        assert state_key("dep", POLICY_CONSUMER, "policy-ledger") == "gov:dep:service-state:policy:policy-ledger"
        assert store.flush_deployment() > 0
        assert client.keys("gov:dep:*") == []
        client.close()


class TestUpgradeFromTheOldLayout:
    """An upgraded deployment holds the service's state in the old layout, ``gov:{dep}:est:{scope}:state``."""

    def _upgraded(self, store: MemoryStore | RedisStore, states: dict[str, str], offset: int = 99) -> None:
        """Lay ``states`` out as the old release committed them, with the service's applied offset."""
        if isinstance(store, MemoryStore):
            store.states.update(states)
        else:
            for scope, state in states.items():
                store._client.set(legacy_state_key("dep", scope), state)
        assert store.commit(POLICY_CONSUMER, {f"{ESTIMATES_TOPIC}:0": offset}, {}, {})

    def _old_states(self) -> dict[str, str]:
        """The state a service of the old release had committed: configurations, shadow, ledger, aggregator."""
        fleet = Fleet.on(MemoryStore())
        fleet.fold(0, len(fleet.records))
        return fleet.decide(_configs())

    def test_the_first_start_reads_it_once_and_the_next_commit_moves_it(self, store: MemoryStore | RedisStore) -> None:
        old = self._old_states()
        self._upgraded(store, old)
        with structlog.testing.capture_logs() as logs:
            restarted = _restored(store)
        assert [e["scopes"] for e in logs if e["event"] == "service_state_read_from_old_layout"] == [sorted(old)]
        assert restarted.states() == old
        assert restarted.policy_set(0).digest == LIVE.digest
        assert restarted.counters.states_unreadable == 0
        assert store.commit(POLICY_CONSUMER, {f"{ESTIMATES_TOPIC}:0": 100}, restarted.states(), {})
        self._upgraded(store, dict.fromkeys(old, "an engine's state now"), offset=101)
        with structlog.testing.capture_logs() as logs:
            again = _restored(store)
        assert [e for e in logs if e["event"] == "service_state_read_from_old_layout"] == []
        assert again.states() == old
        assert again.counters.states_unreadable == 0

    def test_a_new_deployment_never_reads_an_engines_state_as_the_services(
        self, store: MemoryStore | RedisStore
    ) -> None:
        """No applied offset: the engine ``policy-config``'s state under the old key is the engine's alone."""
        fleet = Fleet.on(store)
        fleet.fold(0, len(fleet.records))
        restarted = _restored(store)
        assert restarted.counters.states_unreadable == 0
        assert restarted.states() == {}

    def test_an_engines_state_that_had_overwritten_the_services_starts_that_part_empty(
        self, store: MemoryStore | RedisStore
    ) -> None:
        old = self._old_states()
        self._upgraded(store, old | {config_scope(0): '{"format": 3, "engine_id": "policy-config"}'})
        restarted = _restored(store)
        assert restarted.policy_set(0).digest == _handler(MemoryStore()).policy_set(0).digest
        assert restarted.counters.states_unreadable > 0
        assert len(restarted.ledger(0)) == len(NAMES)

    def test_a_ledger_a_log_reset_dropped_is_not_read_back_from_the_old_layout(
        self, store: MemoryStore | RedisStore
    ) -> None:
        """After the upgrade, a partition reset on a new log starts its ledger empty even if the old key holds one."""
        old = self._old_states()
        self._upgraded(store, old)
        upgraded = _restored(store)
        assert store.commit(POLICY_CONSUMER, {f"{ESTIMATES_TOPIC}:0": 100}, upgraded.states(), {})
        store.reset_partition(POLICY_CONSUMER, f"{ESTIMATES_TOPIC}:0", "new-log", {}, [ledger_scope(0)])
        assert store.commit(POLICY_CONSUMER, {f"{ESTIMATES_TOPIC}:0": 0}, {}, {})  # the first record of the new log
        restarted = _restored(store)
        assert len(restarted.ledger(0)) == 0
        assert restarted.policy_set(0).digest == LIVE.digest
