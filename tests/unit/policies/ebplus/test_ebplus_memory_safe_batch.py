"""Unit and property tests of policies/ebplus/memory_safe_batch.py (Eq. 6 and the CLT variant)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.ebplus.memory_safe_batch import NStarMethod, n_star, n_star_clt, n_star_eq6
from schemas.errors import InvalidInputError

THETAS = st.floats(min_value=0.02, max_value=0.95)
P0S = st.floats(min_value=1e-3, max_value=0.1)
MU_LS = st.floats(min_value=16.0, max_value=4096.0)
EPS_PAIRS = st.tuples(st.floats(min_value=1e-6, max_value=0.5), st.floats(min_value=0.05, max_value=0.99))


class TestNStar:
    @given(THETAS, P0S, MU_LS, EPS_PAIRS)
    @settings(max_examples=60)
    def test_smaller_eps_never_allows_a_larger_batch(
        self, theta: float, p0: float, mu_l: float, eps_pair: tuple[float, float]
    ) -> None:
        eps, shrink = eps_pair
        for solver in (n_star_eq6, n_star_clt):
            loose = solver(theta=theta, p0=p0, mu_l_tokens=mu_l, kv_capacity_tokens=1_000_000, eps=eps)
            tight = solver(theta=theta, p0=p0, mu_l_tokens=mu_l, kv_capacity_tokens=1_000_000, eps=eps * shrink)
            assert tight <= loose

    def test_smaller_eps_strictly_shrinks_eq6_when_volatility_matters(self) -> None:
        kwargs = {"theta": 0.3, "p0": 1 / 256, "mu_l_tokens": 512.0, "kv_capacity_tokens": 700_000}
        assert n_star_eq6(eps=1e-4, **kwargs) < n_star_eq6(eps=1e-2, **kwargs)

    @given(THETAS, P0S, MU_LS)
    @settings(max_examples=40)
    def test_more_kv_capacity_never_shrinks_the_batch(self, theta: float, p0: float, mu_l: float) -> None:
        small = n_star_eq6(theta=theta, p0=p0, mu_l_tokens=mu_l, kv_capacity_tokens=200_000, eps=0.01)
        large = n_star_eq6(theta=theta, p0=p0, mu_l_tokens=mu_l, kv_capacity_tokens=400_000, eps=0.01)
        assert large >= small

    def test_eq6_goes_negative_when_the_volatility_reserve_exceeds_capacity(self) -> None:
        """mu_L = 1 and p0 = 1/1024 give v_bar ln(100) of about 4.8M tokens, more than C."""
        assert n_star_eq6(theta=0.5, p0=1 / 1024, mu_l_tokens=1.0, kv_capacity_tokens=100_000, eps=0.01) < 0

    def test_dispatch_follows_the_method(self) -> None:
        kwargs = {"theta": 0.3, "p0": 1 / 256, "mu_l_tokens": 512.0, "kv_capacity_tokens": 700_000, "eps": 0.01}
        assert n_star(method=NStarMethod.EQ6, **kwargs) == 964
        assert n_star(method=NStarMethod.CLT, **kwargs) == 901

    @pytest.mark.parametrize(
        ("field", "kwargs"),
        [
            ("theta", {"theta": 1.0}),
            ("p0", {"p0": 0.0}),
            ("mu_l_tokens", {"mu_l_tokens": 0.0}),
            ("kv_capacity_tokens", {"kv_capacity_tokens": -1}),
            ("eps", {"eps": 1.0}),
        ],
    )
    def test_out_of_range_input_is_refused_naming_the_field(self, field: str, kwargs: dict[str, float]) -> None:
        base = {"theta": 0.3, "p0": 1 / 256, "mu_l_tokens": 512.0, "kv_capacity_tokens": 700_000, "eps": 0.01}
        with pytest.raises(InvalidInputError, match=field):
            n_star_eq6(**(base | kwargs))
