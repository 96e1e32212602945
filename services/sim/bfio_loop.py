"""BF-IO closed loop in the simulator: the Table 1 workload, DP scenarios and the offline-loop run.

specs/seed-003-bfio.md section 5.3 (Table 1: G = 16, B = 72, BurstGPT lengths, step model
C + t_l max_g L_g with the reference constants, a visible pool of R = 4G requests, always overloaded)
and section 6 (the bundle flows from the stream estimates through the registered ``bfio`` policy).
``run_dp_loop`` runs one DP deployment in offline loop mode: ``OfflineControlPlane`` is both the
telemetry sink and the policy source, with the chosen rank router (FCFS index fill, JSQ by load, or
BF-IO under the pushed bundle, optionally with central-pool assignments), and returns the paper's
metrics.

Metrics (paper section 6.3): AvgImbalance is Eq. 2 averaged per step, measured before each step's
admissions as the reference code does (the post-admission figure is reported beside it); throughput is
sum_k |A(k)| / sum_k Delta_t(k) (tokens decoded per second of step time); TPOT is the mean over
finished requests of (finish - admission) / output tokens; barrier idle is the time-based share of
rank time spent waiting at the barrier. Beside them: the balance ratio (mean_g L_g / max_g L_g, averaged
per step before admissions, spec section 1.4) and the longest wait from arrival to admission of a
long prompt (the top 1% of prompt lengths; one still waiting at the end counts its wait so far), the
starvation that out-of-order admission risks (spec section 5.3: up to 11 s in the reference).

Deviations: the BurstGPT sample is not shipped, so lengths are drawn from a correlated log-normal pair
fitted to the sample's statistics (spec 5.3: prompt mean 363, std 502, max 14117; output median 7,
max 3206, correlation 0.37); arrivals are an open (optionally bursty) process at a rate above the
deployment's capacity instead of the paper's closed-loop revelation, so the queue never runs dry.
With a ``decision_clock`` the router's wall time is charged to every step and its solver budget runs
on that clock (so budget fallbacks are real); without one the router is free and the run is
deterministic, and ``fallback_rate`` then only counts fallbacks for a missing bundle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from decide.registry import PolicyRegistry
from decide.wiring.bfio import bfio_spec
from policies.bfio import BfioParams
from schemas.engines import PolicyApplied
from schemas.errors import InvalidInputError
from schemas.events import Event
from schemas.requests import RequestAdmitted, RequestArrived, RequestFinished
from schemas.steps import StepReport
from services.replay.offline import OfflineControlPlane
from services.sdk.protocol import TelemetrySink
from services.sim.dp import DpConfig, DpEngine
from services.sim.length_hints import LengthHints
from services.sim.rank_routers import RankRouter, baseline_rank_router
from services.sim.routers_bfio import BfioRankRouter, CentralPoolPlanner, PlannerStats, RouterStats, frozen_clock
from services.sim.routing import LeastLoadedRouter
from services.sim.run_summary import MetricsRecorder
from services.sim.simulation import Simulation
from services.sim.telemetry import EngineTelemetry
from services.sim.timing import BfioTiming
from services.sim.workload import ArrivalProcess, Workload, WorkloadPhase

IntArray = npt.NDArray[np.int64]
RouterName = Literal["fcfs", "jsq-load", "round-robin", "jsq-count", "power-of-two", "vllm-score", "bfio"]
LONG_PROMPT_QUANTILE = 0.99  # "long prompts": the top 1% of prompt lengths (spec section 8 item 8's starvation)
ENGINE_ID = "dp-0"
DEPLOYMENT = "bfio-loop"


@dataclass(frozen=True, slots=True, kw_only=True)
class BurstGptLikeLengths:
    """Correlated log-normal prompt and output lengths with BurstGPT's statistics (spec section 5.3).

    The prompt's log-normal has the sample's mean and standard deviation; the output's has its median
    and ``output_sigma``; both are clipped to the sample's maxima, and their normal scores correlate
    with ``rho``.
    """

    prompt_mean_tokens: float = 363.0
    prompt_std_tokens: float = 502.0
    prompt_max_tokens: int = 14_117
    output_median_tokens: float = 7.0
    output_sigma: float = 2.1
    output_max_tokens: int = 3_206
    rho: float = 0.37

    def sample(self, rng: np.random.Generator, count: int) -> tuple[IntArray, IntArray]:
        """Draw ``count`` (prompt, output) pairs, each at least one token."""
        sigma_p = float(np.sqrt(np.log1p((self.prompt_std_tokens / self.prompt_mean_tokens) ** 2)))
        mu_p = float(np.log(self.prompt_mean_tokens)) - sigma_p**2 / 2.0
        z = rng.standard_normal((2, count))
        z_out = self.rho * z[0] + np.sqrt(1.0 - self.rho**2) * z[1]
        prompts = np.clip(np.rint(np.exp(mu_p + sigma_p * z[0])), 1, self.prompt_max_tokens)
        outputs = np.clip(
            np.rint(np.exp(np.log(self.output_median_tokens) + self.output_sigma * z_out)), 1, self.output_max_tokens
        )
        return prompts.astype(np.int64), outputs.astype(np.int64)


@dataclass(frozen=True, slots=True, kw_only=True)
class CentralPool:
    """Central-pool mode: the planner's cadence, loop latency and window (see ``CentralPoolPlanner``)."""

    period_s: float = 0.1
    loop_latency_s: float = 0.05
    window: int = 128


