"""DP-rank load metrics (seed-003 section 1.4)."""

from __future__ import annotations

import pytest

from estimators.dp_load import DpLoadTracker, rank_load
from schemas.errors import InvalidInputError


class TestRankLoad:
    def test_imbalance_gap_and_idle_fractions(self) -> None:
        step = rank_load([100.0, 50.0, 150.0, 100.0], local_times_s=[1.0, 0.5, 1.5, 1.0], step_time_s=2.0)
        assert step.imbalance_tokens == 4 * 150 - 400
        assert step.gap_tokens == 100.0
        assert step.idle_load_frac == pytest.approx(200 / 600)
        assert step.balance_ratio == pytest.approx(400 / 600)
        assert step.imbalance_per_total_frac == pytest.approx(0.5)
        assert step.idle_time_frac == pytest.approx((0.5 + 1.0 + 0.0 + 0.5) / (4 * 2.0))

    def test_negative_load_or_no_ranks_raise(self) -> None:
        with pytest.raises(InvalidInputError):
            rank_load([1.0, -1.0])
        with pytest.raises(InvalidInputError):
            rank_load([])


class TestDpLoadTracker:
    def test_average_imbalance_is_the_per_step_mean_and_merges(self) -> None:
        a, b = DpLoadTracker(), DpLoadTracker()
        a.update([10.0, 0.0])
        b.update([5.0, 5.0])
        merged = DpLoadTracker.from_dict(a.merge(b).to_dict()).snapshot()
        assert merged.n_steps == 2
        assert merged.avg_imbalance_tokens == 5.0
        assert merged.last is not None
        assert merged.last.loads_tokens == (5.0, 5.0)
