"""Erlang-C (Eqs. 5, 16) and the P99 wait (Eq. 6)."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.fleetopt.erlang import erlang_c, p99_wait_s
from schemas.errors import InvalidInputError


def _direct_erlang_c(c: int, a: Fraction) -> Fraction:
    """Eq. 5 by direct summation in exact rational arithmetic."""
    top = a**c / (math.factorial(c) * (1 - a / c))
    return top / (sum(a**k / math.factorial(k) for k in range(c)) + top)


class TestErlangC:
    @given(c=st.integers(min_value=1, max_value=60), load_frac=st.fractions(min_value=0.01, max_value=0.99))
    def test_matches_direct_summation_for_small_c(self, c: int, load_frac: Fraction) -> None:
        a = Fraction(c) * load_frac
        assert erlang_c(c, float(a)) == pytest.approx(float(_direct_erlang_c(c, a)), rel=1e-9, abs=1e-300)

    @pytest.mark.parametrize(
        ("c", "a", "expected"),
        [
            (1, 0.5, 0.5),  # M/M/1: P(wait) = rho
            (2, 1.0, 1.0 / 3.0),  # M/M/2 at rho = 0.5: 2 rho^2 / (1 + rho)
            (2, 1.5, 9.0 / 14.0),  # M/M/2 at rho = 0.75: 2 rho^2 / (1 + rho)
        ],
    )
    def test_known_closed_form_values(self, c: int, a: float, expected: float) -> None:
        assert erlang_c(c, a) == pytest.approx(expected, rel=1e-12)

    @pytest.mark.parametrize("c", [10_000, 32_592, 100_000, 1_000_000])
    def test_is_finite_and_in_range_for_very_large_c(self, c: int) -> None:
        heavy = erlang_c(c, 0.999 * c)
        light = erlang_c(c, 0.85 * c)
        assert 0.0 < heavy < 1.0
        assert 0.0 <= light < 1e-50
        # Fixed utilisation, more servers: less waiting (pooling).
        assert erlang_c(c, 0.99 * c) < erlang_c(c // 10, 0.99 * (c // 10))

    @pytest.mark.parametrize(("c", "load_frac"), [(10_000, 0.99), (10_000, 0.999), (32_592, 0.995)])
    def test_matches_eq16_summed_in_log_space_for_large_c(self, c: int, load_frac: float) -> None:
        """Eq. 16, C = 1 / (1 + (1 - varrho) c! sum_k a^(k-c) / k!), each term in log space."""
        a = load_frac * c
        log_terms = [math.lgamma(c + 1) - math.lgamma(k + 1) + (k - c) * math.log(a) for k in range(c)]
        peak = max(log_terms)
        log_sum = peak + math.log(math.fsum(math.exp(t - peak) for t in log_terms))
        expected = 1.0 / (1.0 + (1.0 - load_frac) * math.exp(log_sum))
        assert erlang_c(c, a) == pytest.approx(expected, rel=1e-8)

    def test_unstable_queue_always_waits(self) -> None:
        assert erlang_c(100, 100.0) == 1.0

    def test_rejects_zero_servers(self) -> None:
        with pytest.raises(InvalidInputError, match="c_servers"):
            erlang_c(0, 1.0)


class TestP99Wait:
    def test_zero_when_waiting_probability_is_below_one_percent(self) -> None:
        assert p99_wait_s(32_592, 27_700.0 / 100.0, 1.0 / 100.0, 0.1) == 0.0

    def test_infinite_when_unstable(self) -> None:
        assert p99_wait_s(10, 20.0, 1.0, 0.5) == math.inf

    def test_matches_eq6_for_a_single_server(self) -> None:
        """M/M/1 at rho 0.5: C = 0.5, W99 = ln(50) (1 + 1) / (2 (1 - 0.5))."""
        assert p99_wait_s(1, 0.5, 1.0, 1.0) == pytest.approx(math.log(50.0) * 2.0 / 1.0, rel=1e-12)
