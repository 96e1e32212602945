"""Schedulers for vLLM's V1 engine (``--scheduler-cls``) that report to Governor and obey its policies.

Three classes, each a subclass of vLLM's own ``Scheduler``, chosen with
``vllm serve MODEL --scheduler-cls services.engines.vllm.scheduler.EbplusScheduler`` (or
``SlaiScheduler``, or ``GovernorScheduler`` for stock scheduling with exact telemetry):

- ``GovernorScheduler`` schedules exactly as stock vLLM and publishes the engine's exact telemetry
  from inside the engine core: arrivals at ``add_request``, every step's batch (prefill and decode
  requests and tokens, measured from the scheduler's own output) with its wall time up to
  ``update_from_output``, first tokens, token gaps and finishes with their reasons.
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

What runs on the step path is kept to reading the engine: the step's raw numbers
(the batch's counts, each output's id, token count and finish reason, queue and KV sizes) go to the
engine's deferred ``EngineStream`` as one record per call, and the request bookkeeping, the
``StepCounts``, the validated events and their encoding are done by the publisher's thread
(``report_outputs``), so a step shares no lock with it and builds no pydantic model.

Async scheduling (vLLM's default on GPUs: the engine core schedules batch N+1 before batch N's output
is back, two batches in flight). Each class has an async twin composed with vLLM's ``AsyncScheduler``
by multiple inheritance (``AsyncEbplusScheduler(EbplusScheduler, AsyncScheduler)``, as vLLM composes
its own ``DiffusionAsyncScheduler``), and naming the plain class builds the twin when the engine's
config says ``async_scheduling``, so one ``--scheduler-cls`` serves both. Every batch in flight keeps
its own record (``InFlightBatch``, keyed by its ``SchedulerOutput``): its counts are taken before vLLM
advances the requests, and its step event, duration and the requests it advanced are reported when
that same output comes back. A request whose last prompt chunk or previous decode is still in flight
(``num_output_placeholders`` > 0) is decoding for EB's phases, and SLAI's critical test counts the
batches in flight that do not carry it. A step's duration is the time from the later of its
scheduling and the previous batch's completion to its own completion: with two batches in flight,
the engine's time per batch, so the durations of a busy engine add up to its wall time.

Deviations from the simulator's schedulers: the EB+ KV escape pauses in-progress prefills (they keep
their blocks) instead of preempting them; an EB PREFILL step that could schedule nothing is followed by
a DECODE step, so a full KV cache never idles the engine. Under vLLM's internal data parallelism each rank's
engine core runs its own scheduler and publishes as one rank of the engine (services/engines/vllm/connect.py).
"""

from __future__ import annotations

import operator
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.engine import EngineCoreOutputs, FinishReason
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request, RequestStatus

from policies.ebplus.phase_machine import EngineView as PhaseView
from policies.ebplus.phase_machine import PhaseState, StepKind, advance, runs_phases
from policies.slai.deadline import last_schedulable_time
from policies.slai.offset_rule import offset_for_kv_use, offset_rule_of
from schemas.policy_docs.base import PolicyDocument
from schemas.policy_docs.ebplus import EbplusMode, EbplusPayload, EbplusPolicy
from schemas.policy_docs.slai import SlaiPayload, SlaiPolicy
from services.engines.stream import EventBuilder
from services.engines.vllm.connect import EngineLink, finish_reason_name, request_track
from services.sdk.step_counts import StepCounts
from services.settings import EngineSettings

SLAI_MODE = "slai"
STOCK_MODE = "stock"
_Running = TypeVar("_Running")  # a running request (vLLM's ``Request``)


# Batches a scheduler remembers at most: vLLM keeps max_concurrent_batches (2 under async scheduling,
# the pipeline depth with pipeline parallelism) in flight; a batch never given back is forgotten past this.
MAX_IN_FLIGHT_BATCHES = 8


def is_decoding(request: Request) -> bool:
    """True when the request's prompt (and any recompute) is scheduled and its next step decodes one token.

    Under async scheduling a token still in flight is a placeholder (``num_output_placeholders``):
    it is counted in ``num_computed_tokens`` but not yet in ``num_tokens``. A request whose last prompt
    chunk is in flight has no output token yet and decodes next.
    """
    placeholders = request.num_output_placeholders
    return (
        request.num_output_tokens + placeholders > 0
        and request.num_computed_tokens >= request.num_tokens + placeholders - 1
    )


