"""Exact (Algorithm 1 enumeration) and fast (spec section 2.7) solvers of (IO).

Stated bound, checked here: on every instance the fast solver's J is at most the exact optimum plus
(G - 1) * sum_k omega_k max_i v_i(h_k), the per-offset s_max slack of the paper's Lemma 1 (a balanced
partition has max - min <= s_max). On small random instances it is usually exactly optimal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.bfio import greedy
from policies.bfio.exact import solve_exact
from policies.bfio.greedy import SolveBudget, solve_fast
from policies.bfio.objective import is_feasible, loads_after, objective_j
from schemas.errors import InvalidInputError

T = TypeVar("T")


@st.composite
def instances(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    num_ranks = draw(st.integers(1, 3))
    num_waiting = draw(st.integers(0, 6))
    num_offsets = draw(st.integers(1, 3))
    base = np.array(
        [[draw(st.integers(0, 120)) for _ in range(num_offsets)] for _ in range(num_ranks)], dtype=np.float64
    )
    free = np.array([draw(st.integers(0, 3)) for _ in range(num_ranks)], dtype=np.int64)
    v = np.array(
        [[draw(st.integers(1, 60)) for _ in range(num_offsets)] for _ in range(num_waiting)], dtype=np.float64
    ).reshape(num_waiting, num_offsets)
    weights = np.array([draw(st.sampled_from([0.5, 1.0, 2.0])) for _ in range(num_offsets)])
    return base, free, v, weights


class TestSolveExact:
    def test_picks_the_prompts_that_fill_the_light_rank_to_the_max(self) -> None:
        """Rank 1 is 30 tokens below rank 0 with one free slot: the 30-token prompt evens them out."""
        base = np.array([[100.0], [70.0]])
        rank_of, j = solve_exact(base, np.array([0, 1]), np.array([[10.0], [30.0], [50.0]]), np.array([1.0]))
        np.testing.assert_array_equal(rank_of, [-1, 1, -1])
        assert j == 0.0

    def test_refuses_instances_too_large_to_enumerate(self) -> None:
        with pytest.raises(InvalidInputError, match="exact solver"):
            solve_exact(np.zeros((8, 1)), np.ones(8, dtype=np.int64), np.ones((9, 1)), np.ones(1))


class TestSolveFast:
    @settings(max_examples=60)
    @given(instances())
    def test_is_feasible_and_within_the_stated_bound_of_the_exact_optimum(
        self, instance: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
    ) -> None:
        base, free, v, weights = instance
        _, exact_j = solve_exact(base, free, v, weights)
        fast = solve_fast(base, free, v, weights)
        assert is_feasible(fast.rank_of, free)
        assert fast.objective_j_tokens == pytest.approx(objective_j(loads_after(base, v, fast.rank_of), weights))
        slack = (base.shape[0] - 1) * float(v.max(axis=0) @ weights) if v.size else 0.0
        assert exact_j - 1e-6 <= fast.objective_j_tokens <= exact_j + slack + 1e-6

    def test_equals_the_exact_optimum_on_most_small_random_instances(self) -> None:
        """At least 75% exactly optimal on 3 ranks x 5 waiting x 2 offsets (155 of these 200 when written)."""
        rng = np.random.default_rng(2026)
        optimal = 0
        for _ in range(200):
            base = rng.integers(0, 120, (3, 2)).astype(np.float64)
            free = rng.integers(0, 3, 3)
            v = rng.integers(1, 60, (5, 2)).astype(np.float64)
            weights = np.array([1.0, 1.0])
            _, exact_j = solve_exact(base, free, v, weights)
            optimal += solve_fast(base, free, v, weights).objective_j_tokens <= exact_j + 1e-9
        assert optimal >= 150

    @settings(max_examples=40)
    @given(instances(), st.data())
    def test_forced_requests_are_admitted_oldest_first(
        self, instance: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], data: st.DataObject
    ) -> None:
        base, free, v, weights = instance
        forced = np.array([data.draw(st.booleans()) for _ in range(v.shape[0])], dtype=bool)
        fast = solve_fast(base, free, v, weights, forced=forced)
        assert is_feasible(fast.rank_of, free)
        fits = min(v.shape[0], int(free.sum()))
        assert np.all(fast.rank_of[np.flatnonzero(forced)[:fits]] >= 0)

    def test_out_of_budget_falls_back_to_jsq_by_load_and_stays_feasible(self) -> None:
        ticks = iter(range(1000))
        budget = SolveBudget(clock=lambda: float(next(ticks)), budget_s=0.5)
        base = np.array([[50.0], [0.0], [10.0]])
        fast = solve_fast(base, np.array([1, 1, 1]), np.array([[5.0], [6.0], [7.0], [8.0]]), np.ones(1), budget=budget)
        assert fast.fallback_used
        np.testing.assert_array_equal(fast.rank_of, [1, 2, 0, -1])

    def test_the_exchange_phase_starts_no_move_it_cannot_finish_within_the_budget(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Simulated time: each greedy round and each exchange move takes 1 s, reading the clock takes none.
        Whenever the greedy phase ends within the budget, the solve ends within it too (a move starts only
        while the last step's cost still fits), and some budgets cut the search short."""
        rng = np.random.default_rng(11)
        base = rng.uniform(0, 5000, (8, 3))
        free = np.full(8, 3)
        v = rng.uniform(1, 3000, (20, 3))
        unbounded = solve_fast(base, free, v, np.ones(3))
        assert unbounded.local_search_moves >= 2
        now = [0.0]
        greedy_end = [0.0]

        def timed(step: Callable[..., T], *, ends_greedy: bool) -> Callable[..., T]:
            def run(**kwargs: object) -> T:
                now[0] += 1.0
                if ends_greedy:
                    greedy_end[0] = now[0]
                return step(**kwargs)

            return run

        monkeypatch.setattr(greedy, "greedy_round", timed(greedy.greedy_round, ends_greedy=True))
        monkeypatch.setattr(greedy, "best_exchange", timed(greedy.best_exchange, ends_greedy=False))
        cut_short = 0
        for budget_s in np.arange(1.0, 20.0):
            now[0] = 0.0
            fast = solve_fast(base, free, v, np.ones(3), budget=SolveBudget(clock=lambda: now[0], budget_s=budget_s))
            assert is_feasible(fast.rank_of, free)
            if not fast.fallback_used and greedy_end[0] <= budget_s:
                assert now[0] <= budget_s
            cut_short += 0 < fast.local_search_moves < unbounded.local_search_moves
        assert cut_short > 0

    def test_a_move_reserve_keeps_moves_dearer_than_a_round_within_the_budget(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Simulated time: a greedy round takes 1 s and an exchange move 3 s. Reserved only by the last
        step's cost, the first move starts with 1 s left and ends past the budget on some budgets; with
        ``move_reserve_s`` = 3 s (what the router passes from its last call) no solve whose greedy phase
        ended within the budget ends past it, and the solution reports the 3 s move."""
        rng = np.random.default_rng(11)
        base = rng.uniform(0, 5000, (8, 3))
        free = np.full(8, 3)
        v = rng.uniform(1, 3000, (20, 3))
        now = [0.0]
        greedy_end = [0.0]
        rounds, moves = greedy.greedy_round, greedy.best_exchange

        def timed_round(**kwargs: object) -> int:
            now[0] += 1.0
            greedy_end[0] = now[0]
            return rounds(**kwargs)

        def timed_move(**kwargs: object) -> bool:
            now[0] += 3.0
            return moves(**kwargs)

        monkeypatch.setattr(greedy, "greedy_round", timed_round)
        monkeypatch.setattr(greedy, "best_exchange", timed_move)
        overshoots = {0.0: 0, 3.0: 0}
        for reserve_s in overshoots:
            for budget_s in np.arange(1.0, 30.0):
                now[0] = 0.0
                budget = SolveBudget(clock=lambda: now[0], budget_s=budget_s, move_reserve_s=reserve_s)
                fast = solve_fast(base, free, v, np.ones(3), budget=budget)
                assert is_feasible(fast.rank_of, free)
                if not fast.fallback_used and greedy_end[0] <= budget_s:
                    overshoots[reserve_s] += now[0] > budget_s
                    assert fast.costliest_move_s in (0.0, 3.0)
        assert overshoots[0.0] > 0
        assert overshoots[3.0] == 0

    def test_one_open_rank_with_room_takes_the_largest_requests_earliest_first(self) -> None:
        """One open rank with three slots, far below the envelope: every request fits under it, so F is
        v itself and the greedy takes the three largest (two tie at 50; both are taken)."""
        base = np.array([[10_000.0], [0.0]])
        v = np.array([[5.0], [50.0], [7.0], [50.0], [40.0]])
        fast = solve_fast(base, np.array([0, 3]), v, np.ones(1), local_search_rounds=0)
        np.testing.assert_array_equal(fast.rank_of, [-1, 1, -1, 1, 1])

    def test_equal_scores_go_to_the_least_loaded_rank_not_rank_zero(self) -> None:
        base = np.array([[30.0], [10.0], [20.0], [100.0]])
        fast = solve_fast(base, np.array([1, 1, 1, 1]), np.array([[5.0]]), np.ones(1))
        np.testing.assert_array_equal(fast.rank_of, [1])

    def test_never_admits_more_than_the_free_slots_at_production_size(self) -> None:
        rng = np.random.default_rng(5)
        base = rng.uniform(70_000, 90_000, (32, 7))
        free = rng.binomial(72, 0.03, 32)
        v = rng.integers(1, 4000, (100, 1)) + np.zeros((1, 7))
        fast = solve_fast(base, free, v, np.ones(7))
        assert is_feasible(fast.rank_of, free)
        assert len(set(np.flatnonzero(fast.rank_of >= 0))) == min(100, int(free.sum()))
