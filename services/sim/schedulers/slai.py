"""SLAI as a simulator ``Scheduler`` over the pure builders of ``policies/slai/batch_builder.py``
(specs/seed-000-slai.md sections 3.2, 6.1, 6.2; paper §6), and the engine bookkeeping
(``BuilderScheduler``) that SLAI shares with its paper's baselines (services/sim/schedulers/baselines.py).

The builders are pure: they turn request views, a KV view and caps into a batch plan. What the
engine must remember between batches lives here, as in the authors' ``SLAIScheduler``:

- tbar, the cumulative mean batch time over every batch since the engine started (spec §8 P2);
- the last schedulable time of every decode, C_ij = e_{i-1,j} + TBT_j - delta * tbar (eq. 8),
  computed after the batch that produced the request's latest token with the delta the offset rule
  gives at the KV use after that batch, and frozen until its next token (spec §8 P3);
- the FIFO of paused (partly prefilled) requests, in first-scheduled order;
- whole-prompt KV reservations: an admitted prompt holds the blocks of its whole prompt (spec §8
  P8), although the simulated engine allocates blocks chunk by chunk. The schedulers subtract the
  outstanding part of every reservation from the free blocks they show the builder, so admission,
  the 1% watermark and preemption behave as in the repository.

``SlaiScheduler`` reads the offset rule, the tier -> TBT map, the token budget, alpha, beta and the
prefill order from the pushed SLAI document (``policy_kind = "slai"``); with no valid document it
uses the safe default of spec §8 P16 (dynamic 5/10 at 0.96, SPF, 512/128/128, paper tiers).
The baselines (``SarathiServeScheduler``, ``VllmPrefillFirstScheduler``) build with fixed settings.

e_{i-1,j} is the end of the batch that gave the request its latest token: the engine emits the
first token when the last prompt chunk completes (spec §8 P5), so ``SimRequest.last_token_s`` is
exactly e_{i-1,j}. A batch's duration, for tbar, runs from its planning time to the latest token it
produced; a batch of unfinished chunks only produces no token, and then the engine runs the next
batch at once, so its end is the time of the next call.

Deviation: tbar counts the batch's model time only; the repository's also holds the scheduler's
and Python's overhead, which the simulator does not model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from policies.slai import BatchPlan as BuilderPlan
from policies.slai import (
    BuilderParams,
    EntryKind,
    KvView,
    OffsetRule,
    PrefillOrder,
    RequestView,
    SchedulerKind,
    SchedulerQueues,
    SlaiInputs,
    SlaiParams,
    build_batch,
    decide,
    last_schedulable_time,
    offset_for_kv_use,
    offset_rule_of,
)
from schemas.policy_docs.slai import SlaiPayload, SlaiPolicy
from services.sim.request import SimRequest, blocks_for_tokens
from services.sim.schedulers.base import BatchPlan, EngineView

KV_WATERMARK_FRAC = 0.01  # spec §3.1: base block manager watermark
SLAI_POLICY_KIND = "slai"


def safe_default_payload() -> SlaiPayload:
    """The SLAI payload an engine obeys without a valid document (spec §8 P16): the paper's defaults.

    It is the decision the pure policy takes from no estimates with ``SlaiParams()``: dynamic offset
    5 / 10 switched at 96% KV use, SPF, token budget 512, alpha = beta = 128, paid 0.1 s, free 0.5 s.
    """
    return decide(SlaiInputs(), None, SlaiParams(), 0.0).payload


class _EngineBook:
    """What an engine keeps between batches: tbar, C per decode, paused FIFO, last batch."""

    def __init__(self) -> None:
        self.batches = 0
        self.batch_time_sum_s = 0.0
        self.lst_s: dict[str, float] = {}
        self.paused: list[str] = []
        self.last_batch: tuple[SimRequest, ...] = ()
        self.last_start_s: float | None = None

    def tbar_s(self, seed_s: float | None) -> float:
        """The cumulative mean batch time; before any batch, the pushed seed or 0."""
        if self.batches == 0:
            return seed_s if seed_s is not None else 0.0
        return self.batch_time_sum_s / self.batches

    def close_last_batch(self, now_s: float) -> list[SimRequest]:
        """Account the previous batch's time; return its requests that got a token at its end."""
        if self.last_start_s is None:
            return []
        start = self.last_start_s
        advanced = [r for r in self.last_batch if r.last_token_s is not None and r.last_token_s > start]
        end_s = max((r.last_token_s for r in advanced if r.last_token_s is not None), default=now_s)
        self.batches += 1
        self.batch_time_sum_s += end_s - start
        self.last_start_s = None
        self.last_batch = ()
        return advanced


def _reserved_blocks(request: SimRequest, block_size_tokens: int) -> int:
    """Blocks of the request's whole (re)prefill: what an admission reserves (spec §8 P8)."""
    return max(request.kv_blocks, blocks_for_tokens(request.prefill_target_tokens, block_size_tokens))


