"""services/policy/handler.py: no record of any shape stops the policy service or freezes a scope.

The handler runs on a real in-memory store (the compare-and-set rules of Redis) and a sink that keeps
what it is given; the integration tests run the same code against the broker and Redis.
"""

from __future__ import annotations

import json

import pytest
import structlog
import structlog.testing
from hypothesis import given
from hypothesis import strategies as st

from decide.specs import default_registry
from schemas.estimates import FleetContribution
from schemas.events import encode_event
from schemas.names import DEADLETTER_TOPIC, DECISIONS_TOPIC, ESTIMATES_TOPIC, TELEMETRY_TOPIC
from schemas.policy_docs import AdmissionPolicy
from schemas.records import DeadLetter, DecisionRecord, EstimateSnapshot
from schemas.signing import PolicyKeyring, SigningKey, sign_snapshot, signature_problem, snapshot_signature_problem
from services.policy.config_records import config_record
from services.policy.handler import (
    CONFIG_STATE_SCOPE,
    LEDGER_STATE_SCOPE,
    PendingBatch,
    PolicyHandler,
    config_scope,
    ledger_scope,
    partition_scope,
    scope_parts,
)
from services.store.memory_store import MemoryStore
from services.stream.batches import TelemetryBatches
from services.testing.memory_source import MemoryRecord as Record
from services.testing.streams import synthetic_stream
from tests.fixtures import admission_snapshot, synthetic_engine_summary
from tests.unit.policy.fakes import ListSink
from tests.unit.stream.fakes import Consumer, KeptProducer

SUMMARY = synthetic_engine_summary()


def _handler(store: MemoryStore, sink: ListSink) -> PolicyHandler:
    return PolicyHandler(deployment="dep", store=store, registry=default_registry(), sink=sink)


def _snapshot(version: int, *, ts: float | None = None, deployment: str = "dep") -> EstimateSnapshot:
    return admission_snapshot(SUMMARY, version=version, ts=ts or 5.0 * version, deployment=deployment)


def _handle(handler: PolicyHandler, values: list[bytes | None]) -> PendingBatch:
    """Handle ``values`` as consecutive records of partition 0, then write what they decided."""
    batch = PendingBatch()
    for offset, value in enumerate(values):
        handler.handle(Record(ESTIMATES_TOPIC, 0, offset, b"eng-0", value), batch)
    handler.apply(batch)
    return batch


def _decided(sink: ListSink) -> list[tuple[int, bool]]:
    records = [DecisionRecord.model_validate_json(value) for value in sink.on(DECISIONS_TOPIC)]
    return [(record.version, record.accepted) for record in records]


class TestForgedSnapshots:
    def test_a_forged_high_version_is_dead_lettered_and_the_engine_keeps_being_decided(self) -> None:
        store, sink = MemoryStore(), ListSink()
        handler = _handler(store, sink)
        forged = _snapshot(1_000_000_000, ts=12.0)
        _handle(handler, [_snapshot(1).model_dump_json().encode(), forged.model_dump_json().encode()])
        _handle(handler, [_snapshot(v).model_dump_json().encode() for v in (2, 3)])
        assert _decided(sink) == [(1, True), (2, True), (3, True)]
        letters = [DeadLetter.model_validate_json(value) for value in sink.on(DEADLETTER_TOPIC)]
        assert [(letter.reason, letter.source.offset) for letter in letters] == [
            ("snapshot version gap for eng-0: 1000000000 after 1", 1)
        ]
        assert handler.counters.inconsistent == 1

    def test_records_of_another_deployment_are_counted_not_decided_nor_dead_lettered(self) -> None:
        store, sink = MemoryStore(), ListSink()
        handler = _handler(store, sink)
        with structlog.testing.capture_logs() as logs:
            _handle(handler, [_snapshot(v, deployment="other").model_dump_json().encode() for v in (1, 2)])
        assert sink.sent == []
        assert handler.counters.foreign == 2
        assert [e["deployment"] for e in logs if e["event"] == "foreign_deployment_records"] == ["other"]


