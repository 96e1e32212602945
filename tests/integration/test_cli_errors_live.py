"""Everyday failures that need a running broker and Redis: one line on stderr, a non-zero exit, no traceback."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from services.cli.errors import EXIT_BAD_INPUT
from services.stack.launcher import StackState
from tests.e2e.cli import governor, one_error_line

pytestmark = pytest.mark.integration


def test_record_of_an_unknown_topic_names_the_topics_there_are(stack: StackState, tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    result = governor("record", "--topic", "gov.nope", "--out", str(out), "--kafka-bootstrap", stack.kafka_bootstrap)
    assert result.returncode == EXIT_BAD_INPUT
    line = one_error_line(result)
    assert line.startswith(f"governor: error: topic 'gov.nope' does not exist on {stack.kafka_bootstrap} (topics: ")
    assert "gov.telemetry" in line
    assert not out.exists()


def test_a_service_on_a_metrics_port_in_use(stack: StackState, deployment: str) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = governor(
            "run",
            "stream",
            "--deployment",
            deployment,
            "--kafka-bootstrap",
            stack.kafka_bootstrap,
            "--redis-url",
            stack.redis_url,
            "--metrics-port",
            str(port),
        )
    assert result.returncode == EXIT_BAD_INPUT
    assert one_error_line(result) == (
        f"governor: error: metrics port 127.0.0.1:{port} is already in use: "
        "choose another with --metrics-port or GOVERNOR_METRICS_PORT"
    )
