"""Schedulers for vLLM's V1 engine (``--scheduler-cls``) that report to Governor and obey its policies.

Three classes, each a subclass of vLLM's own ``Scheduler``, chosen with
``vllm serve MODEL --scheduler-cls services.engines.vllm.scheduler.EbplusScheduler`` (or
``SlaiScheduler``, or ``GovernorScheduler`` for stock scheduling with exact telemetry):

- ``GovernorScheduler`` schedules exactly as stock vLLM and publishes the engine's exact telemetry
  from inside the engine core: arrivals at ``add_request``, every step's batch (prefill and decode
  requests and tokens, measured from the scheduler's own output) with its wall time from ``schedule``
  to ``update_from_output``, first tokens, token gaps and finishes with their reasons.
- ``EbplusScheduler`` runs the EB(k) phase machine of ``policies.ebplus.phase_machine`` under the
  engine's EB+ document (specs/seed-001-ebplus.md section 3.4): a DECODE step hides the running
  requests that still prefill and admits nobody; a PREFILL step hides the decoding requests and admits
  at most the phase machine's count. Mode MB is stock vLLM under the document's MB step budget when it
  sets one (``mb_token_budget_tokens``, EB+'s TBT guard); no valid document is stock vLLM.
- ``SlaiScheduler`` keeps the last schedulable time C = e + TBT - delta tbar of every decoding request
  (paper eq. 8, ``policies.slai.deadline``) with delta from the pushed offset rule at the engine's KV
  use; while prompt work can run (a paused prefill, or a queued request and a free slot) it runs only
  the critical decodes (C <= now, earliest first, at most beta), then prefills (SPF or FCFS as
  pushed), within the pushed token budget and caps. With no valid document it is stock vLLM.

Hiding a request from ``running`` for one call of the stock ``schedule`` is how a step leaves it out:
vLLM already leaves running requests out of a step when the budget runs short, so the model runner
and the KV manager see nothing new. Policies are read from the ``PolicyClient`` cache and telemetry
goes to a bounded queue: no step ever waits on Redis or Kafka (DESIGN principle 5). Each new document
version is acknowledged with ``policy.applied``.

Deviations from the simulator's schedulers: the EB+ KV escape pauses in-progress prefills (they keep
their blocks) instead of preempting them; an EB PREFILL step that could schedule nothing is followed by
a DECODE step, so a full KV cache never idles the engine. Async scheduling is off under these classes
(vLLM disables it for a custom ``Scheduler`` subclass), and data-parallel engines are not supported.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.engine import EngineCoreOutputs
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request, RequestStatus

from policies.ebplus.phase_machine import EngineView as PhaseView
from policies.ebplus.phase_machine import PhaseState, StepKind, advance
from policies.slai.deadline import last_schedulable_time
from policies.slai.decide import offset_rule_of
from policies.slai.offset_rule import offset_for_kv_use
from schemas.policy_docs.base import PolicyDocument
from schemas.policy_docs.ebplus import EbplusPolicy
from schemas.policy_docs.slai import SlaiPayload, SlaiPolicy
from services.engines.stream import StepCounts
from services.engines.vllm.connect import EngineLink, finish_reason_name, request_track

EB_MODE = "eb"
MB_MODE = "mb"
SLAI_MODE = "slai"
STOCK_MODE = "stock"


def is_decoding(request: Request) -> bool:
    """True when the request's prompt (and any recompute) is done and its next step decodes one token."""
    return request.num_output_tokens > 0 and request.num_computed_tokens >= request.num_tokens - 1


