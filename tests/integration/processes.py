"""Start and stop ``governor run stream`` and ``governor run policy`` as real child processes, for crash,
rebalance and outage tests."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from schemas.names import estimate_key
from services.health import ServiceMetrics
from services.policy.service import PolicyService
from services.stack.launcher import StackState
from services.store.redis_store import RedisStore
from services.stream.processor import StreamProcessor

ROOT = Path(__file__).resolve().parents[2]
_STARTED: list[subprocess.Popen[bytes]] = []  # every child started here, until ``reap_children``


def reap_children() -> list[int]:
    """Kill the children started here that still run (a test that failed before it stopped them); return their pids.

    Left running, they would go on writing to the broker and Redis under the next test, and pytest
    reports their ``Popen`` objects' ``ResourceWarning`` as a failure of whichever test collects them.
    """
    running = [process for process in _STARTED if process.poll() is None]
    for process in running:
        process.kill()
    for process in running:
        process.wait(timeout=30)
    _STARTED.clear()
    return [process.pid for process in running]


def start_stream(
    stack: StackState,
    deployment: str,
    log_path: Path,
    idle_exit_s: float | None = None,
    *,
    runtime: str = "kafka",
    redis_url: str | None = None,
) -> subprocess.Popen[bytes]:
    """Start a stream processor (``runtime`` kafka or faust) for ``deployment`` as a child, logging to ``log_path``.

    It uses the stack's Redis unless ``redis_url`` names another.
    """
    return start_service(
        stack,
        "stream",
        deployment,
        log_path,
        idle_exit_s=idle_exit_s,
        extra=["--runtime", runtime],
        redis_url=redis_url,
    )


def start_service(
    stack: StackState,
    service: str,
    deployment: str,
    log_path: Path,
    *,
    idle_exit_s: float | None = None,
    extra: list[str] | None = None,
    redis_url: str | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``governor run SERVICE`` (stream or policy) for ``deployment`` as a child, logging to ``log_path``."""
    argv = [
        sys.executable,
        "-m",
        "services.cli",
        "run",
        service,
        "--deployment",
        deployment,
        "--kafka-bootstrap",
        stack.kafka_bootstrap,
        "--redis-url",
        redis_url or stack.redis_url,
        "--metrics-port",
        "0",
        *(extra or []),
    ]
    if idle_exit_s is not None:
        argv += ["--idle-exit-s", str(idle_exit_s)]
    with log_path.open("ab") as log:
        process = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    _STARTED.append(process)
    return process


def start_crash_driver(
    stack: StackState, service: str, deployment: str, log_path: Path, *flags: str
) -> subprocess.Popen[bytes]:
    """Start tests/integration/crash_driver.py for ``service`` (stream or policy) with ``flags``."""
    argv = [
        sys.executable,
        "-m",
        "tests.integration.crash_driver",
        service,
        "--deployment",
        deployment,
        "--kafka-bootstrap",
        stack.kafka_bootstrap,
        "--redis-url",
        stack.redis_url,
        *flags,
    ]
    with log_path.open("ab") as log:
        process = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    _STARTED.append(process)
    return process


def applied_total(store: RedisStore) -> int:
    """Sum over partitions of (applied offset + 1): how many telemetry records are applied."""
    return sum(offset + 1 for offset in store.applied_offsets("stream").values())


def wait_until(predicate: object, timeout_s: float, what: str, state: Callable[[], object] | None = None) -> None:
    """Poll ``predicate()`` every 0.1 s until true; after ``timeout_s`` fail with ``what`` and ``state()`` then."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.1)
    msg = f"timed out after {timeout_s:.0f} s waiting for {what}"
    if state is not None:
        msg += f"; at the end: {state()}"
    raise AssertionError(msg)


def summaries(store: RedisStore, deployment: str, engines: list[str]) -> dict[str, object]:
    """The stored estimate summaries of ``engines``, parsed."""
    raw = {e: store._client.get(estimate_key(deployment, e, "summary")) for e in engines}
    return {e: json.loads(v) if v is not None else None for e, v in raw.items()}


@contextmanager
def running_in_thread(service: StreamProcessor | PolicyService) -> Iterator[None]:
    """Run ``service`` on a thread of the test; stop, join and close it when the block ends."""
    thread = threading.Thread(target=service.run, daemon=True)
    thread.start()
    try:
        yield
    finally:
        service.stop()
        thread.join(timeout=30)
        service.close()


def log_resets(metrics: ServiceMetrics) -> float:
    """How many log resets a service counted (``governor_log_resets_total``, over its partitions)."""
    return sum(
        sample.value
        for family in metrics.registry.collect()
        if family.name == "governor_log_resets"
        for sample in family.samples
        if sample.name == "governor_log_resets_total"
    )