class TestUnreadablePolicyKey:
    def test_a_non_json_value_in_the_key_is_reported_and_overwritten(self) -> None:
        store, sink = MemoryStore(), ListSink()
        store.policies[("admission", "eng-0")] = "not json {"
        handler = _handler(store, sink)
        with structlog.testing.capture_logs() as logs:
            _handle(handler, [_snapshot(v).model_dump_json().encode() for v in (1, 2)])
        assert _decided(sink) == [(1, True), (2, True)]
        assert json.loads(store.policies[("admission", "eng-0")])["version"] == 2
        unreadable = [e for e in logs if e["event"] == "policy_key_unreadable"]
        assert [(e["kind"], e["scope"], e["action"]) for e in unreadable] == [("admission", "eng-0", "overwrite")]

    def test_after_garbage_the_next_decision_builds_on_the_last_good_document_of_the_history(self) -> None:
        """Engines cached the last good version; the replacement is numbered above it, so they take it."""
        store, sink = MemoryStore(), ListSink()
        handler = _handler(store, sink)
        _handle(handler, [_snapshot(v).model_dump_json().encode() for v in (1, 2)])
        store.policies[("admission", "eng-0")] = "\x00garbage"
        _handle(handler, [_snapshot(3).model_dump_json().encode()])
        stored = json.loads(store.policies[("admission", "eng-0")])
        assert (stored["version"], stored["previous_version"]) == (3, 2)

    def test_a_value_with_a_version_but_no_valid_document_is_replaced_by_a_version_above_it(self) -> None:
        store, sink = MemoryStore(), ListSink()
        store.policies[("admission", "eng-0")] = json.dumps({"version": 41, "payload": "junk"})
        _handle(_handler(store, sink), [_snapshot(1).model_dump_json().encode()])
        assert _decided(sink) == [(42, True)]


class TestOutboxStaging:
    def test_decisions_are_written_only_by_apply_and_later_snapshots_build_on_staged_ones(self) -> None:
        store, sink = MemoryStore(), ListSink()
        handler = _handler(store, sink)
        batch = PendingBatch()
        for offset, version in enumerate((1, 2)):
            value = _snapshot(version).model_dump_json().encode()
            handler.handle(Record(ESTIMATES_TOPIC, 0, offset, b"eng-0", value), batch)
        assert store.policies == {}
        assert [(w.version, w.record.version) for w in batch.writes] == [(1, 1), (2, 2)]
        handler.apply(batch)
        assert json.loads(store.policies[("admission", "eng-0")])["version"] == 2
        assert [json.loads(doc)["version"] for doc in store.policy_history("admission", "eng-0")] == [2, 1]


record_shapes = st.one_of(
    st.none(),
    st.binary(max_size=300),
    st.text(max_size=200).map(str.encode),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
        lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
        max_leaves=12,
    ).map(lambda body: json.dumps(body).encode()),
    st.fixed_dictionaries(
        {
            "record_type": st.sampled_from(["estimate_snapshot", "policy_config", "decision", "x"]),
            "deployment": st.sampled_from(["dep", "other", "", "x" * 300]),
            "scope": st.sampled_from(["eng-0", "fleet", ""]),
            "version": st.integers(min_value=-5, max_value=2**70),
            "trigger": st.sampled_from(["admission:every 5s", "fleetopt:contribution", "nope", ""]),
            "name": st.sampled_from(["live", "shadow-a"]),
            "config": st.sampled_from([None, {}, {"admission": {"nope": 1}}, "x"]),
        }
    ).map(lambda body: json.dumps(body).encode()),
    st.builds(
        lambda version, ts, offset: json.dumps(
            {
                **json.loads(_snapshot(1).model_dump_json()),
                "version": version,
                "ts": ts,
                "offsets": [{"topic": "gov.telemetry", "partition": 0, "offset": offset}],
            }
        ).encode(),
        st.integers(min_value=1, max_value=2**40),
        st.floats(min_value=0.0, max_value=1e12),
        st.integers(min_value=0, max_value=2**40),
    ),
)


@given(values=st.lists(record_shapes, min_size=1, max_size=12))
def test_any_record_shape_never_raises_and_what_is_refused_is_dead_lettered_with_a_reason(
    values: list[bytes | None],
) -> None:
    store, sink = MemoryStore(), ListSink()
    handler = _handler(store, sink)
    _handle(handler, values)
    letters = [DeadLetter.model_validate_json(value) for value in sink.on(DEADLETTER_TOPIC)]
    assert len(letters) == handler.counters.dead_lettered
    assert all(letter.reason for letter in letters)
    counted = handler.counters
    taken = counted.snapshots + counted.foreign + counted.configs + counted.configs_invalid
    assert taken + counted.invalid + counted.inconsistent == len(values)
    assert counted.invalid + counted.inconsistent <= counted.dead_lettered