def split_decoding(requests: Iterable[Request]) -> tuple[list[Request], list[Request]]:
    """The decoding and the prefilling ``requests`` (``is_decoding``), each in their order, in one pass."""
    decoding: list[Request] = []
    prefilling: list[Request] = []
    for request in requests:
        (decoding if is_decoding(request) else prefilling).append(request)
    return decoding, prefilling


def restore_running(before: list[_Running], offered: list[_Running], after: list[_Running]) -> list[_Running]:
    """``running`` after a stock ``schedule`` that was shown only ``offered`` of the ``before`` requests.

    vLLM's ``schedule`` only removes the requests it preempts from the list it is given and appends
    the ones it admits. So the answer is ``before`` in its order less the preempted, then ``after``'s
    admissions; a request that was not offered (hidden for the step, or past SLAI's beta) keeps its
    place. When ``offered`` is still the head of ``after`` (nothing preempted: the common step) that
    is ``before`` plus ``after``'s tail, with no pass over the requests in Python.
    """
    count = len(offered)
    if len(after) >= count and all(map(operator.is_, offered, after)):
        return before + after[count:]
    still_running = {id(request) for request in after}
    preempted = {id(request) for request in offered if id(request) not in still_running}
    known = {id(request) for request in before}
    return [r for r in before if id(r) not in preempted] + [r for r in after if id(r) not in known]


def schedulable_until_s(deadline_s: float, *, batches_in_flight: int, tokens_in_flight: int, tbar_s: float) -> float:
    """The latest time a batch built now may take a decode whose last schedulable time is C = ``deadline_s``.

    C (eq. 8, ``policies.slai.deadline``) assumes the batch runs at once. Under async scheduling a batch
    built now runs after the ``batches_in_flight``; each that carries the request (``tokens_in_flight``,
    its placeholders) also moves its last token, and C with it, one step along, so the decode is due
    (b - h) tbar earlier. Without async scheduling b = h = 0 and this is C.
    """
    return deadline_s - max(0, batches_in_flight - tokens_in_flight) * tbar_s


@dataclass(slots=True, kw_only=True)
class InFlightBatch:
    """One scheduled batch until vLLM gives its output back: what it carried and when it was scheduled.

    Attributes:
        scheduled_s: wall time its ``schedule`` call started, seconds.
        scheduler_mode: what the scheduler ran for it (``EB``, ``MB``: an ``EbplusMode``; ``slai``, ``stock``).
        num_prefill_requests: requests that computed prompt tokens.
        sum_prefill_tokens: prompt tokens computed.
        num_decode_requests: requests that decoded one token.
        sum_decode_kv_tokens: summed context of the decoding requests, tokens.
        num_preempted: requests preempted while it was scheduled.
    """

    scheduled_s: float = 0.0
    scheduler_mode: str = STOCK_MODE
    num_prefill_requests: int = 0
    sum_prefill_tokens: int = 0
    num_decode_requests: int = 0
    sum_decode_kv_tokens: int = 0
    num_preempted: int = 0

    @property
    def num_tokens(self) -> int:
        """Tokens the batch computes: its prompt chunks and one per decode."""
        return self.sum_prefill_tokens + self.num_decode_requests


# One output of a step as the step path reads it: request id, new tokens, finish reason (None: running).
Produced = tuple[str, int, FinishReason | None]
# A step's state after its output, read on the step path: the batch, its duration, running and waiting
# requests, KV blocks used and total.
StepState = tuple[InFlightBatch, float, int, int, int, int]


