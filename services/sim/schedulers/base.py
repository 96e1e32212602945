"""The scheduler interface: what an engine asks each iteration, and what a scheduler answers.

An engine calls ``Scheduler.schedule(view)`` once per iteration with a read-only ``EngineView`` of
its state (waiting queue, running requests with their progress, KV blocks, token budget, event
time, the current policy document or None) and runs the ``BatchPlan`` it returns: the decodes, the
prefill chunks (new admissions included) and the preemptions. The engine checks the plan against
its limits (KV blocks, token budget, slots) and refuses a plan that breaks them. docs/simulator.md
describes how EB(k)/EB+, SLAI and other schedulers plug in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from schemas.policy_docs.base import PolicyDocument
from schemas.policy_docs.ebplus import EbplusMode
from services.sim.request import SimRequest


class EngineView(Protocol):
    """Read-only state of one engine at the start of an iteration.

    ``running`` lists requests holding KV in admission order (oldest first); ``waiting`` lists
    requests without KV in queue order (a preempted request goes back to the front).
    """

    @property
    def now_s(self) -> float: ...
    @property
    def waiting(self) -> Sequence[SimRequest]: ...
    @property
    def running(self) -> Sequence[SimRequest]: ...
    @property
    def kv_blocks_free(self) -> int: ...
    @property
    def kv_blocks_total(self) -> int: ...
    @property
    def block_size_tokens(self) -> int: ...
    @property
    def max_num_seqs(self) -> int: ...
    @property
    def token_budget_tokens(self) -> int: ...
    @property
    def policy(self) -> PolicyDocument | None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchPlan:
    """One iteration's batch.

    Attributes:
        decodes: running, prefill-complete requests that decode one token each.
        prefills: (request, chunk tokens); a request from ``waiting`` listed here is admitted.
        preempted: running requests that lose their KV (recompute) before the batch runs.
        mode: the scheduler's mode for the step report (``EbplusMode.MB``, the mixed batch of vLLM v1; ``sarathi``...).
        exclusive: prefill and decode run in separate phases (EB), which the timing model prices apart.
    """

    decodes: tuple[SimRequest, ...] = ()
    prefills: tuple[tuple[SimRequest, int], ...] = ()
    preempted: tuple[SimRequest, ...] = ()
    mode: str = EbplusMode.MB
    exclusive: bool = False

    @property
    def empty(self) -> bool:
        """True when the plan runs nothing."""
        return not self.decodes and not self.prefills


class Scheduler(Protocol):
    """Builds each iteration's batch. Pure with respect to the engine: it reads the view, never writes it."""

    @property
    def policy_kind(self) -> str | None:
        """The policy-document kind the scheduler obeys (the engine fetches it), or None."""
        ...

    def schedule(self, view: EngineView) -> BatchPlan:
        """Return the next batch (possibly empty when nothing can run)."""
        ...
