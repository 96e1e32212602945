"""The papers' baseline schedulers: what EB+ and SLAI are compared with.

- ``MixedChunkedScheduler`` (the EB paper's MB baseline, specs/seed-001-ebplus.md section 6.5): vLLM
  v1 mixed batching with chunked prefill, ``pack_decode_first`` of services/sim/schedulers/packing.py:
  every decode first, newest running request preempted by recompute when a decode finds no block,
  then partial prefills, then new requests FCFS in chunks under the token budget; a new request is
  admitted when its first chunk's blocks fit.
- ``SarathiServeScheduler`` (specs/seed-000-slai.md section 6.1, paper Alg. 4): every decode in
  every batch, oldest first, partial prefills, then new prefills FCFS or SPF under a small chunk
  budget (512); an admission needs KV for the whole prompt plus the 1% watermark; newest-running
  preemption.
- ``VllmPrefillFirstScheduler`` (seed 000 section 6.2): whole prompts FCFS in prefill-only batches
  while any fits, else a decode-only batch of every running request.

The two SLAI-paper baselines run the pure builders of policies/slai/batch_builder.py through the
same engine bookkeeping as SLAI itself (``BuilderScheduler``, services/sim/schedulers/slai.py), with
fixed settings instead of a pushed document; none of the three obeys a policy.

Deviation (Sarathi): the whole-prompt admission is a check on reservations; blocks are still
allocated chunk by chunk, which leaves the same free-block trajectory as reserving up front except
while a long prompt is half prefilled.
"""

from __future__ import annotations

from dataclasses import dataclass

from policies.slai import BuilderParams, PrefillOrder, SchedulerKind, SlaiParams
from schemas.policy_docs.ebplus import EbplusMode
from services.sim.schedulers.base import BatchPlan, EngineView
from services.sim.schedulers.packing import pack_decode_first
from services.sim.schedulers.slai import BuilderScheduler, BuilderSetting


@dataclass(frozen=True, slots=True)
class MixedChunkedScheduler:
    """vLLM v1 mixed batching with chunked prefill: the MB baseline (seed 001 section 6.5)."""

    @property
    def policy_kind(self) -> str | None:
        """The baseline obeys no policy."""
        return None

    def schedule(self, view: EngineView) -> BatchPlan:
        """Decodes first, then prefill chunks under the token budget (see ``pack_decode_first``)."""
        return pack_decode_first(view, mode=EbplusMode.MB)


class FixedBuilderScheduler(BuilderScheduler):
    """A builder scheduler with a fixed setting: the SLAI paper's baselines obey no policy.

    Args:
        scheduler: which builder runs (Sarathi-Serve or prefill-first vLLM).
        prefill_order: the order new prompts are admitted in.
        token_budget_tokens: tokens per batch; at most the engine's budget.
        max_active: max_num_seqs; at most the engine's.
    """

    def __init__(
        self, *, scheduler: SchedulerKind, prefill_order: PrefillOrder, token_budget_tokens: int, max_active: int
    ) -> None:
        super().__init__()
        self._scheduler = scheduler
        self._prefill_order = prefill_order
        self._token_budget_tokens = token_budget_tokens
        self._max_active = max_active

    @property
    def policy_kind(self) -> str | None:
        """The baseline obeys no policy."""
        return None

    def _setting(self, view: EngineView) -> BuilderSetting:
        budget = min(self._token_budget_tokens, view.token_budget_tokens)
        builder = BuilderParams(
            scheduler=self._scheduler,
            token_budget_tokens=budget,
            max_active=min(self._max_active, view.max_num_seqs),
            prefill_order=self._prefill_order,
            max_model_tokens=1 << 30,
            max_batch_tokens=budget,
        )
        defaults = SlaiParams()
        return BuilderSetting(
            builder=builder,
            tier_tbt_s={t.tier: t.tbt_slo_s for t in defaults.tiers},
            default_tbt_s=defaults.default_tbt_s,
        )


class SarathiServeScheduler(FixedBuilderScheduler):
    """Sarathi-Serve as the SLAI paper ran it (spec §6.1): decodes, partial prefills, then new
    prefills FCFS or SPF under the chunk budget; whole-prompt reservation, newest-running preemption.

    Args:
        prefill_order: FCFS (the paper's Sarathi-Serve) or SPF (the authors' variant).
        token_budget_tokens: the chunk size (paper: 512); at most the engine's budget.
        max_active: max_num_seqs (paper: 128); at most the engine's.
    """

    mode = "sarathi"

    def __init__(
        self, *, prefill_order: PrefillOrder = PrefillOrder.FCFS, token_budget_tokens: int = 512, max_active: int = 128
    ) -> None:
        super().__init__(
            scheduler=SchedulerKind.SARATHI,
            prefill_order=prefill_order,
            token_budget_tokens=token_budget_tokens,
            max_active=max_active,
        )


class VllmPrefillFirstScheduler(FixedBuilderScheduler):
    """The prefill-first vLLM-like baseline (spec §6.2): whole prompts FCFS in prefill-only batches
    while any fits, else a decode-only batch of every running request.

    The engine's ``token_budget_tokens`` must hold the longest prompt (spec: 8192), since prompts
    are never chunked.

    Args:
        max_batch_tokens: prefill tokens per batch (spec: 8192); at most the engine's budget.
        max_active: max_num_seqs (paper: 128); at most the engine's.
    """

    mode = "vllm"

    def __init__(self, *, max_batch_tokens: int = 8192, max_active: int = 128) -> None:
        super().__init__(
            scheduler=SchedulerKind.VLLM,
            prefill_order=PrefillOrder.FCFS,
            token_budget_tokens=max_batch_tokens,
            max_active=max_active,
        )