class TestFleetContributionsBesideTheLedger:
    def test_engine_snapshots_and_late_fleet_contributions_from_the_processor_are_all_taken(self) -> None:
        """The processor holds contributions back and sends them on the fleet partition, after the engine's
        later snapshots: none of that may look like a version gap or an old replay to the ledger."""
        producer = KeptProducer()
        batches = TelemetryBatches(
            deployment="dep",
            store=MemoryStore(),
            registry=default_registry(fleet_slot_s=5.0),
            producer=producer,
            consumer=Consumer(),
            commit_interval_s=3600.0,
        )
        batches.resume_positions([(TELEMETRY_TOPIC, 0)], 1)
        events = synthetic_stream(engines=2, requests=600, deployment="dep", seed=8)
        records = [
            Record(TELEMETRY_TOPIC, 0, offset, e.engine_id.encode(), encode_event(e)) for offset, e in enumerate(events)
        ]
        for start in range(0, len(records), 300):
            batches.process(records[start : start + 300])
        batches.idle()
        store, sink = MemoryStore(), ListSink()
        handler = _handler(store, sink)
        batch = PendingBatch()
        snapshots = [value for topic, value in producer.sent if topic == ESTIMATES_TOPIC]
        assert any(b"fleet_contribution" in value for value in snapshots)
        for offset, value in enumerate(snapshots):
            handler.handle(Record(ESTIMATES_TOPIC, 0, offset, None, value), batch)
        assert handler.counters.inconsistent == 0
        assert sink.on(DEADLETTER_TOPIC) == []


class TestPartitionedState:
    """Members of one group each commit the state of their own ``gov.estimates`` partitions only."""

    def _on(self, handler: PolicyHandler, partition: int, scope: str, versions: range) -> None:
        batch = PendingBatch()
        for offset, version in enumerate(versions):
            snapshot = admission_snapshot(SUMMARY, version=version, ts=5.0 * version, scope=scope)
            handler.handle(
                Record(ESTIMATES_TOPIC, partition, offset, scope.encode(), snapshot.model_dump_json().encode()), batch
            )
        handler.apply(batch)

    def test_each_partition_has_its_own_ledger_scope_and_partition_zero_keeps_the_old_name(self) -> None:
        handler = _handler(MemoryStore(), ListSink())
        self._on(handler, 0, "eng-0", range(1, 4))
        self._on(handler, 3, "eng-3", range(1, 3))
        states = handler.states()
        assert {scope for scope in states if scope.startswith(LEDGER_STATE_SCOPE)} == {
            LEDGER_STATE_SCOPE,
            ledger_scope(3),
        }
        assert "eng-3" not in states[LEDGER_STATE_SCOPE]
        assert "eng-0" not in states[ledger_scope(3)]

    def test_a_member_restored_with_its_partitions_states_forgets_the_others_and_writes_none_of_them(self) -> None:
        store = MemoryStore()
        first = _handler(store, ListSink())
        self._on(first, 0, "eng-0", range(1, 4))
        self._on(first, 3, "eng-3", range(1, 3))
        states = first.states()
        second = _handler(store, ListSink())
        second.restore({scope: state for scope, state in states.items() if scope.endswith(":3")})
        assert second.partitions() == [3]
        assert not {LEDGER_STATE_SCOPE, CONFIG_STATE_SCOPE} & set(second.states())
        sink = ListSink()
        second._sink = sink
        self._on(second, 3, "eng-3", range(2, 4))  # a replayed snapshot and the next one
        assert _decided(sink) == [(3, True)]
        assert sink.on(DEADLETTER_TOPIC) == []

    def test_a_configuration_decides_the_partition_whose_log_carries_it_from_its_position_on(self) -> None:
        handler = _handler(MemoryStore(), ListSink())
        default_digest = handler.policy_set(3).digest
        live = config_record("dep", "live", {"admission": {"kv_comfort_frac": 0.3}}, "live.toml")
        handler.handle(Record(ESTIMATES_TOPIC, 0, 0, b"config", live.model_dump_json().encode()), PendingBatch())
        assert handler.policy_set(0).digest == live.digest != default_digest
        assert handler.policy_set(3).digest == default_digest  # partition 3's copy is not read yet
        states = handler.states()
        restarted = _handler(MemoryStore(), ListSink())
        restarted.restore(states)
        assert (restarted.policy_set(0).digest, restarted.policy_set(3).digest) == (live.digest, default_digest)
        assert config_scope(3) == f"{CONFIG_STATE_SCOPE}:3"

    def test_a_configuration_restored_at_a_reassignment_is_not_counted_again(self) -> None:
        """Kafka may rebalance a member that keeps its partitions; it restores their configs, read once."""
        handler = _handler(MemoryStore(), ListSink())
        live = config_record("dep", "live", {"admission": {"kv_comfort_frac": 0.3}}, "live.toml")
        handler.handle(Record(ESTIMATES_TOPIC, 0, 0, b"config", live.model_dump_json().encode()), PendingBatch())
        handler.state_scopes(handler.states(), fleet_partition=0)
        handler.restore(handler.states())
        assert handler.counters.configs == 1
        assert handler.policy_set(0).digest == live.digest


