"""The vLLM CPU build's serve line of docs/engines/vllm.md, run as the docs write it, joins Governor.

The test reads the command from the block after ``<!-- vllm-cpu-serve -->`` in docs/engines/vllm.md,
so the documented line and the tested one cannot drift. Only the model changes: the tiny random Llama
(services/engines/vllm/tiny_servers.py) with dummy weights, in place of Qwen3-8B, and a free port.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from schemas.names import TELEMETRY_TOPIC
from services.engines.vllm.tiny_servers import SERVED_MODEL, stop_vllm, tiny_model_dir, wait_healthy
from services.replay.replay import read_topic
from services.stack.launcher import StackState
from services.stack.processes import free_port
from tests.integration.processes import wait_until

pytest.importorskip("vllm", reason="needs vLLM's CPU build: bash ops/install.sh --vllm")

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "engines" / "vllm.md"
MARKER = "<!-- vllm-cpu-serve -->"
DOCUMENTED_MODEL = "Qwen/Qwen3-8B"
START_TIMEOUT_S = 900.0  # a vLLM CPU server's start on a loaded two-core machine; a safety net, never asserted


def documented_command() -> list[str]:
    """The one command line of the fenced block that follows the marker."""
    lines = DOCS.read_text(encoding="utf-8").splitlines()
    start = lines.index(MARKER)
    assert lines[start + 1] == "```", f"{DOCS}: a fenced block must follow {MARKER}"
    end = lines.index("```", start + 2)
    block = [line for line in lines[start + 2 : end] if line.strip()]
    assert len(block) == 1, f"{DOCS}: the block after {MARKER} holds one command, not {block}"
    return shlex.split(block[0])


def _registrations(bootstrap: str, engine_id: str) -> list[dict[str, object]]:
    events = (json.loads(value) for value in read_topic(bootstrap, TELEMETRY_TOPIC, idle_s=1.0))
    return [e for e in events if e.get("engine_id") == engine_id and e.get("event_type") == "engine.registered"]


def _steps(bootstrap: str, engine_id: str) -> int:
    events = (json.loads(value) for value in read_topic(bootstrap, TELEMETRY_TOPIC, idle_s=1.0))
    return sum(1 for e in events if e.get("engine_id") == engine_id and e.get("event_type") == "step")


def _published(url: str, engine_id: str) -> float:
    """``governor_publisher_events_published_total`` of the engine on the server's ``/metrics`` (0 when absent)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10.0) as response:
        text = response.read().decode()
    for line in text.splitlines():
        if line.startswith("governor_publisher_events_published_total{") and f'engine="{engine_id}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.fixture
def served(stack: StackState, deployment: str, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """The documented server on the tiny model; yields its URL and engine id."""
    argv = documented_command()
    assert argv[:3] == ["python", "-m", "vllm.entrypoints.openai.api_server"]
    model = tiny_model_dir(tmp_path)
    # The docs' ``python`` is the interpreter of the environment vLLM is installed in: this one.
    port = free_port()
    argv = [sys.executable, *argv[1:]]
    argv[argv.index(DOCUMENTED_MODEL)] = str(model)
    argv += ["--served-model-name", SERVED_MODEL, "--load-format", "dummy", "--dtype", "float32"]
    argv += ["--max-model-len", "512", "--max-num-seqs", "4", "--enforce-eager", "--host", "127.0.0.1"]
    argv += ["--port", str(port)]
    engine_id = "documented-0"
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "GOVERNOR_ENGINE_ID": engine_id,
        "GOVERNOR_DEPLOYMENT": deployment,
        "GOVERNOR_KAFKA_BOOTSTRAP": stack.kafka_bootstrap,
        "REDIS_URL": stack.redis_url,
        # docs/engines/vllm.md: an empty directory per run, so the engine core's publisher series reach /metrics
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "prometheus"),
    }
    (tmp_path / "prometheus").mkdir()
    log = tmp_path / "vllm.log"
    with log.open("w") as output:
        process = subprocess.Popen(argv, cwd=ROOT, stdout=output, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(process, url, log, START_TIMEOUT_S)
        yield url, engine_id
    finally:
        stop_vllm(process)


def test_the_documented_cpu_serve_line_registers_the_ebplus_scheduler_and_publishes_steps(
    stack: StackState, served: tuple[str, str]
) -> None:
    url, engine_id = served
    body = json.dumps({"model": SERVED_MODEL, "prompt": "the river", "max_tokens": 8, "ignore_eos": True})
    request = urllib.request.Request(
        f"{url}/v1/completions", data=body.encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120.0) as response:
        completion = json.loads(response.read())
    assert completion["usage"]["completion_tokens"] == 8
    wait_until(lambda: _steps(stack.kafka_bootstrap, engine_id) > 0, 60.0, "the engine's step events")
    registered = _registrations(stack.kafka_bootstrap, engine_id)
    assert registered, "the engine registered on the deployment's telemetry topic"
    assert registered[-1]["scheduler"] == "ebplus"
    wait_until(lambda: _published(url, engine_id) > 0, 30.0, "the publisher's series on vLLM's /metrics")
    with urllib.request.urlopen(f"{url}/metrics", timeout=10.0) as response:
        assert "vllm:" in response.read().decode(), "vLLM's own series are still served"
