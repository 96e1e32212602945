"""``governor gateway`` as an operator runs it: it serves, stops cleanly on SIGTERM, and refuses a bad file."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

UNREACHABLE = ["--kafka-bootstrap", "127.0.0.1:1", "--redis-url", "redis://127.0.0.1:1/0"]
WAIT_S = 60.0  # a safety net for a process start on a loaded machine, never a measured time


def _gateway(*args: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "services.cli", "gateway", "--gateway-port", "0", *UNREACHABLE, *args]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


class TestGatewayCommand:
    def test_serves_without_kafka_or_redis_and_stops_cleanly_on_sigterm(self, tmp_path: Path) -> None:
        config = tmp_path / "gateway.toml"
        config.write_text('[[upstreams]]\nengine_id = "e0"\nurl = "http://127.0.0.1:1"\nmodel = "m"\n')
        process = _gateway("--gateway-config", str(config))
        try:
            assert process.stdout is not None
            started = None
            for line in process.stdout:
                record = json.loads(line)
                if record["event"] == "service_started":
                    started = record
                    break
            assert started is not None
            address = started["addresses"][0].strip("()").split(", ")
            host, port = address[0].strip("'"), int(address[1])
            with urllib.request.urlopen(f"http://{host}:{port}/healthz", timeout=WAIT_S) as response:
                assert json.loads(response.read()) == {"status": "ok"}
            with urllib.request.urlopen(f"http://{host}:{port}/v1/models", timeout=WAIT_S) as response:
                assert [m["id"] for m in json.loads(response.read())["data"]] == ["m"]
            process.send_signal(signal.SIGTERM)
            rest, _ = process.communicate(timeout=WAIT_S)
            assert process.returncode == 0
            assert '"event": "service_stopped"' in rest
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()

    @pytest.mark.parametrize(
        ("text", "message"),
        [
            ('[[upstreams]]\nengine_id = "a"\nurl = "nope"\nmodel = "m"\n', "upstreams.0.url"),
            ("[[upstreams]\n", "gateway.toml"),
        ],
    )
    def test_a_bad_gateway_file_exits_2_with_one_line(self, tmp_path: Path, text: str, message: str) -> None:
        config = tmp_path / "gateway.toml"
        config.write_text(text)
        process = _gateway("--gateway-config", str(config))
        output, _ = process.communicate(timeout=WAIT_S)
        assert process.returncode == 2
        assert message in output.strip().splitlines()[-1]
        assert "Traceback" not in output
