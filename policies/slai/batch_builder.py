"""Engine-side batch builders: SLAI (spec §3.2, paper §6), Sarathi-Serve (spec §6.1, paper Alg. 4)
and a prefill-first vLLM-like baseline (spec §6.2).

Each builder is a pure function ``build_*_batch(now_s, queues, kv, params) -> BatchPlan`` over small
request views: it says what the next batch runs, in order, and which requests it preempts by
recompute; the engine (or the simulator) applies the plan. SLAI builds a batch in four phases:

1. critical decodes (now_s >= C_ij, eq. 8) in ascending C, at most beta;
2. partly prefilled requests, FIFO, one chunk each;
3. new prefills, shortest prompt first (SPF) or FCFS, optionally paid users first, head-of-line
   admission that reserves KV for the whole prompt and keeps the watermark free;
4. non-critical decodes in ascending C while the budget and beta allow.

The token budget counts a decode as one token. When a decode needs a KV block and none is free,
SLAI preempts the newest paused prefill, and else the decode itself; Sarathi-Serve and vLLM preempt
the newest running request (spec §8 P10). Decode last schedulable times are inputs: the engine
computes them after each batch with ``policies.slai.deadline.last_schedulable_time`` and keeps them
frozen until the next token (spec §8 P3).
"""

from __future__ import annotations

import enum
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from policies.slai.params import PrefillOrder
from schemas.errors import InvalidInputError


class SchedulerKind(enum.StrEnum):
    """Which builder ``build_batch`` runs."""

    SLAI = "slai"
    SARATHI = "sarathi"
    VLLM = "vllm"


class EntryKind(enum.StrEnum):
    """What one batch entry runs (paper Definitions 1-2: a decode- or prefill-iteration)."""

    CRITICAL_DECODE = "critical_decode"
    NONCRITICAL_DECODE = "noncritical_decode"
    PARTIAL_PREFILL = "partial_prefill"
    NEW_PREFILL = "new_prefill"


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestView:
    """What a builder needs to know of one request.

    Attributes:
        request_id: the engine's id of the request.
        arrival_s: arrival time, engine clock.
        prompt_tokens: tokens to prefill; for a recompute-preempted request, prompt plus generated.
        prefilled_tokens: prompt tokens whose KV is computed.
        output_tokens: tokens generated so far (the first comes with the last prefill chunk).
        tbt_slo_s: TBT of the request's tier.
        paid: whether the request belongs to a paying user (paid-first ordering).
        kv_blocks_held: KV blocks the request holds now.
        last_batch_end_s: e_{i-1,j}, end of the last batch that held it; None before any.
        last_schedulable_s: C_ij of eq. 8 for its next decode; None outside the decode phase.
    """

    request_id: str
    arrival_s: float
    prompt_tokens: int
    prefilled_tokens: int = 0
    output_tokens: int = 0
    tbt_slo_s: float
    paid: bool = False
    kv_blocks_held: int = 0
    last_batch_end_s: float | None = None
    last_schedulable_s: float | None = None

    def __post_init__(self) -> None:
        where = f"request {self.request_id}"
        if self.prompt_tokens < 1 or not 0 <= self.prefilled_tokens <= self.prompt_tokens:
            msg = f"prompt_tokens must be >= 1 and prefilled_tokens in [0, prompt_tokens], got {self.prompt_tokens}"
            msg += f" and {self.prefilled_tokens} ({where})"
            raise InvalidInputError(msg, field="prefilled_tokens", value=self.prefilled_tokens, source=where)
        if self.output_tokens < 0 or self.kv_blocks_held < 0:
            msg = f"output_tokens and kv_blocks_held must be >= 0, got {self.output_tokens}, {self.kv_blocks_held}"
            raise InvalidInputError(msg + f" ({where})", field="output_tokens", value=self.output_tokens, source=where)
        if not (math.isfinite(self.tbt_slo_s) and self.tbt_slo_s > 0) or not math.isfinite(self.arrival_s):
            msg = f"tbt_slo_s must be > 0 and arrival_s finite, got {self.tbt_slo_s}, {self.arrival_s} ({where})"
            raise InvalidInputError(msg, field="tbt_slo_s", value=self.tbt_slo_s, source=where)

    @property
    def remaining_prompt_tokens(self) -> int:
        """Prompt tokens still to prefill."""
        return self.prompt_tokens - self.prefilled_tokens


