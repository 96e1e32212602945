"""services/stack/kafka_broker.py: the one-node KRaft configuration, finding Java and the jars, formatting once."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from schemas.errors import BackendUnavailableError, ConfigError
from services.stack import kafka_broker
from services.stack.kafka_broker import (
    BrokerSasl,
    KafkaInstall,
    broker_properties,
    cluster_id,
    format_storage,
    locate_kafka,
)


def _properties(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line)


class TestBrokerProperties:
    def test_one_node_is_broker_and_controller_on_loopback_with_its_log_where_asked(self, tmp_path: Path) -> None:
        properties = _properties(broker_properties(port=19092, controller_port=19093, log_dir=tmp_path / "log"))
        assert properties["process.roles"] == "broker,controller"
        assert properties["controller.quorum.voters"] == "1@127.0.0.1:19093"
        assert properties["listeners"] == "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
        assert properties["advertised.listeners"] == "PLAINTEXT://127.0.0.1:19092"
        assert properties["log.dirs"] == str(tmp_path / "log")

    def test_topics_are_never_created_by_a_client(self, tmp_path: Path) -> None:
        properties = _properties(broker_properties(port=1, controller_port=2, log_dir=tmp_path))
        assert properties["auto.create.topics.enable"] == "false"

    def test_internal_topics_fit_one_node(self, tmp_path: Path) -> None:
        properties = _properties(broker_properties(port=1, controller_port=2, log_dir=tmp_path))
        factors = {key: value for key, value in properties.items() if key.endswith(("replication.factor", "min.isr"))}
        assert set(factors.values()) == {"1"}
        assert len(factors) == 5


class TestLocateKafka:
    def test_without_java_it_says_so(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        monkeypatch.setattr(shutil, "which", lambda _name: None)
        with pytest.raises(ConfigError, match="needs java"):
            locate_kafka(tmp_path)

    def test_without_the_jars_it_names_the_install_step(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        monkeypatch.setattr(shutil, "which", lambda _name: "/bin/sh")
        with pytest.raises(ConfigError, match=r"ops/install\.sh --kafka"):
            locate_kafka(tmp_path)

    def test_the_classpath_is_every_jar_of_the_folder(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        monkeypatch.setattr(shutil, "which", lambda _name: "/bin/sh")
        (tmp_path / "kafka_2.13-4.4.0.jar").touch()
        install = locate_kafka(tmp_path)
        assert install.lib_dir == tmp_path
        assert install.classpath == f"{tmp_path}/*"


class TestFormatStorage:
    def test_a_formatted_log_is_left_alone_without_starting_a_jvm(self, tmp_path: Path) -> None:
        """The java path does not exist: any attempt to run the storage tool would raise."""
        (tmp_path / "meta.properties").write_text("node.id=1\n")
        install = KafkaInstall(java=tmp_path / "no-java", lib_dir=tmp_path)
        assert format_storage(install, tmp_path / "server.properties", tmp_path) is False
        assert (tmp_path / "meta.properties").read_text() == "node.id=1\n"

    def test_a_storage_tool_that_does_not_finish_is_a_backend_error_naming_the_log(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        """A JVM start on a loaded machine outlasted the timeout; the raw TimeoutExpired escaped ``stack up``."""
        java = tmp_path / "java"
        java.write_text("#!/bin/sh\nsleep 5\n")
        java.chmod(0o755)
        monkeypatch.setattr(kafka_broker, "FORMAT_TIMEOUT_S", 0.2)
        with pytest.raises(BackendUnavailableError, match=f"formatting the kafka log in {tmp_path} did not finish"):
            format_storage(KafkaInstall(java=java, lib_dir=tmp_path), tmp_path / "server.properties", tmp_path)


class TestBrokerSasl:
    def test_the_listener_requires_sasl_and_the_node_logs_in_as_its_own_scram_user(self, tmp_path: Path) -> None:
        sasl = BrokerSasl(mechanism="SCRAM-SHA-256", users={"broker": "b-pw", "governor": "g-pw"})
        properties = _properties(broker_properties(port=1, controller_port=2, log_dir=tmp_path, sasl=sasl))
        assert properties["listeners"] == "SASL_PLAINTEXT://127.0.0.1:1,CONTROLLER://127.0.0.1:2"
        assert properties["advertised.listeners"] == "SASL_PLAINTEXT://127.0.0.1:1"
        assert properties["inter.broker.listener.name"] == "SASL_PLAINTEXT"
        assert properties["listener.security.protocol.map"] == "CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT"
        assert properties["sasl.enabled.mechanisms"] == "SCRAM-SHA-256"
        assert properties["sasl.mechanism.inter.broker.protocol"] == "SCRAM-SHA-256"
        jaas = properties["listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config"]
        assert (
            jaas
            == 'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="b-pw";'
        )

    def test_scram_users_are_made_when_the_log_is_formatted(self) -> None:
        sasl = BrokerSasl(mechanism="SCRAM-SHA-512", users={"broker": "b-pw", "governor": "g-pw"})
        assert sasl.format_arguments() == [
            "--add-scram",
            "SCRAM-SHA-512=[name=broker,password=b-pw]",
            "--add-scram",
            "SCRAM-SHA-512=[name=governor,password=g-pw]",
        ]

    def test_plain_users_live_in_the_listener_configuration(self, tmp_path: Path) -> None:
        sasl = BrokerSasl(mechanism="PLAIN", users={"broker": "b-pw", "governor": "g-pw"})
        properties = _properties(broker_properties(port=1, controller_port=2, log_dir=tmp_path, sasl=sasl))
        jaas = properties["listener.name.sasl_plaintext.plain.sasl.jaas.config"]
        assert jaas == (
            'org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" password="b-pw"'
            ' user_broker="b-pw" user_governor="g-pw";'
        )
        assert sasl.format_arguments() == []

    def test_without_the_brokers_own_user_it_is_refused(self) -> None:
        with pytest.raises(ConfigError, match="broker's own user 'broker'"):
            BrokerSasl(mechanism="PLAIN", users={"governor": "g-pw"})

    @pytest.mark.parametrize("password", ['a"b', "a\\b", "a,b", "a=b", "a]b"])
    def test_a_password_the_configuration_cannot_quote_is_refused(self, password: str) -> None:
        with pytest.raises(ConfigError, match="user 'broker'"):
            BrokerSasl(mechanism="SCRAM-SHA-256", users={"broker": password})


class TestOverrides:
    def test_an_override_replaces_a_setting_and_adds_others(self, tmp_path: Path) -> None:
        overrides = {"group.initial.rebalance.delay.ms": "3000", "log.retention.check.interval.ms": "500"}
        properties = _properties(broker_properties(port=1, controller_port=2, log_dir=tmp_path, overrides=overrides))
        assert properties["group.initial.rebalance.delay.ms"] == "3000"
        assert properties["log.retention.check.interval.ms"] == "500"
        assert properties["auto.create.topics.enable"] == "false"


class TestClusterId:
    def test_ids_are_kafkas_22_characters_and_never_read_as_an_option(self) -> None:
        ids = [cluster_id() for _ in range(2000)]
        assert all(len(value) == 22 and re.fullmatch(r"[A-Za-z0-9_-]+", value) for value in ids)
        assert not [value for value in ids if value.startswith("-")]
        assert len(set(ids)) == len(ids)
