"""Settings: the fleet slot, the workload seed and the Kafka client timeouts, from flag, environment or default."""

from __future__ import annotations

import argparse
import re
import typing
from pathlib import Path

import pytest
import yaml

from decide.specs import default_registry
from fold.triggers import EverySeconds
from schemas.errors import ConfigError
from services.cli.main import build_parser
from services.settings import APACHE_KAFKA_TIMEOUTS, LOCAL_BROKER_TIMEOUTS, Settings

ROOT = Path(__file__).resolve().parents[2]


class TestFleetSlot:
    def test_default_is_sixty_seconds(self) -> None:
        assert Settings.load({}, {}).fleet_slot_s == 60.0

    def test_environment_sets_it_and_a_flag_wins(self) -> None:
        environ = {"GOVERNOR_FLEET_SLOT_S": "10"}
        assert Settings.load({}, environ).fleet_slot_s == 10.0
        assert Settings.load({"fleet_slot_s": "15"}, environ).fleet_slot_s == 15.0

    @pytest.mark.parametrize("value", ["0", "-5"])
    def test_non_positive_slot_is_refused_naming_field_value_and_source(self, value: str) -> None:
        with pytest.raises(ConfigError, match=f"fleet_slot_s='{value}' from environment GOVERNOR_FLEET_SLOT_S"):
            Settings.load({}, {"GOVERNOR_FLEET_SLOT_S": value})

    def test_registry_decides_fleetopt_on_the_given_slot(self) -> None:
        assert default_registry().get("fleetopt").trigger == EverySeconds(seconds=60.0)
        assert default_registry(fleet_slot_s=10.0).get("fleetopt").trigger == EverySeconds(seconds=10.0)


class TestStreamCommitInterval:
    def test_default_is_one_second_and_the_environment_sets_it(self) -> None:
        assert Settings.load({}, {}).stream_commit_interval_s == 1.0
        assert Settings.load({}, {"GOVERNOR_STREAM_COMMIT_INTERVAL_S": "5"}).stream_commit_interval_s == 5.0

    @pytest.mark.parametrize("value", ["0", "-1", "3601"])
    def test_a_value_outside_its_bounds_is_refused_naming_field_value_and_source(self, value: str) -> None:
        match = f"stream_commit_interval_s='{value}' from environment GOVERNOR_STREAM_COMMIT_INTERVAL_S"
        with pytest.raises(ConfigError, match=match):
            Settings.load({}, {"GOVERNOR_STREAM_COMMIT_INTERVAL_S": value})


class TestSeed:
    def test_unset_leaves_the_scenarios_own_seed(self) -> None:
        assert Settings.load({}, {}).seed is None

    def test_environment_sets_it_and_the_typed_flag_wins(self) -> None:
        for argv in (["demo"], ["sim", "demo"]):
            args = build_parser(every=True).parse_args(argv)
            assert Settings.load(vars(args), {"GOVERNOR_SEED": "5"}).seed == 5
        args = build_parser(every=True).parse_args(["sim", "demo", "--seed", "7"])
        assert args.seed == 7
        assert Settings.load(vars(args), {"GOVERNOR_SEED": "5"}).seed == 7