class GovernorScheduler(Scheduler):
    """Stock vLLM V1 scheduling with exact Governor telemetry; the base of the policy-obeying schedulers.

    Constructing one of Governor's classes for an engine whose config says ``async_scheduling`` builds
    its async twin instead (and the plain class for a twin named without it), so ``--scheduler-cls``
    names one class for both modes. A subclass of yours is built as it is.
    """

    policy_kind: ClassVar[str | None] = None
    scheduler_name: ClassVar[str] = "vllm"

    def __new__(cls, *args: Any, **kwargs: Any) -> GovernorScheduler:
        """An instance of ``cls`` or of its twin for the engine's scheduling mode (``scheduler_class_for``)."""
        vllm_config = kwargs.get("vllm_config", args[0] if args else None)
        runs_async = getattr(getattr(vllm_config, "scheduler_config", None), "async_scheduling", False) is True
        return super().__new__(scheduler_class_for(cls, runs_async=runs_async))

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.scheduler_mode = STOCK_MODE
        self.in_flight: dict[int, InFlightBatch] = {}
        self._last_done_s = 0.0
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
            self._link.stream.later(report_arrival, time.time(), request, self._link.settings)

    def schedule(self, throttle_prefills: bool = False) -> SchedulerOutput:
        """Build the step under the engine's live policy document (stock vLLM without one)."""
        now_s = time.time()
        document = self._link.document(self.policy_kind, now_s)
        output = self.schedule_under(document, now_s, throttle_prefills)
        batch = self.in_flight.get(id(output))
        if batch is None or batch.num_tokens <= 0:
            self.in_flight.pop(id(output), None)
            return output
        batch.scheduled_s = now_s
        batch.scheduler_mode = self.scheduler_mode
        preempted = tuple(output.preempted_req_ids or ())
        batch.num_preempted = len(preempted)
        self._link.stream.later(report_scheduled, now_s, tuple(output.num_scheduled_tokens), preempted)
        return output

    def batches_in_flight(self) -> int:
        """Batches scheduled whose output is not back yet (0 or 1 between steps without async scheduling)."""
        return len(self.in_flight)

    def schedule_under(self, document: PolicyDocument | None, now_s: float, throttle_prefills: bool) -> SchedulerOutput:
        """The stock step; subclasses obey ``document`` (None: no valid document, stock behaviour)."""
        self.scheduler_mode = STOCK_MODE
        return super().schedule(throttle_prefills)

    def schedule_only(
        self,
        offered: list[Request],
        *,
        admit_seqs: int,
        throttle_prefills: bool,
        token_budget: int | None = None,
    ) -> SchedulerOutput:
        """One stock ``schedule`` over the running requests ``offered`` in their order, admitting <= ``admit_seqs``.

        The running requests not offered keep their KV and their place in ``running``
        (``restore_running``), and ``token_budget`` may lower the step's token budget. ``offered``
        may be ``running`` itself (a lower budget only): stock vLLM then updates it in place.
        """
        before = self.running
        if offered is not before:
            self.running = list(offered)
        saved_active, saved_budget = self.max_num_active_reqs, self.max_num_scheduled_tokens
        self.max_num_active_reqs = min(saved_active, len(self.running) + max(0, admit_seqs))
        if token_budget is not None:
            self.max_num_scheduled_tokens = max(1, min(saved_budget, token_budget))
        try:
            return super().schedule(throttle_prefills)
        finally:
            self.max_num_active_reqs, self.max_num_scheduled_tokens = saved_active, saved_budget
            if offered is not before:
                self.running = restore_running(before, offered, self.running)

    def _update_after_schedule(self, scheduler_output: SchedulerOutput) -> None:
        """Count the batch while its requests still hold their state from before it, then let vLLM advance them.

        vLLM calls this at the end of every ``schedule``; ``AsyncScheduler`` adds its placeholders here too,
        so the counts are taken first: a chunk is a decode when it feeds the request's last sampled
        (or in-flight) token.
        """
        batch = InFlightBatch()
        for request_id, count in scheduler_output.num_scheduled_tokens.items():
            request = self.requests.get(request_id)
            if request is None or count <= 0:
                continue
            if is_decoding(request):
                batch.num_decode_requests += 1
                batch.sum_decode_kv_tokens += request.num_computed_tokens + 1
            else:
                batch.num_prefill_requests += 1
                batch.sum_prefill_tokens += count
        if len(self.in_flight) >= MAX_IN_FLIGHT_BATCHES:
            self.in_flight.pop(next(iter(self.in_flight)))
        self.in_flight[id(scheduler_output)] = batch
        super()._update_after_schedule(scheduler_output)

    def update_from_output(
        self, scheduler_output: SchedulerOutput, model_runner_output: ModelRunnerOutput
    ) -> dict[int, EngineCoreOutputs]:
        """Apply the batch's output as stock vLLM does, then report its tokens, finishes and the batch itself.

        The batch is the one ``scheduler_output`` describes, whichever other batch was scheduled since.
        """
        results = super().update_from_output(scheduler_output, model_runner_output)
        now_s = time.time()
        # The counts are read now: the front end may trim an output's tokens once it has them.
        produced: list[Produced] = [
            (output.request_id, len(output.new_token_ids), output.finish_reason)
            for outputs in results.values()
            for output in outputs.outputs
        ]
        batch = self.in_flight.pop(id(scheduler_output), None)
        state: StepState | None = None
        if batch is not None:
            # Batches run one after another: this one started when it was scheduled or when the one
            # before it finished, whichever came later.
            duration_s = max(now_s - max(batch.scheduled_s, self._last_done_s), 1e-6)
            self._last_done_s = now_s
            self.after_step(now_s, duration_s, produced)
            total = self.kv_blocks_total
            state = (
                batch,
                duration_s,
                len(self.running),
                len(self.waiting) + len(self.kv_holding_waiting),
                max(0, total - self.kv_blocks_free),
                total,
            )
        self._link.stream.later(report_outputs, now_s, produced, state)
        return results

    def after_step(self, now_s: float, duration_s: float, produced: list[Produced]) -> None:
        """Hook after every step with output: ``produced`` holds each output's request id, new tokens, finish."""

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


