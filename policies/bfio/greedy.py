"""Fast BF-IO solver for production sizes: greedy marginal J, exchange local search, time budget, fallback.

specs/seed-003-bfio.md section 2.7. Step 3: repeatedly assign the (request, rank) pair with the largest
F_{r,g} = sum_h omega_h [v_r(h) - G (v_r(h) - m_g(h))^+] = -Delta J (section 2.5) until U(k) requests are
placed, the (IO) constraint "fill every fillable slot". Step 4: exchange moves (swap two admitted requests
between ranks, move one to a rank with a free slot, or replace an admitted request by a waiting one) on the
ranks that attain the envelope, while J decreases; this is the paper's exchange argument (Lemma 1).
If the per-call budget runs out during the greedy phase, the remaining slots are filled by JSQ-by-load in
FIFO order (section 6.2). The exchange phase is anytime: it starts a move only while the time left covers
the last step's cost (a greedy round or a move), so it ends within the budget instead of past it.

F is kept as an (N, G) matrix: an assignment to rank g changes only column g unless it raises the envelope
max_j L_j(h), in which case every margin moves and F is recomputed. The greedy runs in rounds: each rank
with a free slot takes its best remaining request, ranks in order of their best F (ties: lowest current
load, then lowest weighted projected load; among requests the earliest wins), and a round ends early
when an assignment raises the envelope. Without the load tie-break equal scores send everything to
rank 0 (section 2.5). Requests flagged ``forced`` (the router's aging rule) are placed first.

Deviation: the reference code's greedy/subset-sum F-score heuristic (alpha = 1, beta = 43, decay 0.86)
is tuned, not (IO); we use beta = G, the exact -Delta J, and include the +delta per-step growth.
Deviation: the spec's rotating start index for ties is not kept; it would make the solver stateful.
Deviation: a round gives each rank at most one request before scores are refreshed, instead of a strictly
sequential argmax over all (request, rank) pairs; it cuts the Python-level work per admission, and the
exchange phase and the tests' optimality bound cover the difference.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from policies.bfio.baselines import jsq_load
from policies.bfio.objective import fillable_slots, objective_j, scores_by_offset

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

_REL_TOL = 1e-9


@dataclass(frozen=True, slots=True, kw_only=True)
class SolveBudget:
    """A per-call time budget: ``clock`` returns seconds (the engine passes time.perf_counter)."""

    clock: Callable[[], float]
    budget_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class FastSolution:
    """Result of ``solve_fast``.

    Attributes:
        rank_of: shape (N,), rank of each waiting request, -1 when it keeps waiting.
        objective_j_tokens: J of the allocation, in tokens.
        fallback_used: the budget ran out and JSQ-by-load filled the rest.
        local_search_moves: improving exchange moves applied after the greedy phase.
    """

    rank_of: IntArray
    objective_j_tokens: float
    fallback_used: bool
    local_search_moves: int


def solve_fast(
    base_loads: FloatArray,
    free_slots: IntArray,
    contributions: FloatArray,
    weights: FloatArray,
    *,
    forced: BoolArray | None = None,
    local_search_rounds: int = 8,
    budget: SolveBudget | None = None,
) -> FastSolution:
    """Solve (IO) approximately: greedy marginal J, then exchange local search.

    Args:
        base_loads: shape (G, K), predicted loads of active requests b_g(h).
        free_slots: shape (G,), cap[g](k) >= 0.
        contributions: shape (N, K), predicted workload v_i(h) of waiting requests, in FIFO order.
        weights: shape (K,), omega.
        forced: shape (N,), requests that must be admitted before any other (starvation guard); when more
            are forced than fit, the earliest (FIFO) win.
        local_search_rounds: most improving exchange moves.
        budget: time budget; None means unlimited (offline use, deterministic).

    Returns:
        A feasible allocation: never more requests on a rank than its free slots, never a request twice,
        exactly U(k) admitted.
    """
    start_s = budget.clock() if budget is not None else 0.0
    step_cost_s = 0.0

    def elapsed_s() -> float:
        return budget.clock() - start_s if budget is not None else 0.0

    def out_of_time(used_s: float, reserve_s: float) -> bool:
        """Past the budget, or less than ``reserve_s`` (the last step's cost) of it left."""
        return budget is not None and used_s + reserve_s > budget.budget_s

    num_waiting = contributions.shape[0]
    loads = base_loads.astype(np.float64, copy=True)
    cap = free_slots.astype(np.int64, copy=True)
    rank_of = np.full(num_waiting, -1, dtype=np.int64)
    target = fillable_slots(num_waiting, cap)
    by_offset = np.ascontiguousarray(contributions.T)
    must = np.zeros(num_waiting, dtype=bool) if forced is None else forced.copy()
    if int(must.sum()) > target:
        must[np.flatnonzero(must)[target:]] = False
    assigned = 0
    fallback_used = False
    while assigned < target:
        used_s = elapsed_s()
        if out_of_time(used_s, 0.0):
            fallback_used = True
            break
        assigned += _greedy_round(
            loads=loads,
            cap=cap,
            rank_of=rank_of,
            contributions=contributions,
            by_offset=by_offset,
            weights=weights,
            must=must,
            limit=target - assigned,
        )
        step_cost_s = elapsed_s() - used_s
    if fallback_used:
        order = np.concatenate((np.flatnonzero(must & (rank_of < 0)), np.flatnonzero(~must & (rank_of < 0))))
        order = order[: target - assigned]
        placed = jsq_load(contributions[order, 0], cap, loads[:, 0])
        rank_of[order] = placed
        np.add.at(loads, placed, contributions[order])
        return FastSolution(
            rank_of=rank_of, objective_j_tokens=objective_j(loads, weights), fallback_used=True, local_search_moves=0
        )
    moves = 0
    while moves < local_search_rounds:
        used_s = elapsed_s()
        if out_of_time(used_s, step_cost_s):
            break
        if not _apply_best_exchange(
            loads=loads, cap=cap, rank_of=rank_of, contributions=contributions, weights=weights, must=must
        ):
            break
        moves += 1
        step_cost_s = elapsed_s() - used_s
    return FastSolution(
        rank_of=rank_of, objective_j_tokens=objective_j(loads, weights), fallback_used=False, local_search_moves=moves
    )


def _greedy_round(
    *,
    loads: FloatArray,
    cap: IntArray,
    rank_of: IntArray,
    contributions: FloatArray,
    by_offset: FloatArray,
    weights: FloatArray,
    must: BoolArray,
    limit: int,
) -> int:
    """One greedy round: each open rank, in order of its best F, takes its best remaining request.

    F_{r,g} = -Delta J (section 2.5) is evaluated once per round, for the remaining requests (only the
    overdue ones while any is left, one per round) and the ranks with a free slot. The round stops after
    the first assignment that raises the envelope max_j L_j(h), because that moves every rank's margin;
    loads are updated once at the end. Returns the number of requests placed (at least one when
    ``limit`` > 0 and a request and a slot are left).

    Args:
        contributions: shape (N, K), v_r(h); ``by_offset`` is the same, offset-major (K, N).
    """
    overdue = np.flatnonzero(must & (rank_of < 0))
    rows = overdue if overdue.size else np.flatnonzero(rank_of < 0)
    open_ranks = np.flatnonzero(cap > 0)
    envelope = loads.max(axis=0)
    open_loads = loads[open_ranks]
    margins = np.ascontiguousarray((envelope - open_loads).T)
    scores = scores_by_offset(margins, by_offset[:, rows], weights, num_ranks=loads.shape[0])
    order = np.lexsort((open_loads @ weights, open_loads[:, 0], -scores.max(axis=1)))
    most = 1 if overdue.size else limit
    picked_rank: list[int] = []
    picked_row: list[int] = []
    for j in order.tolist():
        row = scores[j]
        pick = int(row.argmax())
        if row[pick] == -np.inf:
            continue
        picked_rank.append(int(open_ranks[j]))
        picked_row.append(int(rows[pick]))
        scores[:, pick] = -np.inf
        if len(picked_rank) == most:
            break
    ranks = np.asarray(picked_rank, dtype=np.int64)
    requests = np.asarray(picked_row, dtype=np.int64)
    raised = np.flatnonzero((loads[ranks] + contributions[requests] > envelope).any(axis=1))
    if raised.size:
        ranks, requests = ranks[: raised[0] + 1], requests[: raised[0] + 1]
    loads[ranks] += contributions[requests]
    rank_of[requests] = ranks
    cap[ranks] -= 1
    return int(ranks.shape[0])


def _apply_best_exchange(
    *,
    loads: FloatArray,
    cap: IntArray,
    rank_of: IntArray,
    contributions: FloatArray,
    weights: FloatArray,
    must: BoolArray,
) -> bool:
    """Apply the best J-decreasing exchange that touches a rank on the envelope; return whether one existed.

    Only a change to a rank that attains max_g L_g(h) at some weighted offset can lower J, so the
    candidate moves start from the admitted requests on those ranks (the movers). J after every candidate
    (swap with any admitted request on another rank, move to another rank with a free slot, replace by a
    waiting request) is evaluated at once as an array (movers x candidates x offsets); the peak of the
    ranks a move does not touch is the largest (or, when that rank is touched, the second largest) load
    among the ranks other than the mover's. Ties go to the first candidate in the order movers by
    (rank, request), then swaps, moves and replaces, each by index.
    """
    num_ranks = loads.shape[0]
    envelope = loads.max(axis=0)
    total = loads.sum(axis=0)
    current_j = float((num_ranks * envelope - total) @ weights)
    critical = np.any((loads >= envelope) & (weights > 0), axis=1)
    movers = np.flatnonzero((rank_of >= 0) & critical[np.maximum(rank_of, 0)])
    if movers.size == 0:
        return False
    movers = movers[np.argsort(rank_of[movers], kind="stable")]
    home = rank_of[movers]
    v1 = contributions[movers]
    left = loads[home] - v1
    top1, arg1, top2 = _peaks_without(loads, home)
    mates = np.flatnonzero(rank_of >= 0)
    mate_rank = rank_of[mates]
    v2 = contributions[mates]
    other = np.where(arg1[:, None, :] == mate_rank[None, :, None], top2[:, None, :], top1[:, None, :])
    peak = np.maximum(
        other, np.maximum(left[:, None, :] + v2[None, :, :], (loads[mate_rank] - v2)[None, :, :] + v1[:, None, :])
    )
    swap_j = _weighted(num_ranks * peak - total, weights)
    swap_j[home[:, None] == mate_rank[None, :]] = np.inf
    targets = np.arange(num_ranks)
    other = np.where(arg1[:, None, :] == targets[None, :, None], top2[:, None, :], top1[:, None, :])
    peak = np.maximum(other, np.maximum(left[:, None, :], loads[None, :, :] + v1[:, None, :]))
    move_j = _weighted(num_ranks * peak - total, weights)
    move_j[(home[:, None] == targets[None, :]) | (cap[None, :] <= 0)] = np.inf
    waiting = np.flatnonzero(rank_of < 0)
    v3 = contributions[waiting]
    peak = np.maximum(top1[:, None, :], left[:, None, :] + v3[None, :, :])
    replace_j = _weighted(num_ranks * peak - ((total - v1)[:, None, :] + v3[None, :, :]), weights)
    replace_j[must[movers]] = np.inf
    candidates = np.concatenate((swap_j, move_j, replace_j), axis=1)
    best = int(np.argmin(candidates))
    if not candidates.flat[best] < current_j - _REL_TOL * max(1.0, abs(current_j)):
        return False
    row, column = divmod(best, candidates.shape[1])
    moved, from_rank = int(movers[row]), int(home[row])
    if column < mates.shape[0]:
        partner = int(mates[column])
        to_rank = int(rank_of[partner])
        loads[from_rank] += contributions[partner] - contributions[moved]
        loads[to_rank] += contributions[moved] - contributions[partner]
        rank_of[moved], rank_of[partner] = to_rank, from_rank
    elif column < mates.shape[0] + num_ranks:
        to_rank = column - mates.shape[0]
        loads[from_rank] -= contributions[moved]
        loads[to_rank] += contributions[moved]
        cap[from_rank] += 1
        cap[to_rank] -= 1
        rank_of[moved] = to_rank
    else:
        partner = int(waiting[column - mates.shape[0] - num_ranks])
        loads[from_rank] += contributions[partner] - contributions[moved]
        rank_of[moved], rank_of[partner] = -1, from_rank
    return True


def _peaks_without(loads: FloatArray, excluded: IntArray) -> tuple[FloatArray, IntArray, FloatArray]:
    """Per excluded rank e and offset: the largest load among ranks != e, its rank, and the second largest.

    Shapes (E, K). Ties resolve to the lowest rank index; -inf where fewer ranks are left.
    """
    num_ranks = loads.shape[0]
    depth = min(3, num_ranks)
    order = np.argsort(-loads, axis=0, kind="stable")[:depth]
    values = np.take_along_axis(loads, order, axis=0)
    if depth < 3:
        pad = 3 - depth
        order = np.concatenate((order, np.full((pad, loads.shape[1]), -1, dtype=order.dtype)))
        values = np.concatenate((values, np.full((pad, loads.shape[1]), -np.inf)))
    hit0 = order[0][None, :] == excluded[:, None]
    hit1 = order[1][None, :] == excluded[:, None]
    top1 = np.where(hit0, values[1], values[0])
    arg1 = np.where(hit0, order[1], order[0]).astype(np.int64)
    top2 = np.where(hit0 | hit1, values[2], values[1])
    return top1, arg1, top2


def _weighted(per_offset: FloatArray, weights: FloatArray) -> FloatArray:
    """sum_k omega_k x[..., k] for an array whose last axis is the offsets."""
    flat: FloatArray = per_offset.reshape(-1, per_offset.shape[-1]) @ weights
    return flat.reshape(per_offset.shape[:-1])
