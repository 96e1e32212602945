"""Unit and property tests of policies/ebplus/ifr_correction.py (Eq. 5)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.ebplus.base_threshold import solve_theta0
from policies.ebplus.ifr_correction import delta_theta
from schemas.errors import InvalidInputError


class TestDeltaTheta:
    @given(
        st.floats(min_value=1e-5, max_value=5.0),
        st.floats(min_value=1e-4, max_value=0.2),
        st.floats(min_value=1e-9, max_value=1e-3),
        st.floats(min_value=0.0, max_value=1e-3),
        st.integers(min_value=1, max_value=4096),
    )
    @settings(max_examples=80)
    def test_correction_is_positive_for_every_positive_eta(
        self, gamma: float, p0: float, eta: float, beta_d: float, n: int
    ) -> None:
        theta0 = solve_theta0(gamma)
        assert delta_theta(theta0=theta0, p0=p0, eta=eta, alpha_d_s=0.01, beta_d_s_per_seq=beta_d, n_seqs=n) > 0.0

    def test_zero_eta_gives_no_correction(self) -> None:
        assert delta_theta(theta0=0.3, p0=0.01, eta=0.0, alpha_d_s=0.01, beta_d_s_per_seq=5e-5, n_seqs=256) == 0.0

    def test_correction_is_linear_in_eta(self) -> None:
        one = delta_theta(theta0=0.3, p0=0.01, eta=1e-6, alpha_d_s=0.01, beta_d_s_per_seq=5e-5, n_seqs=256)
        three = delta_theta(theta0=0.3, p0=0.01, eta=3e-6, alpha_d_s=0.01, beta_d_s_per_seq=5e-5, n_seqs=256)
        assert three == pytest.approx(3.0 * one)

    def test_per_token_cost_effect_grows_with_batch_size(self) -> None:
        small = delta_theta(theta0=0.3, p0=0.01, eta=1e-6, alpha_d_s=0.01, beta_d_s_per_seq=5e-5, n_seqs=64)
        large = delta_theta(theta0=0.3, p0=0.01, eta=1e-6, alpha_d_s=0.01, beta_d_s_per_seq=5e-5, n_seqs=1024)
        assert large > small

    def test_negative_eta_is_refused(self) -> None:
        with pytest.raises(InvalidInputError, match="eta"):
            delta_theta(theta0=0.3, p0=0.01, eta=-1e-6, alpha_d_s=0.01, beta_d_s_per_seq=5e-5, n_seqs=256)

    @pytest.mark.parametrize("theta0", [0.0, 1.0])
    def test_theta0_outside_the_open_unit_interval_is_refused(self, theta0: float) -> None:
        with pytest.raises(InvalidInputError, match="theta0"):
            delta_theta(theta0=theta0, p0=0.01, eta=1e-6, alpha_d_s=0.01, beta_d_s_per_seq=5e-5, n_seqs=256)
