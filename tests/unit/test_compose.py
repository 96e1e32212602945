"""docker-compose.yml: the services, official images, health checks, restart policies and environment."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from services.settings import ENV_ALIASES, ENV_PREFIX, EngineSettings, Settings

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return data


def _env_names() -> set[str]:
    return {ENV_ALIASES.get(name, ENV_PREFIX + name.upper()) for name in Settings.model_fields}


def test_the_stack_has_kafka_redis_and_both_services(compose: dict[str, Any]) -> None:
    assert {"kafka", "redis", "topics", "stream", "policy"} <= set(compose["services"])


def test_kafka_is_the_official_image_in_kraft_mode(compose: dict[str, Any]) -> None:
    kafka = compose["services"]["kafka"]
    assert kafka["image"].startswith("apache/kafka:")
    assert kafka["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert "CONTROLLER" in kafka["environment"]["KAFKA_CONTROLLER_LISTENER_NAMES"]


def test_redis_is_the_official_image(compose: dict[str, Any]) -> None:
    assert compose["services"]["redis"]["image"].startswith("redis:")


@pytest.mark.parametrize("name", ["kafka", "redis", "stream", "policy"])
def test_long_running_services_have_health_checks_and_restart(compose: dict[str, Any], name: str) -> None:
    service = compose["services"][name]
    assert service["healthcheck"]["test"]
    assert service["restart"] == "unless-stopped"


@pytest.mark.parametrize("name", ["stream", "policy"])
def test_governor_services_wait_for_healthy_backends_and_read_only_known_settings(
    compose: dict[str, Any], name: str
) -> None:
    service = compose["services"][name]
    assert service["build"]["dockerfile"] == "ops/Dockerfile"
    assert (ROOT / service["build"]["dockerfile"]).is_file()
    assert service["command"] == ["run", name]
    assert service["depends_on"]["kafka"]["condition"] == "service_healthy"
    assert service["depends_on"]["redis"]["condition"] == "service_healthy"
    environment = service["environment"]
    assert set(environment) <= _env_names()
    assert environment["GOVERNOR_KAFKA_BOOTSTRAP"] == "kafka:9092"
    assert environment["REDIS_URL"] == "redis://redis:6379/0"
    assert "9100" in service["healthcheck"]["test"][-1]
    Settings.load({}, {k: str(v) for k, v in environment.items() if "${" not in str(v)})


def test_the_vllm_engine_is_optional_and_runs_a_governor_scheduler_with_engine_settings(
    compose: dict[str, Any],
) -> None:
    engine = compose["services"]["vllm"]
    assert engine["profiles"] == ["vllm"]
    assert (ROOT / engine["build"]["dockerfile"]).is_file()
    module, _, name = engine["command"][engine["command"].index("--scheduler-cls") + 1].rpartition(".")
    assert (ROOT / (module.replace(".", "/") + ".py")).read_text().count(f"class {name}(") == 1
    names = {ENV_ALIASES.get(field, ENV_PREFIX + field.upper()) for field in EngineSettings.model_fields}
    assert set(engine["environment"]) <= names
    assert engine["environment"]["GOVERNOR_KAFKA_BOOTSTRAP"] == "kafka:9092"


def test_prometheus_and_grafana_are_an_optional_profile_mounting_the_shipped_ops_files(
    compose: dict[str, Any],
) -> None:
    for name in ("prometheus", "grafana"):
        service = compose["services"][name]
        assert service["profiles"] == ["observability"]
        for volume in service["volumes"]:
            assert (ROOT / volume.split(":")[0]).exists(), volume


def test_every_published_port_is_bound_to_localhost(compose: dict[str, Any]) -> None:
    published = [(name, port) for name, service in compose["services"].items() for port in service.get("ports", [])]
    assert published
    assert [(name, port) for name, port in published if not str(port).startswith("127.0.0.1:")] == []


def test_redis_requires_the_password_when_one_is_set_and_its_health_check_sends_it(compose: dict[str, Any]) -> None:
    redis = compose["services"]["redis"]
    assert redis["environment"]["GOVERNOR_REDIS_PASSWORD"] == "${GOVERNOR_REDIS_PASSWORD:-}"
    assert '--requirepass "$$GOVERNOR_REDIS_PASSWORD"' in redis["command"][-1]
    assert '-a "$$GOVERNOR_REDIS_PASSWORD"' in redis["healthcheck"]["test"][-1]


@pytest.mark.parametrize("name", ["stream", "policy", "vllm"])
def test_services_and_the_engine_get_the_redis_password_and_the_signing_key(compose: dict[str, Any], name: str) -> None:
    environment = compose["services"][name]["environment"]
    assert environment["GOVERNOR_REDIS_PASSWORD"] == "${GOVERNOR_REDIS_PASSWORD:-}"
    assert environment["GOVERNOR_POLICY_SIGNING_KEY"] == "${GOVERNOR_POLICY_SIGNING_KEY:-}"
    defaults = {k: re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", str(v)) for k, v in environment.items()}
    names = {ENV_ALIASES.get(field, ENV_PREFIX + field.upper()) for field in EngineSettings.model_fields}
    unset = EngineSettings.load({}, {k: v for k, v in defaults.items() if k in names})
    assert unset.policy_keyring() is None
    assert unset.redis_password is None
