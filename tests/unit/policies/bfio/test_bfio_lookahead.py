"""Survival-based workload predictions (spec section 1.5) against hand-computed cases with censoring."""

from __future__ import annotations

import numpy as np
import pytest

from policies.bfio.lookahead import (
    ClassPredictor,
    SurvivalCurve,
    active_contributions,
    conditional_survival,
    new_request_contributions,
    rank_base_loads,
    rank_base_loads_by_offset,
)
from policies.bfio.params import NewRequestModel
from schemas.errors import InvalidInputError

# Kaplan-Meier by hand for six requests: finished at 2, censored at 3 (hit max_tokens), finished at 4 and 4,
# censored at 6 (aborted), finished at 8.
#   n = 2: at risk 6, 1 finish -> S(2) = 5/6
#   n = 3: censored, leaves the risk set without an event
#   n = 4: at risk 4 (4, 4, 6c, 8), 2 finishes -> S(4) = 5/6 * 2/4 = 5/12
#   n = 6: censored
#   n = 8: at risk 1, 1 finish -> S(8) = 0
# A finished-only estimate would have put S(4) at 1/4: censoring matters.
KM_EDGES = np.array([2.0, 4.0, 8.0])
KM_SURVIVAL = np.array([5 / 6, 5 / 12, 0.0])
OFFSETS = np.array([0.0, 1.0, 2.0, 5.0])


@pytest.fixture
def curve() -> SurvivalCurve:
    return SurvivalCurve(edges_tokens=KM_EDGES, survival_frac=KM_SURVIVAL)


class TestSurvivalCurve:
    def test_is_a_right_continuous_step_function_starting_at_one(self, curve: SurvivalCurve) -> None:
        values = curve.at(np.array([0.0, 1.0, 2.0, 3.0, 4.0, 7.0, 8.0, 100.0]))
        np.testing.assert_allclose(values, [1, 1, 5 / 6, 5 / 6, 5 / 12, 5 / 12, 0, 0])

    def test_non_integer_edges_use_the_binary_search_with_the_same_semantics(self) -> None:
        curve = SurvivalCurve(edges_tokens=np.array([1.5, 3.5]), survival_frac=np.array([0.5, 0.25]))
        np.testing.assert_allclose(curve.at(np.array([1.0, 1.5, 3.0, 3.5, 9.0])), [1, 0.5, 0.5, 0.25, 0.25])

    def test_median_is_the_first_edge_at_or_below_one_half(self, curve: SurvivalCurve) -> None:
        assert curve.median_tokens() == 4.0

    def test_increasing_survival_is_refused(self) -> None:
        with pytest.raises(InvalidInputError, match="non-increasing"):
            SurvivalCurve(edges_tokens=np.array([1.0, 2.0]), survival_frac=np.array([0.5, 0.6]))

    def test_unsorted_edges_are_refused(self) -> None:
        with pytest.raises(InvalidInputError, match="strictly increasing"):
            SurvivalCurve(edges_tokens=np.array([2.0, 1.0]), survival_frac=np.array([0.5, 0.4]))


class TestConditionalSurvival:
    def test_matches_the_hand_computed_ratio_of_survivals(self, curve: SurvivalCurve) -> None:
        """Age 3: q(1) = S(4)/S(3) = (5/12)/(5/6) = 1/2, q(2) = S(5)/S(3) = 1/2, q(5) = S(8)/S(3) = 0."""
        q = conditional_survival(curve, np.array([3.0]), np.array([np.inf]), OFFSETS, 1.0)
        np.testing.assert_allclose(q, [[1.0, 0.5, 0.5, 0.0]])

    def test_max_tokens_ends_the_request_deterministically(self, curve: SurvivalCurve) -> None:
        q = conditional_survival(curve, np.array([3.0]), np.array([5.0]), OFFSETS, 1.0)
        np.testing.assert_allclose(q, [[1.0, 0.5, 0.0, 0.0]])

    def test_request_older_than_every_observation_is_predicted_alive(self, curve: SurvivalCurve) -> None:
        q = conditional_survival(curve, np.array([9.0]), np.array([np.inf]), OFFSETS, 1.0)
        np.testing.assert_allclose(q, [[1.0, 1.0, 1.0, 1.0]])

    def test_without_a_table_only_max_tokens_ends_a_request(self) -> None:
        q = conditional_survival(None, np.array([3.0]), np.array([5.0]), OFFSETS, 1.0)
        np.testing.assert_allclose(q, [[1.0, 1.0, 0.0, 0.0]])


