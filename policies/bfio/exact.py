"""Exact BF-IO for small instances: Algorithm 1's enumeration of every feasible allocation of (IO).

Paper section 4, Algorithm 1: enumerate allocations {S_g(k)} with |S_g| <= cap[g], pairwise disjoint,
|union| = U(k), and keep one minimising J. Exponential in the number of waiting requests, so it refuses
instances beyond ``MAX_EXACT_LEAVES`` and serves as the oracle the fast solver is tested against
(specs/seed-003-bfio.md section 2.7 step 5).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from policies.bfio.objective import fillable_slots, objective_j
from schemas.errors import InvalidInputError

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

MAX_EXACT_LEAVES = 2_000_000


def solve_exact(
    base_loads: FloatArray, free_slots: IntArray, contributions: FloatArray, weights: FloatArray
) -> tuple[IntArray, float]:
    """Return an optimal allocation of (IO) and its J, by depth-first enumeration.

    Args:
        base_loads: shape (G, K), predicted loads of active requests b_g(h).
        free_slots: shape (G,), cap[g](k).
        contributions: shape (N, K), predicted workload v_i(h) of each waiting request.
        weights: shape (K,), omega.

    Returns:
        ``(rank_of, j_tokens)``: rank_of has shape (N,), -1 for a request left waiting. Among equal J the
        allocation met first in the order "request 0 to rank 0 first, not admitted last" wins.

    Raises:
        InvalidInputError: the instance has more than ``MAX_EXACT_LEAVES`` candidate allocations.
    """
    num_ranks = base_loads.shape[0]
    num_waiting = contributions.shape[0]
    leaves = float(num_ranks + 1) ** num_waiting
    if leaves > MAX_EXACT_LEAVES:
        msg = f"exact solver handles at most {MAX_EXACT_LEAVES} allocations, got (G+1)^N = {leaves:.3g}"
        raise InvalidInputError(msg, field="contributions", value=(num_waiting, num_ranks))
    target = fillable_slots(num_waiting, free_slots)
    loads = base_loads.copy()
    cap = free_slots.astype(np.int64).copy()
    rank_of = np.full(num_waiting, -1, dtype=np.int64)
    best_rank_of = rank_of.copy()
    best_j = np.inf

    def visit(i: int, assigned: int) -> None:
        nonlocal best_j, best_rank_of
        if assigned == target:
            j = objective_j(loads, weights)
            if j < best_j:
                best_j, best_rank_of = j, rank_of.copy()
            return
        if i == num_waiting or num_waiting - i < target - assigned:
            return
        for g in range(num_ranks):
            if cap[g] == 0:
                continue
            cap[g] -= 1
            loads[g] += contributions[i]
            rank_of[i] = g
            visit(i + 1, assigned + 1)
            rank_of[i] = -1
            loads[g] -= contributions[i]
            cap[g] += 1
        visit(i + 1, assigned)

    visit(0, 0)
    return best_rank_of, float(best_j)
