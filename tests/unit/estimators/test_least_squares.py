"""Least squares from sufficient statistics, against numpy.linalg.lstsq."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from estimators.least_squares import LeastSquares, LeastSquaresFit, NotEnoughData
from schemas.errors import InvalidInputError


class TestLeastSquares:
    @given(st.integers(0, 2**31 - 1), st.integers(1, 4))
    @settings(max_examples=30)
    def test_matches_numpy_lstsq_on_random_data(self, seed: int, p: int) -> None:
        rng = np.random.default_rng(seed)
        x = np.column_stack((np.ones(50), rng.normal(size=(50, p))))
        y = x @ rng.normal(size=p + 1) + rng.normal(scale=0.1, size=50)
        ls = LeastSquares(n_features=p + 1)
        for row, target in zip(x, y, strict=True):
            ls.update(tuple(row), float(target))
        fit = ls.fit()
        assert isinstance(fit, LeastSquaresFit)
        expected, rss, _, _ = np.linalg.lstsq(x, y, rcond=None)
        assert fit.coefficients == pytest.approx(tuple(expected), rel=1e-7, abs=1e-9)
        assert fit.residual_std == pytest.approx(float(np.sqrt(rss[0] / (50 - p - 1))), rel=1e-6)

    @given(st.integers(0, 2**31 - 1))
    @settings(max_examples=20)
    def test_merge_equals_folding_both_streams(self, seed: int) -> None:
        rng = np.random.default_rng(seed)
        rows = rng.normal(size=(30, 3))
        a, b, both = (LeastSquares(n_features=2) for _ in range(3))
        for i, (x, y, w) in enumerate(rows):
            (a if i < 12 else b).update((1.0, x), y, weight=abs(w))
            both.update((1.0, x), y, weight=abs(w))
        assert a.merge(b).n_samples == both.n_samples == 30
        merged, folded = a.merge(b).fit(), both.fit()
        assert isinstance(merged, LeastSquaresFit)
        assert isinstance(folded, LeastSquaresFit)
        assert merged.coefficients == pytest.approx(folded.coefficients, rel=1e-9, abs=1e-12)

    def test_round_trips_through_to_dict(self) -> None:
        ls = LeastSquares(n_features=2)
        for x in range(5):
            ls.update((1.0, float(x)), 2.0 * x + 1.0)
        assert LeastSquares.from_dict(ls.to_dict()).fit() == ls.fit()

    def test_refuses_below_minimum_with_not_enough_data(self) -> None:
        ls = LeastSquares(n_features=2)
        ls.update((1.0, 1.0), 1.0)
        assert ls.fit(min_samples=5) == NotEnoughData(samples=1, minimum=5)

    def test_exact_line_has_zero_residual_and_unit_r_squared(self) -> None:
        ls = LeastSquares(n_features=2)
        for x in range(10):
            ls.update((1.0, float(x)), 0.5 + 0.25 * x)
        fit = ls.fit()
        assert isinstance(fit, LeastSquaresFit)
        assert fit.coefficients == pytest.approx((0.5, 0.25))
        assert fit.residual_std == pytest.approx(0.0, abs=1e-6)
        assert fit.r_squared == pytest.approx(1.0)

    @pytest.mark.parametrize(
        ("features", "target"), [((1.0, float("nan")), 1.0), ((1.0, 2.0), float("inf")), ((1.0,), 1.0)]
    )
    def test_bad_input_raises(self, features: tuple[float, ...], target: float) -> None:
        with pytest.raises(InvalidInputError):
            LeastSquares(n_features=2).update(features, target)
