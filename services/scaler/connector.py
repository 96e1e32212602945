"""The seam between the scaler and what it resizes: one ``ScaleConnector`` per pool.

A connector reports the replicas its pool runs (where it can read them) and sets a new count.
Each kind lives in its own module: ``scale_subresource.py`` patches a Kubernetes workload's
``scale`` subresource, ``external_scaler.py`` answers KEDA's external scaler calls with the count,
``local_engines.py`` starts and stops engine processes on this machine.
Failures reach the service as ``BackendUnavailableError``, which it records on the action and
retries after the pool's cool-down; they never stop the other pools.
"""

from __future__ import annotations

from typing import Protocol

from schemas.errors import BackendUnavailableError
from schemas.scaling import ConnectorKind


class ScaleConnector(Protocol):
    """Reads and sets one pool's replica count."""

    @property
    def kind(self) -> ConnectorKind:
        """Which connector this is, as the action events name it."""
        ...

    @property
    def target(self) -> str:
        """What it resizes, for the action events: ``Deployment/llm/vllm-short``, ``keda/short``."""
        ...

    def replicas(self) -> int | None:
        """The replicas the pool runs now; None where the connector cannot read them.

        Raises:
            BackendUnavailableError: the backend (the Kubernetes API) did not answer.
        """
        ...

    def scale(self, replicas: int) -> str | None:
        """Set the pool to ``replicas``; return a note for the action's record, or None.

        The note says what the connector had to do that the operator should know (a replica stopped
        at its drain timeout with requests still in flight).

        Raises:
            BackendUnavailableError: the backend refused or did not answer; the count is unchanged.
        """
        ...

    def close(self) -> None:
        """Release what the connector holds (the local connector stops the processes it started)."""
        ...


class MemoryConnector:
    """A connector that keeps the count in memory: the tests' pools, and a pool tried out before it is wired."""

    def __init__(self, pool: str, replicas: int, *, fail_with: str | None = None) -> None:
        """Start at ``replicas``; with ``fail_with``, every ``scale`` fails with that message."""
        self._pool = pool
        self._replicas = replicas
        self.fail_with = fail_with
        self.calls: list[int] = []

    @property
    def kind(self) -> ConnectorKind:
        """``memory``: nothing leaves the process."""
        return "memory"

    @property
    def target(self) -> str:
        """``memory/<pool>``."""
        return f"memory/{self._pool}"

    def replicas(self) -> int | None:
        """The count last set."""
        return self._replicas

    def scale(self, replicas: int) -> str | None:
        """Record the call and set the count, or fail as configured."""
        self.calls.append(replicas)
        if self.fail_with is not None:
            raise BackendUnavailableError(self.fail_with, backend="memory")
        self._replicas = replicas
        return None

    def close(self) -> None:
        """Nothing to release."""
