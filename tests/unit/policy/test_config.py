"""The policy configuration file: schema, one-line errors, params mapping and applies_to."""

from __future__ import annotations

from pathlib import Path

import pytest

from decide.specs import default_registry
from fold.triggers import EveryEvents, EverySeconds
from policies.ebplus import EbplusParams
from policies.fleetopt import PlannerMode
from policies.slai import TierSlo
from schemas.errors import InvalidInputError
from services.policy.config import (
    AppliesTo,
    config_digest,
    config_policy_set,
    ebplus_params,
    fleetopt_params,
    read_config,
    slai_params,
)
from services.policy.decisions import DecisionMaker
from services.store.memory_store import MemoryStore
from tests.unit.policy.snapshots import registered_admission_snapshot

EXAMPLE = Path(__file__).resolve().parents[3] / "ops" / "config" / "policy.example.toml"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(text)
    return path


def _error(tmp_path: Path, text: str) -> str:
    path = _write(tmp_path, text)
    with pytest.raises(InvalidInputError) as caught:
        read_config(path)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ")
    return message


class TestExampleConfig:
    def test_the_shipped_example_validates_and_maps_onto_the_params(self) -> None:
        config, data = read_config(EXAMPLE)
        ebplus = ebplus_params(config.ebplus, "x")
        assert (ebplus.theta_min, ebplus.theta_max, ebplus.calibration_id) == (0.05, 0.8, "qwen3-8b@h200")
        slai = slai_params(config.slai, "x")
        assert slai.tiers == (TierSlo(tier="free", tbt_slo_s=0.5), TierSlo(tier="paid", tbt_slo_s=0.1))
        fleetopt = fleetopt_params(config.fleetopt, "x")
        assert (fleetopt.w_s, fleetopt.kv_blocks, fleetopt.short_cost_usd_per_hr) == (0.008, 65536, 2.21)
        built = config_policy_set(data, source="x", fleet_slot_s=10.0)
        assert built.digest == config_digest(data)
        assert sorted(built.scopes) == ["admission", "ebplus"]

    def test_keys_left_out_keep_the_defaults(self, tmp_path: Path) -> None:
        config, _ = read_config(_write(tmp_path, "[ebplus]\ntheta_min = 0.2\n"))
        params = ebplus_params(config.ebplus, "x")
        assert params.theta_min == 0.2
        assert params.theta_max == EbplusParams().theta_max
        assert params.t_upd_completions == EbplusParams().t_upd_completions

    def test_triggers_and_the_fleet_slot_come_from_the_file(self, tmp_path: Path) -> None:
        text = '[ebplus]\nt_upd_completions = 40\n[fleetopt]\nslot_s = 15.0\nmode = "paper"\n'
        config, data = read_config(_write(tmp_path, text))
        registry = config_policy_set(data, source="x", fleet_slot_s=60.0).registry
        assert registry.get("ebplus").trigger == EveryEvents(event_type="request.finished", n=40)
        assert registry.get("fleetopt").trigger == EverySeconds(seconds=15.0)
        assert fleetopt_params(config.fleetopt, "x").mode is PlannerMode.PAPER

    def test_calibration_none_means_no_fallback_profile(self, tmp_path: Path) -> None:
        config, _ = read_config(_write(tmp_path, '[ebplus]\ncalibration_id = "none"\n'))
        assert ebplus_params(config.ebplus, "x").calibration_id is None


class TestConfigErrors:
    def test_an_unknown_key_names_its_path_and_the_keys_expected(self, tmp_path: Path) -> None:
        message = _error(tmp_path, "[ebplus]\nthetamin = 0.2\n")
        assert "ebplus.thetamin: unknown key (expected one of: " in message
        assert "theta_min" in message

    def test_an_unknown_table_names_the_tables_expected(self, tmp_path: Path) -> None:
        message = _error(tmp_path, "[ebplsu]\ntheta_min = 0.2\n")
        assert "ebplsu: unknown key" in message
        assert "ebplus" in message

    def test_a_wrong_type_names_the_key_and_the_value(self, tmp_path: Path) -> None:
        message = _error(tmp_path, '[slai.tiers]\npaid = "fast"\n')
        assert "slai.tiers.paid: Input should be a valid number" in message
        assert "'fast'" in message

    def test_an_out_of_range_value_names_the_bound(self, tmp_path: Path) -> None:
        message = _error(tmp_path, "[fleetopt]\nrho_max = 1.5\n")
        assert "fleetopt.rho_max: Input should be less than or equal to 1" in message

    def test_cross_field_checks_of_the_params_name_the_section(self, tmp_path: Path) -> None:
        message = _error(tmp_path, "[ebplus]\ntheta_min = 0.9\ntheta_max = 0.5\n")
        assert "ebplus.theta_min: need 0 < theta_min <= theta_max < 1" in message

    def test_an_unknown_calibration_lists_the_profiles(self, tmp_path: Path) -> None:
        message = _error(tmp_path, '[ebplus]\ncalibration_id = "a100-typo"\n')
        assert "ebplus.calibration_id: unknown profile 'a100-typo'" in message
        assert "qwen3-8b@h200" in message

    def test_an_applies_to_typo_lists_the_selectors(self, tmp_path: Path) -> None:
        message = _error(tmp_path, '[slai]\napplies_to = { engine = ["a-*"] }\n')
        assert "slai.applies_to.engine: unknown key (expected one of: engines, models, schedulers)" in message

    def test_fleetopt_has_no_applies_to(self, tmp_path: Path) -> None:
        assert "fleetopt.applies_to: unknown key" in _error(tmp_path, "[fleetopt]\napplies_to = { engines = [] }\n")

    def test_a_file_that_is_not_toml(self, tmp_path: Path) -> None:
        assert ": not valid TOML: " in _error(tmp_path, "[slai\n")

    def test_a_missing_file(self, tmp_path: Path) -> None:
        with pytest.raises(InvalidInputError, match="cannot read the policy config"):
            read_config(tmp_path / "absent.toml")


