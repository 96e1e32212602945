"""The simulated fleet on the event loop: arrivals, engine steps, heartbeats and progress ticks.

``Simulation`` owns the entities (engines, the fleet router, the workload's requests) and one
handler per event type; each handler returns the events it causes (services/sim/event_loop.py). Engines
register at the start, heartbeat every ``heartbeat_interval_s`` of event time, and step back to
back while they have work. A progress sample shows, per engine, the engine-side state of the policy it
obeys (the SLAI offset delta in effect) and, over the DP engines, the Eq. 2 rank imbalance and the
barrier idle share of the last interval (specs/seed-003-bfio.md section 1.4).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from services.sim.engine import SimEngine
from services.sim.engine_base import EngineBase
from services.sim.event_loop import EventLoop, SimEvent
from services.sim.request import RequestSpec
from services.sim.routing import FleetRouter
from services.sim.run_summary import MetricsRecorder
from services.sim.schedulers.slai import SlaiScheduler


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
class EngineSample:
    """One engine at a progress instant.

    Attributes:
        engine_id: the engine.
        running_plus_waiting: its requests, running and waiting.
        kv_use_frac: used / total KV blocks now; None for a DP deployment (its ranks reserve tokens).
        slai_delta: the SLAI offset delta in effect (the scheduler's ``last_delta``, chosen by the
            pushed offset rule at the KV use after the last batch); None for other schedulers or
            before the first batch.
    """

    engine_id: str
    running_plus_waiting: int
    kv_use_frac: float | None
    slai_delta: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ProgressSample:
    """Key metrics at one simulated instant, for live progress lines.

    Rates, ``dp_imbalance_tokens`` and ``dp_barrier_idle_frac`` are over the last progress interval;
    the two DP figures cover every DP engine's steps (None without any) and are Eq. 2's
    G max_g L_g - sum_g L_g averaged per step and the ranks' idle share at the step barrier.
    ``policy_versions`` maps ``engine_id/kind`` to the version that engine has applied.
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
    engines: tuple[EngineSample, ...] = ()
    dp_imbalance_tokens: float | None = None
    dp_barrier_idle_frac: float | None = None


class Simulation:
    """Engines, a fleet router and a request list on one event loop."""

    def __init__(
        self,
        *,
        engines: Sequence[EngineBase],
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
        self._rank_steps_at_tick = 0
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
        rank_steps = self.metrics.rank_samples[self._rank_steps_at_tick :]
        self._rank_steps_at_tick = len(self.metrics.rank_samples)
        capacity_s = sum(r[2] for r in rank_steps)
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
            engines=tuple(_engine_sample(engine) for engine in self.engines),
            dp_imbalance_tokens=sum(r[0] for r in rank_steps) / len(rank_steps) if rank_steps else None,
            dp_barrier_idle_frac=sum(r[1] for r in rank_steps) / capacity_s if capacity_s > 0 else None,
        )


def _engine_sample(engine: EngineBase) -> EngineSample:
    if not isinstance(engine, SimEngine):
        return EngineSample(
            engine_id=engine.engine_id, running_plus_waiting=engine.load, kv_use_frac=None, slai_delta=None
        )
    scheduler = engine.scheduler
    return EngineSample(
        engine_id=engine.engine_id,
        running_plus_waiting=engine.load,
        kv_use_frac=engine.kv_blocks_used / engine.kv_blocks_total,
        slai_delta=scheduler.last_delta if isinstance(scheduler, SlaiScheduler) else None,
    )
