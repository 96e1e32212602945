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
- ``vllm_dp_score``: vLLM's internal data-parallel balancing as of v0.27 (vLLM PR #49204, July 2026,
  ``DPLBAsyncMPClient.get_core_engine_for_request``): score = waiting + running, plus a KV-pressure
  penalty on the waiting count, waiting x 6 x max(0, kv_use - 0.5), so a waiting request weighs 1 at up
  to 50% KV use and 4 at 100% (the older static 4 x waiting + running is the full-KV end of the ramp);
  the least score wins, ties to the first rank in a scan order that starts one rank later per request.
Ties go to the lowest rank index unless stated.

Deviation (``vllm_dp_score``): here requests wait in one central pool and a rank's queue only holds what
this step placed on it, so the waiting term is this step's placements on the rank. KV use is read once
per step (vLLM reads the coordinator's snapshot, published every 100 ms, so ours is fresher), and vLLM's
in-flight floor (client count x the client's own in-flight requests) equals waiting + running with one
router, so it adds nothing.
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


VLLM_KV_KNEE_FRAC = 0.5  # vLLM PR #49204: no waiting penalty up to 50% KV-cache use
VLLM_KV_SLOPE = 6.0  # vLLM PR #49204: the penalty ramps to 3 x waiting at 100% use


def vllm_dp_score(
    num_waiting: int, free_slots: IntArray, running_counts: IntArray, kv_use_frac: FloatArray, *, start_rank: int = 0
) -> IntArray:
    """vLLM's DP balancing: each FIFO request to the open rank of least waiting + running + KV-pressure penalty.

    The penalty is what vLLM adopted in 2026 (PR #49204): a queue on a rank short of KV cache drains
    slowly, so each request waiting there counts ``VLLM_KV_SLOPE x max(0, kv_use - VLLM_KV_KNEE_FRAC)``
    extra; below the knee the score is a plain count, which vLLM keeps so a burst spreads round robin.
    Ties go to the first rank in scan order, and the scan starts one rank later for each request (vLLM's
    rotating start index), so equal ranks take turns instead of rank 0 taking every tie.

    Args:
        num_waiting: N, the waiting requests in FIFO order.
        free_slots: shape (G,).
        running_counts: shape (G,), requests active on each rank.
        kv_use_frac: shape (G,), each rank's KV-cache use in 0..1, read once for the step.
        start_rank: where the first request's scan starts; the caller advances it by the requests placed.

    Returns:
        rank_of, shape (N,): the rank per request, -1 where it keeps waiting.
    """
    cap = free_slots.astype(np.int64, copy=True)
    num_ranks = cap.shape[0]
    placed = np.zeros(num_ranks, dtype=np.float64)
    waiting_weight = 1.0 + VLLM_KV_SLOPE * np.maximum(0.0, kv_use_frac.astype(np.float64) - VLLM_KV_KNEE_FRAC)
    running = running_counts.astype(np.float64)
    rank_of = np.full(num_waiting, -1, dtype=np.int64)
    for r in range(fillable_slots(num_waiting, free_slots)):
        order = (start_rank + r + np.arange(num_ranks)) % num_ranks
        order = order[cap[order] > 0]
        score = running[order] + placed[order] * waiting_weight[order]
        g = int(order[np.argmin(score)])
        rank_of[r] = g
        cap[g] -= 1
        placed[g] += 1.0
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