class TestAppliesTo:
    def test_every_list_given_must_match(self) -> None:
        selector = AppliesTo(engines=["prod-*"], models=["qwen3-*"], schedulers=["vllm"])
        assert selector.matches("prod-1", model="qwen3-8b", scheduler="vllm")
        assert not selector.matches("dev-1", model="qwen3-8b", scheduler="vllm")
        assert not selector.matches("prod-1", model="llama-3-70b", scheduler="vllm")
        assert not selector.matches("prod-1", model="qwen3-8b", scheduler="ebplus")
        assert not selector.matches("prod-1", model=None, scheduler="vllm")

    def test_no_list_matches_everything_and_an_empty_list_nothing(self) -> None:
        assert AppliesTo().matches("any", model=None, scheduler=None)
        assert not AppliesTo(engines=[]).matches("any", model=None, scheduler=None)


class TestAppliesToFromRegistration:
    def test_the_policy_service_decides_only_for_engines_the_config_selects(self, tmp_path: Path) -> None:
        text = '[admission]\napplies_to = { engines = ["prod-*"], models = ["qwen3-*"] }\n'
        _, data = read_config(_write(tmp_path, text))
        store = MemoryStore()
        maker = DecisionMaker(default_registry(), store)
        maker.configure(config_policy_set(data, source="x", fleet_slot_s=60.0))
        decided = maker.on_snapshot(registered_admission_snapshot("prod-0", model="qwen3-8b", scheduler="ebplus"))
        assert [(r.scope, r.accepted, r.config) for r in decided.records] == [("prod-0", True, config_digest(data))]
        other_model = maker.on_snapshot(registered_admission_snapshot("prod-1", model="llama-3-70b"))
        other_id = maker.on_snapshot(registered_admission_snapshot("dev-0", model="qwen3-8b"))
        assert other_model.records == other_id.records == []
        assert maker.skipped["not_applicable"] == 2
        assert store.get_policy("admission", "dev-0") is None

    def test_without_a_config_every_engine_is_decided(self) -> None:
        maker = DecisionMaker(default_registry(), MemoryStore())
        handled = maker.on_snapshot(registered_admission_snapshot("dev-0", model="m"))
        assert [(r.scope, r.config) for r in handled.records] == [("dev-0", None)]


class TestConfigCheckCommand:
    def test_prints_the_digest_and_per_policy_scope_and_keys(self, capsys: pytest.CaptureFixture[str]) -> None:
        from services.cli.main import main

        assert main(["config", "check", str(EXAMPLE)]) == 0
        out = capsys.readouterr().out.splitlines()
        _, data = read_config(EXAMPLE)
        assert out[0].startswith(f"{EXAMPLE}: valid policy config {config_digest(data)}: example: ")
        assert out[2].startswith("  ebplus     applies to engines ['h200-*']; sets ebplus.t_upd_completions=100, ")
        assert out[3].startswith("  slai       applies to every engine that obeys it; sets slai.offset_mode=dynamic")

    def test_a_bad_file_exits_2_with_one_line(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        from services.cli.main import main

        assert main(["config", "check", str(_write(tmp_path, "[ebplus]\ntheta_min = 2\n"))]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1
        assert "ebplus.theta_min: Input should be less than or equal to 1" in err


def test_the_stream_processor_takes_its_triggers_from_the_file(tmp_path: Path) -> None:
    from services.cli.run import config_registry

    path = _write(tmp_path, "[ebplus]\nt_upd_completions = 25\n[fleetopt]\nslot_s = 5.0\n")
    registry = config_registry(path, 60.0)
    assert registry.get("ebplus").trigger == EveryEvents(event_type="request.finished", n=25)
    assert registry.get("fleetopt").trigger == EverySeconds(seconds=5.0)
    assert config_registry(None, 60.0).get("fleetopt").trigger == EverySeconds(seconds=60.0)
