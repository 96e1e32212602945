"""Golden: the paper's LLM workload profile example (section 3) from the lookahead predictor."""

from __future__ import annotations

import numpy as np
import pytest

from policies.bfio.lookahead import active_contributions
from policies.bfio.objective import imbalance_tokens


@pytest.mark.paper(seed="003", ref="Section 3, workload profiles")
def test_prefill_3_with_4_decode_steps_is_3_4_5_6_then_zero() -> None:
    """Section 3: "starts with prefill size 3, then a run of 4 decoding steps corresponds to W_i = (3, 4, 5, 6)".

    A request known to stop after 4 steps (max_tokens = 4) contributes those loads, then 0; exact integers.
    """
    w = active_contributions(
        None,
        prompt_tokens=np.array([3.0]),
        generated_tokens=np.array([0.0]),
        max_tokens=np.array([4.0]),
        offsets_steps=np.arange(5, dtype=np.float64),
        drift=1.0,
    )
    np.testing.assert_array_equal(w, [[3.0, 4.0, 5.0, 6.0, 0.0]])


@pytest.mark.paper(seed="003", ref="Section 3, workload profiles")
def test_constant_work_profile_with_zero_drift() -> None:
    """Section 3: "constant workload 5 in each of 3 steps, then W_i = (5, 5, 5)"; delta = 0, exact."""
    w = active_contributions(
        None,
        prompt_tokens=np.array([5.0]),
        generated_tokens=np.array([0.0]),
        max_tokens=np.array([3.0]),
        offsets_steps=np.arange(3, dtype=np.float64),
        drift=0.0,
    )
    np.testing.assert_array_equal(w, [[5.0, 5.0, 5.0]])


@pytest.mark.paper(seed="003", ref="Eq. 2")
def test_imbalance_is_the_idle_work_at_the_barrier() -> None:
    """Eq. 2: Imbalance = G max L - sum L; loads (6, 4, 5) leave (0 + 2 + 1) = 3 tokens idle, exact."""
    assert imbalance_tokens(np.array([6.0, 4.0, 5.0])) == 3.0
