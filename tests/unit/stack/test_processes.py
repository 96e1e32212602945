"""services/stack/processes.py: when a started process counts as gone, and waiting for a port it should open."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from schemas.errors import BackendUnavailableError
from services.stack.processes import free_port, pid_alive, spawn, stop, wait_for_port


class TestPidAlive:
    def test_a_running_child_is_alive_until_stopped(self, tmp_path: Path) -> None:
        pid = spawn(["/bin/sleep", "30"], tmp_path / "sleep.log")
        assert pid_alive(pid)
        stop(pid)
        assert not pid_alive(pid)

    def test_a_reaped_child_is_gone(self, tmp_path: Path) -> None:
        pid = spawn(["/bin/true"], tmp_path / "true.log")
        os.waitpid(pid, 0)
        assert not pid_alive(pid)


class TestWaitForPort:
    def test_a_process_that_exits_ends_the_wait_with_its_pid_named(self, tmp_path: Path) -> None:
        pid = spawn(["/bin/sh", "-c", "exit 3"], tmp_path / "exits.log")
        with pytest.raises(BackendUnavailableError, match=rf"pid {pid}\) exited before it answered"):
            wait_for_port("127.0.0.1", free_port(), 600.0, "kafka", pid=pid)

    def test_an_open_port_returns_at_once(self) -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen()
            wait_for_port("127.0.0.1", listener.getsockname()[1], 600.0, "kafka")
