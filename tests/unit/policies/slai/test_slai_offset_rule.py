"""The fixed and dynamic offset rule (paper §7.1)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.slai.offset_rule import OffsetRule, offset_for_kv_use
from policies.slai.params import OffsetMode, SlaiParams
from schemas.errors import InvalidInputError

DYNAMIC = OffsetRule.from_params(SlaiParams())


class TestOffsetForKvUse:
    @pytest.mark.parametrize(("kv_use_frac", "delta"), [(0.9599, 5.0), (0.96, 10.0), (1.0, 10.0), (0.0, 5.0)])
    def test_dynamic_rule_switches_at_the_threshold_inclusive(self, kv_use_frac: float, delta: float) -> None:
        """Spec §5.5 G2 (threshold 0.96 compared with >=)."""
        assert offset_for_kv_use(kv_use_frac, DYNAMIC) == delta

    def test_fixed_mode_ignores_kv_use(self) -> None:
        rule = OffsetRule.from_params(SlaiParams(offset_mode=OffsetMode.FIXED))
        assert offset_for_kv_use(0.99, rule) == 10.0
        assert offset_for_kv_use(0.10, rule) == 10.0

    def test_override_wins_in_every_mode(self) -> None:
        rule = OffsetRule.from_params(SlaiParams(delta_override=7.5))
        assert offset_for_kv_use(0.99, rule) == 7.5

    @given(st.floats(min_value=0.0, max_value=1.0))
    def test_dynamic_delta_is_monotone_in_kv_use(self, kv_use_frac: float) -> None:
        assert offset_for_kv_use(kv_use_frac, DYNAMIC) <= offset_for_kv_use(1.0, DYNAMIC)

    @pytest.mark.parametrize("bad", [-0.01, 1.01, float("nan")])
    def test_kv_use_outside_unit_interval_is_refused(self, bad: float) -> None:
        with pytest.raises(InvalidInputError, match="kv_use_frac"):
            offset_for_kv_use(bad, DYNAMIC)