class TestUnreadableServiceState:
    @pytest.mark.parametrize("garbage", ["not json", "[1, 2]", '{"format": 3, "engine_id": "policy-config"}'])
    def test_a_stored_state_that_cannot_be_read_starts_that_part_empty_and_is_reported(self, garbage: str) -> None:
        """An engine's estimates once landed on the service's keys; restoring must not crash-loop on them."""
        handler = _handler(MemoryStore(), ListSink())
        states = {config_scope(0): garbage, ledger_scope(0): garbage, "fleet-fleetopt": garbage}
        with structlog.testing.capture_logs() as logs:
            handler.restore(states)
        assert handler.counters.states_unreadable == 3
        assert sorted(e["scope"] for e in logs if e["event"] == "stored_state_unreadable") == sorted(states)
        assert handler.policy_set(0).digest == _handler(MemoryStore(), ListSink()).policy_set(0).digest
        assert len(handler.ledger(0)) == 0
        assert handler.decider.aggregators == {}


KEYRING = PolicyKeyring(signing=SigningKey("k1", b"a shared secret of the services"))
OTHER_KEYRING = PolicyKeyring(signing=SigningKey("k1", b"a secret the services do not hold"))


class TestSignedSnapshots:
    """Snapshots are taken only from the stream processor (signed with the services' key), from the first on."""

    @staticmethod
    def _signed_handler(sink: ListSink) -> PolicyHandler:
        return PolicyHandler(
            deployment="dep", store=MemoryStore(), registry=default_registry(), sink=sink, keyring=KEYRING
        )

    @pytest.mark.parametrize(
        ("forged", "reason"),
        [
            (_snapshot(1_000), "unsigned"),
            (sign_snapshot(_snapshot(1_000), OTHER_KEYRING.signing, "stream"), "bad_mac"),
            (sign_snapshot(_snapshot(1_000), KEYRING.signing, "policy"), "foreign_producer"),
            (sign_snapshot(_snapshot(1_000), SigningKey("k9", b"x"), "stream"), "unknown_key"),
        ],
    )
    def test_a_forged_first_snapshot_is_dead_lettered_and_nothing_is_decided_or_signed_from_it(
        self, forged: EstimateSnapshot, reason: str
    ) -> None:
        """The probe's forged snapshot before an engine's first genuine one froze its policy for good
        (0 SLAI decisions in 30,000 events), and the service signed the decision made from it."""
        sink = ListSink()
        handler = self._signed_handler(sink)
        _handle(handler, [forged.model_dump_json().encode()])
        assert sink.on(DECISIONS_TOPIC) == []
        letters = [DeadLetter.model_validate_json(value) for value in sink.on(DEADLETTER_TOPIC)]
        assert [(letter.reason, letter.field) for letter in letters] == [
            (f"snapshot not validly signed by the stream service ({reason})", "signature")
        ]
        assert (handler.counters.unsigned, len(handler.ledger(0))) == (1, 0)
        _handle(
            handler, [sign_snapshot(_snapshot(v), KEYRING.signing, "stream").model_dump_json().encode() for v in (1, 2)]
        )
        assert _decided(sink) == [(1, True), (2, True)]
        documents = [DecisionRecord.model_validate_json(value).document for value in sink.on(DECISIONS_TOPIC)]
        assert all(signature_problem(AdmissionPolicy.model_validate(d), KEYRING) is None for d in documents)

    def test_without_a_key_unsigned_snapshots_are_taken_as_before(self) -> None:
        sink = ListSink()
        _handle(_handler(MemoryStore(), sink), [_snapshot(1).model_dump_json().encode()])
        assert _decided(sink) == [(1, True)]

    def test_the_stream_processor_signs_every_snapshot_it_sends(self) -> None:
        producer = KeptProducer()
        batches = TelemetryBatches(
            deployment="dep",
            store=MemoryStore(),
            registry=default_registry(),
            producer=producer,  # type: ignore[arg-type]
            consumer=Consumer(),
            commit_interval_s=3600.0,
            keyring=KEYRING,
        )
        batches.resume_positions([(TELEMETRY_TOPIC, 0)], 1)
        events = synthetic_stream(engines=1, requests=200, deployment="dep", seed=2)
        batches.process(
            [Record(TELEMETRY_TOPIC, 0, o, e.engine_id.encode(), encode_event(e)) for o, e in enumerate(events)]
        )
        sent = [EstimateSnapshot.model_validate_json(v) for topic, v in producer.sent if topic == ESTIMATES_TOPIC]
        assert sent
        assert {snapshot_signature_problem(s, KEYRING, "stream") for s in sent} == {None}