@dataclass(frozen=True, slots=True, kw_only=True)
class DpLoopResult:
    """One closed-loop DP run.

    Attributes:
        router: the rank router.
        avg_imbalance_tokens: Eq. 2 averaged per step, before each step's admissions (reference point).
        avg_imbalance_post_admission_tokens: Eq. 2 averaged per step, just after admissions.
        balance_ratio: mean_g L_g / max_g L_g averaged per step before admissions (1 = balanced).
        long_prompt_max_wait_s: longest arrival-to-admission wait of a top-1% prompt (None without one).
        throughput_tokens_per_s: sum_k |A(k)| / sum_k Delta_t(k).
        tpot_s: mean (finish - admission) / output tokens over finished requests.
        barrier_idle_frac: rank time waiting at the barrier over all rank time.
        steps: decode steps run.
        finished: requests finished.
        bundles_applied: BF-IO bundle versions the engine acknowledged.
        fallback_rate: share of BF-IO router calls that fell back to JSQ-by-load (any reason); 0 for
            a baseline.
        decision_mean_s: mean wall time of a router call charged to the steps (0 without a clock).
        decision_max_s: the longest one.
        router_stats: BF-IO router counters, None for a baseline.
        planner_stats: central-pool counters, None without central pool.
    """

    router: RouterName
    avg_imbalance_tokens: float
    avg_imbalance_post_admission_tokens: float
    balance_ratio: float
    long_prompt_max_wait_s: float | None
    throughput_tokens_per_s: float
    tpot_s: float
    barrier_idle_frac: float
    steps: int
    finished: int
    bundles_applied: int
    fallback_rate: float
    decision_mean_s: float
    decision_max_s: float
    router_stats: RouterStats | None
    planner_stats: PlannerStats | None


