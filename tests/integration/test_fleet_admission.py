"""Admission sheds on a real vLLM server: overload leads to queueing, then 429 with Retry-After, all counted.

Nothing here is written by hand: one vLLM CPU server (the tiny model of services/engines/vllm/tiny_servers.py
under ``SlaiScheduler``, ``max_num_seqs`` 2) registers with the real broker, the real stream processor and
policy service (with ``governor fleet up``'s policy file) decide its admission documents from its own
telemetry, and a real gateway, which finds the server from its registration, obeys them. Bursts of short
requests faster than the server finishes them are sent until the gateway sheds some; then the client's
429s, the gateway's shed counter, its ``gateway.queued``/``gateway.shed`` events and the decided levels must
agree. The server's start takes minutes on the loaded test machine.
"""

from __future__ import annotations

import asyncio
import subprocess
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.cli.fleet import policy_config
from services.cli.live import start_service, stop_service, wait_until_consuming
from services.fleet_run.client import Outcome, drive
from services.fleet_run.ledger import read_ledger
from services.fleet_run.processes import (
    SLAI_SCHEDULER,
    Server,
    metrics_text,
    start_gateway,
    start_server,
    stop,
    wait_gateway,
    wait_servers,
)
from services.fleet_run.report import counter_total
from services.fleet_run.workload import burst
from services.stack.launcher import StackState
from services.stack.processes import free_port

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    pytest.importorskip("vllm", reason="vLLM is not installed: bash ops/install.sh --dev --vllm")
    pytest.importorskip("tokenizers", reason="the tokenizers package comes with vLLM")

from services.engines.vllm.tiny_servers import SERVED_MODEL, tiny_model_dir

pytestmark = [pytest.mark.integration, pytest.mark.slow]

START_S = 900.0  # a vLLM CPU server's start on a loaded two-core machine; a safety net, never asserted
DEADLINE_S = 5
WAVES = 4
WAVE_REQUESTS = 60
WAVE_RATE_PER_S = 10.0


@pytest.fixture
def services(stack: StackState, deployment: str, tmp_path: Path) -> Iterator[None]:
    """The stream processor and the policy service of ``deployment``, with the fleet run's policy file."""
    config = tmp_path / "policy.toml"
    config.write_text(policy_config())
    started: list[subprocess.Popen[bytes]] = []
    try:
        for name in ("stream", "policy"):
            log = tmp_path / f"{name}.log"
            process = start_service(
                name, stack, deployment, 10.0, log, config=config, shadows=(), stream_runtime="kafka"
            )
            started.append(process)
            assert wait_until_consuming(log, process, 120.0), f"the {name} service did not join: {log.read_text()}"
        yield
    finally:
        for process in started:
            stop_service(process)


@pytest.fixture
def server(stack: StackState, deployment: str, tmp_path: Path, services: None) -> Iterator[Server]:
    """One SLAI vLLM server in pool ``short`` with two slots, registered with its endpoint."""
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    started = start_server(
        model=tiny_model_dir(model_dir),
        engine_id=f"{deployment}-short-0",
        pool="short",
        port=free_port(),
        dp_group=None,
        dp_rank=None,
        max_num_seqs=2,
        seed=0,
        state=stack,
        deployment=deployment,
        log=tmp_path / "short-0.log",
        scheduler_cls=SLAI_SCHEDULER,
    )
    try:
        wait_servers([started], START_S, lambda _line: None)
        yield started
    finally:
        stop(started.process)


def test_overload_of_a_real_engine_is_queued_then_shed_with_429_and_counted(
    stack: StackState, deployment: str, server: Server, tmp_path: Path
) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(f"[queue]\ndeadline_s = {DEADLINE_S}\nmax_waiting = 4\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "gateway.log"
    gateway = start_gateway(
        config=config, port=port, deployment=deployment, gateway_id="gateway-test", state=stack, log=log
    )
    outcomes: list[Outcome] = []
    try:
        wait_gateway(gateway, url, {server.url}, 180.0, log)
        before = metrics_text(url)
        for wave in range(WAVES):
            requests = burst(wave, WAVE_REQUESTS, WAVE_RATE_PER_S)
            outcomes += asyncio.run(drive(url, SERVED_MODEL, requests, 600.0, f"wave{wave}"))
            if any(o.status == 429 for o in outcomes):
                break
        after = metrics_text(url)
    finally:
        stop(gateway)
    shed = [o for o in outcomes if o.status == 429]
    assert shed, f"no request of {len(outcomes)} was shed: {sorted({o.status for o in outcomes})}"
    assert {o.status for o in outcomes} <= {200, 429}
    assert {o.shed_reason for o in shed} <= {"deadline", "queue_full"}
    assert {o.retry_after_s for o in shed} == {DEADLINE_S}
    grown = counter_total(after, "governor_gateway_shed_total") - counter_total(before, "governor_gateway_shed_total")
    assert grown == len(shed)
    ledger = read_ledger(stack.kafka_bootstrap, deployment)
    admission = ledger.activity("admission")
    assert admission.levels.get("overloaded", 0) >= 1, admission
    assert "gateway-test" in admission.applied
    assert sum(n for reasons in ledger.shed.values() for n in reasons.values()) == len(shed)
    deadline_sheds = sum(o.shed_reason == "deadline" for o in shed)
    assert sum(ledger.queued.values()) >= deadline_sheds  # a request shed at its deadline waited in the queue
