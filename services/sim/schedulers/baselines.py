"""Baseline schedulers: vLLM v1 mixed batching with chunked prefill, and Sarathi-Serve FCFS.

- ``MixedChunkedScheduler`` (the EB paper's MB baseline, specs/seed-001-ebplus.md section 6.5):
  every decode first, then partial prefills, then new requests FCFS in chunks under the token
  budget; KV blocks are allocated for what the step computes; when a decode finds no block the
  newest running request is preempted by recompute (LIFO, as vLLM).
- ``SarathiScheduler`` (specs/seed-000-slai.md section 6.1, paper Alg. 4): the same decode-first
  packing with one chunk per request per batch, a small chunk budget (512) and an admission that
  needs KV for the whole prompt plus a watermark.

Deviation: Sarathi's admission checks that the whole prompt fits (plus the 1% watermark) but
allocates blocks chunk by chunk, which leaves the same free-block trajectory as reserving up front
except while a long prompt is half prefilled.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.sim.request import SimRequest, blocks_for_tokens
from services.sim.schedulers.base import BatchPlan, EngineView


def extra_blocks(request: SimRequest, new_tokens: int, block_size_tokens: int) -> int:
    """KV blocks ``request`` needs beyond those it holds to compute ``new_tokens`` more tokens."""
    return blocks_for_tokens(request.computed_tokens + new_tokens, block_size_tokens) - request.kv_blocks


@dataclass(frozen=True, slots=True, kw_only=True)
class PackedDecodes:
    """Decodes packed into a batch: who decodes, who was preempted, and what is left."""

    candidates: list[SimRequest]
    decodes: list[SimRequest]
    preempted: list[SimRequest]
    free_blocks: int
    budget_tokens: int


def pack_decodes(
    candidates: list[SimRequest], *, free_blocks: int, budget_tokens: int, block_size_tokens: int
) -> PackedDecodes:
    """Give every prefill-complete request of ``candidates`` one decode token, oldest first.

    When a decode needs a KV block that is not free, the newest candidates are preempted (their
    blocks freed) until it fits, the request itself last; ``candidates`` keeps the survivors.
    """
    free, budget = free_blocks, budget_tokens
    survivors = list(candidates)
    preempted: list[SimRequest] = []
    decodes: list[SimRequest] = []
    index = 0
    while index < len(survivors) and budget > 0:
        request = survivors[index]
        if not request.prefill_done:
            index += 1
            continue
        need = extra_blocks(request, 1, block_size_tokens)
        while need > free and survivors[-1] is not request:
            victim = survivors.pop()
            preempted.append(victim)
            free += victim.kv_blocks
        if need > free:
            survivors.pop()
            preempted.append(request)
            free += request.kv_blocks
            break
        free -= need
        budget -= 1
        decodes.append(request)
        index += 1
    return PackedDecodes(
        candidates=survivors, decodes=decodes, preempted=preempted, free_blocks=free, budget_tokens=budget
    )


def pack_decode_first(view: EngineView, *, mode: str) -> BatchPlan:
    """Pack decodes, then partial prefills, then FCFS admissions under the budget and the free KV.

    Args:
        view: the engine's state.
        mode: the label the step report carries.

    A new request is admitted when its first chunk's blocks fit (vLLM v1); Sarathi-Serve's
    whole-prompt reservation is services/sim/schedulers/slai.py ``SarathiServeScheduler``.

    Returns:
        The plan; preempted requests come from the newest end of ``running``.
    """
    bs = view.block_size_tokens
    packed = pack_decodes(
        list(view.running),
        free_blocks=view.kv_blocks_free,
        budget_tokens=view.token_budget_tokens,
        block_size_tokens=bs,
    )
    candidates, preempted, decodes = packed.candidates, packed.preempted, packed.decodes
    free, budget = packed.free_blocks, packed.budget_tokens
    prefills: list[tuple[SimRequest, int]] = []
    for request in candidates:
        if budget <= 0:
            break
        if request.prefill_done:
            continue
        chunk = min(request.prefill_remaining_tokens, budget)
        need = extra_blocks(request, chunk, bs)
        if need > free:
            continue
        free -= need
        budget -= chunk
        prefills.append((request, chunk))
    slots = view.max_num_seqs - len(candidates)
    # A preempted request re-enters at the front of the queue only next iteration, so FCFS order holds.
    for request in view.waiting:
        if budget <= 0 or slots <= 0:
            break
        chunk = min(request.prefill_remaining_tokens, budget)
        need = extra_blocks(request, chunk, bs)
        if need > free:
            break
        free -= need
        budget -= chunk
        slots -= 1
        prefills.append((request, chunk))
    return BatchPlan(decodes=tuple(decodes), prefills=tuple(prefills), preempted=tuple(preempted), mode=mode)


@dataclass(frozen=True, slots=True)
class MixedChunkedScheduler:
    """vLLM v1 mixed batching with chunked prefill: the MB baseline (seed 001 section 6.5)."""

    @property
    def policy_kind(self) -> str | None:
        """The baseline obeys no policy."""
        return None

    def schedule(self, view: EngineView) -> BatchPlan:
        """Decodes first, then prefill chunks under the token budget (see ``pack_decode_first``)."""
        return pack_decode_first(view, mode="mb")