class GovernorScheduler(Scheduler):
    """Stock vLLM V1 scheduling with exact Governor telemetry; the base of the policy-obeying schedulers."""

    policy_kind: ClassVar[str | None] = None
    scheduler_name: ClassVar[str] = "vllm"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.scheduler_mode = STOCK_MODE
        self._step_started_s: float | None = None
        self._pending_counts = (0, 0, 0, 0)
        self._link = EngineLink.open(
            self.vllm_config,
            block_size_tokens=self.block_size,
            kv_blocks_total=self.kv_blocks_total,
            scheduler=self.scheduler_name,
            obeys=[] if self.policy_kind is None else [self.policy_kind],
            load=lambda: (len(self.running), len(self.waiting)),
        )

    @property
    def kv_blocks_total(self) -> int:
        """Usable KV blocks of the engine (the block pool less its null block)."""
        return max(1, int(self.kv_cache_manager.block_pool.num_gpu_blocks) - 1)

    @property
    def kv_blocks_free(self) -> int:
        """Free KV blocks now."""
        return int(self.kv_cache_manager.block_pool.get_num_free_blocks())

    @property
    def link(self) -> EngineLink:
        """The engine's connection to Governor (stream, policy client)."""
        return self._link

    def add_request(self, request: Request) -> None:
        """Queue ``request`` as stock vLLM does and report its arrival (once, not per streamed chunk)."""
        is_new = request.request_id not in self.requests
        super().add_request(request)
        if is_new:
            self._link.stream.arrived(time.time(), request_track(request, self._link.settings))

    def schedule(self, throttle_prefills: bool = False) -> SchedulerOutput:
        """Build the step under the engine's live policy document (stock vLLM without one)."""
        now_s = time.time()
        document = self._link.document(self.policy_kind, now_s)
        output = self.schedule_under(document, now_s, throttle_prefills)
        if output.total_num_scheduled_tokens > 0:
            self._step_started_s = now_s
            self._link.stream.scheduled(now_s, output.num_scheduled_tokens)
            for request_id in output.preempted_req_ids or ():
                self._link.stream.preempted(request_id)
            self._pending_counts = self._batch_counts(output)
        return output

    def schedule_under(self, document: PolicyDocument | None, now_s: float, throttle_prefills: bool) -> SchedulerOutput:
        """The stock step; subclasses obey ``document`` (None: no valid document, stock behaviour)."""
        self.scheduler_mode = STOCK_MODE
        return super().schedule(throttle_prefills)

    def schedule_only(
        self,
        keep: Callable[[Request], bool],
        *,
        admit_seqs: int,
        throttle_prefills: bool,
        token_budget: int | None = None,
        order: Callable[[list[Request]], list[Request]] | None = None,
    ) -> SchedulerOutput:
        """Run one stock ``schedule`` over the running requests ``keep`` accepts, admitting at most ``admit_seqs``.

        The hidden requests keep their KV and their place in ``running``; ``order`` may reorder the kept
        ones (earliest deadline first) and ``token_budget`` lower the step's token budget.
        """
        position = {id(request): index for index, request in enumerate(self.running)}
        hidden = [request for request in self.running if not keep(request)]
        kept = [request for request in self.running if keep(request)]
        saved_active, saved_budget = self.max_num_active_reqs, self.max_num_scheduled_tokens
        self.running = order(kept) if order is not None else kept
        self.max_num_active_reqs = min(saved_active, len(self.running) + max(0, admit_seqs))
        if token_budget is not None:
            self.max_num_scheduled_tokens = max(1, min(saved_budget, token_budget))
        try:
            return super().schedule(throttle_prefills)
        finally:
            self.max_num_active_reqs, self.max_num_scheduled_tokens = saved_active, saved_budget
            last = len(position)
            self.running = sorted([*hidden, *self.running], key=lambda request: position.get(id(request), last))

    def update_from_output(
        self, scheduler_output: SchedulerOutput, model_runner_output: ModelRunnerOutput
    ) -> dict[int, EngineCoreOutputs]:
        """Apply the step's output as stock vLLM does, then report its tokens, finishes and the step itself."""
        results = super().update_from_output(scheduler_output, model_runner_output)
        now_s = time.time()
        stream = self._link.stream
        produced = [output for outputs in results.values() for output in outputs.outputs]
        stream.tokens(now_s, ((output.request_id, len(output.new_token_ids)) for output in produced))
        advanced = [output.request_id for output in produced if output.new_token_ids]
        for output in produced:
            if output.finish_reason is not None:
                stream.finished(now_s, output.request_id, finish_reason_name(str(output.finish_reason)))
        started = self._step_started_s
        if started is not None and scheduler_output.total_num_scheduled_tokens > 0:
            self._step_started_s = None
            duration_s = max(now_s - started, 1e-6)
            self.after_step(now_s, duration_s, advanced)
            stream.step(now_s, self._step_counts(duration_s))
        return results

    def after_step(self, now_s: float, duration_s: float, advanced: list[str]) -> None:
        """Hook after every step with output: ``advanced`` lists the requests that got tokens."""

    def finish_requests(self, request_ids: str | Iterable[str] | None, finished_status: RequestStatus) -> list[Request]:
        """Finish requests from outside (client aborts) as stock vLLM does, and report each."""
        finished = super().finish_requests(request_ids, finished_status)
        reason = RequestStatus.get_finished_reason(finished_status)
        name = finish_reason_name("abort" if reason is None else str(reason))
        now_s = time.time()
        for request in finished:
            self._link.stream.finished(now_s, request.request_id, name)
        return finished

    def shutdown(self) -> None:
        """Stop vLLM's scheduler, then flush and close the Governor link."""
        super().shutdown()
        self._link.close()

    def _batch_counts(self, output: SchedulerOutput) -> tuple[int, int, int, int]:
        prefill_requests = prefill_tokens = decode_requests = decode_context = 0
        for request_id, count in output.num_scheduled_tokens.items():
            request = self.requests.get(request_id)
            if request is None:
                continue
            computed_before = request.num_computed_tokens - count
            if request.num_output_tokens > 0 and computed_before >= request.num_tokens - 1:
                decode_requests += 1
                decode_context += computed_before + 1
            else:
                prefill_requests += 1
                prefill_tokens += count
        return prefill_requests, prefill_tokens, decode_requests, decode_context

    def _step_counts(self, duration_s: float) -> StepCounts:
        prefill_requests, prefill_tokens, decode_requests, decode_context = self._pending_counts
        total = self.kv_blocks_total
        return StepCounts(
            duration_s=duration_s,
            num_prefill_requests=prefill_requests,
            sum_prefill_tokens=prefill_tokens,
            num_decode_requests=decode_requests,
            sum_decode_kv_tokens=decode_context,
            num_running=len(self.running),
            num_waiting=len(self.waiting) + len(self.kv_holding_waiting),
            kv_blocks_used=max(0, total - self.kv_blocks_free),
            kv_blocks_total=total,
            scheduler_mode=self.scheduler_mode,
        )


