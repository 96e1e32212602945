"""The scaler's TOML file (services/scaler/config.py) and what ``governor scale`` does with a bad one."""

from __future__ import annotations

from pathlib import Path

import pytest

from schemas.errors import ConfigError, InvalidInputError
from services.cli.main import main
from services.cli.scale import build_connectors, gateway_admin
from services.scaler import DesiredReplicas, KedaConnector, MemoryConnector
from services.scaler.config import read_scaler_config

GOOD = """
mode = "act"
keda_port = 9090

[pools.short]
min_replicas = 1
max_replicas = 8
gpus_per_replica = 2
connector = "keda"

[pools.long]
max_replicas = 4
initial_replicas = 2
connector = "memory"
"""


class TestReadScalerConfig:
    def test_reads_each_pool_and_its_connector(self, tmp_path: Path) -> None:
        path = tmp_path / "scaler.toml"
        path.write_text(GOOD)
        config = read_scaler_config(path)
        assert (config.mode, config.keda_port, config.pools["short"].gpus_per_replica) == ("act", 9090, 2)
        connectors = build_connectors(config, DesiredReplicas(["short"]), None)
        assert isinstance(connectors["short"], KedaConnector)
        assert isinstance(connectors["long"], MemoryConnector)
        assert connectors["long"].replicas() == 2

    def test_a_bad_key_is_named_with_the_file(self, tmp_path: Path) -> None:
        path = tmp_path / "scaler.toml"
        path.write_text(GOOD.replace("max_replicas = 4", "max_replicas = 0"))
        with pytest.raises(InvalidInputError, match=r"scaler.toml: pools.long.max_replicas: Input should be") as info:
            read_scaler_config(path)
        assert info.value.field == "pools.long.max_replicas"

    def test_a_local_pool_gets_the_local_connector_with_the_gateways_token(self, tmp_path: Path) -> None:
        token = tmp_path / "admin.token"
        token.write_text("s3cret\n")
        path = tmp_path / "scaler.toml"
        path.write_text(
            f'gateway = {{ url = "http://127.0.0.1:8080", token_file = "{token}" }}\n'
            'pools.short = { max_replicas = 2, connector = "local", local = { command = ["vllm"], first_port = 8100 } }'
        )
        config = read_scaler_config(path)
        connector = build_connectors(config, DesiredReplicas([]), None)["short"]
        assert (connector.kind, connector.target, connector.replicas()) == ("local", "local/short", 0)
        admin = gateway_admin(config)
        assert admin is not None
        assert (admin.base_url, admin.token) == ("http://127.0.0.1:8080", "s3cret")

    def test_an_empty_gateway_token_file_is_refused(self, tmp_path: Path) -> None:
        token = tmp_path / "admin.token"
        token.write_text("\n")
        path = tmp_path / "scaler.toml"
        path.write_text(
            f'gateway = {{ url = "http://127.0.0.1:8080", token_file = "{token}" }}\n'
            'pools.short = { max_replicas = 2, connector = "memory" }'
        )
        with pytest.raises(ConfigError, match=r"admin\.token is empty"):
            gateway_admin(read_scaler_config(path))

    def test_governor_scale_exits_2_naming_the_file_and_key(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        path = tmp_path / "scaler.toml"
        path.write_text(GOOD.replace('connector = "memory"', 'connector = "ssh"'))
        assert main(["scale", "--config", str(path), "--log-format", "console"]) == 2
        assert "scaler.toml: pools.long.connector: Input should be" in capsys.readouterr().err
