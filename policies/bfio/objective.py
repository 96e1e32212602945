"""The BF-IO objective: Imbalance (Eq. 2), the horizon sum J of (IO) and the marginal score F.

Imbalance(k) = G max_g L_g(k) - sum_g L_g(k) (paper Eq. 2); J(S(k)) = sum_{h=0..H} omega_h Imbalance(k+h)
(paper section 4, (IO)); adding request r with predicted workload v_r(h) to rank g changes J by
Delta J = sum_h omega_h [G (v_r(h) - m_g(h))^+ - v_r(h)] with margin m_g(h) = max_j L_j(h) - L_g(h)
(specs/seed-003-bfio.md section 2.5), so F_{r,g} = -Delta J is the greedy score.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def imbalance_tokens(loads: FloatArray) -> float:
    """Imbalance of one step (Eq. 2) for rank loads of shape (G,), in tokens."""
    return float(loads.shape[0] * loads.max() - loads.sum())


def loads_after(base_loads: FloatArray, contributions: FloatArray, rank_of: IntArray) -> FloatArray:
    """Predicted rank loads L_g(k+h) after assigning waiting request i to ``rank_of[i]`` (-1: not admitted).

    Args:
        base_loads: shape (G, K), predicted loads of the active requests, b_g(h).
        contributions: shape (N, K), v_i(h) of each waiting request.
        rank_of: shape (N,), rank of each request or -1.

    Returns:
        Shape (G, K).
    """
    loads = base_loads.copy()
    admitted = rank_of >= 0
    if np.any(admitted):
        np.add.at(loads, rank_of[admitted], contributions[admitted])
    return loads


def objective_j(loads: FloatArray, weights: FloatArray) -> float:
    """J = sum_k omega_k (G max_g L_g(h_k) - sum_g L_g(h_k)) for loads of shape (G, K), in tokens."""
    per_offset = loads.shape[0] * loads.max(axis=0) - loads.sum(axis=0)
    return float(per_offset @ weights)


def marginal_scores(loads: FloatArray, contributions: FloatArray, weights: FloatArray) -> FloatArray:
    """F_{r,g} = -Delta J of adding each request r to each rank g alone, shape (N, G).

    Args:
        loads: shape (G, K), current predicted rank loads.
        contributions: shape (N, K), v_r(h).
        weights: shape (K,), omega.
    """
    margins = loads.max(axis=0)[None, :] - loads
    return scores_from_margins(margins, contributions, weights, num_ranks=loads.shape[0]).T


def scores_from_margins(
    margins: FloatArray, contributions: FloatArray, weights: FloatArray, *, num_ranks: int
) -> FloatArray:
    """F_{r,g} = sum_h omega_h [v_r(h) - G (v_r(h) - m_g(h))^+] for given margins, shape (len(margins), N).

    Args:
        margins: shape (G', K), m_g(h) = max_j L_j(h) - L_g(h) of the ranks to score (a subset is allowed).
        contributions: shape (N, K), v_r(h).
        weights: shape (K,), omega.
        num_ranks: G of Eq. 2 (all ranks, not only the scored ones).
    """
    return scores_by_offset(
        np.ascontiguousarray(margins.T), np.ascontiguousarray(contributions.T), weights, num_ranks=num_ranks
    )


def scores_by_offset(
    margins_by_offset: FloatArray, contributions_by_offset: FloatArray, weights: FloatArray, *, num_ranks: int
) -> FloatArray:
    """``scores_from_margins`` from offset-major inputs: margins (K, G'), contributions (K, N); returns (G', N).

    Offset-major keeps the long axis (requests) innermost, so the (K, G', N) excess tensor is built and
    clipped in passes over N contiguous values and reduced over the K offsets by one vector-matrix
    product; rank-major output, so that a rank's scores are contiguous (the greedy takes a rank's best).
    """
    num_offsets, num_scored = margins_by_offset.shape
    excess = contributions_by_offset[:, None, :] - margins_by_offset[:, :, None]
    np.maximum(excess, 0.0, out=excess)
    penalty = weights @ excess.reshape(num_offsets, -1)
    scores: FloatArray = (weights @ contributions_by_offset)[None, :] - num_ranks * penalty.reshape(num_scored, -1)
    return scores


def fillable_slots(num_waiting: int, free_slots: IntArray) -> int:
    """U(k) = min(|R_wait(k)|, sum_g cap[g](k)): how many assignments (IO) must make."""
    return int(min(num_waiting, int(free_slots.sum())))


def is_feasible(rank_of: IntArray, free_slots: IntArray) -> bool:
    """Whether ``rank_of`` satisfies (IO): each request at most once, per-rank capacity, exactly U assigned."""
    num_ranks = free_slots.shape[0]
    if np.any(rank_of < -1) or np.any(rank_of >= num_ranks):
        return False
    per_rank = np.bincount(rank_of[rank_of >= 0], minlength=num_ranks)
    return bool(np.all(per_rank <= free_slots)) and int(per_rank.sum()) == fillable_slots(rank_of.shape[0], free_slots)
