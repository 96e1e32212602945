"""Our adaptive delta tuner: direction from TBT attainment and median TTFT, patience, cooldown, floor."""

from __future__ import annotations

from policies.slai.adaptive import adapt_delta_lo, tuning_signal
from policies.slai.decide import decide
from policies.slai.inputs import SlaiInputs, TierObservation
from policies.slai.params import SlaiParams
from schemas.policy_docs.slai import SlaiState

ADAPTIVE = SlaiParams(adaptive_enabled=True, adaptive_patience=2, adaptive_cooldown_s=30.0)


def inputs(*, free_p99_s: float, ttft_p50_s: float, samples: int = 1000, attain: float = 1.0) -> SlaiInputs:
    return SlaiInputs(
        tbar_s=0.05,
        step_time_p99_s=0.06,
        ttft_p50_s=ttft_p50_s,
        tiers=(
            TierObservation(tier="paid", tbt_p99_s=0.07, tbt_attainment_frac=1.0, tbt_samples=samples),
            TierObservation(tier="free", tbt_p99_s=free_p99_s, tbt_attainment_frac=attain, tbt_samples=samples),
        ),
    )


SLOW_TTFT = inputs(free_p99_s=0.2, ttft_p50_s=1.2)
LATE_FREE = inputs(free_p99_s=0.6, ttft_p50_s=1.2)


class TestTuningSignal:
    def test_a_tier_over_its_tbt_asks_for_a_larger_delta(self) -> None:
        assert tuning_signal(LATE_FREE, ADAPTIVE)[0] == 1

    def test_low_attainment_alone_asks_for_a_larger_delta(self) -> None:
        assert tuning_signal(inputs(free_p99_s=0.2, ttft_p50_s=0.3, attain=0.95), ADAPTIVE)[0] == 1

    def test_slow_ttft_with_tbt_headroom_asks_for_a_smaller_delta(self) -> None:
        assert tuning_signal(SLOW_TTFT, ADAPTIVE)[0] == -1

    def test_fast_ttft_holds(self) -> None:
        assert tuning_signal(inputs(free_p99_s=0.2, ttft_p50_s=0.3), ADAPTIVE)[0] == 0

    def test_too_few_samples_hold(self) -> None:
        assert tuning_signal(inputs(free_p99_s=0.9, ttft_p50_s=1.2, samples=10), ADAPTIVE)[0] == 0


class TestAdaptDeltaLo:
    def test_one_signal_waits_for_patience(self) -> None:
        step = adapt_delta_lo(LATE_FREE, SlaiState(), ADAPTIVE, 0.0, delta_min=2.4)
        assert (step.delta_lo, step.moved, step.state.pending_count) == (5.0, False, 1)

    def test_second_consecutive_signal_moves_one_step(self) -> None:
        first = adapt_delta_lo(LATE_FREE, SlaiState(), ADAPTIVE, 0.0, delta_min=2.4)
        second = adapt_delta_lo(LATE_FREE, first.state, ADAPTIVE, 10.0, delta_min=2.4)
        assert (second.delta_lo, second.moved, second.state.last_move_s) == (6.0, True, 10.0)

    def test_cooldown_blocks_a_move_right_after_another(self) -> None:
        state = SlaiState(adaptive_delta_lo=6.0, pending_direction=1, pending_count=5, last_move_s=100.0)
        assert adapt_delta_lo(LATE_FREE, state, ADAPTIVE, 110.0, delta_min=2.4).delta_lo == 6.0
        assert adapt_delta_lo(LATE_FREE, state, ADAPTIVE, 130.0, delta_min=2.4).delta_lo == 7.0

    def test_delta_never_goes_below_the_safety_floor(self) -> None:
        state = SlaiState(adaptive_delta_lo=3.0, pending_direction=-1, pending_count=5)
        assert adapt_delta_lo(SLOW_TTFT, state, ADAPTIVE, 0.0, delta_min=2.4).delta_lo == 2.4

    def test_delta_never_exceeds_delta_hi(self) -> None:
        state = SlaiState(adaptive_delta_lo=10.0, pending_direction=1, pending_count=5)
        assert adapt_delta_lo(LATE_FREE, state, ADAPTIVE, 0.0, delta_min=2.4).delta_lo == 10.0

    def test_without_a_floor_estimate_it_stays_at_or_above_the_papers_delta_lo(self) -> None:
        state = SlaiState(adaptive_delta_lo=5.0, pending_direction=-1, pending_count=5)
        assert adapt_delta_lo(SLOW_TTFT, state, ADAPTIVE, 0.0, delta_min=None).delta_lo == 5.0


class TestAdaptiveThroughDecide:
    def test_off_by_default_keeps_the_papers_delta_lo(self) -> None:
        decision = decide(SLOW_TTFT, None, SlaiParams(), 0.0)
        assert decision.state.adaptive_delta_lo is None
        assert "adaptive_signal" not in decision.diagnostics

    def test_on_it_lowers_delta_lo_after_patience_and_reports_why(self) -> None:
        params = SlaiParams(adaptive_enabled=True, adaptive_patience=1)
        decision = decide(SLOW_TTFT, None, params, 0.0)
        assert decision.payload.delta_lo == 4.0
        assert decision.diagnostics["adaptive_moved"] is True
        assert "median TTFT" in str(decision.diagnostics["adaptive_reason"])
