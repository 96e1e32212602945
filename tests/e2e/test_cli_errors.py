"""Everyday failures of the ``governor`` command end in one line on stderr and a non-zero exit, never a traceback.

Each runs the real command in a subprocess, as an operator would; none needs a broker or Redis
(the ones that do are in tests/integration/test_cli_errors_live.py).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from services.cli.errors import EXIT_BAD_INPUT, EXIT_UNAVAILABLE
from services.cli.main import COMMANDS, build_parser
from services.replay.files import write_events
from services.testing.streams import synthetic_stream
from tests.e2e.cli import ROOT, governor, one_error_line

DEAD_KAFKA = "127.0.0.1:1"
DEAD_REDIS = "redis://127.0.0.1:1/0"


class TestBackendsThatDoNotAnswer:
    def test_status_with_redis_away(self) -> None:
        result = governor(
            "status", "--redis-url", DEAD_REDIS, "--kafka-bootstrap", DEAD_KAFKA, "--redis-timeout-s", "1"
        )
        assert result.returncode == EXIT_UNAVAILABLE
        assert one_error_line(result).startswith(f"governor: error: redis at {DEAD_REDIS} did not answer")

    def test_explain_with_the_broker_away(self) -> None:
        result = governor("explain", "ebplus", "eng-0", "--kafka-bootstrap", DEAD_KAFKA)
        assert result.returncode == EXIT_UNAVAILABLE
        assert one_error_line(result) == f"governor: error: kafka at {DEAD_KAFKA} did not answer"

    def test_record_with_the_broker_away(self, tmp_path: Path) -> None:
        result = governor("record", "--out", str(tmp_path / "out.jsonl"), "--kafka-bootstrap", DEAD_KAFKA)
        assert result.returncode == EXIT_UNAVAILABLE
        assert one_error_line(result) == f"governor: error: kafka at {DEAD_KAFKA} did not answer"

    def test_replay_with_the_broker_away_publishes_nothing(self, tmp_path: Path) -> None:
        path = tmp_path / "events.jsonl"
        write_events(path, synthetic_stream(engines=1, requests=5))
        result = governor("replay", str(path), "--kafka-bootstrap", DEAD_KAFKA)
        assert result.returncode == EXIT_UNAVAILABLE
        assert one_error_line(result) == f"governor: error: kafka at {DEAD_KAFKA} did not answer; nothing was replayed"

    def test_a_service_waits_with_backoff_saying_for_what_then_gives_up_in_one_line(self) -> None:
        result = governor("run", "stream", "--kafka-bootstrap", DEAD_KAFKA, "--backend-wait-s", "1.5")
        assert result.returncode == EXIT_UNAVAILABLE
        assert one_error_line(result) == f"governor: error: kafka at {DEAD_KAFKA} did not answer within 1.5 s"
        waits = [line for line in result.stderr.splitlines() if '"backend_waiting"' in line]
        assert len(waits) >= 2
        assert all(f'"address": "{DEAD_KAFKA}"' in line and '"backend": "kafka"' in line for line in waits)


class TestBadInput:
    def test_replay_of_an_empty_file(self, tmp_path: Path) -> None:
        path = tmp_path / "empty.jsonl"
        path.write_text("")
        result = governor("replay", str(path), "--offline")
        assert result.returncode == EXIT_BAD_INPUT
        assert one_error_line(result) == f"governor: error: {path}: no events (the file is empty)"

    def test_replay_as_a_deployment_that_is_not_a_name(self, tmp_path: Path) -> None:
        path = tmp_path / "events.jsonl"
        write_events(path, synthetic_stream(engines=1, requests=5))
        result = governor("replay", str(path), "--offline", "--as-deployment", "not a name")
        assert result.returncode == EXIT_BAD_INPUT
        assert one_error_line(result).startswith("governor: error: --as-deployment 'not a name': String should match")

    def test_a_setting_out_of_bounds_names_the_flag_and_its_value(self) -> None:
        result = governor("status", "--redis-timeout-s", "-1")
        assert result.returncode == EXIT_BAD_INPUT
        assert one_error_line(result) == (
            "governor: error: redis_timeout_s=-1.0 from flag --redis-timeout-s: Input should be greater than 0"
        )


class TestHelp:
    def test_help_lists_every_command_without_importing_their_modules(self) -> None:
        probe = (
            "import sys; from services.cli.main import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit as exc:\n    assert exc.code == 0\n"
            "print(sorted(m for m in sys.modules if m.startswith(('services.cli.', 'numpy', 'kafka', 'redis'))))"
        )
        result = subprocess.run(
            [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
        )
        assert result.stdout.splitlines()[-1] == "['services.cli.errors', 'services.cli.main']"
        for command in COMMANDS:
            assert f"    {command.name} " in result.stdout

    @pytest.mark.parametrize("name", [command.name for command in COMMANDS])
    def test_each_commands_help_line_is_the_one_its_module_registers(self, name: str) -> None:
        full = build_parser(every=True)
        registered = {action.dest: action.help for action in full._subparsers._group_actions[0]._choices_actions}  # type: ignore[union-attr]
        assert registered[name] == next(c.help for c in COMMANDS if c.name == name)
