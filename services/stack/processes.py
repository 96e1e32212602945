"""Detached child processes the stack starts, and the port checks that tell when they answer."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from pathlib import Path

from schemas.errors import BackendUnavailableError


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def port_open(host: str, port: int, timeout_s: float = 0.5) -> bool:
    """True when a TCP connection to host:port succeeds within ``timeout_s``."""
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=timeout_s):
        return True
    return False


def spawn(argv: list[str], log_path: Path) -> int:
    """Start ``argv`` in its own session, output to ``log_path``, and return its pid.

    posix_spawn rather than Popen: the child outlives this process by design, so there is no
    Popen object to wait on (nor one to warn about a still-running child when collected). The
    child gets a minimal, explicit environment so that nothing of the caller's configures it.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        actions = [
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_DUP2, log_fd, 1),
            (os.POSIX_SPAWN_DUP2, log_fd, 2),
        ]
        return os.posix_spawn(argv[0], argv, {"PATH": "/usr/bin:/bin"}, file_actions=actions, setsid=True)
    finally:
        os.close(log_fd)


def pid_alive(pid: int) -> bool:
    """True when a process with ``pid`` exists and is not a zombie whose every thread has exited.

    A killed JVM's main thread turns zombie while its other threads are still exiting, and those
    still hold its sockets: until the last one is gone its listener may accept connections, so a
    zombie leader with threads left counts as alive.
    """
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    if stat.exists():
        with contextlib.suppress(OSError, IndexError):
            if stat.read_text().split(")")[-1].split()[0] != "Z":
                return True
            return len(os.listdir(f"/proc/{pid}/task")) > 1
    return True


def stop(pid: int, timeout_s: float = 5.0) -> None:
    """Terminate ``pid`` (SIGTERM, then SIGKILL after ``timeout_s``) and return once it is gone.

    It also waits for the SIGKILL to take effect: a process still dying holds its listening port,
    so a broker started at once on the same port would fail to bind while the dying one still
    accepted the new broker's clients. A missing process is fine.
    """
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if _gone_within(pid, timeout_s):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    _gone_within(pid, KILL_WAIT_S)


KILL_WAIT_S = 10.0


def _gone_within(pid: int, timeout_s: float) -> bool:
    """Reap ``pid`` if it is a child and poll until it is gone; whether it went within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        if not pid_alive(pid):
            return True
        time.sleep(0.05)
    return False


def wait_for_port(host: str, port: int, timeout_s: float, what: str, *, pid: int | None = None) -> None:
    """Block until host:port accepts connections.

    With ``pid``, the process that should open the port: its exit ends the wait at once (a JVM
    that failed to start would otherwise be waited on for the whole timeout).

    Raises:
        BackendUnavailableError: it did not within ``timeout_s``, or ``pid`` exited first.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if port_open(host, port):
            return
        if pid is not None and not pid_alive(pid):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            msg = f"{what} (pid {pid}) exited before it answered on {host}:{port}; see its log"
            raise BackendUnavailableError(msg, backend=what)
        time.sleep(0.05)
    msg = f"{what} did not answer on {host}:{port} within {timeout_s:.0f} s"
    raise BackendUnavailableError(msg, backend=what)
