"""The real processes of ``governor fleet up``: vLLM CPU servers with Governor's plugin, and gateways.

The servers are the tiny random Llama with the word-level tokenizer of services/engines/vllm/tiny_servers.py (dummy
weights, one OpenMP thread each), with the plugin's environment of docs/engines/vllm.md: each says where it
listens (``GOVERNOR_ENDPOINT_URL``), its pool, and, for the ranks of the DP deployment, ``GOVERNOR_DP_GROUP``
and ``GOVERNOR_DP_RANK``, so the governed gateway finds them from their registrations alone. A server may run
one of Governor's schedulers (``--scheduler-cls``: ``EBPLUS_SCHEDULER``, ``SLAI_SCHEDULER``), which then
publishes its exact telemetry and obeys its EB+ or SLAI document (the plugin stays passive). Start-up takes
minutes on a loaded CPU machine, so the wait prints what each server is doing every ``PROGRESS_EVERY_S``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from services.engines.vllm.tiny_servers import vllm_command
from services.settings import child_environment
from services.stack.launcher import StackState

PROGRESS_EVERY_S = 20.0
EBPLUS_SCHEDULER = "services.engines.vllm.scheduler.EbplusScheduler"
SLAI_SCHEDULER = "services.engines.vllm.scheduler.SlaiScheduler"
STOP_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Server:
    """One vLLM server of the fleet as it was started."""

    engine_id: str
    pool: str
    url: str
    dp_group: str | None
    dp_rank: int | None
    max_num_seqs: int
    log: Path
    process: subprocess.Popen[bytes]
    scheduler_cls: str | None = None


def start_server(
    *,
    model: Path,
    engine_id: str,
    pool: str,
    port: int,
    dp_group: str | None,
    dp_rank: int | None,
    max_num_seqs: int,
    seed: int,
    state: StackState,
    deployment: str,
    log: Path,
    scheduler_cls: str | None = None,
) -> Server:
    """Start one server registering as an upstream of ``deployment``, under ``scheduler_cls`` if given."""
    url = f"http://127.0.0.1:{port}"
    env = {
        "OMP_NUM_THREADS": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "GOVERNOR_ENGINE_ID": engine_id,
        "GOVERNOR_DEPLOYMENT": deployment,
        "GOVERNOR_KAFKA_BOOTSTRAP": state.kafka_bootstrap,
        "REDIS_URL": state.redis_url,
        "GOVERNOR_POOL": pool,
        "GOVERNOR_ENDPOINT_URL": url,
    }
    if dp_group is not None:
        env["GOVERNOR_DP_GROUP"] = dp_group
        env["GOVERNOR_DP_RANK"] = str(dp_rank)
    command = vllm_command(model, port, max_num_seqs=max_num_seqs, seed=seed, scheduler_cls=scheduler_cls)
    argv = [*command, "--enable-logging-iteration-details"]
    with log.open("w") as output:
        process = subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT, env=child_environment(env))
    return Server(
        engine_id=engine_id,
        pool=pool,
        url=url,
        dp_group=dp_group,
        dp_rank=dp_rank,
        max_num_seqs=max_num_seqs,
        log=log,
        process=process,
        scheduler_cls=scheduler_cls,
    )


def answers(url: str) -> bool:
    """Whether ``url`` answers 200 now."""
    try:
        with urllib.request.urlopen(url, timeout=5.0) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def _last_line(log: Path) -> str:
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1][-120:] if lines else "(no output yet)"


def wait_servers(servers: Sequence[Server], timeout_s: float, say: Callable[[str], None]) -> None:
    """Return once every server's ``/health`` answers, printing progress.

    Raises:
        RuntimeError: a server exited or the timeout passed (with the tail of its log).
    """
    started = time.monotonic()
    last_said = started
    waiting = list(servers)
    while waiting:
        for server in list(waiting):
            if server.process.poll() is not None:
                msg = f"{server.engine_id} exited with {server.process.returncode}: {server.log.read_text()[-2000:]}"
                raise RuntimeError(msg)
            if answers(f"{server.url}/health"):
                say(f"  {server.engine_id} up at {server.url} after {time.monotonic() - started:.0f} s")
                waiting.remove(server)
        if not waiting:
            return
        now = time.monotonic()
        if now - started > timeout_s:
            names = ", ".join(s.engine_id for s in waiting)
            msg = f"{names} not up after {timeout_s:.0f} s; last log line: {_last_line(waiting[0].log)}"
            raise RuntimeError(msg)
        if now - last_said >= PROGRESS_EVERY_S:
            last_said = now
            for server in waiting:
                say(f"  {now - started:4.0f} s  {server.engine_id} starting: {_last_line(server.log)}")
        time.sleep(2.0)


def start_gateway(
    *,
    config: Path,
    port: int,
    deployment: str,
    gateway_id: str,
    state: StackState,
    log: Path,
) -> subprocess.Popen[bytes]:
    """Start ``governor gateway`` as a child process, its JSON log in ``log``."""
    argv = [
        sys.executable,
        "-m",
        "services.cli",
        "gateway",
        *("--gateway-config", str(config), "--gateway-port", str(port), "--gateway-id", gateway_id),
        *("--deployment", deployment, "--kafka-bootstrap", state.kafka_bootstrap, "--redis-url", state.redis_url),
        *("--log-format", "json"),
    ]
    with log.open("w") as output:
        return subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT)


def upstream_urls(gateway_url: str) -> set[str]:
    """The URLs the gateway lists as active upstreams (its admin API), empty while it does not answer."""
    try:
        with urllib.request.urlopen(f"{gateway_url}/admin/upstreams", timeout=5.0) as response:
            entries = json.loads(response.read())
    except (OSError, ValueError):
        return set()
    return {str(e["url"]) for e in entries if e.get("state") == "active"}


def wait_gateway(
    process: subprocess.Popen[bytes], gateway_url: str, urls: set[str], timeout_s: float, log: Path
) -> None:
    """Return once the gateway is ready and lists every URL of ``urls`` as an active upstream.

    Raises:
        RuntimeError: the gateway exited or the timeout passed.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        if process.poll() is not None:
            msg = f"the gateway exited with {process.returncode}: {log.read_text()[-2000:]}"
            raise RuntimeError(msg)
        if urls <= upstream_urls(gateway_url) and answers(f"{gateway_url}/readyz"):
            return
        if time.monotonic() > deadline:
            msg = f"the gateway did not list {sorted(urls - upstream_urls(gateway_url))} within {timeout_s:.0f} s"
            raise RuntimeError(msg)
        time.sleep(1.0)


def metrics_text(gateway_url: str) -> str:
    """The gateway's Prometheus exposition now."""
    with urllib.request.urlopen(f"{gateway_url}/metrics", timeout=10.0) as response:
        return str(response.read().decode())


def stop(process: subprocess.Popen[bytes]) -> int:
    """SIGTERM, then SIGKILL after ``STOP_TIMEOUT_S``; the exit code (already-exited processes too)."""
    if process.poll() is None:
        process.terminate()
    try:
        return process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait(timeout=10)
