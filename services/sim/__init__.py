"""The engine simulator: a discrete-event fleet of LLM engines driven by the papers' timing models.

Build a named scenario (``load_scenario``), run it offline on event time (``run_offline``) or paced
in wall time (``run_live``) against a ``TelemetrySink`` and a ``PolicySource``, read its
``RunSummary`` and write its plots (``write_plots``); services/replay/files.py records its event stream.
docs/simulator.md describes the model, the scheduler interface and the scenarios.
"""

from services.sim.dp import DpConfig, DpEngine
from services.sim.engine import EngineConfig, SimEngine
from services.sim.event_loop import EventLoop, SimEvent
from services.sim.plots import write_plots
from services.sim.rank_routers import FcfsRankRouter, JsqLoadRankRouter, RankRouter, RankView
from services.sim.request import RequestSpec, SimRequest
from services.sim.routing import FleetRouter, LeastLoadedRouter, LengthRouter
from services.sim.run_summary import MetricsRecorder, RunSummary, TierSummary, TimelineSample
from services.sim.runner import Clock, WallClock, build_simulation, run_live, run_offline
from services.sim.scenario import SCENARIOS_PATH, EngineSpec, Scenario, list_scenarios, load_scenario
from services.sim.simulation import ProgressSample, Simulation
from services.sim.timing import BatchShape, BfioTiming, EbTiming, SlaiTiming, TimingModel
from services.sim.workload import Tier, Workload, WorkloadPhase, load_fleetopt_cdf, load_sharegpt_lengths

__all__ = [
    "SCENARIOS_PATH",
    "BatchShape",
    "BfioTiming",
    "Clock",
    "DpConfig",
    "DpEngine",
    "EbTiming",
    "EngineConfig",
    "EngineSpec",
    "EventLoop",
    "FcfsRankRouter",
    "FleetRouter",
    "JsqLoadRankRouter",
    "LeastLoadedRouter",
    "LengthRouter",
    "MetricsRecorder",
    "ProgressSample",
    "RankRouter",
    "RankView",
    "RequestSpec",
    "RunSummary",
    "Scenario",
    "SimEngine",
    "SimEvent",
    "SimRequest",
    "Simulation",
    "SlaiTiming",
    "Tier",
    "TierSummary",
    "TimelineSample",
    "TimingModel",
    "WallClock",
    "Workload",
    "WorkloadPhase",
    "build_simulation",
    "list_scenarios",
    "load_fleetopt_cdf",
    "load_scenario",
    "load_sharegpt_lengths",
    "run_live",
    "run_offline",
    "write_plots",
]