@dataclass(frozen=True, slots=True, kw_only=True)
class SchedulerQueues:
    """The engine's queues at batch-construction time.

    Attributes:
        decodes: decode-phase requests holding KV, in any order.
        paused_prefills: admitted requests with an unfinished prompt, first-scheduled first.
        waiting: requests not admitted, in arrival order with recompute-preempted ones in front.
    """

    decodes: tuple[RequestView, ...] = ()
    paused_prefills: tuple[RequestView, ...] = ()
    waiting: tuple[RequestView, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class KvView:
    """The engine's paged KV cache.

    Attributes:
        free_blocks: free KV blocks now.
        total_blocks: KV blocks in the pool.
        block_size_tokens: tokens per block (repo: 16).
        watermark_frac: share of the pool an admission must leave free (repo: 0.01).
    """

    free_blocks: int
    total_blocks: int
    block_size_tokens: int = 16
    watermark_frac: float = 0.01

    def __post_init__(self) -> None:
        if self.total_blocks < 1 or not 0 <= self.free_blocks <= self.total_blocks or self.block_size_tokens < 1:
            msg = "need 0 <= free_blocks <= total_blocks, total_blocks >= 1 and block_size_tokens >= 1, got "
            msg += f"{self.free_blocks}, {self.total_blocks}, {self.block_size_tokens}"
            raise InvalidInputError(msg, field="free_blocks", value=self.free_blocks)
        if not 0.0 <= self.watermark_frac < 1.0:
            msg = f"watermark_frac must be in [0, 1), got {self.watermark_frac}"
            raise InvalidInputError(msg, field="watermark_frac", value=self.watermark_frac)

    @property
    def watermark_blocks(self) -> int:
        """Blocks an admission must leave free: floor(watermark_frac * total_blocks)."""
        return math.floor(self.watermark_frac * self.total_blocks)


@dataclass(frozen=True, slots=True, kw_only=True)
class BuilderParams:
    """Caps and order a builder obeys (the pushed SLAI payload, or a baseline's configuration).

    Attributes:
        scheduler: which builder ``build_batch`` runs.
        token_budget_tokens: tau_budget (SLAI) or chunk size (Sarathi); decodes count 1 each.
        max_active: alpha (SLAI) or max_num_seqs (Sarathi, vLLM): requests holding KV.
        max_decodes: beta, decodes per batch (SLAI only).
        prefill_order: order of new prefills (SLAI and Sarathi; vLLM is FCFS).
        max_model_tokens: prompts longer than this are ignored (dropped).
        max_batch_tokens: prefill tokens per vLLM prefill batch (spec §6.2: 8192).
    """

    scheduler: SchedulerKind = SchedulerKind.SLAI
    token_budget_tokens: int = 512  # paper §7
    max_active: int = 128  # paper §7 alpha
    max_decodes: int = 128  # paper §7 beta
    prefill_order: PrefillOrder = PrefillOrder.SPF  # paper §7
    max_model_tokens: int = 8192  # paper §7
    max_batch_tokens: int = 8192  # spec §6.2, vLLM max_num_batched_tokens

    def __post_init__(self) -> None:
        for name in ("token_budget_tokens", "max_active", "max_decodes", "max_model_tokens", "max_batch_tokens"):
            if getattr(self, name) < 1:
                msg = f"{name} must be >= 1, got {getattr(self, name)}"
                raise InvalidInputError(msg, field=name, value=getattr(self, name))


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchEntry:
    """One iteration of the batch: a decode (1 token) or a prefill chunk.

    Attributes:
        request_id: the request.
        kind: what runs.
        tokens: 1 for a decode, the chunk length c for a prefill.
        start_token: prompt tokens already prefilled before the chunk (i - 1 in the paper's
            1-based PI(R, i, c)); for a decode, its context length before the token.
    """

    request_id: str
    kind: EntryKind
    tokens: int
    start_token: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Preemption:
    """A request evicted by recompute: its KV is freed and it goes to the front of ``waiting``."""

    request_id: str
    kv_blocks_freed: int
    in_prefill: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchPlan:
    """What the next batch runs and what it preempts.

    Attributes:
        entries: the batch, in the order the builder chose.
        preempted: requests evicted, in eviction order.
        ignored: waiting requests dropped because their prompt exceeds max_model_tokens.
        admitted: waiting requests admitted by this batch (KV reserved for the whole prompt).
        tokens: tau, the batch's token count.
        kv_blocks_allocated: blocks this batch takes (admissions and decode slots).
        free_blocks_after: free blocks once the plan is applied, before completions free any.
    """

    entries: tuple[BatchEntry, ...]
    preempted: tuple[Preemption, ...]
    ignored: tuple[str, ...]
    admitted: tuple[str, ...]
    tokens: int
    kv_blocks_allocated: int
    free_blocks_after: int

    @property
    def critical_decodes(self) -> int:
        """Decodes scheduled because they were critical."""
        return sum(1 for e in self.entries if e.kind is EntryKind.CRITICAL_DECODE)

    @property
    def noncritical_decodes(self) -> int:
        """Decodes scheduled ahead of their last schedulable time."""
        return sum(1 for e in self.entries if e.kind is EntryKind.NONCRITICAL_DECODE)

    @property
    def prefill_tokens(self) -> int:
        """Tokens of prefill chunks in the batch."""
        return sum(e.tokens for e in self.entries if e.kind in (EntryKind.PARTIAL_PREFILL, EntryKind.NEW_PREFILL))


class _Batch:
    """Mutable scratch of one build: KV, active count, entries and evictions."""

    def __init__(self, kv: KvView, queues: SchedulerQueues) -> None:
        self.kv = kv
        self.free_blocks = kv.free_blocks
        self.active = len(queues.decodes) + len(queues.paused_prefills)
        self.tokens = 0
        self.allocated = 0
        self.entries: list[BatchEntry] = []
        self.preempted: list[Preemption] = []
        self.ignored: list[str] = []
        self.admitted: list[str] = []

    def decode_block_need(self, r: RequestView) -> int:
        context = r.prompt_tokens + r.output_tokens
        return max(0, math.ceil(context / self.kv.block_size_tokens) - r.kv_blocks_held)

    def slot_missing(self, r: RequestView) -> bool:
        # repo can_append_slot: a decode needs a free block even when its last block has room
        return self.free_blocks < max(1, self.decode_block_need(r))

    def preempt(self, r: RequestView) -> None:
        self.free_blocks += r.kv_blocks_held
        self.active -= 1
        self.preempted.append(
            Preemption(
                request_id=r.request_id, kv_blocks_freed=r.kv_blocks_held, in_prefill=r.remaining_prompt_tokens > 0
            )
        )

    def add_decode(self, r: RequestView, kind: EntryKind) -> None:
        need = self.decode_block_need(r)
        self.free_blocks -= need
        self.allocated += need
        self.tokens += 1
        context = r.prompt_tokens + r.output_tokens - 1
        self.entries.append(BatchEntry(request_id=r.request_id, kind=kind, tokens=1, start_token=context))

    def add_chunk(self, r: RequestView, chunk: int, kind: EntryKind) -> None:
        self.tokens += chunk
        self.entries.append(
            BatchEntry(request_id=r.request_id, kind=kind, tokens=chunk, start_token=r.prefilled_tokens)
        )

    def try_admit(self, r: RequestView, max_active: int) -> bool:
        """Reserve KV for r's whole prompt if the watermark and the active cap allow (spec §3.2 step 3)."""
        need = math.ceil(r.prompt_tokens / self.kv.block_size_tokens)
        if self.free_blocks - need < self.kv.watermark_blocks or self.active >= max_active:
            return False
        self.free_blocks -= need
        self.allocated += need
        self.active += 1
        self.admitted.append(r.request_id)
        return True

    def plan(self) -> BatchPlan:
        return BatchPlan(
            entries=tuple(self.entries),
            preempted=tuple(self.preempted),
            ignored=tuple(self.ignored),
            admitted=tuple(self.admitted),
            tokens=self.tokens,
            kv_blocks_allocated=self.allocated,
            free_blocks_after=self.free_blocks,
        )


def order_waiting(waiting: Sequence[RequestView], now_s: float, order: PrefillOrder) -> list[RequestView]:
    """Return ``waiting`` with its arrived prefix reordered (spec §8 P7).

    Only the leading requests with arrival_s <= now_s are sorted; the sort is stable, so ties keep
    their queue order. SPF sorts by prompt_tokens (prompt plus generated after a recompute),
    SPF_PAID_FIRST by (free, prompt_tokens), FCFS keeps the order.
    """
    arrived = 0
    while arrived < len(waiting) and waiting[arrived].arrival_s <= now_s:
        arrived += 1
    head, tail = list(waiting[:arrived]), list(waiting[arrived:])
    if order is PrefillOrder.SPF:
        head.sort(key=lambda r: r.prompt_tokens)
    elif order is PrefillOrder.SPF_PAID_FIRST:
        head.sort(key=lambda r: (not r.paid, r.prompt_tokens))
    return head + tail


def _admit_chunked(batch: _Batch, now_s: float, waiting: Sequence[RequestView], params: BuilderParams) -> None:
    """Admit new prefills head-of-line with chunking until the budget, KV or alpha stops it."""
    for r in order_waiting(waiting, now_s, params.prefill_order):
        if batch.tokens >= params.token_budget_tokens or r.arrival_s > now_s:
            return
        if r.prompt_tokens > params.max_model_tokens:
            batch.ignored.append(r.request_id)
            continue
        if not batch.try_admit(r, params.max_active):
            return
        batch.add_chunk(r, min(r.prompt_tokens, params.token_budget_tokens - batch.tokens), EntryKind.NEW_PREFILL)


def build_slai_batch(now_s: float, queues: SchedulerQueues, kv: KvView, params: BuilderParams) -> BatchPlan:
    """Build the next SLAI batch at engine time ``now_s`` (spec §3.2; paper §6 steps 1-4).

    Args:
        now_s: batch-construction time t_m, engine clock.
        queues: the engine's queues; every decode must carry ``last_schedulable_s``.
        kv: the KV cache before the batch.
        params: budget, alpha, beta and prefill order.

    Returns:
        The plan: critical decodes, partial prefills, new prefills, non-critical decodes.

    Raises:
        InvalidInputError: a decode without a last schedulable time.
    """
    for r in queues.decodes:
        if r.last_schedulable_s is None:
            msg = f"decode {r.request_id} has no last_schedulable_s; compute it after its last batch (eq. 8)"
            raise InvalidInputError(msg, field="last_schedulable_s", value=None, source=f"request {r.request_id}")
    heap = sorted(queues.decodes, key=lambda r: (r.last_schedulable_s, r.arrival_s))
    paused = list(queues.paused_prefills)
    batch = _Batch(kv, queues)
    budget = params.token_budget_tokens
    decodes = 0
    next_decode = 0

    def ensure_slot(r: RequestView) -> bool:
        while batch.slot_missing(r):
            if not paused:
                batch.preempt(r)
                return False
            batch.preempt(paused.pop())
        return True

    while next_decode < len(heap) and batch.tokens < budget and decodes < params.max_decodes:
        r = heap[next_decode]
        if now_s < _lst(r):
            break
        next_decode += 1
        if ensure_slot(r):
            batch.add_decode(r, EntryKind.CRITICAL_DECODE)
            decodes += 1
    while paused and batch.tokens < budget:
        r = paused.pop(0)
        batch.add_chunk(r, min(r.remaining_prompt_tokens, budget - batch.tokens), EntryKind.PARTIAL_PREFILL)
    _admit_chunked(batch, now_s, queues.waiting, params)
    while next_decode < len(heap) and batch.tokens < budget and decodes < params.max_decodes:
        r = heap[next_decode]
        next_decode += 1
        if ensure_slot(r):
            kind = EntryKind.NONCRITICAL_DECODE if now_s < _lst(r) else EntryKind.CRITICAL_DECODE
            batch.add_decode(r, kind)
            decodes += 1
    return batch.plan()


def _lst(r: RequestView) -> float:
    return r.last_schedulable_s if r.last_schedulable_s is not None else -math.inf


def _schedule_running_decodes(batch: _Batch, running: Sequence[RequestView]) -> list[RequestView]:
    """Add every running decode, oldest first, preempting the newest running request when KV runs out.

    Returns the running partial prefills (in order) that survived, for the caller to chunk.
    """
    pending = deque(running)
    prefills: list[RequestView] = []
    while pending:
        r = pending.popleft()
        if r.remaining_prompt_tokens > 0:
            prefills.append(r)
            continue
        while batch.slot_missing(r) and pending:
            batch.preempt(pending.pop())
        if batch.slot_missing(r):
            batch.preempt(r)
            continue
        batch.add_decode(r, EntryKind.CRITICAL_DECODE)
    return prefills


def build_sarathi_batch(now_s: float, queues: SchedulerQueues, kv: KvView, params: BuilderParams) -> BatchPlan:
    """Build the next Sarathi-Serve batch, FCFS or SPF (spec §6.1; paper Alg. 4, loop bug fixed).

    Every running decode joins every batch (each is labelled critical: Sarathi treats all decodes as
    if they had the strictest deadline); partial prefills follow in arrival order, one chunk each;
    new prefills fill what remains of the chunk-size budget. ``max_decodes`` does not apply.
    """
    running = sorted((*queues.decodes, *queues.paused_prefills), key=lambda r: r.arrival_s)
    batch = _Batch(kv, queues)
    budget = params.token_budget_tokens
    for r in _schedule_running_decodes(batch, running):
        chunk = min(r.remaining_prompt_tokens, budget - batch.tokens)
        if chunk > 0:
            batch.add_chunk(r, chunk, EntryKind.PARTIAL_PREFILL)
    _admit_chunked(batch, now_s, queues.waiting, params)
    return batch.plan()


def build_vllm_batch(now_s: float, queues: SchedulerQueues, kv: KvView, params: BuilderParams) -> BatchPlan:
    """Build the next batch of the prefill-first vLLM-like baseline (spec §6.2).

    Waiting requests are admitted FCFS with their whole prompt while KV, ``max_active`` and
    ``max_batch_tokens`` allow; a batch with any prefill holds no decode. Otherwise every running
    decode runs, oldest first, preempting the newest when KV runs out.

    Raises:
        InvalidInputError: ``queues.paused_prefills`` is not empty (this baseline never chunks).
    """
    if queues.paused_prefills:
        ids = [r.request_id for r in queues.paused_prefills]
        msg = f"the vLLM baseline never chunks prefills, got paused_prefills {ids}"
        raise InvalidInputError(msg, field="paused_prefills", value=ids)
    batch = _Batch(kv, queues)
    for r in queues.waiting:
        if r.arrival_s > now_s:
            break
        if r.prompt_tokens > params.max_model_tokens:
            batch.ignored.append(r.request_id)
            continue
        if batch.tokens + r.prompt_tokens > params.max_batch_tokens or not batch.try_admit(r, params.max_active):
            break
        batch.add_chunk(r, r.prompt_tokens, EntryKind.NEW_PREFILL)
    if not batch.entries:
        _schedule_running_decodes(batch, sorted(queues.decodes, key=lambda r: r.arrival_s))
    return batch.plan()


def build_batch(now_s: float, queues: SchedulerQueues, kv: KvView, params: BuilderParams) -> BatchPlan:
    """Build the next batch with the builder ``params.scheduler`` names."""
    if params.scheduler is SchedulerKind.SARATHI:
        return build_sarathi_batch(now_s, queues, kv, params)
    if params.scheduler is SchedulerKind.VLLM:
        return build_vllm_batch(now_s, queues, kv, params)
    return build_slai_batch(now_s, queues, kv, params)
