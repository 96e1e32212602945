"""DP deployment: barrier timing by hand, rank reports, and the baseline routers."""

from __future__ import annotations

import pytest

from schemas.events import Event
from schemas.steps import RankStepReport, StepReport
from services.sdk.protocol import ListSink, StaticPolicySource
from services.sim.dp import DpConfig, DpEngine
from services.sim.rank_routers import FcfsRankRouter, JsqLoadRankRouter, RankRouter, RankView, VllmScoreRankRouter
from services.sim.request import RequestSpec, SimRequest
from services.sim.routing import LeastLoadedRouter
from services.sim.run_summary import MetricsRecorder
from services.sim.simulation import Simulation
from services.sim.telemetry import EngineTelemetry
from services.sim.timing import BfioTiming

TIMING = BfioTiming(c_s=0.005, t_l_s_per_token=1e-6)


def _run(router: RankRouter, requests: list[RequestSpec], until_s: float = 10.0) -> tuple[list[Event], MetricsRecorder]:
    sink = ListSink()
    metrics = MetricsRecorder()
    engine = DpEngine(
        DpConfig(engine_id="dp0", ranks=2, slots_per_rank=2),
        router=router,
        timing=TIMING,
        telemetry=EngineTelemetry(engine_id="dp0", deployment="test", sink=sink),
        policy_source=StaticPolicySource(),
        metrics=metrics,
    )
    Simulation(engines=[engine], router=LeastLoadedRouter(), requests=requests, metrics=metrics).run(until_s)
    return sink.events, metrics


def _requests(prompts: list[int], output: int) -> list[RequestSpec]:
    return [
        RequestSpec(request_id=f"r{i}", arrival_s=0.0, prompt_tokens=p, output_tokens=output)
        for i, p in enumerate(prompts)
    ]


class TestDpEngine:
    def test_fcfs_fills_rank_zero_first_and_the_barrier_waits_for_it(self) -> None:
        """r0 (prompt 1000) starts step 0 alone; r1 (prompt 10) joins rank 0 at step 1 (FCFS index fill).

        Step 1: L = (1001 + 10, 0), so it lasts C + t_l * 1011 and rank 1 waits all of it. Its Eq. 2
        imbalance is taken after the decode, before the next admissions (the reference code's point):
        L = (1002 + 11, 0), so 2 * 1013 - 1013.
        """
        events, metrics = _run(FcfsRankRouter(), _requests([1000, 10], 3))
        ranks = [e for e in events if isinstance(e, RankStepReport)]
        steps = [e for e in events if isinstance(e, StepReport)]
        assert steps[0].duration_s == pytest.approx(0.005 + 1e-6 * 1000)
        assert [(r.dp_rank, r.load_tokens) for r in ranks[2:4]] == [(0, 1011), (1, 0)]
        assert steps[1].duration_s == pytest.approx(0.005 + 1e-6 * 1011)
        assert ranks[3].barrier_wait_s == pytest.approx(steps[1].duration_s)
        assert ranks[2].barrier_wait_s == pytest.approx(0.0)
        assert metrics.rank_samples[1][0] == 2 * 1013 - 1013

    def test_jsq_by_load_sends_the_second_request_to_the_idle_rank(self) -> None:
        """JSQ-load: step 1 loads are (1001, 10), (1002, 11) after its decode, so Eq. 2 gives 2 * 1002 - 1013 = 991."""
        events, metrics = _run(JsqLoadRankRouter(), _requests([1000, 10], 3))
        ranks = [e for e in events if isinstance(e, RankStepReport)]
        assert [(r.dp_rank, r.load_tokens) for r in ranks[2:4]] == [(0, 1001), (1, 10)]
        assert metrics.rank_samples[1][0] == 991
        assert metrics.summarize(10.0).finished == 2

    def test_slots_bound_admissions_and_every_request_finishes(self) -> None:
        events, metrics = _run(JsqLoadRankRouter(), _requests([5] * 9, 3))
        for report in (e for e in events if isinstance(e, RankStepReport)):
            assert report.num_running <= 2
        summary = metrics.summarize(10.0)
        assert (summary.arrived, summary.finished, summary.in_flight) == (9, 9, 0)
        assert summary.barrier_idle_frac is not None


def _view(rank: int, *, load_tokens: int, active: int = 0) -> RankView:
    return RankView(
        rank=rank,
        load_tokens=load_tokens,
        active=active,
        free_slots=8,
        kv_free_tokens=1000,
        kv_capacity_tokens=1000,
    )


class TestVllmScoreRankRouter:
    def test_kv_use_is_load_over_capacity_and_the_scan_start_carries_over(self) -> None:
        """Rank 0 holds 1000 of 1000 KV tokens (a placed request weighs 4), rank 1 none. First call, scan
        from rank 0: 0 (a tie), then 1, 1, 1 (1 < 4, 2 < 4, 3 < 4). Four placed, so the next call scans
        from rank 0 again and its one request ties to rank 0; a third call then starts at rank 1."""
        router = VllmScoreRankRouter()
        views = [_view(0, load_tokens=1000), _view(1, load_tokens=0)]
        waiting = [SimRequest(spec) for spec in _requests([5] * 4, 3)]
        assert router.assign(waiting, views, None) == [(0, 0), (1, 1), (2, 1), (3, 1)]
        assert router.assign(waiting[:1], views, None) == [(0, 0)]
        assert router.assign(waiting[:1], views, None) == [(0, 1)]
