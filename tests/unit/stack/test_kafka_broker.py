"""services/stack/kafka_broker.py: the one-node KRaft configuration, finding Java and the jars, formatting once."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from schemas.errors import ConfigError
from services.stack.kafka_broker import KafkaInstall, broker_properties, format_storage, locate_kafka


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
