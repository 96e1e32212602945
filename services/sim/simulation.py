"""The simulated fleet on the event loop: arrivals, engine steps, heartbeats and progress ticks.

``Simulation`` owns the entities (engines, the fleet router, the workload's requests) and one
handler per event type; each handler returns the events it causes (services/sim/core.py). Engines
register at the start, heartbeat every ``heartbeat_interval_s`` of event time, and step back to
back while they have work.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from services.sim.core import EventLoop, SimEvent
from services.sim.metrics import MetricsRecorder
from services.sim.request import RequestSpec
from services.sim.routing import FleetRouter


class SimulatedEngine(Protocol):
    """What the simulation drives: a single engine (``SimEngine``) or a DP deployment (``DpEngine``)."""

    @property
    def engine_id(self) -> str: ...
    @property
    def pool(self) -> str: ...
    @property
    def load(self) -> int: ...
    @property
    def busy(self) -> bool: ...
    def register(self, now_s: float) -> None: ...
    def heartbeat(self, now_s: float) -> None: ...
    def arrive(self, spec: RequestSpec, now_s: float) -> None: ...
    def start_step(self, now_s: float) -> float | None: ...
    def end_step(self, now_s: float) -> None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class ArrivalDue(SimEvent):
    """The workload's request number ``index`` arrives."""

    index: int


@dataclass(frozen=True, slots=True, kw_only=True)
class StepDone(SimEvent):
    """Engine ``engine_index`` finishes its iteration."""

    engine_index: int


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatDue(SimEvent):
    """Engine ``engine_index`` sends a heartbeat."""

    engine_index: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ProgressDue(SimEvent):
    """A progress sample is due (every ``progress_interval_s``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ProgressSample:
    """Key metrics at one simulated instant, for live progress lines.

    Rates are over the last progress interval; ``policy_versions`` maps ``engine_id/kind`` to the
    version that engine has applied.
    """

    now_s: float
    arrived: int
    finished: int
    running_plus_waiting: int
    finished_per_s: float
    ttft_p50_s: float | None
    kv_use_frac: float
    preemptions: int
    policy_versions: dict[str, int]


class Simulation:
    """Engines, a fleet router and a request list on one event loop."""

    def __init__(
        self,
        *,
        engines: Sequence[SimulatedEngine],
        router: FleetRouter,
        requests: Sequence[RequestSpec],
        metrics: MetricsRecorder,
        heartbeat_interval_s: float = 5.0,
        progress: Callable[[ProgressSample], None] | None = None,
        progress_interval_s: float = 1.0,
        policy_versions: Callable[[], dict[str, int]] | None = None,
    ) -> None:
        self.engines = list(engines)
        self.router = router
        self.requests = requests
        self.metrics = metrics
        self.heartbeat_interval_s = heartbeat_interval_s
        self.progress = progress
        self.progress_interval_s = progress_interval_s
        self._policy_versions = policy_versions
        self.loop = EventLoop()
        self._finished_at_tick = 0
        self._ttft_index = 0
        for index in range(len(self.engines)):
            self.loop.push(HeartbeatDue(time_s=0.0, engine_index=index))
        if requests:
            self.loop.push(ArrivalDue(time_s=requests[0].arrival_s, index=0))
        if progress is not None:
            self.loop.push(ProgressDue(time_s=progress_interval_s))
        self._started = False

    def run(self, until_s: float, *, before: Callable[[float], None] | None = None) -> None:
        """Run the fleet until simulated time ``until_s`` (resumable: a later call continues)."""
        if not self._started:
            for engine in self.engines:
                engine.register(0.0)
            self._started = True
        self.loop.run(self._handle, until_s=until_s, before=before)

    def _handle(self, event: SimEvent) -> Iterator[SimEvent]:
        now_s = event.time_s
        if isinstance(event, StepDone):
            engine = self.engines[event.engine_index]
            engine.end_step(now_s)
            yield from self._next_step(event.engine_index, now_s)
        elif isinstance(event, ArrivalDue):
            spec = self.requests[event.index]
            target = self.router.route(spec, self.engines)
            self.engines[target].arrive(spec, now_s)
            if not self.engines[target].busy:
                yield from self._next_step(target, now_s)
            if event.index + 1 < len(self.requests):
                yield ArrivalDue(time_s=self.requests[event.index + 1].arrival_s, index=event.index + 1)
        elif isinstance(event, HeartbeatDue):
            self.engines[event.engine_index].heartbeat(now_s)
            yield HeartbeatDue(time_s=now_s + self.heartbeat_interval_s, engine_index=event.engine_index)
        elif isinstance(event, ProgressDue) and self.progress is not None:
            self.progress(self._sample(now_s))
            yield ProgressDue(time_s=now_s + self.progress_interval_s)

    def _next_step(self, engine_index: int, now_s: float) -> Iterator[SimEvent]:
        duration_s = self.engines[engine_index].start_step(now_s)
        if duration_s is not None:
            yield StepDone(time_s=now_s + duration_s, engine_index=engine_index)

    def _sample(self, now_s: float) -> ProgressSample:
        finishes = self.metrics.finishes
        recent = finishes[self._finished_at_tick :]
        ttfts = sorted(f[2] for f in recent if f[2] is not None)
        self._finished_at_tick = len(finishes)
        kv = [s[4] for s in self.metrics.step_samples[-len(self.engines) :]]
        return ProgressSample(
            now_s=now_s,
            arrived=self.metrics.arrivals,
            finished=len(finishes),
            running_plus_waiting=sum(engine.load for engine in self.engines),
            finished_per_s=len(recent) / self.progress_interval_s,
            ttft_p50_s=ttfts[len(ttfts) // 2] if ttfts else None,
            kv_use_frac=sum(kv) / len(kv) if kv else 0.0,
            preemptions=self.metrics.preemptions,
            policy_versions=self._policy_versions() if self._policy_versions is not None else {},
        )
