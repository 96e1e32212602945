"""Build a scenario's fleet on the engine SDK seams and run it: offline (event time only) or live (paced).

Offline: events go to ``sink.publish`` synchronously in event-time order and policies come from
``policy_source.current`` at each step, so a run is a pure function of (scenario, seed, policy
documents) and reproducible bit for bit. Live: the same loop, paced so that simulated time runs at
``speed`` times the injected clock; ``progress`` gets key metrics every simulated second.
services/replay/files.py ``write_events`` records a run's events as JSON lines (fixtures for replay tests).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

import numpy as np

from policies.slai import PrefillOrder
from schemas.errors import InvalidInputError
from services.sdk.protocol import PolicySource, TelemetrySink
from services.sim.dp import DpConfig, DpEngine
from services.sim.engine import EngineConfig, SimEngine
from services.sim.engine_base import EngineBase
from services.sim.rank_routers import RankRouter, baseline_rank_router
from services.sim.routers_bfio import BfioRankRouter
from services.sim.routing import FleetRouter, LeastLoadedRouter, LengthRouter
from services.sim.run_summary import MetricsRecorder, RunSummary
from services.sim.scenario import Scenario
from services.sim.schedulers.base import Scheduler
from services.sim.schedulers.baselines import MixedChunkedScheduler, SarathiServeScheduler, VllmPrefillFirstScheduler
from services.sim.schedulers.ebplus import EbplusScheduler
from services.sim.schedulers.slai import SlaiScheduler
from services.sim.simulation import ProgressSample, Simulation
from services.sim.telemetry import EngineTelemetry


class Clock(Protocol):
    """Wall time for the live mode (injected so tests can fake it)."""

    def monotonic_s(self) -> float:
        """Seconds on a monotonic clock."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds``."""
        ...


class WallClock:
    """The real monotonic clock."""

    def monotonic_s(self) -> float:
        """``time.monotonic()``."""
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        """``time.sleep(seconds)``."""
        time.sleep(seconds)


def _scheduler(name: str) -> Scheduler:
    schedulers: dict[str, Callable[[], Scheduler]] = {
        "mixed": MixedChunkedScheduler,
        "ebplus": EbplusScheduler,
        "sarathi": SarathiServeScheduler,
        "sarathi-spf": lambda: SarathiServeScheduler(prefill_order=PrefillOrder.SPF),
        "slai": SlaiScheduler,
        "vllm": VllmPrefillFirstScheduler,
    }
    return schedulers[name]()


def _rank_router(name: str) -> RankRouter:
    if name == "bfio":
        return BfioRankRouter()
    return baseline_rank_router(name)


def build_simulation(
    scenario: Scenario,
    *,
    sink: TelemetrySink,
    policy_source: PolicySource,
    progress: Callable[[ProgressSample], None] | None = None,
) -> tuple[Simulation, MetricsRecorder]:
    """Return the scenario's simulation (engines on ``sink`` and ``policy_source``) and its recorder."""
    metrics = MetricsRecorder()
    engines: list[EngineBase] = []
    telemetries: list[EngineTelemetry] = []
    for spec in scenario.engines:
        telemetry = EngineTelemetry(engine_id=spec.config.engine_id, deployment=scenario.deployment, sink=sink)
        telemetries.append(telemetry)
        if isinstance(spec.config, DpConfig):
            engines.append(
                DpEngine(
                    spec.config,
                    router=_rank_router(spec.scheduler),
                    timing=spec.timing,
                    telemetry=telemetry,
                    policy_source=policy_source,
                    metrics=metrics,
                )
            )
        else:
            config: EngineConfig = spec.config
            engines.append(
                SimEngine(
                    config,
                    scheduler=_scheduler(spec.scheduler),
                    timing=spec.timing,
                    telemetry=telemetry,
                    policy_source=policy_source,
                    metrics=metrics,
                )
            )
    router: FleetRouter = (
        LengthRouter(boundary_tokens=scenario.boundary_tokens or 8192)
        if scenario.router == "length"
        else LeastLoadedRouter()
    )
    rng = np.random.default_rng(scenario.seed)
    requests = scenario.workload.generate(scenario.duration_s, rng)

    def versions() -> dict[str, int]:
        return {f"{t.engine_id}/{kind}": v for t in telemetries for kind, v in t.policy_versions.items()}

    simulation = Simulation(
        engines=engines,
        router=router,
        requests=requests,
        metrics=metrics,
        heartbeat_interval_s=scenario.heartbeat_interval_s,
        progress=progress,
        policy_versions=versions,
    )
    return simulation, metrics


def run_offline(
    scenario: Scenario,
    *,
    sink: TelemetrySink,
    policy_source: PolicySource,
    progress: Callable[[ProgressSample], None] | None = None,
) -> RunSummary:
    """Run ``scenario`` to its ``duration_s`` in event time only and return its summary.

    ``sink.publish`` is called synchronously in event-time order; pass the in-process control
    plane as both ``sink`` and ``policy_source`` for the offline closed loop.
    """
    simulation, metrics = build_simulation(scenario, sink=sink, policy_source=policy_source, progress=progress)
    simulation.run(scenario.duration_s)
    return metrics.summarize(scenario.duration_s)


def run_live(
    scenario: Scenario,
    *,
    sink: TelemetrySink,
    policy_source: PolicySource,
    speed: float = 1.0,
    clock: Clock | None = None,
    progress: Callable[[ProgressSample], None] | None = None,
) -> RunSummary:
    """Run ``scenario`` paced in wall time: event time t is handled no earlier than start + t / speed.

    Args:
        speed: simulated seconds per wall second (> 0).
        clock: the wall clock (default ``WallClock``); tests pass a fake.
        progress: called every simulated second with key metrics.

    Raises:
        InvalidInputError: ``speed`` is not positive.
    """
    if not speed > 0:
        msg = f"speed must be > 0, got {speed}"
        raise InvalidInputError(msg, field="speed", value=speed)
    wall = clock or WallClock()
    simulation, metrics = build_simulation(scenario, sink=sink, policy_source=policy_source, progress=progress)
    start = wall.monotonic_s()

    def pace(event_time_s: float) -> None:
        ahead = start + event_time_s / speed - wall.monotonic_s()
        if ahead > 0:
            wall.sleep(ahead)

    simulation.run(scenario.duration_s, before=pace)
    return metrics.summarize(scenario.duration_s)
