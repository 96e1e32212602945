"""A data-parallel deployment: G ranks with B slots each, one step barrier, and a rank router.

Step semantics follow the BF-IO simulator (specs/seed-003-bfio.md sections 1.1-1.4): at each step
the router assigns waiting requests to ranks with free slots; an admission adds its prompt s_i to
the rank's load L_g; every active request then decodes one token (L_g grows by one per request);
a request leaves after its output length. Each rank's local time is its timing model's price of
its own batch, the step lasts the slowest rank's time (the barrier), and every rank reports its
load, free slots, local compute and barrier wait (``rank.step``). Routers implement ``RankRouter``
(services/sim/rank_routers.py: the FCFS and JSQ-by-load baselines of ``policies.bfio``, and BF-IO in
services/sim/routers_bfio.py). Arrivals, the policy refresh, registration, heartbeats, tokens and the
step report are ``EngineBase``'s (services/sim/engine_base.py), shared with the single engine.

Imbalance (Eq. 2) is measured where the reference code measures it (spec section 1.4): after the
step's decode and the removal of finished requests, before the next step's admissions (the
pre-admission load). That figure goes to ``MetricsRecorder.rank_step``; ``ImbalanceMeter`` keeps it
beside the post-admission figure (what the router's h = 0 term sees), so both can be reported.

The router's own compute time is charged to the step when a ``decision_clock`` is given: the step
then lasts the router's measured wall time plus the slowest rank's time (every rank waits for the
router). Without it the router is free and a run is a pure function of its seed.

Deviation: the paper has no KV limit; a rank here also reserves prompt + output tokens at
admission against ``kv_tokens_per_rank``, so no preemption is ever needed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from services.sdk.engine_events import RankShare, Registration
from services.sdk.protocol import PolicySource
from services.sdk.step_counts import StepCounts
from services.sim.engine_base import EngineBase, require_positive
from services.sim.rank_routers import RankRouter, RankView
from services.sim.request import RequestSpec, SimRequest, blocks_for_tokens
from services.sim.run_summary import MetricsRecorder
from services.sim.telemetry import EngineTelemetry
from services.sim.timing import BatchShape, TimingModel


@dataclass(slots=True)
class ImbalanceMeter:
    """Eq. 2 imbalance summed per step at both measurement points, and the router's charged time.

    Attributes:
        steps: decode steps measured.
        pre_admission_sum_tokens: sum over steps of G max_g L_g - sum_g L_g after decode and removals,
            before the next admissions (the reference code's point, spec section 1.4).
        post_admission_sum_tokens: the same just after the step's admissions, before its decode.
        balance_ratio_sum: sum over steps of mean_g L_g / max_g L_g at the pre-admission point (TRT-LLM's
            balance ratio, 1 - Imbalance / (G max_g L_g); spec section 1.4), 1 for a step with no load.
        decisions: router calls timed (only with a ``decision_clock``).
        decision_sum_s: their summed wall time, charged to the steps.
        decision_max_s: the longest one.
    """

    steps: int = 0
    pre_admission_sum_tokens: float = 0.0
    post_admission_sum_tokens: float = 0.0
    balance_ratio_sum: float = 0.0
    decisions: int = 0
    decision_sum_s: float = 0.0
    decision_max_s: float = 0.0

    def record_step(
        self, *, pre_admission_tokens: float, post_admission_tokens: float, balance_ratio: float = 1.0
    ) -> None:
        """Add one decode step's imbalance at both measurement points and its pre-admission balance ratio."""
        self.steps += 1
        self.balance_ratio_sum += balance_ratio
        self.pre_admission_sum_tokens += pre_admission_tokens
        self.post_admission_sum_tokens += post_admission_tokens

    def record_decision(self, seconds: float) -> None:
        """Add one timed router call."""
        self.decisions += 1
        self.decision_sum_s += seconds
        self.decision_max_s = max(self.decision_max_s, seconds)

    @property
    def avg_pre_admission_tokens(self) -> float | None:
        """AvgImbalance at the reference point, or None before the first step."""
        return self.pre_admission_sum_tokens / self.steps if self.steps else None

    @property
    def avg_balance_ratio(self) -> float | None:
        """Mean over steps of mean_g L_g / max_g L_g before admissions, or None before the first step."""
        return self.balance_ratio_sum / self.steps if self.steps else None

    @property
    def avg_post_admission_tokens(self) -> float | None:
        """AvgImbalance just after admissions, or None before the first step."""
        return self.post_admission_sum_tokens / self.steps if self.steps else None


@dataclass(frozen=True, slots=True, kw_only=True)
class DpConfig:
    """Shape and identity of a DP deployment.

    Raises:
        ConfigError: a non-positive size.
    """

    engine_id: str
    ranks: int = 16
    slots_per_rank: int = 72
    kv_tokens_per_rank: int = 1_000_000
    block_size_tokens: int = 16
    model: str = "deepseek-v3"
    gpu: str = "h200"
    pool: str = "default"

    def __post_init__(self) -> None:
        sizes = ("ranks", "slots_per_rank", "kv_tokens_per_rank", "block_size_tokens")
        require_positive(self, sizes, f"DP deployment {self.engine_id}")


class DpEngine(EngineBase):
    """G ranks, B slots each, stepping together behind one barrier."""

    def __init__(
        self,
        config: DpConfig,
        *,
        router: RankRouter,
        timing: TimingModel,
        telemetry: EngineTelemetry,
        policy_source: PolicySource,
        metrics: MetricsRecorder,
        decision_clock: Callable[[], float] | None = None,
    ) -> None:
        """Build the deployment.

        Args:
            config: shape and identity.
            router: assigns waiting requests to ranks at each step.
            timing: prices each rank's batch.
            telemetry: where request, rank and step events go.
            policy_source: where the router's policy document is read.
            metrics: the run's recorder.
            decision_clock: wall-clock seconds (time.perf_counter) to time the router and charge it
                to the step; None leaves the router free (deterministic runs).
        """
        kind = router.policy_kind
        super().__init__(
            config.engine_id, timing, telemetry, policy_source, metrics, pool=config.pool, policy_kind=kind
        )
        self.config = config
        self.router = router
        self._active: list[list[SimRequest]] = [[] for _ in range(config.ranks)]
        self._loads = [0] * config.ranks
        self._reserved = [0] * config.ranks
        self._admitted_now = [0] * config.ranks
        self._local_s = [0.0] * config.ranks
        self._in_step = False
        self._decision_clock = decision_clock
        self._decision_s = 0.0
        self.imbalance = ImbalanceMeter()

    @property
    def num_running(self) -> int:
        """Requests active on any rank."""
        return sum(len(a) for a in self._active)

    @property
    def rank_loads_tokens(self) -> tuple[int, ...]:
        """L_g per rank, tokens."""
        return tuple(self._loads)

    def registration(self) -> Registration:
        """The deployment's limits summed over its ranks, with ``dp_size`` = G."""
        c = self.config
        return Registration(
            hardware_profile=None,
            dp_size=c.ranks,
            model=c.model,
            gpu=c.gpu,
            max_num_seqs=c.ranks * c.slots_per_rank,
            max_num_batched_tokens=c.ranks * c.slots_per_rank,
            max_model_len=c.kv_tokens_per_rank,
            kv_blocks_total=c.ranks * blocks_for_tokens(c.kv_tokens_per_rank, c.block_size_tokens),
            block_size_tokens=c.block_size_tokens,
        )

    def rejection(self, spec: RequestSpec) -> str | None:
        """Prompt plus output over one rank's KV reservation room."""
        total = spec.prompt_tokens + spec.target_output_tokens
        if total > self.config.kv_tokens_per_rank:
            return f"prompt+output {total} tokens exceeds kv_tokens_per_rank {self.config.kv_tokens_per_rank}"
        return None

    def start_step(self, now_s: float) -> float | None:
        """Route, admit and price one synchronised step; None when nothing is active or admissible."""
        self.refresh_policy(now_s)
        c = self.config
        if self._waiting:
            views = [
                RankView(
                    rank=g,
                    load_tokens=self._loads[g],
                    active=len(self._active[g]),
                    free_slots=c.slots_per_rank - len(self._active[g]),
                    kv_free_tokens=c.kv_tokens_per_rank - self._reserved[g],
                    kv_capacity_tokens=c.kv_tokens_per_rank,
                    requests=tuple(self._active[g]),
                    step_id=self._step_id,
                    now_s=now_s,
                )
                for g in range(c.ranks)
            ]
            waiting = list(self._waiting)
            taken: set[int] = set()
            clock = self._decision_clock
            started_s = 0.0 if clock is None else clock()
            assigned = self.router.assign(waiting, views, self._policy)
            if clock is not None:
                self._decision_s = clock() - started_s
                self.imbalance.record_decision(self._decision_s)
            for index, g in assigned:
                request = waiting[index]
                taken.add(index)
                request.dp_rank = g
                request.admitted_s = now_s
                request.computed_tokens = request.spec.prompt_tokens
                self._active[g].append(request)
                self._loads[g] += request.spec.prompt_tokens
                self._reserved[g] += request.spec.prompt_tokens + request.target_output_tokens
                self._admitted_now[g] += 1
                self.telemetry.admitted(now_s, request)
            if taken:
                self._waiting = deque(r for i, r in enumerate(waiting) if i not in taken)
        if not any(self._active):
            self.busy = False
            return None
        for g in range(c.ranks):
            active = self._active[g]
            new = self._admitted_now[g]
            prefill = sum(r.spec.prompt_tokens for r in active[len(active) - new :]) if new else 0
            shape = BatchShape(
                prefill_tokens=prefill,
                num_prefill_requests=new,
                decode_requests=len(active) - new,
                decode_context_tokens=self._loads[g] - prefill,
                max_rank_load_tokens=self._loads[g],
            )
            self._local_s[g] = self.timing.step_time_s(shape) if active else 0.0
        self._step_started_s = now_s
        self._in_step = True
        self.busy = True
        charged_s, self._decision_s = self._decision_s, 0.0
        return charged_s + max(self._local_s)

    def end_step(self, now_s: float) -> None:
        """Every active request decodes one token; finished ones leave; rank and step reports go out."""
        if not self._in_step:
            return
        self._in_step = False
        c = self.config
        step_s = now_s - self._step_started_s
        loads_before = list(self._loads)
        prefill_tokens = 0
        prefills = 0
        decodes = 0
        decode_ctx = 0
        completed = [0] * c.ranks
        for g in range(c.ranks):
            active = self._active[g]
            new = self._admitted_now[g]
            prefills += new
            decodes += len(active) - new
            prefill_tokens += sum(r.spec.prompt_tokens for r in active[len(active) - new :]) if new else 0
            decode_ctx += loads_before[g]
            keep: list[SimRequest] = []
            for request in active:
                if self.token(request, now_s):
                    self._loads[g] -= request.computed_tokens
                    self._reserved[g] -= request.spec.prompt_tokens + request.target_output_tokens
                    completed[g] += 1
                    self.finish(request, now_s)
                else:
                    request.computed_tokens += 1
                    self._loads[g] += 1
                    keep.append(request)
            self._active[g] = keep
        for g in range(c.ranks):
            self.telemetry.rank_step(
                now_s,
                RankShare(
                    dp_rank=g,
                    step_id=self._step_id,
                    load_tokens=loads_before[g],
                    num_running=len(self._active[g]),
                    free_slots=c.slots_per_rank - len(self._active[g]),
                    local_compute_s=self._local_s[g],
                    barrier_wait_s=max(0.0, step_s - self._local_s[g]),
                    admitted=self._admitted_now[g],
                    completed=completed[g],
                ),
            )
            self._admitted_now[g] = 0
        pre_admission = float(c.ranks * max(self._loads) - sum(self._loads))
        post_admission = float(c.ranks * max(loads_before) - sum(loads_before))
        peak = max(self._loads)
        self.imbalance.record_step(
            pre_admission_tokens=pre_admission,
            post_admission_tokens=post_admission,
            balance_ratio=sum(self._loads) / (c.ranks * peak) if peak > 0 else 1.0,
        )
        self.metrics.rank_step(
            imbalance_tokens=pre_admission,
            idle_s=sum(max(0.0, step_s - local) for local in self._local_s),
            capacity_s=c.ranks * step_s,
        )
        self.report_step(
            now_s,
            StepCounts(
                duration_s=step_s,
                num_prefill_requests=prefills,
                sum_prefill_tokens=prefill_tokens,
                num_decode_requests=decodes,
                sum_decode_kv_tokens=decode_ctx - prefill_tokens,
                num_running=self.num_running,
                num_waiting=self.num_waiting,
                kv_blocks_used=sum(blocks_for_tokens(load, c.block_size_tokens) for load in self._loads),
                kv_blocks_total=c.ranks * blocks_for_tokens(c.kv_tokens_per_rank, c.block_size_tokens),
                block_size_tokens=c.block_size_tokens,
                num_preempted=0,
                scheduler_mode="dp",
            ),
            tokens=prefill_tokens + prefills + decodes,
        )
