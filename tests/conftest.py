"""Shared test configuration: the hypothesis profiles, and a Redis server of a test's own."""

from __future__ import annotations

import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from services.stack.processes import free_port, wait_for_port

settings.register_profile(
    "ci", derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci")


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A redis-server of this test alone, on its own port: its URL and its process (to pause or stop it).

    No Redis runs on the test machines unless a test starts one (ops/install.sh --dev installs the binary).
    """
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("needs redis-server on the PATH (bash ops/install.sh --dev installs it)")
    port = free_port()
    argv = [binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no"]
    with (tmp_path / "redis.log").open("wb") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for_port("127.0.0.1", port, 10.0, "redis")
        yield f"redis://127.0.0.1:{port}/0", process
    finally:
        process.send_signal(signal.SIGCONT)
        process.terminate()
        process.wait(timeout=10)
