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

The greedy runs in rounds: each rank with a free slot takes its best remaining request, ranks in
order of their best F (ties: lowest current load, then lowest weighted projected load; among requests
the earliest wins), and a round ends early when an assignment raises the envelope max_j L_j(h), which
moves every rank's margin. Without the load tie-break equal scores send everything to rank 0 (section
2.5). Requests flagged ``forced`` (the router's aging rule) are placed first, one per round.

Implementation: a round and an exchange move are compiled loops
(policies/bfio/kernels.py); this module keeps the budget between them, on the caller's clock, and the
fallback. Their decisions are those of the numpy solver they replaced, checked on 2,240 instances
(tests/unit/policies/bfio/test_bfio_solver_decisions.py), ties included.

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
from policies.bfio.kernels import best_exchange, greedy_round
from policies.bfio.objective import fillable_slots, objective_j

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
    loads = np.array(base_loads, dtype=np.float64, order="C")
    contributions = np.ascontiguousarray(contributions, dtype=np.float64)
    weights = np.ascontiguousarray(weights, dtype=np.float64)
    cap = np.array(free_slots, dtype=np.int64)
    rank_of = np.full(num_waiting, -1, dtype=np.int64)
    target = fillable_slots(num_waiting, cap)
    must = np.zeros(num_waiting, dtype=np.bool_) if forced is None else np.array(forced, dtype=np.bool_)
    if int(must.sum()) > target:
        must[np.flatnonzero(must)[target:]] = False
    forced_left = int(must.sum())
    envelope = loads.max(axis=0) if loads.shape[0] else np.zeros(loads.shape[1])
    assigned = 0
    fallback_used = False
    while assigned < target:
        used_s = elapsed_s()
        if out_of_time(used_s, 0.0):
            fallback_used = True
            break
        placed = greedy_round(
            loads=loads,
            envelope=envelope,
            cap=cap,
            rank_of=rank_of,
            contributions=contributions,
            weights=weights,
            must=must,
            forced_round=forced_left > 0,
            limit=target - assigned,
        )
        if forced_left > 0:
            forced_left -= placed
        assigned += placed
        step_cost_s = elapsed_s() - used_s
    if fallback_used:
        order = np.concatenate((np.flatnonzero(must & (rank_of < 0)), np.flatnonzero(~must & (rank_of < 0))))
        order = order[: target - assigned]
        fill = jsq_load(contributions[order, 0], cap, loads[:, 0])
        rank_of[order] = fill
        np.add.at(loads, fill, contributions[order])
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
        improved = best_exchange(
            loads=loads,
            cap=cap,
            rank_of=rank_of,
            contributions=contributions,
            weights=weights,
            must=must,
            rel_tol=_REL_TOL,
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
