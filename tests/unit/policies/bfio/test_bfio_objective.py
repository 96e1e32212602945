"""Imbalance (Eq. 2), J of (IO) and the marginal score F = -Delta J (spec section 2.5)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.bfio.objective import (
    fillable_slots,
    imbalance_tokens,
    is_feasible,
    loads_after,
    marginal_scores,
    objective_j,
    scores_from_margins,
)


class TestImbalance:
    def test_is_g_times_max_minus_sum(self) -> None:
        assert imbalance_tokens(np.array([10.0, 4.0, 7.0])) == 3 * 10 - 21

    def test_balanced_loads_have_zero_imbalance(self) -> None:
        assert imbalance_tokens(np.array([5.0, 5.0])) == 0.0


class TestObjectiveJ:
    def test_sums_weighted_imbalance_over_offsets(self) -> None:
        loads = np.array([[10.0, 8.0], [4.0, 8.0]])
        assert objective_j(loads, np.array([1.0, 2.0])) == (20 - 14) * 1 + (16 - 16) * 2


class TestMarginalScores:
    @settings(max_examples=40)
    @given(
        st.lists(st.integers(0, 100), min_size=2, max_size=4),
        st.integers(1, 80),
        st.integers(0, 3),
    )
    def test_equals_minus_the_exact_change_of_j(self, rank_loads: list[int], size: int, rank: int) -> None:
        rank = rank % len(rank_loads)
        loads = np.array(rank_loads, dtype=np.float64)[:, None]
        v = np.array([[float(size)]])
        weights = np.array([1.0])
        before = objective_j(loads, weights)
        after = loads.copy()
        after[rank] += v[0]
        assert marginal_scores(loads, v, weights)[0, rank] == before - objective_j(after, weights)

    def test_scores_of_a_subset_of_ranks_use_the_envelope_of_all_ranks(self) -> None:
        """The greedy scores only ranks with a free slot; their F must still see every rank's load and G."""
        rng = np.random.default_rng(5)
        loads = rng.integers(0, 500, (5, 3)).astype(np.float64)
        v = rng.integers(1, 200, (7, 3)).astype(np.float64)
        weights = np.array([1.0, 2.0, 0.5])
        subset = np.array([1, 3])
        margins = loads.max(axis=0) - loads[subset]
        subset_scores = scores_from_margins(margins, v, weights, num_ranks=5)
        np.testing.assert_allclose(subset_scores, marginal_scores(loads, v, weights)[:, subset].T)
        assert not np.allclose(subset_scores, marginal_scores(loads[subset], v, weights).T)


class TestFeasibility:
    def test_fillable_slots_is_the_smaller_of_waiting_and_free(self) -> None:
        assert fillable_slots(5, np.array([1, 2])) == 3
        assert fillable_slots(2, np.array([4, 4])) == 2

    def test_over_capacity_and_under_filling_are_infeasible(self) -> None:
        free = np.array([1, 1])
        assert is_feasible(np.array([0, 1, -1]), free)
        assert not is_feasible(np.array([0, 0, -1]), free)
        assert not is_feasible(np.array([0, -1, -1]), free)

    def test_loads_after_adds_each_admitted_request_to_its_rank(self) -> None:
        base = np.zeros((2, 1))
        v = np.array([[3.0], [4.0], [5.0]])
        np.testing.assert_array_equal(loads_after(base, v, np.array([1, -1, 1])), [[0.0], [8.0]])
