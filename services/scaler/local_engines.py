"""The local connector: a pool is engine processes on this machine, started and stopped to follow the plan.

Each replica is one process from the pool's ``[pools.<name>.local]`` table (``schemas/scaling.py``
``LocalEngineSpec``): ``command`` with ``{port}`` and ``{engine_id}`` filled in, slot i on
``first_port + i``, the replica's names (``GOVERNOR_ENGINE_ID=<pool>-<i>``, ``GOVERNOR_POOL``) and the
table's ``env`` added to the environment it inherits, so Governor's vLLM plugin reports it as an
engine of that pool.

- Up: start the new replicas, wait for each one's ``GET /health`` to answer 200 (within
  ``start_timeout_s``); only then is it counted and put in the gateway's rotation. One that exits or
  does not answer in time is stopped, and the call fails with the count it reached.
- Down: the newest replicas leave first. Each is drained: taken out of the gateway's rotation
  (``POST /admin/upstreams/drain``), then waited on until neither the gateway nor the engine itself
  (vLLM's ``num_requests_running`` and ``num_requests_waiting``) has a request in flight, at most
  ``drain_timeout_s``; a replica stopped at that bound is logged and named in the note the action
  records. Then SIGTERM, SIGKILL after ``stop_timeout_s``, and it leaves the gateway's list.
- ``replicas()`` counts the processes alive; one that died on its own is reaped, logged and taken out
  of the gateway, so the scaler's next pass sees the pool short and starts another.

How many to start or stop is not this module's decision: the scaler's rules (policies/scaling) keep
the pool within its bounds and step limit, and this connector does what it is told.

Without a ``[gateway]`` table replicas are not registered anywhere and the drain waits on the engine's
own counts only. The processes are this scaler's children: ``close`` stops them all.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import structlog

from schemas.errors import BackendUnavailableError
from schemas.scaling import ConnectorKind, LocalEngineSpec
from services.scaler.gateway_admin import GatewayAdmin

log = structlog.get_logger(__name__)

POLL_S = 0.5
IN_FLIGHT_SERIES = ("vllm:num_requests_running", "vllm:num_requests_waiting")
REMOVE_TRIES = 10


@dataclass(slots=True, kw_only=True)
class LocalReplica:
    """One engine process of the pool: its slot, where it listens and the process."""

    slot: int
    engine_id: str
    url: str
    process: subprocess.Popen[bytes]
    output: IO[bytes] | None


def engine_in_flight(url: str, timeout_s: float) -> int | None:
    """Requests running or waiting on the vLLM engine at ``url`` (its ``/metrics``); None when it does not answer."""
    try:
        with urllib.request.urlopen(f"{url}/metrics", timeout=timeout_s) as response:
            text = response.read().decode()
    except (urllib.error.URLError, OSError):
        return None
    total = 0.0
    for line in text.splitlines():
        series = line.split("{", 1)[0].split(" ", 1)[0]
        if series in IN_FLIGHT_SERIES:
            total += float(line.rsplit(" ", 1)[1])
    return int(total)


def healthy(url: str, timeout_s: float) -> bool:
    """Whether ``GET {url}/health`` answers 200."""
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout_s) as response:
            status: int = response.status
            return status == 200
    except (urllib.error.URLError, OSError):
        return False


class LocalEngineConnector:
    """Runs one pool as engine processes on this machine (see the module docstring)."""

    def __init__(
        self,
        pool: str,
        spec: LocalEngineSpec,
        *,
        gateway: GatewayAdmin | None = None,
        probe_timeout_s: float = 2.0,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """Run ``pool``'s replicas as ``spec`` says; register and drain them through ``gateway`` where given."""
        self._pool = pool
        self._spec = spec
        self._gateway = gateway
        self._probe_timeout_s = probe_timeout_s
        self._monotonic = monotonic
        self._sleep = sleep
        self._replicas: list[LocalReplica] = []
        self.forced_stops = 0

    @property
    def kind(self) -> ConnectorKind:
        """``local``."""
        return "local"

    @property
    def target(self) -> str:
        """``local/<pool>``."""
        return f"local/{self._pool}"

    def urls(self) -> list[str]:
        """The URLs of the replicas running, oldest first."""
        self._reap()
        return [replica.url for replica in self._replicas]

    def pids(self) -> list[int]:
        """The process ids of the replicas running, oldest first."""
        self._reap()
        return [replica.process.pid for replica in self._replicas]

    def replicas(self) -> int | None:
        """The replicas alive (healthy once, when started); one that died is reaped and leaves the gateway."""
        self._reap()
        return len(self._replicas)

    def scale(self, replicas: int) -> str | None:
        """Start or drain and stop replicas until ``replicas`` run; return a note of forced stops, or None.

        Raises:
            BackendUnavailableError: a new replica did not become healthy or could not join the gateway
                (it is stopped; the pool keeps the replicas that did), or the gateway refused a drain.
        """
        self._reap()
        current = len(self._replicas)
        if replicas > current:
            self._start(replicas - current)
            return None
        if replicas < current:
            return self._retire(self._replicas[replicas:])
        return None

    def close(self) -> None:
        """Stop every replica this connector started (drained, as a scale to zero would)."""
        self._reap()
        if self._replicas:
            self._retire(list(self._replicas))

    def _start(self, count: int) -> None:
        used = {replica.slot for replica in self._replicas}
        slots = [slot for slot in range(len(used) + count) if slot not in used][:count]
        starting = [self._spawn(slot) for slot in slots]
        deadline = self._monotonic() + self._spec.start_timeout_s
        waiting = list(starting)
        failed: list[tuple[LocalReplica, str]] = []
        while waiting:
            for replica in list(waiting):
                code = replica.process.poll()
                if code is not None:
                    failed.append((replica, f"exited with {code} before /health answered"))
                    waiting.remove(replica)
                elif healthy(replica.url, self._probe_timeout_s):
                    waiting.remove(replica)
                    self._join(replica, failed)
            if waiting and self._monotonic() >= deadline:
                failed += [(r, f"no /health in {self._spec.start_timeout_s:g} s") for r in waiting]
                break
            if waiting:
                self._sleep(POLL_S)
        for replica, _ in failed:
            self._stop_process(replica)
        if failed:
            reasons = "; ".join(f"{r.engine_id} at {r.url}: {why}" for r, why in failed)
            msg = f"{self.target}: {len(failed)} of {count} new replicas did not start ({reasons})"
            raise BackendUnavailableError(msg, backend="local")

    def _join(self, replica: LocalReplica, failed: list[tuple[LocalReplica, str]]) -> None:
        """Count a healthy replica and put it in the gateway's rotation (a refusal fails the replica)."""
        if self._gateway is not None:
            try:
                self._gateway.add(replica.url, self._pool, self._spec.model)
            except BackendUnavailableError as exc:
                failed.append((replica, f"the gateway refused it: {exc}"))
                return
        self._replicas.append(replica)
        self._replicas.sort(key=lambda r: r.slot)
        log.info("replica_started", pool=self._pool, engine_id=replica.engine_id, url=replica.url)

    def _spawn(self, slot: int) -> LocalReplica:
        port = self._spec.first_port + slot
        engine_id = f"{self._pool}-{slot}"
        argv = [part.replace("{port}", str(port)).replace("{engine_id}", engine_id) for part in self._spec.command]
        names = {**self._spec.env, "GOVERNOR_ENGINE_ID": engine_id, "GOVERNOR_POOL": self._pool}
        # env(1) adds the replica's names to the environment it inherits: only services/settings.py reads the
        # process environment, and the replica keeps the scaler's (its Kafka, Redis and deployment reach the plugin).
        command = ["env", *(f"{key}={value}" for key, value in sorted(names.items())), *argv]
        output = None
        if self._spec.log_dir is not None:
            folder = Path(self._spec.log_dir)
            folder.mkdir(parents=True, exist_ok=True)
            output = (folder / f"{engine_id}.log").open("ab")
        try:
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=output if output is not None else subprocess.DEVNULL,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            if output is not None:
                output.close()
            msg = f"{self.target}: cannot start {argv[0]}: {exc}"
            raise BackendUnavailableError(msg, backend="local") from exc
        url = f"http://{self._spec.host}:{port}"
        log.info("replica_starting", pool=self._pool, engine_id=engine_id, url=url, pid=process.pid)
        return LocalReplica(slot=slot, engine_id=engine_id, url=url, process=process, output=output)

    def _retire(self, leaving: list[LocalReplica]) -> str | None:
        """Drain ``leaving`` together (one shared bound), then stop each; return the note of forced stops."""
        for replica in leaving:
            if self._gateway is not None:
                self._gateway.drain(replica.url)
            log.info("replica_draining", pool=self._pool, engine_id=replica.engine_id, url=replica.url)
        deadline = self._monotonic() + self._spec.drain_timeout_s
        busy = {replica.engine_id: self._in_flight(replica) for replica in leaving}
        while any(busy.values()) and self._monotonic() < deadline:
            self._sleep(POLL_S)
            busy = {replica.engine_id: self._in_flight(replica) for replica in leaving}
        notes = []
        for replica in leaving:
            left = busy[replica.engine_id]
            if left:
                self.forced_stops += 1
                notes.append(f"{replica.engine_id} stopped at the drain timeout with {left} requests in flight")
                log.warning(
                    "replica_drain_timed_out",
                    pool=self._pool,
                    engine_id=replica.engine_id,
                    in_flight=left,
                    drain_timeout_s=self._spec.drain_timeout_s,
                )
            self._stop_process(replica)
            self._replicas.remove(replica)
            self._forget(replica)
            log.info("replica_stopped", pool=self._pool, engine_id=replica.engine_id, forced=bool(left))
        if not notes:
            return None
        return (f"drain timeout {self._spec.drain_timeout_s:g} s: " + "; ".join(notes))[:1024]

    def _in_flight(self, replica: LocalReplica) -> int:
        """Requests still on ``replica``: the larger of the gateway's count and the engine's own."""
        if replica.process.poll() is not None:
            return 0
        gateway = 0
        if self._gateway is not None:
            try:
                gateway = self._gateway.in_flight(replica.url) or 0
            except BackendUnavailableError as exc:
                log.warning("gateway_in_flight_unread", url=replica.url, error=str(exc))
        engine = engine_in_flight(replica.url, self._probe_timeout_s) or 0
        return max(gateway, engine)

    def _stop_process(self, replica: LocalReplica) -> None:
        """SIGTERM, then SIGKILL after ``stop_timeout_s``; returns once the process is gone.

        The replica runs in its own session, so what it started (vLLM's engine-core process) is in its
        process group: the SIGKILL goes to the group, and the group is swept once the leader is gone,
        so no engine outlives its replica.
        """
        process = replica.process
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=self._spec.stop_timeout_s)
            except subprocess.TimeoutExpired:
                log.warning("replica_killed", pool=self._pool, engine_id=replica.engine_id)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        if replica.output is not None:
            replica.output.close()

    def _forget(self, replica: LocalReplica) -> None:
        """Take a stopped replica off the gateway's list (it may take a moment for its requests to fail)."""
        if self._gateway is None:
            return
        for _ in range(REMOVE_TRIES):
            try:
                if self._gateway.remove(replica.url):
                    return
            except BackendUnavailableError as exc:
                log.warning("replica_not_removed", url=replica.url, error=str(exc))
                return
            self._sleep(POLL_S)
        log.warning("replica_not_removed", url=replica.url, error="still in flight at the gateway")

    def _reap(self) -> None:
        for replica in [r for r in self._replicas if r.process.poll() is not None]:
            log.warning("replica_exited", pool=self._pool, engine_id=replica.engine_id, code=replica.process.returncode)
            self._replicas.remove(replica)
            if replica.output is not None:
                replica.output.close()
            if self._gateway is not None:
                try:
                    self._gateway.drain(replica.url)
                except BackendUnavailableError as exc:
                    log.warning("replica_not_removed", url=replica.url, error=str(exc))
                    continue
                self._forget(replica)
