"""vLLM's internal data parallelism on the CPU build: both ranks of one server publish as ranks of one engine.

One ``api_server --data-parallel-size 2`` on the tiny random Llama (services/engines/vllm/tiny_servers.py,
dummy weights) with ``GovernorScheduler``: vLLM starts an engine core per rank, each runs its own
scheduler, and each publishes its steps as ``rank.step`` reports of the one engine. A request is sent to
each rank with vLLM's ``X-data-parallel-rank`` header (so the test does not depend on vLLM's balancer);
the test reads the telemetry topic and checks each rank's registration, its steps and rank reports with
that request's tokens, and that the stream processor folds both ranks as one engine with no gap or
restart.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from fold.engine_estimates import EngineEstimates
from schemas.engines import EngineRegistered
from schemas.events import Event, parse_event
from schemas.names import TELEMETRY_TOPIC
from schemas.steps import RankStepReport, StepReport
from services.engines.vllm.tiny_servers import SERVED_MODEL, stop_vllm, tiny_model_dir, wait_healthy
from services.replay.replay import read_topic
from services.stack.launcher import StackState
from services.stack.processes import free_port
from tests.integration.processes import wait_until

pytest.importorskip("vllm", reason="needs vLLM's CPU build: bash ops/install.sh --vllm")

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
ENGINE_ID = "vllm-dp"
OUTPUT_TOKENS = 8
START_TIMEOUT_S = 900.0  # two engine cores starting on a loaded two-core machine; a safety net, never asserted


def _events(bootstrap: str) -> list[Event]:
    raw = read_topic(bootstrap, TELEMETRY_TOPIC, idle_s=1.0)
    return [event for event in (parse_event(value) for value in raw) if event.engine_id == ENGINE_ID]


@pytest.fixture
def server(stack: StackState, deployment: str, tmp_path: Path) -> Iterator[str]:
    """A two-rank server of vLLM's internal data parallelism under ``GovernorScheduler``; yields its URL."""
    port = free_port()
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(tiny_model_dir(tmp_path))]
    argv += ["--served-model-name", SERVED_MODEL, "--load-format", "dummy", "--dtype", "float32"]
    argv += ["--max-model-len", "512", "--max-num-seqs", "4", "--enforce-eager", "--data-parallel-size", "2"]
    argv += ["--scheduler-cls", "services.engines.vllm.scheduler.GovernorScheduler"]
    argv += ["--host", "127.0.0.1", "--port", str(port)]
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "GOVERNOR_ENGINE_ID": ENGINE_ID,
        "GOVERNOR_DEPLOYMENT": deployment,
        "GOVERNOR_KAFKA_BOOTSTRAP": stack.kafka_bootstrap,
        "REDIS_URL": stack.redis_url,
    }
    log = tmp_path / "vllm.log"
    with log.open("w") as output:
        process = subprocess.Popen(argv, cwd=ROOT, stdout=output, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(process, url, log, START_TIMEOUT_S)
        yield url
    finally:
        stop_vllm(process)


def _complete_on(url: str, rank: int) -> dict[str, int]:
    """One completion served by ``rank`` (vLLM's header); returns its usage."""
    body = json.dumps({"model": SERVED_MODEL, "prompt": "the river", "max_tokens": OUTPUT_TOKENS, "ignore_eos": True})
    request = urllib.request.Request(
        f"{url}/v1/completions",
        data=body.encode(),
        headers={"Content-Type": "application/json", "X-data-parallel-rank": str(rank)},
    )
    with urllib.request.urlopen(request, timeout=300.0) as response:
        usage: dict[str, int] = json.loads(response.read())["usage"]
    return usage


def test_both_ranks_publish_their_steps_as_ranks_of_one_engine(stack: StackState, server: str) -> None:
    usages = [_complete_on(server, rank) for rank in (0, 1)]
    assert [usage["completion_tokens"] for usage in usages] == [OUTPUT_TOKENS, OUTPUT_TOKENS]

    def finished_ranks() -> list[int]:
        reports = (e for e in _events(stack.kafka_bootstrap) if isinstance(e, RankStepReport))
        return sorted(r.dp_rank for r in reports if r.completed and r.dp_rank is not None)

    wait_until(lambda: finished_ranks() == [0, 1], 60.0, "each rank's report of its finished request")
    events = _events(stack.kafka_bootstrap)
    registered = [e for e in events if isinstance(e, EngineRegistered)]
    assert sorted((e.dp_rank, e.dp_size, e.max_num_seqs) for e in registered) == [(0, 2, 8), (1, 2, 8)]
    for rank, usage in enumerate(usages):
        steps = [e for e in events if isinstance(e, StepReport) and e.dp_rank == rank]
        reports = [e for e in events if isinstance(e, RankStepReport) and e.dp_rank == rank]
        assert sum(s.sum_prefill_tokens for s in steps) == usage["prompt_tokens"]
        assert sum(s.num_decode_requests for s in steps) == OUTPUT_TOKENS - 1, "one decode per token after the first"
        assert [r.step_id for r in reports] == [s.step_id for s in steps], "each step has its rank report"
        assert (sum(r.admitted for r in reports), sum(r.completed for r in reports)) == (1, 1)
        assert max(r.load_tokens for r in reports) == usage["prompt_tokens"] + OUTPUT_TOKENS - 1
        assert {r.free_slots + r.num_running for r in reports} == {4}
    estimates = EngineEstimates(ENGINE_ID)
    for event in events:
        estimates.admit(event)
        estimates.fold(event)
    assert (estimates.guard.rank_producers, estimates.guard.seq_gaps, estimates.guard.restarts) == (True, 0, 0)
    summary = estimates.summary()
    assert summary.dp is not None
    assert len(summary.dp.loads_tokens) == 2
