"""What every simulated engine shares: identity, waiting queue, arrivals, policy refresh, tokens, reports.

``SimEngine`` (services/sim/engine.py, one engine with paged KV) and ``DpEngine`` (services/sim/dp.py,
G ranks behind one barrier) differ in how they batch and account for memory; everything they do alike
lives here, once:

- arrival: ``request.arrived``, then either the waiting queue or, when the request can never fit the
  engine (``rejection``), an immediate ``request.finished`` with ``finish_reason=error``;
- the policy refresh at the start of each step: the current document of the engine's policy kind
  (scope: the engine id), acknowledged with ``policy.applied`` the first time a version is seen;
- ``engine.registered`` and ``engine.heartbeat``;
- a request's token at a step's end (first token, or one more token gap) and its finish;
- the step report (``step`` event and the run's metrics) that closes every iteration.

A subclass says what it registers (``registration``), which arrivals it refuses (``rejection``), how
many requests it runs (``num_running``) and how it steps (``start_step``, ``end_step``); the event
order is the same for both engine kinds.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque

from schemas.errors import ConfigError
from schemas.policy_docs.base import PolicyDocument
from services.sdk.engine_events import Registration
from services.sdk.protocol import PolicySource
from services.sdk.step_counts import StepCounts
from services.sim.request import RequestSpec, SimRequest
from services.sim.run_summary import MetricsRecorder
from services.sim.telemetry import EngineTelemetry
from services.sim.timing import TimingModel


def require_positive(config: object, names: tuple[str, ...], where: str) -> None:
    """Check an engine configuration's sizes and limits.

    Raises:
        ConfigError: the first of ``names`` whose value on ``config`` is below 1, naming ``where``.
    """
    for name in names:
        value = getattr(config, name)
        if value < 1:
            msg = f"{name} must be >= 1, got {value} ({where})"
            raise ConfigError(msg)


class EngineBase(ABC):
    """A simulated engine as the simulation drives it (services/sim/simulation.py), and the half all engines share.

    The simulation registers it, heartbeats it, hands it arrivals and calls ``start_step`` and
    ``end_step`` at event times; the subclass batches and accounts for memory in those two.

    Args:
        engine_id: the engine's id (scope of its policy documents).
        timing: prices each iteration.
        telemetry: where its events go.
        policy_source: where its policy documents are read.
        metrics: the run's recorder.
        pool: the fleet pool it serves (fleet routers read it).
        policy_kind: the policy kind its scheduler or router obeys, or None.
    """

    def __init__(
        self,
        engine_id: str,
        timing: TimingModel,
        telemetry: EngineTelemetry,
        policy_source: PolicySource,
        metrics: MetricsRecorder,
        *,
        pool: str,
        policy_kind: str | None,
    ) -> None:
        self.engine_id = engine_id
        self.pool = pool
        self.policy_kind = policy_kind
        self._policy: PolicyDocument | None = None
        self.timing = timing
        self.telemetry = telemetry
        self.policy_source = policy_source
        self.metrics = metrics
        self._waiting: deque[SimRequest] = deque()
        self._step_id = 0
        self._step_started_s = 0.0
        self.busy = False

    @property
    @abstractmethod
    def num_running(self) -> int:
        """Requests admitted and not finished."""

    @property
    def num_waiting(self) -> int:
        """Requests queued, not yet admitted."""
        return len(self._waiting)

    @abstractmethod
    def registration(self) -> Registration:
        """The limits the engine registers with."""

    @abstractmethod
    def rejection(self, spec: RequestSpec) -> str | None:
        """Why ``spec`` can never run on this engine, or None when it can."""

    @abstractmethod
    def start_step(self, now_s: float) -> float | None:
        """Plan and price the next iteration at ``now_s``; its duration, or None when idle."""

    @abstractmethod
    def end_step(self, now_s: float) -> None:
        """Apply the running iteration's work at its end ``now_s`` and report it."""

    @property
    def policy(self) -> PolicyDocument | None:
        """The policy document in effect, or None (safe defaults)."""
        return self._policy

    @property
    def load(self) -> int:
        """Requests on the engine (running plus waiting), for fleet routers."""
        return self.num_running + len(self._waiting)

    def register(self, now_s: float) -> None:
        """Announce the engine (``engine.registered``)."""
        obeys = [] if self.policy_kind is None else [self.policy_kind]
        self.telemetry.registered(now_s, self.registration(), pool=self.pool, obeys=obeys)

    def heartbeat(self, now_s: float) -> None:
        """Emit ``engine.heartbeat`` with the queue sizes."""
        self.telemetry.heartbeat(now_s, num_running=self.num_running, num_waiting=len(self._waiting))

    def arrive(self, spec: RequestSpec, now_s: float) -> None:
        """Queue a request, or reject it (finish ``error``) when it can never fit the engine."""
        self.telemetry.arrived(now_s, spec)
        self.metrics.arrived(self.engine_id, spec)
        reason = self.rejection(spec)
        if reason is not None:
            self.telemetry.finished(now_s, SimRequest(spec), finish_reason="error")
            self.metrics.rejected(self.engine_id, spec, reason)
            return
        self._waiting.append(SimRequest(spec))

    def refresh_policy(self, now_s: float) -> None:
        """Read the current document of the engine's policy kind; acknowledge a version not seen before."""
        kind = self.policy_kind
        if kind is None:
            return
        document = self.policy_source.current(kind, self.engine_id, now_s)
        if document is not None and document.version != self.telemetry.policy_versions.get(kind):
            self.telemetry.policy_applied(now_s, kind=kind, scope=self.engine_id, version=document.version)
        self._policy = document

    def token(self, request: SimRequest, now_s: float) -> bool:
        """Give ``request`` its next token at ``now_s`` (``request.first_token`` for the first); True when done."""
        request.generated_tokens += 1
        last = request.last_token_s
        if last is None:
            request.first_token_s = now_s
            self.telemetry.first_token(now_s, request)
        else:
            request.gaps_s.append(now_s - last)
        request.last_token_s = now_s
        return request.generated_tokens >= request.target_output_tokens

    def finish(self, request: SimRequest, now_s: float) -> None:
        """Report ``request`` finished with its natural reason (``stop`` or ``length``)."""
        reason = request.spec.finish_reason
        self.telemetry.finished(now_s, request, finish_reason=reason)
        self.metrics.finished(self.engine_id, request, now_s, reason)

    def report_step(self, now_s: float, counts: StepCounts, *, tokens: int) -> None:
        """Close the iteration: the ``step`` event, the run's step metrics, the next step id; idle again.

        Args:
            now_s: the iteration's end.
            counts: what it did.
            tokens: tokens it produced or computed, for throughput.
        """
        self.telemetry.step(now_s, counts, step_id=self._step_id)
        kv_use_frac = counts.kv_blocks_used / counts.kv_blocks_total
        self.metrics.step(
            self.engine_id,
            now_s,
            duration_s=counts.duration_s,
            tokens=tokens,
            kv_use_frac=kv_use_frac,
            num_running=counts.num_running,
            num_waiting=counts.num_waiting,
        )
        self._step_id += 1
        self.busy = False
