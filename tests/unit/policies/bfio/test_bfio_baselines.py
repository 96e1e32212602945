"""Baselines of spec section 3: FCFS (two variants), round robin, JSQ by count and by load, power-of-d, vLLM."""

from __future__ import annotations

import numpy as np
import pytest

from policies.bfio.baselines import (
    fcfs_index_fill,
    fcfs_most_free,
    jsq_count,
    jsq_load,
    power_of_d,
    round_robin,
    vllm_dp_score,
)
from schemas.errors import InvalidInputError


class TestFcfs:
    def test_index_fill_fills_rank_zero_first_and_leaves_the_tail_waiting(self) -> None:
        np.testing.assert_array_equal(fcfs_index_fill(5, np.array([2, 0, 2])), [0, 0, 2, 2, -1])

    def test_most_free_follows_algorithm_2(self) -> None:
        np.testing.assert_array_equal(fcfs_most_free(4, np.array([1, 3, 2])), [1, 1, 2, 0])

    def test_no_free_slot_admits_nobody(self) -> None:
        np.testing.assert_array_equal(fcfs_most_free(2, np.array([0, 0])), [-1, -1])


class TestRoundRobin:
    def test_cycles_from_rank_zero_skipping_full_ranks(self) -> None:
        np.testing.assert_array_equal(round_robin(5, np.array([2, 0, 3])), [0, 2, 0, 2, 2])


class TestJsq:
    def test_count_variant_balances_request_counts(self) -> None:
        np.testing.assert_array_equal(jsq_count(3, np.array([3, 3]), np.array([5, 3])), [1, 1, 0])

    def test_load_variant_sends_each_request_to_the_lightest_rank_with_a_slot(self) -> None:
        rank_of = jsq_load(np.array([100.0, 50.0, 10.0]), np.array([1, 2]), np.array([0.0, 60.0]))
        np.testing.assert_array_equal(rank_of, [0, 1, 1])


class TestPowerOfD:
    def test_d_equal_to_g_is_jsq_by_count(self) -> None:
        rng = np.random.default_rng(3)
        free, counts = np.array([2, 2, 2]), np.array([4, 1, 2])
        np.testing.assert_array_equal(power_of_d(4, free, counts, d=3, rng=rng), jsq_count(4, free, counts))

    def test_is_reproducible_from_the_seed(self) -> None:
        free, counts = np.full(8, 3), np.arange(8)
        first = power_of_d(10, free, counts, d=2, rng=np.random.default_rng(11))
        second = power_of_d(10, free, counts, d=2, rng=np.random.default_rng(11))
        np.testing.assert_array_equal(first, second)
        assert np.all(np.bincount(first[first >= 0], minlength=8) <= free)

    def test_d_below_one_is_refused(self) -> None:
        with pytest.raises(InvalidInputError, match="d must be"):
            power_of_d(1, np.array([1]), np.array([0]), d=0, rng=np.random.default_rng(0))


class TestVllmDpScore:
    def test_below_half_kv_use_a_placed_request_weighs_as_a_running_one(self) -> None:
        """Running (3, 1, 1), KV use under 50%: scores from the rotating start 0 are 3, 1, 1 -> rank 1;
        start 1: ranks 1, 2, 0 score 2, 1, 3 -> 2; start 2: ranks 2, 0, 1 score 2, 3, 2 -> 2 (first in
        order), now full; start 0: ranks 0, 1 score 3, 2 -> 1, now full; then rank 0."""
        rank_of = vllm_dp_score(5, np.array([2, 2, 2]), np.array([3, 1, 1]), np.array([0.1, 0.5, 0.2]))
        np.testing.assert_array_equal(rank_of, [1, 2, 2, 1, 0])

    def test_kv_pressure_weighs_a_placed_request_up_to_four(self) -> None:
        """Two empty ranks, KV use 100% and 0%: a request placed on the full one weighs 1 + 6 x 0.5 = 4, so
        after the first (a tie, taken at the start) the next three go to the other: 0 vs 4, then 1 vs 4,
        then 2 vs 4. At equal KV use the ranks would alternate."""
        rank_of = vllm_dp_score(4, np.array([4, 4]), np.array([0, 0]), np.array([1.0, 0.0]))
        np.testing.assert_array_equal(rank_of, [0, 1, 1, 1])
        even = vllm_dp_score(4, np.array([4, 4]), np.array([0, 0]), np.array([0.3, 0.3]))
        np.testing.assert_array_equal(even, [0, 1, 0, 1])

    def test_the_ramp_is_linear_above_half_kv_use(self) -> None:
        """KV use 75%: a placed request weighs 1 + 6 x 0.25 = 2.5, so rank 0 (running 0) against rank 1
        (running 5) wins at 0 and 2.5, ties at 5.0 (the third request's scan starts at rank 0) and loses at
        7.5. Weight 1 would keep all four on rank 0, the static weight 4 would send the third to rank 1."""
        rank_of = vllm_dp_score(4, np.array([4, 4]), np.array([0, 5]), np.array([0.75, 0.0]))
        np.testing.assert_array_equal(rank_of, [0, 0, 0, 1])

    def test_ties_rotate_from_the_start_rank(self) -> None:
        rank_of = vllm_dp_score(4, np.full(3, 2), np.zeros(3, dtype=np.int64), np.zeros(3), start_rank=2)
        np.testing.assert_array_equal(rank_of, [2, 0, 1, 2])

    def test_admits_exactly_the_free_slots(self) -> None:
        rank_of = vllm_dp_score(6, np.array([1, 0, 2]), np.array([0, 0, 0]), np.zeros(3))
        assert sorted(rank_of.tolist()) == [-1, -1, -1, 0, 2, 2]