def report_arrival(builder: EventBuilder, now_s: float, request: Request, settings: EngineSettings) -> None:
    """On the publisher's thread: the arrival of ``request`` (its id, lengths and tier do not change)."""
    builder.arrived(now_s, request_track(request, settings))


def report_scheduled(
    builder: EventBuilder, now_s: float, request_ids: tuple[str, ...], preempted: tuple[str, ...]
) -> None:
    """On the publisher's thread: a scheduled batch's admissions, then its preemptions."""
    builder.scheduled(now_s, request_ids)
    for request_id in preempted:
        builder.preempted(request_id)


def report_outputs(builder: EventBuilder, now_s: float, produced: list[Produced], state: StepState | None) -> None:
    """On the publisher's thread: a step's tokens, then its finishes, then the step itself (when it had a batch)."""
    builder.tokens(now_s, [(request_id, count) for request_id, count, _ in produced])
    for request_id, _, reason in produced:
        if reason is not None:
            builder.finished(now_s, request_id, finish_reason_name(str(reason)))
    if state is None:
        return
    batch, duration_s, running, waiting, used, total = state
    builder.step(
        now_s,
        StepCounts(
            duration_s=duration_s,
            num_prefill_requests=batch.num_prefill_requests,
            sum_prefill_tokens=batch.sum_prefill_tokens,
            num_decode_requests=batch.num_decode_requests,
            sum_decode_kv_tokens=batch.sum_decode_kv_tokens,
            num_running=running,
            num_waiting=waiting,
            kv_blocks_used=used,
            kv_blocks_total=total,
            num_preempted=batch.num_preempted,
            scheduler_mode=batch.scheduler_mode,
        ),
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
        """One step of the phase machine under the live payload: EB's exclusive phases, or mixed batching.

        Under MB or no payload the machine's step is MIXED from a fresh state (``runs_phases``), so the
        running requests are not read at all: the step costs what stock vLLM's does.
        """
        payload = document.payload if isinstance(document, EbplusPolicy) else None
        if payload is None or not runs_phases(payload):
            self.phase = None
            return self._mixed(payload, now_s, throttle_prefills)
        decoding, prefilling = split_decoding(self.running)
        view = PhaseView(
            now_s=now_s,
            waiting_seqs=len(self.waiting) + len(self.kv_holding_waiting),
            decoding_seqs=len(decoding),
            prefilling_seqs=len(prefilling),
            kv_free_blocks=min(self.kv_blocks_free, self.kv_blocks_total),
            kv_total_blocks=self.kv_blocks_total,
            block_size_tokens=self.block_size,
            max_num_seqs=self.max_num_running_reqs,
        )
        step = advance(view, self.phase, payload)
        self.phase = step.state
        kind = step.action.kind
        if kind is StepKind.PREFILL and self._prefill_was_empty and decoding:
            kind = StepKind.DECODE
        if kind in (StepKind.MIXED, StepKind.IDLE):
            return self._mixed(payload, now_s, throttle_prefills)
        self.scheduler_mode = EbplusMode.EB
        if kind is StepKind.PREFILL:
            output = self.schedule_only(
                prefilling, admit_seqs=step.action.admit_seqs, throttle_prefills=throttle_prefills
            )
            self._prefill_was_empty = output.total_num_scheduled_tokens == 0
            return output
        self._prefill_was_empty = False
        return self.schedule_only(decoding, admit_seqs=0, throttle_prefills=throttle_prefills)

    def _mixed(self, payload: EbplusPayload | None, now_s: float, throttle_prefills: bool) -> SchedulerOutput:
        """A mixed step: stock vLLM, under the payload's MB step budget when it sets one (EB+'s TBT guard)."""
        self._prefill_was_empty = False
        budget = None if payload is None else payload.mb_token_budget_tokens
        if budget is None:
            output = super().schedule_under(None, now_s, throttle_prefills)
        else:
            output = self.schedule_only(
                self.running,
                admit_seqs=self.max_num_running_reqs - len(self.running),
                throttle_prefills=throttle_prefills,
                token_budget=budget,
            )
        self.scheduler_mode = STOCK_MODE if payload is None else EbplusMode.MB
        return output


class SlaiScheduler(GovernorScheduler):
    """vLLM under SLAI (specs/seed-000-slai.md section 3): deadline-ordered decodes, deferred while prompts wait.

    Under async scheduling a request is critical when ``now + (b - h) tbar >= C``, with b the batches in
    flight and h the request's in-flight tokens (its placeholders): a batch built now runs only after
    the b in flight, and each of them that carries the request also moves its last token later.

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
        in_flight, tbar_s = self.batches_in_flight(), self.tbar_s

        def due_s(request: Request) -> float:
            return schedulable_until_s(
                deadlines.get(request.request_id, now_s),
                batches_in_flight=in_flight,
                tokens_in_flight=request.num_output_placeholders,
                tbar_s=tbar_s,
            )

        def critical(request: Request) -> bool:
            return request.request_id not in deadlines or now_s >= due_s(request)

        def keep(request: Request) -> bool:
            return not prompt_work or not is_decoding(request) or critical(request)

        def by_deadline(kept: list[Request]) -> list[Request]:
            decodes = sorted((r for r in kept if is_decoding(r)), key=due_s)
            prompts = [r for r in kept if not is_decoding(r)]
            return decodes[: payload.max_decodes] + prompts

        kept = [request for request in self.running if keep(request)]
        self.deferred_decodes += len(self.running) - len(kept)
        return self.schedule_only(
            by_deadline(kept),
            admit_seqs=max(0, slots),
            throttle_prefills=throttle_prefills,
            token_budget=payload.token_budget_tokens,
        )

    def after_step(self, now_s: float, duration_s: float, produced: list[Produced]) -> None:
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
        for request_id, count, _ in produced:
            if count <= 0:
                continue
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


class AsyncGovernorScheduler(GovernorScheduler, AsyncScheduler):
    """``GovernorScheduler`` under async scheduling: vLLM's ``AsyncScheduler`` placeholders, per-batch telemetry."""


class AsyncEbplusScheduler(EbplusScheduler, AsyncScheduler):
    """``EbplusScheduler`` under async scheduling (vLLM's default on GPUs)."""


class AsyncSlaiScheduler(SlaiScheduler, AsyncScheduler):
    """``SlaiScheduler`` under async scheduling (vLLM's default on GPUs)."""


# Each of Governor's schedulers: (its plain class, its async twin).
_TWINS: dict[type[GovernorScheduler], tuple[type[GovernorScheduler], type[GovernorScheduler]]] = {
    member: (plain, twin)
    for plain, twin in (
        (GovernorScheduler, AsyncGovernorScheduler),
        (EbplusScheduler, AsyncEbplusScheduler),
        (SlaiScheduler, AsyncSlaiScheduler),
    )
    for member in (plain, twin)
}


def scheduler_class_for(cls: type[GovernorScheduler], *, runs_async: bool) -> type[GovernorScheduler]:
    """The class to build for ``cls`` when the engine does (``runs_async``) or does not run async scheduling.

    Governor's own classes map to their plain or async twin; any other subclass is returned as it is
    (compose it with ``AsyncScheduler`` yourself, as the twins here do).
    """
    twins = _TWINS.get(cls)
    if twins is None:
        return cls
    return twins[1] if runs_async else twins[0]