class TestActiveContributions:
    def test_expected_workload_grows_one_token_per_step_times_survival(self, curve: SurvivalCurve) -> None:
        """Prompt 100, age 3: (103, 104 * 1/2, 105 * 1/2, 108 * 0)."""
        w = active_contributions(
            curve,
            prompt_tokens=np.array([100.0]),
            generated_tokens=np.array([3.0]),
            max_tokens=np.array([np.inf]),
            offsets_steps=OFFSETS,
            drift=1.0,
        )
        np.testing.assert_allclose(w, [[103.0, 52.0, 52.5, 0.0]])

    def test_current_step_counts_the_full_context_even_when_the_table_says_finished(self, curve: SurvivalCurve) -> None:
        w = active_contributions(
            curve,
            prompt_tokens=np.array([10.0]),
            generated_tokens=np.array([8.0]),
            max_tokens=np.array([8.0]),
            offsets_steps=OFFSETS,
            drift=1.0,
        )
        np.testing.assert_allclose(w, [[18.0, 0.0, 0.0, 0.0]])


class TestNewRequestContributions:
    def test_survival_model_weights_prompt_plus_growth_by_unconditional_survival(self, curve: SurvivalCurve) -> None:
        """Prompt 50: (50, 51 * S(1), 52 * S(2), 55 * S(5)) = (50, 51, 52 * 5/6, 55 * 5/12)."""
        v = new_request_contributions(
            curve,
            prompt_tokens=np.array([50.0]),
            max_tokens=np.array([np.inf]),
            offsets_steps=OFFSETS,
            drift=1.0,
            model=NewRequestModel.S_PLUS_H_SURVIVAL,
        )
        np.testing.assert_allclose(v, [[50.0, 51.0, 52 * 5 / 6, 55 * 5 / 12]])

    def test_const_s_is_the_reference_code_convention(self, curve: SurvivalCurve) -> None:
        v = new_request_contributions(
            curve,
            prompt_tokens=np.array([50.0, 7.0]),
            max_tokens=np.array([np.inf, np.inf]),
            offsets_steps=OFFSETS,
            drift=1.0,
            model=NewRequestModel.CONST_S,
        )
        np.testing.assert_allclose(v, [[50.0] * 4, [7.0] * 4])


class TestRankBaseLoads:
    def test_sums_contributions_per_rank_and_leaves_idle_ranks_at_zero(self) -> None:
        contributions = np.array([[1.0, 2.0], [10.0, 20.0], [100.0, 200.0]])
        loads = rank_base_loads(contributions, np.array([0, 2, 0]), 3)
        np.testing.assert_allclose(loads, [[101.0, 202.0], [0.0, 0.0], [10.0, 20.0]])


class TestClassPredictor:
    """The router's per-bundle precomputed ratios give the same numbers, bit for bit, as the direct formulas."""

    @pytest.mark.parametrize("model", list(NewRequestModel))
    @pytest.mark.parametrize("drift", [1.0, 0.5])
    def test_matches_the_direct_predictions_bitwise(self, model: NewRequestModel, drift: float) -> None:
        rng = np.random.default_rng(7)
        edges = np.unique(np.round(np.geomspace(1, 4096, 40)))
        curve = SurvivalCurve(edges_tokens=edges, survival_frac=np.exp(-edges / 300.0) * (edges < 3000))
        offsets = np.array([0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 20.0])
        prompts = rng.integers(1, 3000, 500).astype(np.float64)
        ages = rng.integers(0, 5000, 500).astype(np.float64)  # past the last edge and past S = 0 too
        caps = np.where(rng.random(500) < 0.3, ages + rng.integers(1, 30, 500), np.inf)
        predictor = ClassPredictor(curve, offsets_steps=offsets, drift=drift, model=model)
        direct = active_contributions(
            curve, prompt_tokens=prompts, generated_tokens=ages, max_tokens=caps, offsets_steps=offsets, drift=drift
        )
        by_offset = predictor.active_by_offset(prompt_tokens=prompts, generated_tokens=ages, max_tokens=caps)
        np.testing.assert_array_equal(by_offset, direct.T)
        new = new_request_contributions(
            curve, prompt_tokens=prompts, max_tokens=caps, offsets_steps=offsets, drift=drift, model=model
        )
        np.testing.assert_array_equal(predictor.new(prompt_tokens=prompts, max_tokens=caps), new)
        uncapped = np.full(500, np.inf)
        new_uncapped = new_request_contributions(
            curve, prompt_tokens=prompts, max_tokens=uncapped, offsets_steps=offsets, drift=drift, model=model
        )
        np.testing.assert_array_equal(predictor.new(prompt_tokens=prompts, max_tokens=uncapped), new_uncapped)

    def test_fractional_ages_and_no_curve_use_the_direct_formula(self, curve: SurvivalCurve) -> None:
        ages = np.array([2.5, 3.0])
        prompts = np.array([10.0, 20.0])
        caps = np.array([np.inf, 6.0])
        for table in (curve, None):
            predictor = ClassPredictor(table, offsets_steps=OFFSETS, drift=1.0, model=NewRequestModel.S_PLUS_H_SURVIVAL)
            direct = active_contributions(
                table, prompt_tokens=prompts, generated_tokens=ages, max_tokens=caps, offsets_steps=OFFSETS, drift=1.0
            )
            got = predictor.active_by_offset(prompt_tokens=prompts, generated_tokens=ages, max_tokens=caps)
            np.testing.assert_array_equal(got, direct.T)

    def test_rank_sums_by_offset_equal_the_request_major_sums(self) -> None:
        rng = np.random.default_rng(3)
        contributions = rng.uniform(0, 1000, (300, 7))
        rank = rng.integers(0, 9, 300)
        expected = rank_base_loads(contributions, rank, 10)
        np.testing.assert_array_equal(
            rank_base_loads_by_offset(np.ascontiguousarray(contributions.T), rank, 10), expected
        )


