"""services/stack/launcher.py without starting anything: the state file's broker, and a port already taken."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from schemas.errors import ConfigError
from services.stack.launcher import STATE_FILE, StackState, read_state, start_broker


class TestReadState:
    def test_a_state_file_from_before_the_choice_is_tansus(self, tmp_path: Path) -> None:
        recorded = {
            "kafka_bootstrap": "127.0.0.1:19092",
            "broker_pid": 7,
            "redis_url": "redis://x/0",
            "redis_pid": None,
        }
        (tmp_path / STATE_FILE).write_text(json.dumps(recorded))
        assert read_state(tmp_path) == StackState(**recorded, broker="tansu")  # type: ignore[arg-type]

    def test_the_broker_round_trips(self, tmp_path: Path) -> None:
        state = StackState(
            kafka_bootstrap="127.0.0.1:1", broker_pid=1, redis_url="redis://x/0", redis_pid=None, broker="kafka"
        )
        (tmp_path / STATE_FILE).write_text(state.to_json())
        assert read_state(tmp_path) == state

    def test_an_unknown_broker_is_refused_with_the_file_named(self, tmp_path: Path) -> None:
        recorded = {"kafka_bootstrap": "a:1", "broker_pid": 1, "redis_url": "r", "redis_pid": None, "broker": "zk"}
        (tmp_path / STATE_FILE).write_text(json.dumps(recorded))
        with pytest.raises(ConfigError, match=rf"{STATE_FILE} is unreadable \(unknown broker 'zk'\)"):
            read_state(tmp_path)


class TestStartBroker:
    @pytest.mark.parametrize("broker", ["tansu", "kafka"])
    def test_a_port_another_process_listens_on_is_refused(self, tmp_path: Path, broker: str) -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen()
            port = listener.getsockname()[1]
            with pytest.raises(ConfigError, match=f"port {port} on 127.0.0.1 is in use"):
                start_broker(tmp_path, port, broker)  # type: ignore[arg-type]
        assert list(tmp_path.iterdir()) == []
