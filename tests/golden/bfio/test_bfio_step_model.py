"""Golden values of the BF-IO step-time model (paper Eq. 6) as the reference code sets it (spec section 1.3)."""

from __future__ import annotations

import pytest

from policies.bfio.params import BfioParams


@pytest.mark.paper(seed="003", ref="Eq. 6; spec section 1.3")
def test_default_fixed_overhead_is_the_reference_value_at_b_72() -> None:
    """Spec 1.3: "C = (B*0.6e-3 + 35e-3)/16 s, which is 4.8875 ms at B=72"; exact arithmetic, tolerance 1e-12."""
    assert BfioParams().c_s == pytest.approx(4.8875e-3, abs=1e-12)


@pytest.mark.paper(seed="003", ref="Eq. 6; spec section 1.3")
def test_default_per_token_latency_is_the_reference_value() -> None:
    """Spec 1.3: "t_l = 1.5*2*576*61e-6/2^20 = 1.00525e-7 s per resident token"; printed to 6 digits."""
    assert BfioParams().t_l_s_per_token == pytest.approx(1.00525e-7, rel=5e-6)


@pytest.mark.paper(seed="003", ref="Eq. 6; spec section 1.3")
def test_step_at_80k_tokens_per_rank_is_about_12_9_ms() -> None:
    """Spec 1.3: "At about 80k tokens per rank, a step is about 12.9 ms"; printed to 0.1 ms."""
    params = BfioParams()
    assert params.c_s + params.t_l_s_per_token * 80_000 == pytest.approx(12.9e-3, abs=0.05e-3)
