"""Batch packing shared by the simulator's schedulers: who decodes, who is preempted, which chunks fit.

One home for each packing idea of the engine side (vLLM v1's, specs/seed-001-ebplus.md section 6.5):

- ``pack_decodes``: every prefill-complete request decodes one token, oldest first; when a decode
  finds no free KV block the newest running request is preempted by recompute (LIFO, as vLLM);
- ``pack_prefills``: partial prefills first (a chunk whose blocks do not fit is skipped), then new
  requests FCFS (a chunk that does not fit stops the admissions, so FCFS order holds), in chunks
  under the token budget and the free KV;
- ``pack_decode_first``: vLLM v1 mixed batching, the two in that order in one batch.

The mixed-batching baseline (services/sim/schedulers/baselines.py) and the EB phases
(services/sim/schedulers/ebplus.py) are built from these; the SLAI paper's schedulers use the pure
builders of policies/slai instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import chain

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


def pack_prefills(
    running: Sequence[SimRequest],
    waiting: Iterable[SimRequest],
    *,
    free_blocks: int,
    budget_tokens: int,
    admit_seqs: int,
    block_size_tokens: int,
) -> list[tuple[SimRequest, int]]:
    """Prefill chunks under ``budget_tokens`` and ``free_blocks``: partial prefills, then admissions.

    Args:
        running: requests holding KV; those with a prefill left get a chunk when its blocks fit.
        waiting: the queue, in FCFS order; at most ``admit_seqs`` are admitted, and the first whose
            chunk's blocks do not fit stops the admissions (vLLM v1 admits on its first chunk).
        free_blocks: KV blocks free for the chunks.
        budget_tokens: tokens left in the batch.
        admit_seqs: most new requests to admit.
        block_size_tokens: tokens per KV block.

    Returns:
        (request, chunk tokens) in packing order.
    """
    free, budget, slots = free_blocks, budget_tokens, admit_seqs
    partial = [request for request in running if not request.prefill_done]
    prefills: list[tuple[SimRequest, int]] = []
    for position, request in enumerate(chain(partial, waiting)):
        admitting = position >= len(partial)
        if budget <= 0 or (admitting and slots <= 0):
            break
        chunk = min(request.prefill_remaining_tokens, budget)
        need = extra_blocks(request, chunk, block_size_tokens)
        if need > free and admitting:
            break
        if need > free:
            continue
        free -= need
        budget -= chunk
        if admitting:
            slots -= 1
        prefills.append((request, chunk))
    return prefills


def pack_decode_first(view: EngineView, *, mode: str, budget_tokens: int | None = None) -> BatchPlan:
    """vLLM v1 mixed batching: decodes (``pack_decodes``), then prefill chunks (``pack_prefills``).

    Args:
        view: the engine's state.
        mode: the label the step report carries.
        budget_tokens: a policy's step budget below the engine's own (EB+'s MB budget), or None.

    Returns:
        The plan; preempted requests come from the newest end of ``running``. A request preempted
        here re-enters at the front of the queue only next iteration, so FCFS order holds.
    """
    budget = view.token_budget_tokens if budget_tokens is None else min(view.token_budget_tokens, budget_tokens)
    packed = pack_decodes(
        list(view.running),
        free_blocks=view.kv_blocks_free,
        budget_tokens=budget,
        block_size_tokens=view.block_size_tokens,
    )
    prefills = pack_prefills(
        packed.candidates,
        view.waiting,
        free_blocks=packed.free_blocks,
        budget_tokens=packed.budget_tokens,
        admit_seqs=view.max_num_seqs - len(packed.candidates),
        block_size_tokens=view.block_size_tokens,
    )
    return BatchPlan(
        decodes=tuple(packed.decodes), prefills=tuple(prefills), preempted=tuple(packed.preempted), mode=mode
    )
