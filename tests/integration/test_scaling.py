"""Both services scale by partitions: two members of each share the work, and a killed one's partitions move.

The stack is private: ``gov.telemetry`` has its 8 partitions and ``gov.estimates`` 4, so the policy
service's members, too, each own partitions (docs/operations.md, "Scaling by partitions"). Eight
numbered engines spread evenly over both topics (services/engine_partitions.py).
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from decide.specs import default_registry
from schemas.names import DECISIONS_TOPIC, ESTIMATES_TOPIC, TELEMETRY_TOPIC, TOPICS
from services.engine_partitions import engine_partition, key_partition
from services.policy.handler import FLEET_SCOPE, PendingBatch, PolicyHandler, config_scope, ledger_scope
from services.replay.replay import read_topic, replay_events, replay_offline
from services.sdk.publisher import TelemetryPublisher
from services.settings import Settings
from services.stack.launcher import BrokerKind, StackState, stack_down, stack_up
from services.stack.processes import free_port
from services.store.redis_store import RedisStore
from services.testing.memory_source import MemoryRecord as Record
from services.testing.streams import synthetic_stream
from tests.fixtures import admission_snapshot, synthetic_engine_summary
from tests.integration.processes import applied_total, start_service, summaries, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ESTIMATES_PARTITIONS = 4
SCALED_TOPICS = tuple(
    replace(topic, partitions=ESTIMATES_PARTITIONS) if topic.name == ESTIMATES_TOPIC else topic for topic in TOPICS
)
TELEMETRY_PARTITIONS = next(topic.partitions for topic in TOPICS if topic.name == TELEMETRY_TOPIC)
FEED_S = 20.0  # the telemetry arrives over this long, while members are killed
SERVICES = ("stream", "policy")


@pytest.fixture(scope="module")
def scaled_stack(tmp_path_factory: pytest.TempPathFactory, broker: BrokerKind) -> Iterator[StackState]:
    """A private stack, on the broker ``GOVERNOR_BROKER`` names, whose ``gov.estimates`` has several partitions."""
    state_dir = tmp_path_factory.mktemp("scaled-stack")
    state = stack_up(state_dir, Settings.load({}).redis_url, free_port(), topics=SCALED_TOPICS, broker=broker)
    yield state
    stack_down(state_dir)


@pytest.fixture
def scaled_deployment(scaled_stack: StackState) -> Iterator[str]:
    """A deployment name unique to the test; its Redis keys are removed after."""
    name = f"test-{uuid.uuid4().hex[:10]}"
    yield name
    store = RedisStore.from_url(scaled_stack.redis_url, name, 5.0)
    store.flush_deployment()
    store.close()


class _MemberLog:
    """One member's JSON log lines, read again on every call."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def lines(self) -> list[dict[str, object]]:
        found = []
        for line in self.path.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                found.append(json.loads(line))
        return found

    def assignments(self) -> list[list[int]]:
        return [list(line["partitions"]) for line in self.lines() if line.get("event") == "partitions_assigned"]  # type: ignore[call-overload]

    def holds(self) -> list[int]:
        assigned = self.assignments()
        return assigned[-1] if assigned else []

    def decided_outside_its_partitions(self) -> list[str]:
        """Each decision this member logged whose scope is not on a partition it held at the time."""
        held: set[int] = set()
        strays = []
        for line in self.lines():
            if line.get("event") == "partitions_assigned":
                held = set(line["partitions"])  # type: ignore[call-overload]
            elif line.get("event") == "policy_decided":
                scope = str(line["scope"])
                partition = key_partition(scope.encode(), ESTIMATES_PARTITIONS)
                if partition not in held:
                    strays.append(f"{line['kind']}:{scope} v{line['version']} on partition {partition}, held {held}")
        return strays

    def decided(self, scope: str) -> int:
        return sum(1 for line in self.lines() if line.get("event") == "policy_decided" and line["scope"] == scope)


def _start(stack: StackState, service: str, deployment: str, path: Path) -> subprocess.Popen[bytes]:
    return start_service(stack, service, deployment, path, extra=["--log-format", "json"])


def _accepted(bootstrap: str, deployment: str) -> dict[tuple[str, str, int], set[str]]:
    """The payloads of every accepted policy decision, by (kind, scope, version)."""
    found: dict[tuple[str, str, int], set[str]] = {}
    for value in read_topic(bootstrap, DECISIONS_TOPIC):
        record = json.loads(value)
        if record["deployment"] == deployment and record["accepted"] and record.get("origin", "policy") == "policy":
            key = (record["kind"], record["scope"], record["version"])
            found.setdefault(key, set()).add(json.dumps(record["document"]["payload"]))
    return found