class _StepMeter:
    """Telemetry tee: sum_k |A(k)| and sum_k Delta_t(k) from step reports, TPOT from finishes, bundle acks,
    and each request's prompt and wait (arrival to admission)."""

    def __init__(self, inner: TelemetrySink) -> None:
        self._inner = inner
        self.arrived: dict[str, tuple[int, float]] = {}
        self.waits: list[tuple[int, float]] = []
        self.active_tokens = 0
        self.step_s = 0.0
        self.tpot_sum_s = 0.0
        self.tpot_count = 0
        self.acks = 0

    def long_prompt_max_wait_s(self, end_s: float) -> float | None:
        """Longest wait of a top-1% prompt: admitted ones to admission, those still waiting to ``end_s``."""
        waits = self.waits + [(prompt, end_s - arrival_s) for prompt, arrival_s in self.arrived.values()]
        if not waits:
            return None
        threshold = float(np.quantile([prompt for prompt, _ in waits], LONG_PROMPT_QUANTILE))
        return max(wait_s for prompt, wait_s in waits if prompt >= threshold)

    def publish(self, event: Event) -> None:
        """Count ``event`` and pass it on."""
        if isinstance(event, RequestArrived):
            self.arrived[event.request_id] = (event.prompt_tokens, event.ts)
        elif isinstance(event, RequestAdmitted) and event.request_id in self.arrived:
            self.waits.append((self.arrived.pop(event.request_id)[0], event.queue_time_s))
        elif isinstance(event, StepReport):
            self.active_tokens += event.num_prefill_requests + event.num_decode_requests
            self.step_s += event.duration_s
        elif isinstance(event, RequestFinished) and event.admitted_ts is not None and event.output_tokens > 0:
            self.tpot_sum_s += (event.ts - event.admitted_ts) / event.output_tokens
            self.tpot_count += 1
        elif isinstance(event, PolicyApplied) and event.kind == "bfio":
            self.acks += 1
        self._inner.publish(event)


@dataclass(frozen=True, slots=True, kw_only=True)
class BacklogArrivals:
    """``backlog_requests`` requests at the start, then ``then``: the deployment starts full and queued,
    as the paper's simulator does (every slot filled from the revealed pool at step 0)."""

    backlog_requests: int
    then: ArrivalProcess

    def times(self, rng: np.random.Generator, start_s: float, end_s: float) -> npt.NDArray[np.float64]:
        """The backlog at ``start_s``, followed by the process's own times."""
        return np.concatenate((np.full(self.backlog_requests, start_s), self.then.times(rng, start_s, end_s)))


def dp_workload(
    arrivals: ArrivalProcess, lengths: BurstGptLikeLengths | None = None, *, backlog_requests: int = 0
) -> Workload:
    """One phase of ``arrivals`` (after a backlog) with BurstGPT-like lengths, no ``max_tokens`` cap."""
    process: ArrivalProcess = arrivals
    if backlog_requests > 0:
        process = BacklogArrivals(backlog_requests=backlog_requests, then=arrivals)
    return Workload(phases=(WorkloadPhase(start_s=0.0, arrivals=process, lengths=lengths or BurstGptLikeLengths()),))


def bfio_registry(params: BfioParams | None = None, *, interval_s: float = 1.0) -> PolicyRegistry:
    """A registry with only the BF-IO bundle policy (the closed-loop runs need nothing else)."""
    return PolicyRegistry([bfio_spec(params, interval_s=interval_s)])