class EbplusScheduler(GovernorScheduler):
    """vLLM under EB+ (specs/seed-001-ebplus.md section 3.4): the EB(k) phase machine, or MB, as pushed."""

    policy_kind: ClassVar[str | None] = "ebplus"
    scheduler_name: ClassVar[str] = "ebplus"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.phase: PhaseState | None = None
        self._prefill_was_empty = False

    def schedule_under(self, document: PolicyDocument | None, now_s: float, throttle_prefills: bool) -> SchedulerOutput:
        """One step of the phase machine under the live payload: EB's exclusive phases, or mixed batching."""
        payload = document.payload if isinstance(document, EbplusPolicy) else None
        decoding = sum(1 for request in self.running if is_decoding(request))
        view = PhaseView(
            now_s=now_s,
            waiting_seqs=len(self.waiting) + len(self.kv_holding_waiting),
            decoding_seqs=decoding,
            prefilling_seqs=len(self.running) - decoding,
            kv_free_blocks=min(self.kv_blocks_free, self.kv_blocks_total),
            kv_total_blocks=self.kv_blocks_total,
            block_size_tokens=self.block_size,
            max_num_seqs=self.max_num_running_reqs,
        )
        step = advance(view, self.phase, payload)
        self.phase = step.state
        kind = step.action.kind
        if kind is StepKind.PREFILL and self._prefill_was_empty and decoding > 0:
            kind = StepKind.DECODE
        if kind in (StepKind.MIXED, StepKind.IDLE):
            self._prefill_was_empty = False
            budget = None if payload is None else payload.mb_token_budget_tokens
            if budget is None:
                output = super().schedule_under(None, now_s, throttle_prefills)
            else:
                output = self.schedule_only(
                    lambda request: True,
                    admit_seqs=self.max_num_running_reqs - len(self.running),
                    throttle_prefills=throttle_prefills,
                    token_budget=budget,
                )
            self.scheduler_mode = STOCK_MODE if payload is None else MB_MODE
            return output
        self.scheduler_mode = EB_MODE
        if kind is StepKind.PREFILL:
            output = self.schedule_only(
                lambda request: not is_decoding(request),
                admit_seqs=step.action.admit_seqs,
                throttle_prefills=throttle_prefills,
            )
            self._prefill_was_empty = output.total_num_scheduled_tokens == 0
            return output
        self._prefill_was_empty = False
        return self.schedule_only(is_decoding, admit_seqs=0, throttle_prefills=throttle_prefills)


