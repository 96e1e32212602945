"""A simulated engine: paged KV cache, continuous batching under a token budget, recompute preemption.

The engine is an entity of the discrete-event core (services/sim/event_loop.py): the simulation calls
``arrive``, ``start_step`` and ``end_step`` at event times. Each iteration it asks its scheduler
(services/sim/schedulers) for a batch, checks the batch against its limits (KV blocks, token
budget, slots), prices it with its timing model (services/sim/timing.py) and, at the step's end,
advances every request in it. Telemetry goes out through ``EngineTelemetry``; policies come from a
``PolicySource`` read at the start of each step (specs/seed-001-ebplus.md section 6.5 and
specs/seed-000-slai.md section 5.6 describe the engine model). Arrivals, the policy refresh,
registration, heartbeats, tokens and the step report are ``EngineBase``'s (services/sim/engine_base.py),
shared with the data-parallel deployment.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from schemas.errors import InvalidInputError
from services.sdk.engine_events import Registration
from services.sdk.protocol import PolicySource
from services.sdk.step_counts import StepCounts
from services.sim.engine_base import EngineBase, require_positive
from services.sim.request import RequestSpec, SimRequest, blocks_for_tokens
from services.sim.run_summary import MetricsRecorder
from services.sim.schedulers.base import BatchPlan, Scheduler
from services.sim.telemetry import EngineTelemetry
from services.sim.timing import BatchShape, TimingModel


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineConfig:
    """Limits and identity of one simulated engine (vLLM names where they exist).

    Raises:
        ConfigError: a non-positive limit.
    """

    engine_id: str
    model: str = "qwen3-8b"
    gpu: str = "h200"
    hardware_profile: str | None = None
    pool: str = "default"
    max_num_seqs: int = 256
    token_budget_tokens: int = 8192
    kv_blocks_total: int = 40_000
    block_size_tokens: int = 16
    max_model_len: int = 32_768

    def __post_init__(self) -> None:
        limits = ("max_num_seqs", "token_budget_tokens", "kv_blocks_total", "block_size_tokens", "max_model_len")
        require_positive(self, limits, f"engine {self.engine_id}")


class SimEngine(EngineBase):
    """One engine: waiting queue, running set, KV blocks, a scheduler and a timing model."""

    def __init__(
        self,
        config: EngineConfig,
        *,
        scheduler: Scheduler,
        timing: TimingModel,
        telemetry: EngineTelemetry,
        policy_source: PolicySource,
        metrics: MetricsRecorder,
    ) -> None:
        kind = scheduler.policy_kind
        super().__init__(
            config.engine_id, timing, telemetry, policy_source, metrics, pool=config.pool, policy_kind=kind
        )
        self.config = config
        self.scheduler = scheduler
        # The EngineView limits: KV capacity (blocks), tokens per block, most running, tokens per step.
        self.kv_blocks_total = config.kv_blocks_total
        self.block_size_tokens = config.block_size_tokens
        self.max_num_seqs = config.max_num_seqs
        self.token_budget_tokens = config.token_budget_tokens
        self._running: list[SimRequest] = []
        self._kv_blocks_used = 0
        self._now_s = 0.0
        self._plan: BatchPlan | None = None

    # EngineView, read by the scheduler.
    @property
    def now_s(self) -> float:
        """Event time of the iteration being planned, seconds."""
        return self._now_s

    @property
    def waiting(self) -> Sequence[SimRequest]:
        """Requests without KV, in queue order."""
        return self._waiting

    @property
    def running(self) -> Sequence[SimRequest]:
        """Requests holding KV, oldest admission first."""
        return self._running

    @property
    def kv_blocks_free(self) -> int:
        """KV blocks not held by any request."""
        return self.config.kv_blocks_total - self._kv_blocks_used

    @property
    def kv_blocks_used(self) -> int:
        """KV blocks held by running requests."""
        return self._kv_blocks_used

    @property
    def num_running(self) -> int:
        """Requests holding KV."""
        return len(self._running)

    def registration(self) -> Registration:
        """The engine's limits, as configured."""
        c = self.config
        return Registration(
            model=c.model,
            gpu=c.gpu,
            hardware_profile=c.hardware_profile,
            dp_size=1,
            max_num_seqs=c.max_num_seqs,
            max_num_batched_tokens=c.token_budget_tokens,
            max_model_len=c.max_model_len,
            kv_blocks_total=c.kv_blocks_total,
            block_size_tokens=c.block_size_tokens,
        )

    def rejection(self, spec: RequestSpec) -> str | None:
        """Prompt plus output over ``max_model_len`` or over the whole KV cache."""
        total_tokens = spec.prompt_tokens + spec.target_output_tokens
        if total_tokens > self.config.max_model_len:
            return f"prompt+output {total_tokens} tokens exceeds max_model_len {self.config.max_model_len}"
        if blocks_for_tokens(total_tokens, self.config.block_size_tokens) > self.config.kv_blocks_total:
            return f"prompt+output {total_tokens} tokens exceeds the KV capacity"
        return None

    def start_step(self, now_s: float) -> float | None:
        """Plan and price the next iteration at ``now_s``; return its duration, or None when idle.

        Raises:
            InvalidInputError: the scheduler's plan breaks a limit (KV, budget, slots): a scheduler bug.
        """
        self._now_s = now_s
        self.refresh_policy(now_s)
        if not self._running and not self._waiting:
            self.busy = False
            return None
        plan = self.scheduler.schedule(self)
        bs = self.config.block_size_tokens
        for victim in plan.preempted:
            self._preempt(victim, now_s)
        if plan.empty:
            self.busy = False
            return None
        tokens = len(plan.decodes)
        prefill_tokens = 0
        prefill_ctx = 0.0
        admitted: list[SimRequest] = []
        for request, chunk in plan.prefills:
            if request.kv_blocks == 0:  # running requests always hold a block
                admitted.append(request)
            prefill_ctx += request.computed_tokens + chunk / 2
            prefill_tokens += chunk
            need = blocks_for_tokens(request.computed_tokens + chunk, bs)
            self._kv_blocks_used += need - request.kv_blocks
            request.kv_blocks = need
        decode_ctx = 0
        for request in plan.decodes:
            need = blocks_for_tokens(request.computed_tokens + 1, bs)
            self._kv_blocks_used += need - request.kv_blocks
            request.kv_blocks = need
            decode_ctx += request.computed_tokens
        tokens += prefill_tokens
        for request in admitted:
            self._waiting.remove(request)
            self._running.append(request)
            if request.admitted_s is None:
                request.admitted_s = now_s
                self.telemetry.admitted(now_s, request)
        if tokens > self.config.token_budget_tokens:
            msg = f"batch of {tokens} tokens exceeds the budget {self.config.token_budget_tokens} ({self.engine_id})"
            raise InvalidInputError(msg, field="token_budget_tokens", value=tokens)
        if self._kv_blocks_used > self.config.kv_blocks_total:
            msg = f"KV use {self._kv_blocks_used} blocks exceeds {self.config.kv_blocks_total} ({self.engine_id})"
            raise InvalidInputError(msg, field="kv_blocks_used", value=self._kv_blocks_used)
        if len(self._running) > self.config.max_num_seqs:
            msg = f"{len(self._running)} running exceeds max_num_seqs {self.config.max_num_seqs} ({self.engine_id})"
            raise InvalidInputError(msg, field="max_num_seqs", value=len(self._running))
        shape = BatchShape(
            prefill_tokens=prefill_tokens,
            num_prefill_requests=len(plan.prefills),
            decode_requests=len(plan.decodes),
            decode_context_tokens=decode_ctx,
            prefill_context_tokens=prefill_ctx,
            max_rank_load_tokens=decode_ctx + prefill_tokens,
            exclusive=plan.exclusive,
        )
        self._plan = plan
        self._step_started_s = now_s
        self.busy = True
        return self.timing.step_time_s(shape)

    def _preempt(self, request: SimRequest, now_s: float) -> None:
        self._running.remove(request)
        self._kv_blocks_used -= request.kv_blocks
        request.kv_blocks = 0
        request.computed_tokens = 0
        request.prefill_target_tokens = request.spec.prompt_tokens + request.generated_tokens
        request.preemptions += 1
        self._waiting.appendleft(request)
        self.telemetry.preempted(now_s, request)
        self.metrics.preempted(self.engine_id)

    def end_step(self, now_s: float) -> None:
        """Apply the running iteration's work at its end time ``now_s`` and emit its events."""
        plan = self._plan
        if plan is None:
            return
        self._plan = None
        done: list[SimRequest] = []
        prefill_tokens = 0
        for request, chunk in plan.prefills:
            request.computed_tokens += chunk
            prefill_tokens += chunk
            if request.computed_tokens >= request.prefill_target_tokens and self.token(request, now_s):
                done.append(request)
        decode_ctx = 0
        for request in plan.decodes:
            decode_ctx += request.computed_tokens
            request.computed_tokens += 1
            if self.token(request, now_s):
                done.append(request)
        if done:
            self._running = [r for r in self._running if r.generated_tokens < r.target_output_tokens]
        for request in done:
            self._kv_blocks_used -= request.kv_blocks
            request.kv_blocks = 0
            self.finish(request, now_s)
        self.report_step(
            now_s,
            StepCounts(
                duration_s=now_s - self._step_started_s,
                num_prefill_requests=len(plan.prefills),
                sum_prefill_tokens=prefill_tokens,
                num_decode_requests=len(plan.decodes),
                sum_decode_kv_tokens=decode_ctx,
                num_running=self.num_running,
                num_waiting=self.num_waiting,
                kv_blocks_used=self._kv_blocks_used,
                kv_blocks_total=self.config.kv_blocks_total,
                block_size_tokens=self.config.block_size_tokens,
                num_preempted=len(plan.preempted),
                scheduler_mode=plan.mode,
            ),
            tokens=prefill_tokens + len(plan.decodes),
        )
