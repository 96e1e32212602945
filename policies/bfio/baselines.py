"""Baseline assignment policies BF-IO is compared with; specs/seed-003-bfio.md section 3, paper App. A-B.

Every baseline admits the FIFO front of the waiting queue, U(k) = min(|R_wait|, sum cap) requests, and
differs only in the rank each one goes to. Each returns ``rank_of`` (shape (N,), -1 = keeps waiting) for
the waiting requests in FIFO order, like the BF-IO solvers.

Which variant is which (spec section 8 item 9):
- ``fcfs_index_fill``: fill rank 0's free slots, then rank 1's, ... (reference code; behind Table 1).
- ``fcfs_most_free``: paper Algorithm 2, each request to a rank with the most free slots, with the
  missing "sum cap = 0" exit added.
- ``round_robin``: a pointer starting at rank 0 on every call, skipping full ranks (reference code).
- ``jsq_count``: argmin of active plus just-assigned requests (the paper's JSQ, as in vLLM/SGLang).
- ``jsq_load``: argmin of token load L_g, updated as requests are placed (the reference code's JSQ);
  also the router's fallback.
- ``power_of_d``: d ranks with a free slot sampled uniformly, the one with the fewest requests wins.
- ``vllm_dp_score``: vLLM's internal data-parallel balancing (spec section 3: score = 4 x waiting +
  running per engine, the least score wins), with the requests placed this step counted as waiting
  on their rank, ties to the lower KV use (token load).
Ties go to the lowest rank index unless stated.

Deviation (``vllm_dp_score``): since mid-2026 vLLM weights the waiting count by the engine's KV-cache
pressure; here requests wait in one central pool and a rank's queue only holds what this step placed
on it, so the waiting term is this step's placements at the published weight 4, and KV use enters as
the tie-break (the form the KV-usage proposal for vLLM's balancer took).
"""

from __future__ import annotations

import heapq

import numpy as np
import numpy.typing as npt

from policies.bfio.objective import fillable_slots
from schemas.errors import InvalidInputError

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def fcfs_index_fill(num_waiting: int, free_slots: IntArray) -> IntArray:
    """FCFS, reference-code variant: the FIFO front fills rank 0's free slots, then rank 1's, and so on."""
    rank_of = np.full(num_waiting, -1, dtype=np.int64)
    slots = np.repeat(np.arange(free_slots.shape[0], dtype=np.int64), free_slots)
    count = fillable_slots(num_waiting, free_slots)
    rank_of[:count] = slots[:count]
    return rank_of


def fcfs_most_free(num_waiting: int, free_slots: IntArray) -> IntArray:
    """FCFS, paper Algorithm 2: the oldest request goes to a rank with the most free slots, repeatedly."""
    cap = free_slots.astype(np.int64, copy=True)
    rank_of = np.full(num_waiting, -1, dtype=np.int64)
    for r in range(fillable_slots(num_waiting, free_slots)):
        g = int(np.argmax(cap))
        rank_of[r] = g
        cap[g] -= 1
    return rank_of


def round_robin(num_waiting: int, free_slots: IntArray) -> IntArray:
    """Round robin: a pointer cycles from rank 0, skipping ranks without a free slot."""
    cap = free_slots.astype(np.int64, copy=True)
    num_ranks = cap.shape[0]
    rank_of = np.full(num_waiting, -1, dtype=np.int64)
    pointer = 0
    for r in range(fillable_slots(num_waiting, free_slots)):
        while cap[pointer % num_ranks] == 0:
            pointer += 1
        g = pointer % num_ranks
        rank_of[r] = g
        cap[g] -= 1
        pointer += 1
    return rank_of


def jsq_count(num_waiting: int, free_slots: IntArray, active_counts: IntArray) -> IntArray:
    """JSQ by request count: each FIFO request to the rank with the fewest active plus just-placed requests."""
    cap = free_slots.astype(np.int64, copy=True)
    counts = active_counts.astype(np.int64, copy=True)
    rank_of = np.full(num_waiting, -1, dtype=np.int64)
    for r in range(fillable_slots(num_waiting, free_slots)):
        open_ranks = np.flatnonzero(cap > 0)
        g = int(open_ranks[np.argmin(counts[open_ranks])])
        rank_of[r] = g
        cap[g] -= 1
        counts[g] += 1
    return rank_of


def jsq_load(prompt_tokens: FloatArray, free_slots: IntArray, rank_loads_tokens: FloatArray) -> IntArray:
    """JSQ by load: each FIFO request to the rank with the least token load L_g among ranks with a free slot.

    Args:
        prompt_tokens: shape (N,), s_i of the waiting requests in FIFO order (the load each one adds).
        free_slots: shape (G,).
        rank_loads_tokens: shape (G,), current L_g.
    """
    # A heap over Python floats: this is the router's fallback, so it must stay cheap when time has run out.
    cap = [int(c) for c in free_slots]
    heap = [(float(load), g) for g, load in enumerate(rank_loads_tokens.tolist()) if cap[g] > 0]
    heapq.heapify(heap)
    prompts = prompt_tokens.tolist()
    rank_of = np.full(prompt_tokens.shape[0], -1, dtype=np.int64)
    for r in range(fillable_slots(prompt_tokens.shape[0], free_slots)):
        load, g = heapq.heappop(heap)
        rank_of[r] = g
        cap[g] -= 1
        if cap[g] > 0:
            heapq.heappush(heap, (load + prompts[r], g))
    return rank_of


def vllm_dp_score(
    num_waiting: int, free_slots: IntArray, running_counts: IntArray, rank_loads_tokens: FloatArray
) -> IntArray:
    """vLLM's DP balancing: each FIFO request to the open rank of least 4 x placed + running, then least load.

    Args:
        num_waiting: N, the waiting requests in FIFO order.
        free_slots: shape (G,).
        running_counts: shape (G,), requests active on each rank.
        rank_loads_tokens: shape (G,), L_g, the tie-break (a rank's KV use).
    """
    cap = free_slots.astype(np.int64, copy=True)
    placed = np.zeros_like(cap)
    rank_of = np.full(num_waiting, -1, dtype=np.int64)
    for r in range(fillable_slots(num_waiting, free_slots)):
        open_ranks = np.flatnonzero(cap > 0)
        score = 4 * placed[open_ranks] + running_counts[open_ranks]
        best = open_ranks[score == score.min()]
        g = int(best[np.argmin(rank_loads_tokens[best])])
        rank_of[r] = g
        cap[g] -= 1
        placed[g] += 1
    return rank_of


def power_of_d(
    num_waiting: int, free_slots: IntArray, active_counts: IntArray, *, d: int, rng: np.random.Generator
) -> IntArray:
    """Power-of-d choices: sample d distinct ranks with a free slot, send the request to the least-occupied one.

    Raises:
        InvalidInputError: d < 1.
    """
    if d < 1:
        msg = f"d must be >= 1, got {d}"
        raise InvalidInputError(msg, field="d", value=d)
    cap = free_slots.astype(np.int64, copy=True)
    counts = active_counts.astype(np.int64, copy=True)
    rank_of = np.full(num_waiting, -1, dtype=np.int64)
    for r in range(fillable_slots(num_waiting, free_slots)):
        open_ranks = np.flatnonzero(cap > 0)
        sample = np.sort(rng.choice(open_ranks, size=min(d, open_ranks.size), replace=False))
        g = int(sample[np.argmin(counts[sample])])
        rank_of[r] = g
        cap[g] -= 1
        counts[g] += 1
    return rank_of