class SlaiScheduler(GovernorScheduler):
    """vLLM under SLAI (specs/seed-000-slai.md section 3): deadline-ordered decodes, deferred while prompts wait.

    Attributes:
        deadlines_s: last schedulable time C of each decoding request, frozen until its next token.
        offsets: the delta each deadline was computed with (a multiple of tbar), per request.
        batch_end_s: e of eq. 8, the end of the last step that advanced each request, seconds.
        tbars_s: the tbar each deadline was computed with, per request, seconds.
        tbar_s: the engine's running mean step time, seconds.
        deferred_decodes: decodes left out of steps because they were not yet critical (a counter).
    """

    policy_kind: ClassVar[str | None] = "slai"
    scheduler_name: ClassVar[str] = "slai"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.deadlines_s: dict[str, float] = {}
        self.offsets: dict[str, float] = {}
        self.batch_end_s: dict[str, float] = {}
        self.tbars_s: dict[str, float] = {}
        self.tbar_s = 0.0
        self.deferred_decodes = 0
        self._steps = 0
        self._payload: SlaiPayload | None = None

    def schedule_under(self, document: PolicyDocument | None, now_s: float, throttle_prefills: bool) -> SchedulerOutput:
        """Critical decodes first, then prompts, within the pushed budget; stock vLLM with no valid document."""
        payload = document.payload if isinstance(document, SlaiPolicy) else None
        self._payload = payload
        if payload is None:
            return super().schedule_under(None, now_s, throttle_prefills)
        self.scheduler_mode = SLAI_MODE
        if payload.prefill_order != "fcfs":
            self._order_waiting(paid_first=payload.prefill_order == "spf_paid_first")
        slots = min(payload.max_active, self.max_num_running_reqs) - len(self.running)
        prompt_work = (bool(self.waiting) and slots > 0) or any(not is_decoding(r) for r in self.running)
        deadlines = self.deadlines_s

        def critical(request: Request) -> bool:
            deadline = deadlines.get(request.request_id)
            return deadline is None or now_s >= deadline

        def keep(request: Request) -> bool:
            return not prompt_work or not is_decoding(request) or critical(request)

        def by_deadline(kept: list[Request]) -> list[Request]:
            decodes = sorted((r for r in kept if is_decoding(r)), key=lambda r: deadlines.get(r.request_id, now_s))
            prompts = [r for r in kept if not is_decoding(r)]
            return decodes[: payload.max_decodes] + prompts

        self.deferred_decodes += sum(1 for request in self.running if not keep(request))
        return self.schedule_only(
            keep,
            admit_seqs=max(0, slots),
            throttle_prefills=throttle_prefills,
            token_budget=payload.token_budget_tokens,
            order=by_deadline,
        )

    def after_step(self, now_s: float, duration_s: float, advanced: list[str]) -> None:
        """Update tbar, then freeze C = e + TBT - delta tbar (eq. 8) for every request this step advanced."""
        self._steps += 1
        self.tbar_s += (duration_s - self.tbar_s) / self._steps
        payload = self._payload
        if payload is None:
            for bookkeeping in (self.deadlines_s, self.offsets, self.batch_end_s, self.tbars_s):
                bookkeeping.clear()
            return
        used = max(0, self.kv_blocks_total - self.kv_blocks_free)
        delta = offset_for_kv_use(min(1.0, used / self.kv_blocks_total), offset_rule_of(payload))
        for request_id in advanced:
            request = self.requests.get(request_id)
            if request is None or request.is_finished():
                continue
            tier = self._link.tier_of(request)
            tbt_s = payload.tier_tbt_s.get(tier, payload.default_tbt_s)
            self.deadlines_s[request_id] = last_schedulable_time(
                last_batch_end_s=now_s, tbt_slo_s=tbt_s, delta=delta, tbar_s=self.tbar_s
            )
            self.offsets[request_id] = delta
            self.batch_end_s[request_id] = now_s
            self.tbars_s[request_id] = self.tbar_s
        live = set(self.requests)
        for request_id in [r for r in self.deadlines_s if r not in live]:
            for bookkeeping in (self.deadlines_s, self.offsets, self.batch_end_s, self.tbars_s):
                bookkeeping.pop(request_id, None)

    def _order_waiting(self, *, paid_first: bool) -> None:
        """Shortest prompt first (optionally paid tiers first), stable, preempted requests still in front."""
        queued = list(self.waiting)
        if len(queued) < 2:
            return
        tier_of = self._link.tier_of
        queued.sort(
            key=lambda r: (
                r.num_preemptions == 0,
                paid_first and tier_of(r) != "paid",
                r.num_tokens,
            )
        )
        for request in queued:
            self.waiting.remove_request(request)
        for request in queued:
            self.waiting.add_request(request)
