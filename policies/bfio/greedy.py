"""Fast BF-IO solver for production sizes: greedy marginal J, exchange local search, time budget, fallback.

specs/seed-003-bfio.md section 2.7. Step 3: repeatedly assign the (request, rank) pair with the largest
F_{r,g} = sum_h omega_h [v_r(h) - G (v_r(h) - m_g(h))^+] = -Delta J (section 2.5) until U(k) requests are
placed, the (IO) constraint "fill every fillable slot". Step 4: exchange moves (swap two admitted requests
between ranks, move one to a rank with a free slot, or replace an admitted request by a waiting one) on the
ranks that attain the envelope, while J decreases; this is the paper's exchange argument (Lemma 1).
If the per-call budget runs out during the greedy phase, the remaining slots are filled by JSQ-by-load in
FIFO order (section 6.2). The exchange phase is anytime: it starts a move only while the time left covers
the costliest step it expects (the last greedy round, the costliest move so far in this call, or the
caller's estimate of a move from earlier calls), so it ends within the budget instead of past it.

F is kept as an (N, G) matrix: an assignment to rank g changes only column g unless it raises the envelope
max_j L_j(h), in which case every margin moves and F is recomputed. The greedy runs in rounds: each rank
with a free slot takes its best remaining request, ranks in order of their best F (ties: lowest current
load, then lowest weighted projected load; among requests the earliest wins), and a round ends early
when an assignment raises the envelope. Without the load tie-break equal scores send everything to
rank 0 (section 2.5). Requests flagged ``forced`` (the router's aging rule) are placed first.

Implementation (issue 13 item 5; decisions unchanged, checked against the earlier solver's on 2,240
instances in tests/unit/policies/bfio/test_bfio_solver_decisions.py): the rounds share a state (the
unassigned requests, the open ranks, the envelope as a running maximum, and every request's
contributions offset-major, gathered per round as before) updated from each round's picks instead of
rebuilt; a rank's pick is its row's argmax taken
once for all ranks, and only a rank whose best was taken earlier in the round masks the taken
requests and looks again; the exchange phase scores every swap, move and replace as one table.

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
    """A per-call time budget: ``clock`` returns seconds (the engine passes time.perf_counter).

    ``move_reserve_s`` is what one exchange move is expected to cost (the router passes the costliest
    move of its previous calls); no move starts with less than that left, so the first move of a call
    is not reserved by the greedy's last round, which is several times cheaper than a move.
    """

    clock: Callable[[], float]
    budget_s: float
    move_reserve_s: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class FastSolution:
    """Result of ``solve_fast``.

    Attributes:
        rank_of: shape (N,), rank of each waiting request, -1 when it keeps waiting.
        objective_j_tokens: J of the allocation, in tokens.
        fallback_used: the budget ran out and JSQ-by-load filled the rest.
        local_search_moves: improving exchange moves applied after the greedy phase.
        costliest_move_s: the longest exchange step of this call on the budget's clock (0 without a budget
            or a move), for the next call's ``SolveBudget.move_reserve_s``.
    """

    rank_of: IntArray
    objective_j_tokens: float
    fallback_used: bool
    local_search_moves: int
    costliest_move_s: float = 0.0


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
        """Past the budget, or less than ``reserve_s`` (what the next step is expected to cost) of it left."""
        return budget is not None and used_s + reserve_s > budget.budget_s

    num_waiting = contributions.shape[0]
    loads = base_loads.astype(np.float64, copy=True)
    cap = free_slots.astype(np.int64, copy=True)
    rank_of = np.full(num_waiting, -1, dtype=np.int64)
    target = fillable_slots(num_waiting, cap)
    must = np.zeros(num_waiting, dtype=bool) if forced is None else forced.copy()
    if int(must.sum()) > target:
        must[np.flatnonzero(must)[target:]] = False
    state = _GreedyState(loads=loads, cap=cap, rank_of=rank_of, contributions=contributions, must=must)
    assigned = 0
    fallback_used = False
    while assigned < target:
        used_s = elapsed_s()
        if out_of_time(used_s, 0.0):
            fallback_used = True
            break
        assigned += _greedy_round(state=state, weights=weights, limit=target - assigned)
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
    costliest_move_s = 0.0
    while moves < local_search_rounds:
        used_s = elapsed_s()
        reserve_s = max(step_cost_s, costliest_move_s, budget.move_reserve_s if budget is not None else 0.0)
        if out_of_time(used_s, reserve_s):
            break
        improved = _apply_best_exchange(
            loads=loads, cap=cap, rank_of=rank_of, contributions=contributions, weights=weights, must=must
        )
        costliest_move_s = max(costliest_move_s, elapsed_s() - used_s)
        if not improved:
            break
        moves += 1
    return FastSolution(
        rank_of=rank_of,
        objective_j_tokens=objective_j(loads, weights),
        fallback_used=False,
        local_search_moves=moves,
        costliest_move_s=costliest_move_s,
    )


class _GreedyState:
    """What the greedy rounds share, kept up to date between rounds instead of rebuilt in each.

    ``rows`` are the unassigned requests in FIFO order, ``by_offset`` every request's contributions,
    offset-major (K, N); ``open_ranks`` the ranks with a free slot; ``envelope`` the per-offset
    max_j L_j(h). Each is updated from the round's picks (the envelope by a running maximum, which is
    exact), so a round costs its scores and picks, not a rescan of every request and rank. A round
    gathers its columns as ``by_offset[:, rows]``: that array's memory order sets how the score's
    matrix products sum, so keeping it keeps the scores, and hence ties, bit for bit.
    """

    def __init__(
        self, *, loads: FloatArray, cap: IntArray, rank_of: IntArray, contributions: FloatArray, must: BoolArray
    ) -> None:
        self.loads = loads
        self.cap = cap
        self.rank_of = rank_of
        self.contributions = contributions
        self.must = must
        self.forced_left = int(must.sum())
        self.num_ranks = int(loads.shape[0])
        self.envelope: FloatArray = loads.max(axis=0)
        self.open_ranks: IntArray = np.flatnonzero(cap > 0)
        self.rows: IntArray = np.flatnonzero(rank_of < 0)
        self.by_offset: FloatArray = np.ascontiguousarray(contributions.T)


def _greedy_round(*, state: _GreedyState, weights: FloatArray, limit: int) -> int:
    """One greedy round: each open rank, in order of its best F, takes its best remaining request.

    F_{r,g} = -Delta J (section 2.5) is evaluated once per round, for the remaining requests (only the
    overdue ones while any is left, one per round) and the ranks with a free slot. Ranks are ordered by
    their best F (ties: lowest current load, then lowest weighted projected load); each takes its
    argmax among the requests not yet taken this round (ties: the earliest request). The round stops
    after the first assignment that raises the envelope max_j L_j(h), because that moves every rank's
    margin. Returns the number of requests placed (at least one when ``limit`` > 0 and a request and a
    slot are left).
    """
    loads, envelope, open_ranks = state.loads, state.envelope, state.open_ranks
    forced_round = state.forced_left > 0
    rows = np.flatnonzero(state.must & (state.rank_of < 0)) if forced_round else state.rows
    open_loads = loads[open_ranks]
    margins = np.ascontiguousarray((envelope - open_loads).T)
    scores = scores_by_offset(margins, state.by_offset[:, rows], weights, num_ranks=state.num_ranks)
    best = scores.argmax(axis=1)
    order = np.lexsort((open_loads @ weights, open_loads[:, 0], -scores.max(axis=1)))
    most = 1 if forced_round else limit
    picked_rank: list[int] = []
    picked_column: list[int] = []
    taken = np.empty(min(most, best.shape[0]), dtype=np.int64)
    best_list = best.tolist()
    rank_list = open_ranks.tolist()
    for j in order.tolist():
        pick = best_list[j]
        if pick in picked_column:
            row = scores[j]
            row[taken[: len(picked_column)]] = -np.inf
            pick = int(row.argmax())
            if row[pick] == -np.inf:
                continue
        taken[len(picked_column)] = pick
        picked_rank.append(rank_list[j])
        picked_column.append(pick)
        if len(picked_rank) == most:
            break
    ranks = np.asarray(picked_rank, dtype=np.int64)
    columns = taken[: len(picked_column)]
    requests = rows[columns]
    raised_loads = loads[ranks] + state.contributions[requests]
    raised = np.flatnonzero((raised_loads > envelope).any(axis=1))
    if raised.size:
        cut = int(raised[0]) + 1
        ranks, columns, requests, raised_loads = ranks[:cut], columns[:cut], requests[:cut], raised_loads[:cut]
        state.envelope = np.maximum(envelope, raised_loads.max(axis=0))
    loads[ranks] = raised_loads
    state.rank_of[requests] = ranks
    cap = state.cap
    cap[ranks] -= 1
    state.open_ranks = open_ranks[cap[open_ranks] > 0]
    if forced_round:
        state.forced_left -= int(ranks.shape[0])
        state.rows = np.flatnonzero(state.rank_of < 0)
    else:
        keep = np.ones(rows.shape[0], dtype=bool)
        keep[columns] = False
        state.rows = rows[keep]
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
    candidate moves start from the admitted requests on those ranks (the movers). Every candidate is
    one row of a single table: it takes a mover m off its rank a, puts ``incoming`` on a and moves m
    onto rank ``to_rank`` b less ``outgoing``: a swap with an admitted request p on another rank
    (incoming = outgoing = v_p, b = p's rank), a move to another rank with a free slot (incoming =
    outgoing = 0), or a replace by a waiting request q (incoming = v_q, no rank b, the total grows by
    v_q - v_m). J after every (mover, candidate) pair is evaluated at once as one (movers x candidates
    x offsets) array; the peak of the ranks a move does not touch is the largest (or, when that rank
    is b, the second largest) load among the ranks other than a. Ties go to the first pair in the
    order movers by (rank, request), then swaps, moves and replaces, each by index.
    """
    num_ranks = loads.shape[0]
    envelope = loads.max(axis=0)
    total = loads.sum(axis=0)
    current_j = float((num_ranks * envelope - total) @ weights)
    critical = np.any((loads >= envelope) & (weights > 0), axis=1)
    admitted = rank_of >= 0
    movers = np.flatnonzero(admitted & critical[np.maximum(rank_of, 0)])
    if movers.size == 0:
        return False
    movers = movers[np.argsort(rank_of[movers], kind="stable")]
    home = rank_of[movers]
    v1 = contributions[movers]
    mates = np.flatnonzero(admitted)
    waiting = np.flatnonzero(~admitted)
    num_mates, num_offsets = mates.shape[0], loads.shape[1]
    to_rank = np.concatenate((rank_of[mates], np.arange(num_ranks), np.full(waiting.shape[0], -1)))
    v2 = contributions[mates]
    v3 = contributions[waiting]
    incoming = np.concatenate((v2, np.zeros((num_ranks, num_offsets)), v3))
    nowhere = np.full((waiting.shape[0], num_offsets), -np.inf)
    to_rank_left = np.concatenate((loads[rank_of[mates]] - v2, loads, nowhere))
    top1, arg1, top2 = _peaks_without(loads, home)
    peak = np.where(arg1[:, None, :] == to_rank[None, :, None], top2[:, None, :], top1[:, None, :])
    np.maximum(peak, (loads[home] - v1)[:, None, :] + incoming[None, :, :], out=peak)
    np.maximum(peak, to_rank_left[None, :, :] + v1[:, None, :], out=peak)
    candidates = _weighted(num_ranks * peak - total, weights)
    replaced = num_mates + num_ranks
    candidates[:, replaced:] -= (v3 @ weights)[None, :] - (v1 @ weights)[:, None]
    candidates[home[:, None] == to_rank[None, :]] = np.inf
    candidates[:, num_mates:replaced][:, cap <= 0] = np.inf
    candidates[must[movers], replaced:] = np.inf
    best = int(np.argmin(candidates))
    if not candidates.flat[best] < current_j - _REL_TOL * max(1.0, abs(current_j)):
        return False
    row, column = divmod(best, candidates.shape[1])
    moved, from_rank = int(movers[row]), int(home[row])
    if column < num_mates:
        partner = int(mates[column])
        target = int(rank_of[partner])
        loads[from_rank] += contributions[partner] - contributions[moved]
        loads[target] += contributions[moved] - contributions[partner]
        rank_of[moved], rank_of[partner] = target, from_rank
    elif column < num_mates + num_ranks:
        target = column - num_mates
        loads[from_rank] -= contributions[moved]
        loads[target] += contributions[moved]
        cap[from_rank] += 1
        cap[target] -= 1
        rank_of[moved] = target
    else:
        partner = int(waiting[column - num_mates - num_ranks])
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
