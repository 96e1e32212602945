"""Last schedulable time (eq. 8), the critical test, deferral windows and the safety floor (spec §3.4)."""

from __future__ import annotations

import pytest

from policies.slai.deadline import deferral_window_s, is_critical, last_schedulable_time, safety_floor_delta
from schemas.errors import InvalidInputError


class TestLastSchedulableTime:
    @pytest.mark.parametrize(
        ("tbt_s", "delta", "expected_s"),
        [(0.5, 5.0, 10.25), (0.1, 5.0, 9.85), (0.5, 10.0, 10.0)],
    )
    def test_deadline_is_end_plus_tbt_minus_delta_tbar(self, tbt_s: float, delta: float, expected_s: float) -> None:
        """Spec §5.5 G1 with e = 10.000 s and tbar = 0.05 s."""
        c = last_schedulable_time(last_batch_end_s=10.0, tbt_slo_s=tbt_s, delta=delta, tbar_s=0.05)
        assert c == pytest.approx(expected_s, abs=1e-12)

    def test_zero_tbt_is_refused(self) -> None:
        with pytest.raises(InvalidInputError, match="tbt_slo_s"):
            last_schedulable_time(last_batch_end_s=0.0, tbt_slo_s=0.0, delta=5.0, tbar_s=0.05)


class TestIsCritical:
    def test_boundary_is_inclusive(self) -> None:
        assert is_critical(now_s=10.25, last_schedulable_s=10.25)
        assert not is_critical(now_s=10.2499, last_schedulable_s=10.25)


class TestDeferralWindow:
    def test_window_shrinks_by_delta_tbar(self) -> None:
        assert deferral_window_s(tbt_slo_s=0.5, delta=5.0, tbar_s=0.05) == pytest.approx(0.25)

    def test_negative_tbar_is_refused(self) -> None:
        with pytest.raises(InvalidInputError, match="tbar_s"):
            deferral_window_s(tbt_slo_s=0.5, delta=5.0, tbar_s=-0.01)


class TestSafetyFloor:
    def test_floor_is_two_p99_batches_in_units_of_tbar(self) -> None:
        assert safety_floor_delta(step_time_p99_s=0.075, tbar_s=0.05) == pytest.approx(3.0)

    def test_zero_tbar_is_refused(self) -> None:
        with pytest.raises(InvalidInputError, match="tbar_s"):
            safety_floor_delta(step_time_p99_s=0.075, tbar_s=0.0)