def test_a_member_of_each_service_killed_mid_stream_leaves_the_uninterrupted_estimates_and_decisions(
    scaled_stack: StackState, scaled_deployment: str, tmp_path: Path
) -> None:
    stack, deployment = scaled_stack, scaled_deployment
    events = synthetic_stream(engines=8, requests=6000, deployment=deployment, seed=16)
    engines = sorted({e.engine_id for e in events})
    assert sorted(engine_partition(e, TELEMETRY_PARTITIONS) for e in engines) == list(range(TELEMETRY_PARTITIONS))
    offline = replay_offline(events, default_registry())
    expected = {engine: json.loads(offline.folder.summary_json(engine)) for engine in engines}
    decisions = {
        (d.kind, d.scope, d.version): {json.dumps(d.document["payload"])} for d in offline.decisions if d.accepted
    }
    assert any(scope == FLEET_SCOPE for _, scope, _ in decisions)
    logs = {(name, n): _MemberLog(tmp_path / f"{name}-{n}.log") for name in SERVICES for n in (0, 1)}
    members = {key: _start(stack, key[0], deployment, log.path) for key, log in logs.items()}
    publisher = TelemetryPublisher(stack.kafka_bootstrap, block_when_full=True)
    speed = (events[-1].ts - events[0].ts) / FEED_S
    feeding = threading.Thread(target=replay_events, args=(events, publisher), kwargs={"speed": speed})
    store = RedisStore.from_url(stack.redis_url, deployment, 5.0)
    try:
        for name, partitions in (("stream", TELEMETRY_PARTITIONS), ("policy", ESTIMATES_PARTITIONS)):
            wait_until(
                lambda name=name, partitions=partitions: (
                    all(logs[(name, n)].holds() for n in (0, 1))
                    and sorted(logs[(name, 0)].holds() + logs[(name, 1)].holds()) == list(range(partitions))
                ),
                120.0,
                f"both {name} members to share the {partitions} partitions",
            )
        feeding.start()
        wait_until(lambda: applied_total(store) > len(events) // 4, 60.0, "a quarter of the telemetry to be folded")
        fleet_partition = key_partition(FLEET_SCOPE.encode(), ESTIMATES_PARTITIONS)
        victims = {"stream": 0, "policy": next(n for n in (0, 1) if fleet_partition in logs[("policy", n)].holds())}
        for name, n in victims.items():
            members[(name, n)].send_signal(signal.SIGKILL)
            members[(name, n)].wait(timeout=10)
        killed_at = applied_total(store)
        assert 0 < killed_at < len(events)
        for name, partitions in (("stream", TELEMETRY_PARTITIONS), ("policy", ESTIMATES_PARTITIONS)):
            survivor = logs[(name, 1 - victims[name])]
            wait_until(
                lambda survivor=survivor, partitions=partitions: survivor.holds() == list(range(partitions)),
                90.0,
                f"the surviving {name} member to take every partition",
            )
        feeding.join(timeout=120)
        assert publisher.flush(60.0)
        publisher.close()
        wait_until(lambda: summaries(store, deployment, engines) == expected, 120.0, "every event folded exactly once")
        wait_until(
            lambda: sorted(_accepted(stack.kafka_bootstrap, deployment)) == sorted(decisions),
            120.0,
            "every decision version to be made",
        )
    finally:
        store.close()
        for process in members.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=30)
        if feeding.is_alive():
            feeding.join(timeout=120)
    accepted = _accepted(stack.kafka_bootstrap, deployment)
    assert {key: payloads for key, payloads in accepted.items() if payloads != decisions[key]} == {}
    for key, log in logs.items():
        if key[0] == "policy":
            assert log.decided_outside_its_partitions() == []
    fleet_deciders = [n for n in (0, 1) if logs[("policy", n)].decided(FLEET_SCOPE)]
    assert fleet_deciders, "no member decided the fleet"


class _Sink:
    def send(self, topic: str, key: bytes | None, value: bytes) -> None:
        """Records are not what this test looks at."""


def _decide(handler: PolicyHandler, partition: int, offsets_versions: list[tuple[int, int]]) -> PendingBatch:
    batch = PendingBatch()
    for offset, version in offsets_versions:
        snapshot = admission_snapshot(synthetic_engine_summary(), version=version, ts=5.0 * version, scope="eng-1")
        handler.handle(Record(ESTIMATES_TOPIC, partition, offset, b"eng-1", snapshot.model_dump_json().encode()), batch)
        batch.offsets[f"{ESTIMATES_TOPIC}:{partition}"] = offset
    handler.apply(batch)
    return batch


def test_a_stale_member_writes_nothing_after_its_partition_moved(
    scaled_stack: StackState, scaled_deployment: str
) -> None:
    """The member that lost partition 1 in a rebalance (and has not noticed) commits and decides nothing there."""
    store = RedisStore.from_url(scaled_stack.redis_url, scaled_deployment, 5.0)
    partition = engine_partition("eng-1", ESTIMATES_PARTITIONS)
    field_name = f"{ESTIMATES_TOPIC}:{partition}"
    try:
        stale = PolicyHandler(deployment=scaled_deployment, store=store, registry=default_registry(), sink=_Sink())
        batch = _decide(stale, partition, [(0, 1), (1, 2), (2, 3)])
        assert store.commit("policy", batch.offsets, stale.states(), {})
        owner = PolicyHandler(deployment=scaled_deployment, store=store, registry=default_registry(), sink=_Sink())
        owner.restore(store.load_states("policy", [config_scope(partition), ledger_scope(partition)]))
        batch = _decide(owner, partition, [(3, 4), (4, 5)])
        assert store.commit("policy", batch.offsets, owner.states(), {})
        ledger_after_owner = store.load_states("policy", [ledger_scope(partition)])
        document_after_owner = store.get_policy("admission", "eng-1")

        batch = _decide(stale, partition, [(3, 4)])
        assert not batch.writes  # snapshot 4 was decided already: nothing to write over the owner's newer document
        assert not store.commit("policy", batch.offsets, stale.states(), {})
        assert store.load_states("policy", [ledger_scope(partition)]) == ledger_after_owner
        assert store.get_policy("admission", "eng-1") == document_after_owner
        assert store.applied_offsets("policy")[field_name] == 4
    finally:
        store.close()
