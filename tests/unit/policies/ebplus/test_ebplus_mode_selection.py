"""Unit and property tests of policies/ebplus/mode_selection.py (Eq. 8 with hysteresis)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.ebplus.calibration import calibration_profile
from policies.ebplus.inputs import CostModel
from policies.ebplus.mode_selection import crossover_signal, select_mode, surge_triggered
from schemas.errors import InvalidInputError
from schemas.policy_docs.ebplus import EbplusMode

HYSTERESIS = {"delta_s_per_token": 1e-5, "sticky_factor": 3.0, "cooldown_evaluations": 3, "n_obs_min": 16.0}


class TestCrossoverSignal:
    def test_rhs_scales_as_one_over_n_obs(self) -> None:
        cost = calibration_profile("qwen3-8b@h200").cost_model
        at_100 = crossover_signal(cost=cost, theta0=0.05, mu_l_tokens=512, mu_o_tokens=256, n_obs=100)
        at_400 = crossover_signal(cost=cost, theta0=0.05, mu_l_tokens=512, mu_o_tokens=256, n_obs=400)
        assert at_400.rhs_s_per_token == pytest.approx(at_100.rhs_s_per_token / 4.0)
        assert at_400.lhs_s_per_token == at_100.lhs_s_per_token

    def test_without_a_beta_mb_profile_the_lhs_is_zero(self) -> None:
        cost = CostModel(
            alpha_p_s=1e-3,
            beta_p_s_per_token=2e-5,
            alpha_d_s=9e-3,
            beta_d_s_per_seq=4e-5,
            alpha_mb_s=1e-3,
            beta_mb=None,
        )
        signal = crossover_signal(cost=cost, theta0=0.05, mu_l_tokens=512, mu_o_tokens=256, n_obs=100)
        assert signal.lhs_s_per_token == 0.0
        assert signal.signal_s_per_token == -signal.rhs_s_per_token

    def test_decode_ratio_is_token_weighted(self) -> None:
        cost = calibration_profile("qwen3-8b@h200").cost_model
        signal = crossover_signal(cost=cost, theta0=0.05, mu_l_tokens=300, mu_o_tokens=100, n_obs=100)
        assert signal.r_hat == pytest.approx(0.25)

    def test_zero_n_obs_is_refused(self) -> None:
        cost = calibration_profile("qwen3-8b@h200").cost_model
        with pytest.raises(InvalidInputError, match="n_obs"):
            crossover_signal(cost=cost, theta0=0.05, mu_l_tokens=512, mu_o_tokens=256, n_obs=0.0)


class TestSelectMode:
    def test_mb_enters_eb_only_above_delta(self) -> None:
        assert (
            select_mode(
                current=EbplusMode.MB, signal_s_per_token=1.1e-5, n_obs=100, cooldown_remaining=0, **HYSTERESIS
            ).mode
            == "EB"
        )
        assert (
            select_mode(
                current=EbplusMode.MB, signal_s_per_token=0.9e-5, n_obs=100, cooldown_remaining=0, **HYSTERESIS
            ).mode
            == "MB"
        )

    def test_eb_is_sticky_until_signal_falls_below_minus_three_delta(self) -> None:
        assert (
            select_mode(
                current=EbplusMode.EB, signal_s_per_token=-2.9e-5, n_obs=100, cooldown_remaining=0, **HYSTERESIS
            ).mode
            == "EB"
        )
        assert (
            select_mode(
                current=EbplusMode.EB, signal_s_per_token=-3.1e-5, n_obs=100, cooldown_remaining=0, **HYSTERESIS
            ).mode
            == "MB"
        )

    def test_a_switch_starts_the_cooldown(self) -> None:
        choice = select_mode(
            current=EbplusMode.MB, signal_s_per_token=1.0, n_obs=100, cooldown_remaining=0, **HYSTERESIS
        )
        assert (choice.switched, choice.cooldown_remaining, choice.reason) == (True, 3, "switched")

    def test_cooldown_blocks_and_counts_down(self) -> None:
        choice = select_mode(
            current=EbplusMode.EB, signal_s_per_token=-1.0, n_obs=100, cooldown_remaining=2, **HYSTERESIS
        )
        assert (choice.mode, choice.cooldown_remaining, choice.reason) == ("EB", 1, "cooldown")

    def test_drain_gate_blocks_switching_below_n_obs_min(self) -> None:
        choice = select_mode(
            current=EbplusMode.MB, signal_s_per_token=1.0, n_obs=15.9, cooldown_remaining=0, **HYSTERESIS
        )
        assert (choice.mode, choice.reason) == ("MB", "drain_gate")

    @given(
        st.sampled_from(list(EbplusMode)),
        st.lists(st.floats(min_value=-1e-3, max_value=1e-3), min_size=2, max_size=30),
        st.lists(st.floats(min_value=0.0, max_value=5000.0), min_size=30, max_size=30),
    )
    @settings(max_examples=80)
    def test_never_flips_on_two_consecutive_evaluations_inside_the_cooldown(
        self, start: EbplusMode, signals: list[float], n_obs: list[float]
    ) -> None:
        mode, cooldown = start, 0
        switched_at: list[int] = []
        for i, signal in enumerate(signals):
            choice = select_mode(
                current=mode, signal_s_per_token=signal, n_obs=n_obs[i], cooldown_remaining=cooldown, **HYSTERESIS
            )
            if choice.switched:
                switched_at.append(i)
            mode, cooldown = choice.mode, choice.cooldown_remaining
        gaps = [b - a for a, b in itertools.pairwise(switched_at)]
        assert all(gap > HYSTERESIS["cooldown_evaluations"] for gap in gaps)


class TestSurgeTriggered:
    def test_demand_above_twice_n_obs_triggers_without_cooldown(self) -> None:
        assert surge_triggered(demand_seqs=201, n_obs=100, surge_factor=2.0, cooldown_remaining=0)
        assert not surge_triggered(demand_seqs=200, n_obs=100, surge_factor=2.0, cooldown_remaining=0)
        assert not surge_triggered(demand_seqs=500, n_obs=100, surge_factor=2.0, cooldown_remaining=1)