def _kv_view(view: EngineView, paused: Sequence[SimRequest]) -> KvView:
    """The free blocks net of outstanding whole-prompt reservations."""
    bs = view.block_size_tokens
    outstanding = sum(_reserved_blocks(r, bs) - r.kv_blocks for r in paused)
    free = min(view.kv_blocks_total, max(0, view.kv_blocks_free - outstanding))
    return KvView(
        free_blocks=free,
        total_blocks=view.kv_blocks_total,
        block_size_tokens=bs,
        watermark_frac=KV_WATERMARK_FRAC,
    )


def _decode_view(r: SimRequest, tbt_s: float, lst_s: float | None) -> RequestView:
    # The builder's context is prompt + output; the engine's next decode makes computed + 1 tokens.
    return RequestView(
        request_id=r.spec.request_id,
        arrival_s=r.spec.arrival_s,
        prompt_tokens=r.prefill_target_tokens,
        prefilled_tokens=r.prefill_target_tokens,
        output_tokens=r.computed_tokens + 1 - r.prefill_target_tokens,
        tbt_slo_s=tbt_s,
        kv_blocks_held=r.kv_blocks,
        last_batch_end_s=r.last_token_s,
        last_schedulable_s=lst_s,
    )


def _prefill_view(r: SimRequest, tbt_s: float, paid_tier: str, block_size_tokens: int) -> RequestView:
    return RequestView(
        request_id=r.spec.request_id,
        arrival_s=r.spec.arrival_s,
        prompt_tokens=r.prefill_target_tokens,
        prefilled_tokens=r.computed_tokens,
        output_tokens=r.generated_tokens,
        tbt_slo_s=tbt_s,
        paid=r.spec.tier == paid_tier,
        kv_blocks_held=_reserved_blocks(r, block_size_tokens) if r.kv_blocks else 0,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class BuilderSetting:
    """The builder parameters and tiers one batch is built with."""

    builder: BuilderParams
    tier_tbt_s: dict[str, float]
    default_tbt_s: float

    def tbt_for(self, r: SimRequest) -> float:
        return self.tier_tbt_s.get(r.spec.tier, self.default_tbt_s)


class BuilderScheduler:
    """Shared machinery: engine state -> builder views -> builder plan -> simulator plan."""

    mode = "slai"
    paid_tier = "paid"

    def __init__(self) -> None:
        self._book = _EngineBook()

    def _setting(self, view: EngineView) -> BuilderSetting:
        raise NotImplementedError

    def _after_batch(self, view: EngineView, setting: BuilderSetting, advanced: list[SimRequest]) -> None:
        """Hook run once the previous batch is accounted (SLAI computes last schedulable times)."""
        del view, setting, advanced

    def schedule(self, view: EngineView) -> BatchPlan:
        """Build the next batch with the wrapped builder (see the module docstring)."""
        setting = self._setting(view)
        book = self._book
        advanced = book.close_last_batch(view.now_s)
        running = {r.spec.request_id: r for r in view.running}
        book.paused = [rid for rid in book.paused if rid in running and not running[rid].prefill_done]
        for r in view.running:
            if not r.prefill_done and r.spec.request_id not in book.paused:
                book.paused.append(r.spec.request_id)
        book.lst_s = {rid: c for rid, c in book.lst_s.items() if rid in running and running[rid].prefill_done}
        self._after_batch(view, setting, advanced)
        paused = [running[rid] for rid in book.paused]
        bs = view.block_size_tokens
        queues = SchedulerQueues(
            decodes=tuple(
                _decode_view(r, setting.tbt_for(r), book.lst_s.get(r.spec.request_id))
                for r in view.running
                if r.prefill_done
            ),
            paused_prefills=tuple(_prefill_view(r, setting.tbt_for(r), self.paid_tier, bs) for r in paused),
            waiting=tuple(
                _prefill_view(r, setting.tbt_for(r), self.paid_tier, bs)
                for r in self._waiting_prefix(view, setting.builder, len(view.running))
            ),
        )
        plan = build_batch(view.now_s, queues, _kv_view(view, paused), setting.builder)
        return self._to_sim_plan(view, plan)

    def _waiting_prefix(self, view: EngineView, params: BuilderParams, active: int) -> list[SimRequest]:
        """The waiting requests the builder can reach this batch, in its order.

        Admission is head-of-line and capped by alpha, so only the first ``alpha - active + 1`` of
        the ordered queue can matter; passing just those keeps a batch cheap under overload.
        The simulator queues only arrived requests, so the whole queue is the arrived prefix.
        """
        waiting = list(view.waiting)
        if params.prefill_order is PrefillOrder.SPF and params.scheduler is not SchedulerKind.VLLM:
            waiting.sort(key=lambda r: r.prefill_target_tokens)
        elif params.prefill_order is PrefillOrder.SPF_PAID_FIRST and params.scheduler is not SchedulerKind.VLLM:
            waiting.sort(key=lambda r: (r.spec.tier != self.paid_tier, r.prefill_target_tokens))
        return waiting[: max(0, params.max_active - active) + 1]

    def _to_sim_plan(self, view: EngineView, plan: BuilderPlan) -> BatchPlan:
        by_id = {r.spec.request_id: r for r in (*view.running, *view.waiting)}
        decodes = tuple(
            by_id[e.request_id]
            for e in plan.entries
            if e.kind in (EntryKind.CRITICAL_DECODE, EntryKind.NONCRITICAL_DECODE)
        )
        prefills = tuple(
            (by_id[e.request_id], e.tokens)
            for e in plan.entries
            if e.kind in (EntryKind.PARTIAL_PREFILL, EntryKind.NEW_PREFILL)
        )
        self._book.paused.extend(rid for rid in plan.admitted if rid not in self._book.paused)
        preempted_ids = {p.request_id for p in plan.preempted}
        self._book.paused = [rid for rid in self._book.paused if rid not in preempted_ids]
        if decodes or prefills:
            self._book.last_batch = (*decodes, *(r for r, _ in prefills))
            self._book.last_start_s = view.now_s
        return BatchPlan(
            decodes=decodes,
            prefills=prefills,
            preempted=tuple(by_id[p.request_id] for p in plan.preempted),
            mode=self.mode,
        )

    @property
    def tbar_s(self) -> float:
        """The engine's cumulative mean batch time so far, seconds (0 before any batch)."""
        return self._book.tbar_s(None)

    def last_schedulable_s(self, request_id: str) -> float | None:
        """C of the request's next decode as of the last batch built, or None outside the decode phase."""
        return self._book.lst_s.get(request_id)


class SlaiScheduler(BuilderScheduler):
    """SLAI (spec §3.2) obeying the pushed SLAI document, with the engine's LST bookkeeping.

    Each batch: the previous batch's time enters tbar; every request that got a token from it and
    still decodes gets C = e + TBT_k - delta * tbar, with delta from the pushed offset rule at the
    KV use after that batch (reservations included); then ``build_slai_batch`` runs with the pushed
    budget, alpha (at most the engine's ``max_num_seqs``), beta and prefill order. The token budget
    is at most the engine's ``token_budget_tokens``.

    Args:
        fallback: the payload to obey without a valid document (default: ``safe_default_payload()``).
    """

    mode = "slai"

    def __init__(self, *, fallback: SlaiPayload | None = None) -> None:
        super().__init__()
        self._fallback = fallback if fallback is not None else safe_default_payload()
        self._last_delta: float | None = None

    @property
    def policy_kind(self) -> str | None:
        """SLAI documents, scoped to this engine."""
        return SLAI_POLICY_KIND

    @property
    def last_delta(self) -> float | None:
        """The offset delta in effect: the one the last batch set C with (eq. 8), None before any batch.

        It is what the offset rule gave at the KV use after the previous batch, reservations
        included; the live demo shows it beside the engine's KV use.
        """
        return self._last_delta

    def payload(self, view: EngineView) -> SlaiPayload:
        """The pushed payload in effect, or the fallback when none is valid."""
        document = view.policy
        return document.payload if isinstance(document, SlaiPolicy) else self._fallback

    def _setting(self, view: EngineView) -> BuilderSetting:
        p = self.payload(view)
        builder = BuilderParams(
            scheduler=SchedulerKind.SLAI,
            token_budget_tokens=min(p.token_budget_tokens, view.token_budget_tokens),
            max_active=min(p.max_active, view.max_num_seqs),
            max_decodes=p.max_decodes,
            prefill_order=PrefillOrder(p.prefill_order),
            max_model_tokens=1 << 30,
        )
        return BuilderSetting(builder=builder, tier_tbt_s=dict(p.tier_tbt_s), default_tbt_s=p.default_tbt_s)

    def _after_batch(self, view: EngineView, setting: BuilderSetting, advanced: list[SimRequest]) -> None:
        p = self.payload(view)
        rule: OffsetRule = offset_rule_of(p)
        book = self._book
        running = {r.spec.request_id for r in view.running}
        paused = [r for r in view.running if not r.prefill_done]
        kv = _kv_view(view, paused)
        kv_use_frac = 1.0 - kv.free_blocks / kv.total_blocks
        delta = offset_for_kv_use(kv_use_frac, rule)
        self._last_delta = delta
        tbar_s = book.tbar_s(p.tbar_seed_s)
        for r in advanced:
            if r.spec.request_id in running and r.prefill_done and r.last_token_s is not None:
                book.lst_s[r.spec.request_id] = last_schedulable_time(
                    last_batch_end_s=r.last_token_s, tbt_slo_s=setting.tbt_for(r), delta=delta, tbar_s=tbar_s
                )
        # A decode that never got a C (re-admitted after a preemption while we missed its token) is due now.
        for r in view.running:
            if r.prefill_done and r.spec.request_id not in book.lst_s:
                book.lst_s[r.spec.request_id] = view.now_s