def _settings_flags(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """Every flag of every command that sets a Settings field."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found.extend(_settings_flags(sub))
        elif action.dest in Settings.model_fields and action.option_strings:
            found.append(action)
    return found


class TestTypedFlags:
    def test_every_settings_flag_parses_to_its_fields_type(self) -> None:
        flags = _settings_flags(build_parser(every=True))
        assert {a.dest for a in flags} >= {"seed", "fleet_slot_s", "metrics_port", "state_dir", "log_format"}
        for action in flags:
            annotation = Settings.model_fields[action.dest].annotation
            if typing.get_origin(annotation) is typing.Literal:
                assert action.choices == typing.get_args(annotation), action.option_strings
                continue
            types = [t for t in typing.get_args(annotation) or (annotation,) if t is not type(None)]
            assert [action.type] == types, action.option_strings

    def test_a_mistyped_flag_is_refused_in_one_line(self, capsys: pytest.CaptureFixture[str]) -> None:
        with pytest.raises(SystemExit):
            build_parser(every=True).parse_args(["demo", "--seed", "seven"])
        assert capsys.readouterr().err.strip().splitlines()[-1] == (
            "governor demo: error: argument --seed: invalid int value: 'seven'"
        )


class TestKafkaClientTimeouts:
    def test_defaults_are_the_local_brokers(self) -> None:
        assert Settings.load({}, {}).kafka_client_timeouts() == LOCAL_BROKER_TIMEOUTS

    def test_docker_compose_sets_apache_kafkas_defaults(self) -> None:
        compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
        environment = {k: str(v) for k, v in compose["services"]["stream"]["environment"].items() if "${" not in str(v)}
        assert Settings.load({}, environment).kafka_client_timeouts() == APACHE_KAFKA_TIMEOUTS

    def test_a_heartbeat_not_below_the_session_timeout_is_refused(self) -> None:
        environ = {"GOVERNOR_KAFKA_HEARTBEAT_INTERVAL_MS": "6000"}
        with pytest.raises(ConfigError, match="must be below kafka_session_timeout_ms"):
            Settings.load({}, environ)

    @pytest.mark.parametrize("value", ["5999", "1800001"])
    def test_a_session_timeout_apache_kafka_would_refuse_is_refused_by_name(self, value: str) -> None:
        """Outside the broker's default group.min/max.session.timeout.ms every join would fail."""
        environ = {"GOVERNOR_KAFKA_SESSION_TIMEOUT_MS": value, "GOVERNOR_KAFKA_HEARTBEAT_INTERVAL_MS": "1000"}
        with pytest.raises(ConfigError, match=f"kafka_session_timeout_ms='{value}' from environment"):
            Settings.load({}, environ)

    @pytest.mark.parametrize("value", [6000, 1_800_000])
    def test_the_bounds_themselves_are_accepted(self, value: int) -> None:
        assert Settings.load({}, {"GOVERNOR_KAFKA_SESSION_TIMEOUT_MS": str(value)}).kafka_session_timeout_ms == value

    def test_the_control_planes_producer_is_idempotent_only_when_asked(self) -> None:
        assert Settings.load({}, {}).kafka_client_timeouts().idempotent_producer is False
        environ = {"GOVERNOR_KAFKA_IDEMPOTENT_PRODUCER": "true"}
        assert Settings.load({}, environ).kafka_client_timeouts().idempotent_producer is True

    def test_the_producer_is_idempotent_on_a_local_apache_kafka_unless_told_otherwise(self) -> None:
        on_kafka = {"GOVERNOR_BROKER": "kafka"}
        assert Settings.load({}, on_kafka).kafka_client_timeouts().idempotent_producer is True
        told = on_kafka | {"GOVERNOR_KAFKA_IDEMPOTENT_PRODUCER": "false"}
        assert Settings.load({}, told).kafka_client_timeouts().idempotent_producer is False


class TestBroker:
    def test_the_local_stack_runs_tansu_unless_kafka_is_asked_for(self) -> None:
        assert Settings.load({}, {}).broker == "tansu"
        assert Settings.load({}, {"GOVERNOR_BROKER": "kafka"}).broker == "kafka"
        assert Settings.load({"broker": "tansu"}, {"GOVERNOR_BROKER": "kafka"}).broker == "tansu"

    def test_another_broker_is_refused_by_name(self) -> None:
        with pytest.raises(ConfigError, match="broker='redpanda' from environment GOVERNOR_BROKER"):
            Settings.load({}, {"GOVERNOR_BROKER": "redpanda"})


class TestIdentifiers:
    @pytest.mark.parametrize(
        ("variable", "value"),
        [
            ("GOVERNOR_DEPLOYMENT", "prod:eu"),
            ("GOVERNOR_DEPLOYMENT", "../etc"),
            ("GOVERNOR_GATEWAY_ID", "gw/0"),
        ],
    )
    def test_a_name_that_would_build_a_key_is_refused_at_start_naming_it(self, variable: str, value: str) -> None:
        field = variable.removeprefix("GOVERNOR_").lower()
        with pytest.raises(ConfigError, match=f"{field}='{re.escape(value)}' from environment {variable}"):
            Settings.load({}, {variable: value})

    def test_a_plain_name_is_accepted(self) -> None:
        settings = Settings.load({}, {"GOVERNOR_DEPLOYMENT": "prod-eu.1", "GOVERNOR_GATEWAY_ID": "gw-0"})
        assert (settings.deployment, settings.gateway_id) == ("prod-eu.1", "gw-0")