class TestFleetSilenceDeclarations:
    """The fleet's owner declares an overdue engine silent through the fleet partition, never at once."""

    @staticmethod
    def _contributions(engine: str, slots: range) -> list[bytes]:
        return [
            EstimateSnapshot(
                deployment="dep",
                scope=engine,
                snapshot_id=f"sha256:{engine}-{slot}",
                version=slot + 1,
                ts=60.0 * (slot + 1),
                trigger="fleetopt:contribution",
                estimates=FleetContribution(
                    slot_index=slot, arrivals=3, finished=1, prompt_tokens=80, output_tokens=20, length_counts={"9": 1}
                ),
            )
            .model_dump_json()
            .encode()
            for slot in slots
        ]

    def test_a_declaration_counts_where_it_is_read_back_and_is_signed_as_the_policy_services(self) -> None:
        sink = ListSink()
        handler = PolicyHandler(
            deployment="dep", store=MemoryStore(), registry=default_registry(), sink=sink, keyring=KEYRING
        )
        unsigned = [
            *self._contributions("eng-a", range(1)),
            *self._contributions("eng-b", range(1)),
            *self._contributions("eng-a", range(1, 8)),
        ]
        values = [
            sign_snapshot(EstimateSnapshot.model_validate_json(v), KEYRING.signing, "stream").model_dump_json().encode()
            for v in unsigned
        ]
        _handle(handler, values)
        assert handler.overdue() == {("fleetopt", "eng-b"): (0, 7)}
        aggregator = handler.decider.aggregators["fleetopt"]
        assert aggregator.closed_through == 0
        handler.declare_silent("fleetopt", "eng-b", (0, 7), 61.5)
        declaration = sink.on(ESTIMATES_TOPIC)[-1]
        assert aggregator.silenced == {}
        parsed = EstimateSnapshot.model_validate_json(declaration)
        assert snapshot_signature_problem(parsed, KEYRING, "policy") is None
        batch = PendingBatch()
        handler.handle(Record(ESTIMATES_TOPIC, 0, len(values), b"fleet", declaration), batch)
        assert aggregator.silenced == {"eng-b": 0}
        assert aggregator.closed_through == 6
        assert handler.overdue() == {}
        assert sink.on(DEADLETTER_TOPIC) == []


@given(
    name=st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True),
    partition=st.integers(min_value=0, max_value=10_000),
)
def test_scope_parts_reads_back_every_scope_partition_scope_builds(name: str, partition: int) -> None:
    assert scope_parts(partition_scope(name, partition)) == (name, partition)


def test_scope_parts_reads_a_scope_with_no_partition_suffix_as_the_whole_name_on_partition_0() -> None:
    assert scope_parts("shadow-canary") == ("shadow-canary", 0)
    assert scope_parts("policy-ledger:0") == ("policy-ledger:0", 0)  # partition_scope never writes :0
    assert scope_parts("policy-config:x1") == ("policy-config:x1", 0)
