"""Pins (the pinned document, the service holding off) and shadow policies (decided, never written)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from decide.specs import default_registry
from schemas.errors import InvalidInputError
from schemas.policy_docs import AdmissionPolicy
from schemas.records import DecisionRecord
from services.cli.pin import parse_duration
from services.cli.shadow import compare
from services.policy.config import config_policy_set, read_config
from services.policy.decisions import DecisionMaker
from services.policy.pins import parse_assignment, pinned_document
from services.policy.shadow import ShadowPolicy
from services.store.memory_store import MemoryStore
from services.testing.models import changed
from tests.unit.policy.snapshots import registered_admission_snapshot


class HeldPins:
    """A ``PinBoard`` holding the (kind, scope) pairs in ``held``."""

    def __init__(self) -> None:
        self.held: set[tuple[str, str]] = set()

    def holds(self, kind: str, scope: str) -> bool:
        return (kind, scope) in self.held


def _decided(store: MemoryStore) -> AdmissionPolicy:
    maker = DecisionMaker(default_registry(), store)
    maker.on_snapshot(registered_admission_snapshot("eng-0", model="qwen3-8b"))
    raw = store.get_policy("admission", "eng-0")
    assert raw is not None
    return AdmissionPolicy.model_validate_json(raw)


class TestPinnedDocument:
    def test_sets_the_keys_one_version_above_valid_for_the_duration(self) -> None:
        current = _decided(MemoryStore())
        pinned = pinned_document(
            current, AdmissionPolicy, {"admit_fraction": 0.25, "level": "busy"}, event_time_s=50.0, for_s=600.0
        )
        assert isinstance(pinned, AdmissionPolicy)
        assert (pinned.version, pinned.previous_version) == (current.version + 1, current.version)
        assert (pinned.payload.admit_fraction, pinned.payload.level) == (0.25, "busy")
        assert pinned.payload.pressure == current.payload.pressure
        assert (pinned.computed_at, pinned.valid_until) == (50.0, 650.0)
        assert pinned.state == current.state
        assert pinned.diagnostics["pinned"] is True

    def test_a_key_the_payload_lacks_is_refused_with_the_keys_it_has(self) -> None:
        current = _decided(MemoryStore())
        with pytest.raises(InvalidInputError, match="admission payload has no key 'theta' \\(keys: admit_fraction"):
            pinned_document(current, AdmissionPolicy, {"theta": 0.5}, event_time_s=0.0, for_s=60.0)

    def test_a_value_the_document_refuses_is_refused(self) -> None:
        current = _decided(MemoryStore())
        with pytest.raises(
            InvalidInputError, match=r"payload\.admit_fraction: Input should be less than or equal to 1"
        ):
            pinned_document(current, AdmissionPolicy, {"admit_fraction": 2}, event_time_s=0.0, for_s=60.0)

    def test_assignments_and_durations(self) -> None:
        assert parse_assignment("theta=0.5") == ("theta", 0.5)
        assert parse_assignment("mode=EB") == ("mode", "EB")
        assert parse_assignment("kv_gate.s_kv=0.3") == ("kv_gate.s_kv", 0.3)
        assert [parse_duration(t) for t in ("90", "90s", "10m", "2h", "1d")] == [90.0, 90.0, 600.0, 7200.0, 86400.0]
        with pytest.raises(InvalidInputError, match="expected key=value"):
            parse_assignment("theta")
        with pytest.raises(InvalidInputError, match="positive duration"):
            parse_duration("ten minutes")


class TestPolicyServiceUnderAPin:
    def test_decisions_are_recorded_but_not_written_while_the_pin_holds(self) -> None:
        store = MemoryStore()
        pins = HeldPins()
        maker = DecisionMaker(default_registry(), store, pins=pins)
        maker.on_snapshot(registered_admission_snapshot("eng-0", model="qwen3-8b"))
        current = AdmissionPolicy.model_validate_json(store.get_policy("admission", "eng-0") or "")
        pinned = pinned_document(current, AdmissionPolicy, {"admit_fraction": 0.1}, event_time_s=10.0, for_s=60.0)
        pins.held.add(("admission", "eng-0"))
        assert store.put_policy("admission", "eng-0", pinned.version, pinned.model_dump_json())

        later = changed(registered_admission_snapshot("eng-0", model="qwen3-8b"), version=2, snapshot_id="sha256:2")
        held = maker.on_snapshot(later).records
        assert [(r.held_by_pin, r.accepted, r.version) for r in held] == [(True, False, pinned.version + 1)]
        stored = AdmissionPolicy.model_validate_json(store.get_policy("admission", "eng-0") or "")
        assert stored.payload.admit_fraction == 0.1

        pins.held.clear()
        again = changed(registered_admission_snapshot("eng-0", model="qwen3-8b"), version=3, snapshot_id="sha256:3")
        released = maker.on_snapshot(again).records
        assert [(r.held_by_pin, r.accepted, r.version) for r in released] == [(False, True, pinned.version + 1)]


class TestShadowPolicy:
    def _shadow(self, tmp_path: Path) -> ShadowPolicy:
        path = tmp_path / "candidate.toml"
        path.write_text("[admission]\nkv_comfort_frac = 0.3\nbusy_at = 0.2\noverloaded_at = 0.25\n")
        _, data = read_config(path)
        return ShadowPolicy("candidate", config_policy_set(data, source=str(path), fleet_slot_s=60.0))

    def test_decides_with_its_own_params_and_never_writes(self, tmp_path: Path) -> None:
        store = MemoryStore()
        live = DecisionMaker(default_registry(), store)
        shadow = self._shadow(tmp_path)
        snapshot = registered_admission_snapshot("eng-0", model="qwen3-8b")
        live_records = live.on_snapshot(snapshot).records
        shadow_records = shadow.on_snapshot(snapshot, [])
        assert [(r.shadow, r.accepted, r.version) for r in shadow_records] == [("candidate", False, 1)]
        assert shadow_records[0].document["payload"] != live_records[0].document["payload"]
        assert json.loads(store.get_policy("admission", "eng-0") or "{}") == live_records[0].document

        restarted = ShadowPolicy("candidate", shadow.policy_set)
        restarted.load(shadow.state())
        later = changed(snapshot, version=2, snapshot_id="sha256:2")
        assert [r.version for r in restarted.on_snapshot(later, [])] == [2]

    def test_the_report_joins_shadow_and_live_on_the_snapshot(self, tmp_path: Path) -> None:
        live = DecisionMaker(default_registry(), MemoryStore())
        shadow = self._shadow(tmp_path)
        records: list[DecisionRecord] = []
        for n in range(3):
            snapshot = registered_admission_snapshot(f"eng-{n}", model="qwen3-8b")
            records += live.on_snapshot(snapshot).records
            if n < 2:
                records += shadow.on_snapshot(snapshot, [])
        kinds = compare(records, "candidate")
        admission = kinds["admission"]
        assert (admission.both, admission.differ, admission.live_only, admission.shadow_only) == (2, 2, 1, 0)
        assert admission.keys["level"].differ == 2
        pressure = admission.keys["pressure"]
        assert pressure.live_values == [0.2, 0.2]  # the live policy's comfort KV share is 0.85, the shadow's 0.3
        assert all(v > 0.2 for v in pressure.shadow_values)


class TestSimulatorPrediction:
    def test_each_configuration_runs_the_same_scenario_under_its_own_params_and_scopes(self, tmp_path: Path) -> None:
        from services.cli.shadow_sim import prediction_table, simulate
        from services.sim import load_scenario

        path = tmp_path / "no-ebplus.toml"
        path.write_text("[ebplus]\napplies_to = { engines = [] }\n")
        _, data = read_config(path)
        scenario = load_scenario("demo", duration_s=20.0)
        live = config_policy_set(None, source="live", fleet_slot_s=10.0)
        candidate = config_policy_set(data, source=str(path), fleet_slot_s=10.0)
        arms = simulate(scenario, {"live": live, "candidate": candidate})
        assert [arm.name for arm in arms] == ["live", "candidate"]
        assert any(change.kind == "ebplus" for change in arms[0].policy_changes)
        assert not any(change.kind == "ebplus" for change in arms[1].policy_changes)
        table = prediction_table(arms)
        assert table.splitlines()[0].split() == ["metric", "live", "candidate", "candidate", "vs", "live"]