class TestLengthHints:
    """A request's output-length hint replaces its survival prediction while the request is younger than it."""

    def test_hinted_request_is_alive_exactly_until_its_hint(self, curve: SurvivalCurve) -> None:
        """Age 3, hint 5, drift 1: alive at ages 3 and 4 (h = 0, 1), gone from age 5 (h = 2, 5)."""
        predictor = ClassPredictor(curve, offsets_steps=OFFSETS, drift=1.0, model=NewRequestModel.S_PLUS_H_SURVIVAL)
        got = predictor.active_by_offset(
            prompt_tokens=np.array([100.0]),
            generated_tokens=np.array([3.0]),
            max_tokens=np.array([np.inf]),
            hint_tokens=np.array([5.0]),
        )
        np.testing.assert_array_equal(got[:, 0], [103.0, 104.0, 0.0, 0.0])

    def test_a_tighter_max_tokens_still_ends_a_hinted_request(self, curve: SurvivalCurve) -> None:
        predictor = ClassPredictor(curve, offsets_steps=OFFSETS, drift=1.0, model=NewRequestModel.S_PLUS_H_SURVIVAL)
        got = predictor.active_by_offset(
            prompt_tokens=np.array([100.0]),
            generated_tokens=np.array([0.0]),
            max_tokens=np.array([2.0]),
            hint_tokens=np.array([50.0]),
        )
        np.testing.assert_array_equal(got[:, 0], [100.0, 101.0, 0.0, 0.0])

    def test_no_hint_or_a_spent_hint_falls_back_to_survival(self, curve: SurvivalCurve) -> None:
        """NaN (no hint) and a hint the request has outlived (age 6, hint 4) predict as without hints."""
        predictor = ClassPredictor(curve, offsets_steps=OFFSETS, drift=1.0, model=NewRequestModel.S_PLUS_H_SURVIVAL)
        prompts, ages, caps = np.array([10.0, 20.0]), np.array([1.0, 6.0]), np.full(2, np.inf)
        plain = predictor.active_by_offset(prompt_tokens=prompts, generated_tokens=ages, max_tokens=caps)
        hinted = predictor.active_by_offset(
            prompt_tokens=prompts, generated_tokens=ages, max_tokens=caps, hint_tokens=np.array([np.nan, 4.0])
        )
        np.testing.assert_array_equal(hinted, plain)

    def test_a_new_request_with_a_hint_lives_hint_steps(self, curve: SurvivalCurve) -> None:
        """Hint 2: the request admitted now is alive at h = 0, 1 and gone at h = 2, 5; its neighbour without a
        hint keeps (s + h) S(h) = 20, 21 x 1, 22 x 5/6, 25 x 5/12."""
        predictor = ClassPredictor(curve, offsets_steps=OFFSETS, drift=1.0, model=NewRequestModel.S_PLUS_H_SURVIVAL)
        got = predictor.new(
            prompt_tokens=np.array([10.0, 20.0]), max_tokens=np.full(2, np.inf), hint_tokens=np.array([2.0, np.nan])
        )
        np.testing.assert_array_equal(got[0], [10.0, 11.0, 0.0, 0.0])
        np.testing.assert_allclose(got[1], [20.0, 21.0, 22.0 * 5 / 6, 25.0 * 5 / 12], rtol=1e-12)

    def test_const_s_ignores_hints(self, curve: SurvivalCurve) -> None:
        """The reference code's convention counts a new request's prompt at every offset, hinted or not."""
        predictor = ClassPredictor(curve, offsets_steps=OFFSETS, drift=1.0, model=NewRequestModel.CONST_S)
        got = predictor.new(prompt_tokens=np.array([10.0]), max_tokens=np.array([np.inf]), hint_tokens=np.array([1.0]))
        np.testing.assert_array_equal(got, [[10.0, 10.0, 10.0, 10.0]])
