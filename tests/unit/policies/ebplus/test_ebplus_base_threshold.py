"""Unit and property tests of policies/ebplus/base_threshold.py (Eq. 3)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.ebplus.base_threshold import base_threshold, psi, solve_theta0
from schemas.errors import InvalidInputError


class TestSolveTheta0:
    @given(st.floats(min_value=1e-8, max_value=50.0))
    @settings(max_examples=60)
    def test_root_satisfies_eq3(self, gamma: float) -> None:
        theta0 = solve_theta0(gamma)
        assert 0.0 < theta0 < 1.0
        assert psi(theta0) == pytest.approx(gamma, rel=1e-6)

    @given(st.floats(min_value=1e-6, max_value=10.0), st.floats(min_value=1.01, max_value=10.0))
    @settings(max_examples=40)
    def test_theta0_increases_with_gamma(self, gamma: float, factor: float) -> None:
        assert solve_theta0(gamma * factor) > solve_theta0(gamma)

    def test_small_gamma_approaches_sqrt_two_gamma(self) -> None:
        """Psi(theta) = theta^2/2 + O(theta^3), so theta0 ~ sqrt(2 gamma) as gamma -> 0."""
        assert solve_theta0(1e-8) == pytest.approx(math.sqrt(2e-8), rel=1e-3)

    @pytest.mark.parametrize("gamma", [0.0, -1.0, math.nan, math.inf])
    def test_non_positive_or_non_finite_gamma_is_refused(self, gamma: float) -> None:
        with pytest.raises(InvalidInputError, match="gamma"):
            solve_theta0(gamma)


class TestBaseThreshold:
    @given(
        st.floats(min_value=1e-4, max_value=0.5),
        st.floats(min_value=1e-5, max_value=0.1),
        st.floats(min_value=1e-4, max_value=0.1),
        st.floats(min_value=0.1, max_value=10.0),
    )
    @settings(max_examples=60)
    def test_theta0_depends_only_on_p0_alpha_p_over_alpha_d(
        self, p0: float, alpha_p: float, alpha_d: float, scale: float
    ) -> None:
        """Rescaling p0 up and alpha_p down (or both alphas together) by the same factor leaves theta0 unchanged."""
        reference = base_threshold(p0=p0, alpha_p_s=alpha_p, alpha_d_s=alpha_d).theta0
        same_gamma = base_threshold(
            p0=min(p0 * scale, 1.0), alpha_p_s=alpha_p * p0 / min(p0 * scale, 1.0), alpha_d_s=alpha_d
        )
        same_ratio = base_threshold(p0=p0, alpha_p_s=alpha_p * scale, alpha_d_s=alpha_d * scale)
        assert same_gamma.theta0 == pytest.approx(reference, rel=1e-9)
        assert same_ratio.theta0 == pytest.approx(reference, rel=1e-9)

    def test_zeta_is_minus_log_one_minus_theta0(self) -> None:
        base = base_threshold(p0=0.01, alpha_p_s=0.1, alpha_d_s=0.01)
        assert base.gamma == pytest.approx(0.1)
        assert base.zeta == pytest.approx(-math.log(1.0 - base.theta0))

    def test_zero_alpha_d_is_refused_with_the_field_named(self) -> None:
        with pytest.raises(InvalidInputError, match="alpha_d_s") as info:
            base_threshold(p0=0.01, alpha_p_s=0.1, alpha_d_s=0.0)
        assert info.value.field == "alpha_d_s"
