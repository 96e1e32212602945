"""SLAI in the closed loop: simulated engine -> offline control plane -> pushed SLAI documents -> engine.

The paper's setup (spec seed-000 sections 5.1, 5.6; scenario ``sarathi-sharegpt``): one Mistral-7B /
RTX 6000 Ada engine priced by the SLAI batch-time fit, ShareGPT lengths, Poisson arrivals, 5% paid
users (TBT 0.1 s) and 95% free (0.5 s), token budget 512, alpha = beta = 128. Runs are 600 s of
event time, seeded; the benchmark (ops/bench/bench_slai_loop.py) runs the paper's full sweep.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from decide.registry import PolicyRegistry
from decide.wiring.slai import slai_spec
from policies.slai import PrefillOrder, SlaiParams
from services.replay.offline import OfflineControlPlane
from services.sim.engine import SimEngine
from services.sim.routing import LeastLoadedRouter
from services.sim.run_summary import MetricsRecorder, RunSummary
from services.sim.scenario import load_scenario
from services.sim.schedulers import SarathiServeScheduler, SlaiScheduler
from services.sim.schedulers.base import Scheduler
from services.sim.simulation import Simulation
from services.sim.telemetry import EngineTelemetry

DURATION_S = 600.0
SEED = 42
HIGH_LOAD_PER_S = 1.3  # our calibration's Sarathi-FCFS knee (median TTFT ~0.47 s); paper: 1.15 req/s
BEYOND_SARATHI_PER_S = 1.45  # past Sarathi-FCFS's 0.5 s capacity in our calibration
TTFT_CAPACITY_S = 0.5  # paper §7: capacity at median TTFT <= 0.5 s
TBT_TARGET_S = {"paid": 0.1, "free": 0.5}  # paper §7


def _run(kind: str, rate_per_s: float) -> tuple[RunSummary, OfflineControlPlane, Scheduler]:
    scenario = load_scenario("sarathi-sharegpt", duration_s=DURATION_S, rate_per_s=rate_per_s, seed=SEED)
    plane = OfflineControlPlane("slai-loop", PolicyRegistry([slai_spec()]))
    scheduler: Scheduler = SlaiScheduler() if kind == "slai" else SarathiServeScheduler(prefill_order=PrefillOrder.FCFS)
    metrics = MetricsRecorder()
    (spec,) = scenario.engines
    engine = SimEngine(
        spec.config,  # type: ignore[arg-type]
        scheduler=scheduler,
        timing=spec.timing,
        telemetry=EngineTelemetry(engine_id=spec.config.engine_id, deployment="slai-loop", sink=plane),
        policy_source=plane,
        metrics=metrics,
    )
    requests = scenario.workload.generate(DURATION_S, np.random.default_rng(SEED))
    Simulation(engines=[engine], router=LeastLoadedRouter(), requests=requests, metrics=metrics).run(DURATION_S)
    return metrics.summarize(DURATION_S), plane, scheduler


@functools.cache
def _figures(kind: str, rate_per_s: float) -> tuple[float, dict[str, float], int, int]:
    """(median TTFT, P99 TBT per tier, accepted SLAI decisions, finished) of one seeded run, printed."""
    summary, plane, _ = _run(kind, rate_per_s)
    assert summary.ttft_p50_s is not None
    tbt = {t.tier: t.tbt_p99_s for t in summary.tiers if t.tbt_p99_s is not None}
    accepted = sum(1 for d in plane.decisions if d.accepted and d.kind == "slai")
    print(
        f"{kind:8s} {rate_per_s:.2f} req/s: median TTFT {summary.ttft_p50_s:.3f} s, "
        f"P99 TBT paid {tbt.get('paid', float('nan')):.3f} s free {tbt.get('free', float('nan')):.3f} s, "
        f"finished {summary.finished}/{summary.arrived}, KV mean {summary.kv_use_mean_frac:.2f}, "
        f"preemptions {summary.preemptions}, SLAI decisions {accepted}"
    )
    return summary.ttft_p50_s, tbt, accepted, summary.finished


@pytest.mark.paper(seed="000", ref="Fig. 7c")
class TestSlaiClosedLoop:
    def test_slai_cuts_median_ttft_at_high_load_with_every_tier_within_its_tbt(self) -> None:
        """Paper §7: SLAI (SPF, dynamic offset) cuts median TTFT by 53% against Sarathi-Serve (FCFS)
        at high load while meeting tail TBT. We ask for the design target, at least a 40% cut (DESIGN
        section 9), at our calibration's knee (measured: 0.474 -> 0.268 s, -43%), with P99 TBT of each
        tier within 0.1 s (paid) and 0.5 s (free) under both schedulers."""
        sarathi_ttft, sarathi_tbt, _, _ = _figures("sarathi", HIGH_LOAD_PER_S)
        slai_ttft, slai_tbt, decisions, _ = _figures("slai", HIGH_LOAD_PER_S)
        # The loop ran: an unchanged document is published again half way to its expiry (30 s of the
        # default 60 s validity), a changed one at once (SLAI decides every 2 s of event time).
        assert decisions >= DURATION_S / (SlaiParams().valid_for_s / 2.0) - 2
        assert slai_ttft <= 0.6 * sarathi_ttft
        for tier, target_s in TBT_TARGET_S.items():
            assert slai_tbt[tier] <= target_s
            assert sarathi_tbt[tier] <= target_s

    def test_slai_keeps_median_ttft_within_half_a_second_past_sarathi_capacity(self) -> None:
        """Paper §7: capacity at median TTFT <= 0.5 s rises from 1.15 to 1.45 req/s. At a rate where
        Sarathi-Serve (FCFS) is past 0.5 s, SLAI stays within it, so its capacity is higher."""
        sarathi_ttft, _, _, _ = _figures("sarathi", BEYOND_SARATHI_PER_S)
        slai_ttft, _, _, _ = _figures("slai", BEYOND_SARATHI_PER_S)
        assert sarathi_ttft > TTFT_CAPACITY_S
        assert slai_ttft <= TTFT_CAPACITY_S

    def test_control_plane_mirrors_the_engine_tbar_it_pushes_as_seed(self) -> None:
        """Spec §3.4: tbar inside C is the engine's own cumulative mean; the control plane mirrors it
        from step events and pushes it as the cold-start seed. Both are means of the same batch times."""
        _, plane, scheduler = _run("slai", 0.4)
        assert isinstance(scheduler, SlaiScheduler)
        documents = [d for d in plane.decisions if d.accepted and d.kind == "slai"]
        last = plane.current("slai", "engine-0", documents[-1].document["computed_at"])
        assert last is not None
        assert last.diagnostics["tbar_s"] == pytest.approx(scheduler.tbar_s, rel=0.02)
        # The pushed seed follows the mirrored mean only beyond the hysteresis tolerance.
        tolerance = SlaiParams().tbar_seed_tolerance_frac
        assert last.payload.tbar_seed_s == pytest.approx(scheduler.tbar_s, rel=tolerance * 1.05)
        assert scheduler.last_delta == 5.0  # KV use stays far below 96% at 0.4 req/s
