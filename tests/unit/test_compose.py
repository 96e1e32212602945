"""docker-compose.yml: the services, official images, health checks, restart policies and environment."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest
import yaml

from services.settings import APACHE_KAFKA_TIMEOUTS, ENV_ALIASES, ENV_PREFIX, EngineSettings, Settings
from services.stack.kafka_broker import BROKER_SETTINGS, KAFKA_JVM_OPTIONS

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


def _pinned_kafka_version() -> str:
    """The Apache Kafka version ops/kafka/pom.xml resolves for the tests and ``governor stack up``."""
    root = ElementTree.parse(ROOT / "ops" / "kafka" / "pom.xml").getroot()
    version = root.find("m:properties/m:kafka.version", {"m": "http://maven.apache.org/POM/4.0.0"})
    assert version is not None
    assert version.text is not None
    return version.text


def _listeners(value: str) -> dict[str, str]:
    """``NAME://host:port,...`` as {name: host:port}."""
    return dict(item.split("://", 1) for item in value.split(","))


class TestKafkaMatchesTheTestedBroker:
    def test_the_image_is_the_version_the_tests_run(self, compose: dict[str, Any]) -> None:
        assert compose["services"]["kafka"]["image"] == f"apache/kafka:{_pinned_kafka_version()}"

    def test_the_broker_settings_are_those_the_tests_start_kafka_with(self, compose: dict[str, Any]) -> None:
        """The apache/kafka image turns ``KAFKA_A_B`` into the property ``a.b``."""
        environment = compose["services"]["kafka"]["environment"]
        passed = {f"KAFKA_{key.upper().replace('.', '_')}": value for key, value in BROKER_SETTINGS.items()}
        assert {name: str(environment.get(name)).lower() for name in passed} == passed
        assert "KAFKA_NUM_PARTITIONS" not in environment, "topics are created with their counts, never by default"

    def test_the_heap_is_the_tested_one(self, compose: dict[str, Any]) -> None:
        heap = compose["services"]["kafka"]["environment"]["KAFKA_HEAP_OPTS"].split()
        assert heap == [option for option in KAFKA_JVM_OPTIONS if option.startswith(("-Xms", "-Xmx"))]

    def test_an_internal_listener_for_the_compose_network_and_an_external_one_for_the_host(
        self, compose: dict[str, Any]
    ) -> None:
        kafka = compose["services"]["kafka"]
        environment = kafka["environment"]
        advertised = _listeners(environment["KAFKA_ADVERTISED_LISTENERS"])
        assert advertised["INTERNAL"] == "kafka:9092"
        assert advertised["EXTERNAL"] == "${GOVERNOR_KAFKA_EXTERNAL_HOST:-127.0.0.1}:19092"
        assert set(_listeners(environment["KAFKA_LISTENERS"])) == {"INTERNAL", "EXTERNAL", "CONTROLLER"}
        assert environment["KAFKA_INTER_BROKER_LISTENER_NAME"] == "INTERNAL"
        protocols = dict(item.split(":") for item in environment["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
        assert set(protocols) == {"INTERNAL", "EXTERNAL", "CONTROLLER"}
        assert kafka["ports"] == ["127.0.0.1:19092:19092"], "the host reaches the listener it is advertised"

    def test_the_services_reach_the_internal_listener(self, compose: dict[str, Any]) -> None:
        advertised = _listeners(compose["services"]["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"])
        for name in ("topics", "stream", "policy", "vllm"):
            assert compose["services"][name]["environment"]["GOVERNOR_KAFKA_BOOTSTRAP"] == advertised["INTERNAL"]

    def test_the_log_and_the_redis_data_are_on_named_volumes(self, compose: dict[str, Any]) -> None:
        kafka, redis = compose["services"]["kafka"], compose["services"]["redis"]
        log_dir = kafka["environment"]["KAFKA_LOG_DIRS"]
        assert kafka["volumes"] == [f"kafka-data:{log_dir}"]
        assert redis["volumes"] == ["redis-data:/data"]
        assert "--appendonly yes" in redis["command"][-1]
        assert set(compose["volumes"]) == {"kafka-data", "redis-data"}

    def test_the_services_produce_idempotently_with_the_kafka_client_timeouts(self, compose: dict[str, Any]) -> None:
        environment = compose["services"]["stream"]["environment"]
        settings = Settings.load({}, {k: str(v) for k, v in environment.items() if "${" not in str(v)})
        assert settings.kafka_client_timeouts() == APACHE_KAFKA_TIMEOUTS

    def test_the_image_installs_the_faust_runtime_compose_offers(self, compose: dict[str, Any]) -> None:
        assert compose["services"]["stream"]["environment"]["GOVERNOR_STREAM_RUNTIME"] == (
            "${GOVERNOR_STREAM_RUNTIME:-kafka}"
        )
        dockerfile = (ROOT / "ops" / "Dockerfile").read_text()
        (extras,) = re.findall(r'pip install "\.\[([a-z,]+)\]"', dockerfile)
        assert "faust" in extras.split(",")


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