def run_dp_loop(
    *,
    router: RouterName,
    workload: Workload,
    duration_s: float,
    seed: int,
    ranks: int = 16,
    slots_per_rank: int = 72,
    timing: BfioTiming | None = None,
    params: BfioParams | None = None,
    visible_pool: int | None = None,
    central_pool: CentralPool | None = None,
    bundle_interval_s: float = 1.0,
    decision_clock: Callable[[], float] | None = None,
    length_hints: LengthHints | None = None,
) -> DpLoopResult:
    """Run one DP deployment in offline loop mode and measure it.

    Args:
        router: a baseline (``fcfs`` index fill, ``jsq-load``, ``round-robin``, ``jsq-count``,
            ``power-of-two``, ``vllm-score``) or ``bfio`` (under the bundle the control plane decides
            from this run's own telemetry).
        workload: arrivals and lengths.
        duration_s: simulated seconds.
        seed: seed of the workload draw.
        ranks: G.
        slots_per_rank: B.
        timing: step model (default: the reference constants of spec section 1.3).
        params: BF-IO parameters of the bundle policy (and of central-pool assignments).
        visible_pool: R, waiting requests the BF-IO router sees (None: all).
        central_pool: central-pool mode for the BF-IO router, or None.
        bundle_interval_s: event time between bundle decisions.
        decision_clock: wall-clock seconds (time.perf_counter) that times the router, charges it to
            each step and runs the solver's budget; None: a free router on a frozen clock.
        length_hints: output-length hints the BF-IO router's lookahead reads (true lengths: the paper's
            setting; noisy: the value of a hint), or None (survival prediction only).

    Raises:
        InvalidInputError: central pool or length hints requested for a baseline router.
    """
    if (central_pool is not None or length_hints is not None) and router != "bfio":
        msg = f"central_pool and length_hints need router 'bfio', got {router!r}"
        raise InvalidInputError(msg, field="router", value=router)
    bfio_params = params or BfioParams()
    control_plane = OfflineControlPlane(DEPLOYMENT, bfio_registry(bfio_params, interval_s=bundle_interval_s))
    step_meter = _StepMeter(control_plane)
    sink: TelemetrySink = step_meter
    planner: CentralPoolPlanner | None = None
    if central_pool is not None:
        planner = CentralPoolPlanner(
            inner=step_meter,
            policy_source=control_plane,
            engine_id=ENGINE_ID,
            period_s=central_pool.period_s,
            num_ranks=ranks,
            loop_latency_s=central_pool.loop_latency_s,
            slots_per_rank=slots_per_rank,
            window=central_pool.window,
            params=bfio_params,
        )
        sink = planner
    telemetry = EngineTelemetry(engine_id=ENGINE_ID, deployment=DEPLOYMENT, sink=sink)
    rank_router: RankRouter
    bfio_router: BfioRankRouter | None = None
    if router == "bfio":
        bfio_router = BfioRankRouter(
            visible_pool=visible_pool,
            assignments=planner,
            clock=decision_clock or frozen_clock,
            length_hints=length_hints,
            self_check_sink=telemetry.bfio_self_check,
        )
        rank_router = bfio_router
    else:
        rank_router = baseline_rank_router(router, seed=seed)
    metrics = MetricsRecorder()
    engine = DpEngine(
        DpConfig(engine_id=ENGINE_ID, ranks=ranks, slots_per_rank=slots_per_rank),
        router=rank_router,
        timing=timing or BfioTiming(),
        telemetry=telemetry,
        policy_source=control_plane,
        metrics=metrics,
        decision_clock=decision_clock,
    )
    requests = workload.generate(duration_s, np.random.default_rng(seed))
    Simulation(engines=[engine], router=LeastLoadedRouter(), requests=requests, metrics=metrics).run(duration_s)
    summary = metrics.summarize(duration_s)
    meter = engine.imbalance
    stats = None if bfio_router is None else bfio_router.stats
    fallbacks = 0 if stats is None else sum(stats.fallbacks.values())
    return DpLoopResult(
        router=router,
        avg_imbalance_tokens=meter.avg_pre_admission_tokens or 0.0,
        avg_imbalance_post_admission_tokens=meter.avg_post_admission_tokens or 0.0,
        balance_ratio=meter.avg_balance_ratio or 1.0,
        long_prompt_max_wait_s=step_meter.long_prompt_max_wait_s(duration_s),
        throughput_tokens_per_s=step_meter.active_tokens / step_meter.step_s if step_meter.step_s > 0 else 0.0,
        tpot_s=step_meter.tpot_sum_s / step_meter.tpot_count if step_meter.tpot_count else 0.0,
        barrier_idle_frac=summary.barrier_idle_frac or 0.0,
        steps=summary.steps,
        finished=summary.finished,
        bundles_applied=step_meter.acks,
        fallback_rate=fallbacks / stats.steps if stats is not None and stats.steps else 0.0,
        decision_mean_s=meter.decision_sum_s / meter.decisions if meter.decisions else 0.0,
        decision_max_s=meter.decision_max_s,
        router_stats=stats,
        planner_stats=None if planner is None else planner.stats,
    )
