"""The BF-IO rank router on a simulated DP deployment: bundle reload, fallback, pushed assignments."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from policies.bfio import BfioParams, build_payload
from schemas.events import Event
from schemas.policy_docs.base import InputsDigest
from schemas.policy_docs.bfio import BfioAssignment, BfioPolicy, BfioState
from schemas.requests import RequestAdmitted
from schemas.steps import RankStepReport
from services.sdk.protocol import ListSink, StaticPolicySource
from services.sim.dp import DpConfig, DpEngine
from services.sim.request import RequestSpec
from services.sim.routers_bfio import BfioRankRouter
from services.sim.routing import LeastLoadedRouter
from services.sim.run_summary import MetricsRecorder
from services.sim.simulation import Simulation
from services.sim.telemetry import EngineTelemetry
from services.sim.timing import BfioTiming

TIMING = BfioTiming(c_s=0.005, t_l_s_per_token=1e-6)


def _bundle(version: int = 1, horizon_steps: int = 0, valid_until: float = 100.0) -> BfioPolicy:
    return BfioPolicy(
        scope="dp0",
        deployment="test",
        version=version,
        computed_at=0.0,
        valid_until=valid_until,
        inputs=InputsDigest(snapshot_id="sha256:test"),
        payload=build_payload(BfioParams(), horizon_steps=horizon_steps),
        state=BfioState(horizon_steps=horizon_steps),
    )


class _Pushed:
    """A fixed set of central-pool assignments; records the router's verdicts."""

    def __init__(self, assignments: list[BfioAssignment]) -> None:
        self._live = {a.request_id: a for a in assignments}
        self.used = 0
        self.rejected = 0

    def current(self, now_s: float) -> Mapping[str, BfioAssignment]:
        del now_s
        return self._live

    def considered(self, request_ids: Sequence[str], *, used: int, rejected: int) -> None:
        for request_id in request_ids:
            self._live.pop(request_id)
        self.used += used
        self.rejected += rejected


def _run(
    router: BfioRankRouter,
    requests: list[RequestSpec],
    *,
    policies: StaticPolicySource,
    ranks: int = 2,
    slots: int = 2,
    until_s: float = 5.0,
) -> list[Event]:
    sink = ListSink()
    metrics = MetricsRecorder()
    engine = DpEngine(
        DpConfig(engine_id="dp0", ranks=ranks, slots_per_rank=slots),
        router=router,
        timing=TIMING,
        telemetry=EngineTelemetry(engine_id="dp0", deployment="test", sink=sink),
        policy_source=policies,
        metrics=metrics,
    )
    Simulation(engines=[engine], router=LeastLoadedRouter(), requests=requests, metrics=metrics).run(until_s)
    return sink.events


def _requests(prompts: list[int], outputs: list[int], arrival_s: float = 0.0) -> list[RequestSpec]:
    return [
        RequestSpec(request_id=f"r{i}", arrival_s=arrival_s, prompt_tokens=p, output_tokens=o)
        for i, (p, o) in enumerate(zip(prompts, outputs, strict=True))
    ]


def _admissions(events: list[Event]) -> list[tuple[str, int | None]]:
    return [(e.request_id, e.dp_rank) for e in events if isinstance(e, RequestAdmitted)]


class TestBfioRankRouter:
    def test_without_a_bundle_it_falls_back_to_jsq_by_load(self) -> None:
        """No document: each of the two routing steps is the JSQ-by-load fallback, counted as no_bundle."""
        router = BfioRankRouter()
        events = _run(router, _requests([1000, 10], [3, 3]), policies=StaticPolicySource())
        assert _admissions(events) == [("r0", 0), ("r1", 1)]
        assert router.stats.fallbacks == {"no_bundle": 2}

    def test_balances_prompts_under_the_bundle(self) -> None:
        """H = 0: r0 (1000) starts alone; then 900, 100 and 10 fill the 3 free slots as (1001 + 10, 900 + 100)."""
        router = BfioRankRouter()
        events = _run(router, _requests([1000, 900, 100, 10], [5, 5, 5, 5]), policies=StaticPolicySource([_bundle()]))
        ranks = dict(_admissions(events))
        assert ranks["r3"] == ranks["r0"]
        assert ranks["r1"] == ranks["r2"] != ranks["r0"]
        assert router.stats.fallbacks == {}
        assert router.stats.bundle_versions == [1]
        assert sorted(e.load_tokens for e in events if isinstance(e, RankStepReport) and e.step_id == 1) == [
            1000,
            1011,
        ]

    def test_capacity_and_single_admission_on_a_busy_run(self) -> None:
        """Random prompts and outputs: no rank above B, every request admitted at most once."""
        rng = np.random.default_rng(5)
        prompts = [int(p) for p in rng.integers(1, 3000, size=60)]
        outputs = [int(o) for o in rng.integers(1, 40, size=60)]
        router = BfioRankRouter(visible_pool=8)
        events = _run(router, _requests(prompts, outputs), policies=StaticPolicySource([_bundle()]), ranks=3, slots=4)
        admitted = [rid for rid, _ in _admissions(events)]
        assert len(admitted) == len(set(admitted)) == 60
        assert max(e.num_running for e in events if isinstance(e, RankStepReport)) <= 4

    def test_visible_pool_limits_the_choice_to_the_queue_front(self) -> None:
        """R = 1: one request a step although four slots are free, in FIFO order."""
        router = BfioRankRouter(visible_pool=1)
        events = _run(router, _requests([10, 5000, 20], [50, 50, 50]), policies=StaticPolicySource([_bundle()]))
        assert [rid for rid, _ in _admissions(events)] == ["r0", "r1", "r2"]
        assert router.stats.steps == 3

    def test_uses_a_valid_pushed_assignment_and_rejects_an_expired_one(self) -> None:
        """r0 pushed to rank 1 (valid) is honoured; r1's assignment expired at step -1 is solved locally."""
        pushed = _Pushed(
            [
                BfioAssignment(
                    request_id="r0",
                    rank=1,
                    bundle_version=1,
                    computed_at_step=0,
                    valid_until_step=5,
                    plan_objective_j_tokens=0.0,
                ),
                BfioAssignment(
                    request_id="r1",
                    rank=1,
                    bundle_version=1,
                    computed_at_step=0,
                    valid_until_step=0,
                    plan_objective_j_tokens=0.0,
                ),
            ]
        )
        router = BfioRankRouter(assignments=pushed)
        requests = [
            *_requests([100], [3]),
            RequestSpec(request_id="r1", arrival_s=0.5, prompt_tokens=5, output_tokens=3),
        ]
        events = _run(router, requests, policies=StaticPolicySource([_bundle()]))
        assert _admissions(events)[0] == ("r0", 1)
        assert (pushed.used, pushed.rejected) == (1, 1)
        assert (router.stats.pushed_used, router.stats.pushed_rejected) == (1, 1)

    def test_hot_reloads_newer_bundles_only(self) -> None:
        """A newer version is adopted; serving the same version again changes nothing."""
        router = BfioRankRouter()
        policies = StaticPolicySource([_bundle(version=1)])
        _run(router, _requests([10], [2]), policies=policies)
        policies.put(_bundle(version=2))
        _run(router, _requests([10], [2]), policies=policies)
        _run(router, _requests([10], [2]), policies=policies)
        assert router.stats.bundle_versions == [1, 2]
