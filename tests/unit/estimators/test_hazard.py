"""Empirical hazard and the EB+ FitLinearHazard (seed-001 section 3.3, Appendix A item 4)."""

from __future__ import annotations

import numpy as np
import pytest

from estimators.hazard import empirical_hazard, fit_linear_hazard
from estimators.least_squares import NotEnoughData
from estimators.survival import OutputLengthSample


def _sample(lengths: list[int] | np.ndarray, censored: list[bool] | None = None) -> OutputLengthSample:
    values = tuple(int(x) for x in lengths)
    return OutputLengthSample(lengths_tokens=values, censored=tuple(censored or [False] * len(values)))


def _draw_linear_hazard(rng: np.random.Generator, n: int, p0: float, eta: float) -> np.ndarray:
    """Integer lengths t >= 1 with P(O = t | O >= t) = p0 + eta t (inverse-CDF sampling)."""
    t = np.arange(1, 20_000)
    h = np.minimum(p0 + eta * t, 1.0)
    survival_before = np.concatenate(([1.0], np.cumprod(1.0 - h)[:-1]))
    cdf = 1.0 - survival_before * (1.0 - h)
    return t[np.searchsorted(cdf, rng.random(n))]


class TestEmpiricalHazard:
    def test_censored_finish_leaves_risk_set_without_an_event(self) -> None:
        table = empirical_hazard(_sample([2, 3, 3, 5], [False, True, False, False]))
        by_t = dict(zip(table.tokens, zip(table.events, table.at_risk, strict=True), strict=True))
        assert by_t[3] == (1, 3)
        assert by_t[4] == (0, 1)
        assert by_t[5] == (1, 1)

    def test_uncensored_hazard_is_the_papers_count_ratio(self) -> None:
        lengths = [1, 1, 2, 4, 4, 4]
        table = empirical_hazard(_sample(lengths))
        for t, h in zip(table.tokens, table.hazard, strict=True):
            assert h == sum(x == t for x in lengths) / sum(x >= t for x in lengths)


class TestFitLinearHazard:
    def test_recovers_p0_of_a_large_geometric_sample(self) -> None:
        """Geometric with p0 = 1/256: constant hazard, so eta ~ 0 and p0 within sampling error."""
        rng = np.random.default_rng(7)
        fit = fit_linear_hazard(_sample(rng.geometric(1 / 256, size=200_000)))
        assert not isinstance(fit, NotEnoughData)
        assert fit.p0 == pytest.approx(1 / 256, rel=0.03)
        assert abs(fit.eta_raw) < 2e-7
        assert fit.eta >= 0.0

    def test_recovers_p0_and_eta_of_a_large_linear_hazard_sample(self) -> None:
        rng = np.random.default_rng(11)
        fit = fit_linear_hazard(_sample(_draw_linear_hazard(rng, 200_000, p0=0.002, eta=2e-5)))
        assert not isinstance(fit, NotEnoughData)
        assert fit.p0_raw == pytest.approx(0.002, rel=0.08)
        assert fit.eta_raw == pytest.approx(2e-5, rel=0.05)
        # the geometric floor 1/mean exceeds the true intercept here, as in App. A item 4's Gamma case
        assert fit.p0 == max(fit.p0_raw, fit.p0_floor)

    @pytest.mark.paper(seed="001", ref="section 3.3 step 2 and Appendix A item 4")
    def test_bounded_support_window_gets_t_start_at_p5_and_the_p0_floor(self) -> None:
        """Uniform[128, 384] gives a negative raw p0 (App. A item 4), floored to 1/mean."""
        lengths = np.repeat(np.arange(128, 385), 4)
        fit = fit_linear_hazard(_sample(lengths))
        assert not isinstance(fit, NotEnoughData)
        s = np.sort(lengths)
        n = s.size
        assert fit.t_start_tokens == s[int(0.05 * n)]
        assert fit.t95_tokens == s[int(0.95 * n)]
        assert fit.p0_raw < 0.0
        assert fit.eta_raw > 0.0
        assert fit.p0 == pytest.approx(1.0 / lengths.mean(), rel=1e-12)
        assert fit.eta == fit.eta_raw

    def test_negative_slope_is_clamped_to_zero(self) -> None:
        """A decreasing-hazard mixture (short and long geometrics) fits eta < 0, clamped to CFR."""
        rng = np.random.default_rng(3)
        lengths = np.concatenate((rng.geometric(1 / 20, 20_000), rng.geometric(1 / 400, 20_000)))
        fit = fit_linear_hazard(_sample(lengths))
        assert not isinstance(fit, NotEnoughData)
        assert fit.eta_raw < 0.0
        assert fit.eta == 0.0

    def test_t95_is_at_least_t_start_plus_ten_and_degenerate_design_falls_back_to_cfr(self) -> None:
        fit = fit_linear_hazard(_sample([50] * 40))
        assert not isinstance(fit, NotEnoughData)
        assert (fit.t_start_tokens, fit.t95_tokens) == (50, 60)
        assert fit.degenerate
        assert (fit.p0, fit.eta) == (pytest.approx(1 / 50), 0.0)

    def test_points_with_fewer_than_five_at_risk_are_skipped(self) -> None:
        lengths = list(range(1, 41))  # S(t) = 41 - t: t = 37..40 have S < 5
        fit = fit_linear_hazard(_sample(lengths))
        assert not isinstance(fit, NotEnoughData)
        assert fit.t_start_tokens == 3
        assert fit.t95_tokens == 39
        assert fit.n_points == len(range(3, 37))

    def test_fewer_than_w_min_samples_is_not_enough_data(self) -> None:
        assert fit_linear_hazard(_sample([10] * 29)) == NotEnoughData(samples=29, minimum=30, reason="samples")

    def test_total_weight_below_ten_is_not_enough_data(self) -> None:
        fit = fit_linear_hazard(_sample(list(range(1, 31))), min_at_risk=31)
        assert isinstance(fit, NotEnoughData)
        assert fit.reason == "total_weight"

    def test_censoring_changes_the_floor_to_events_per_exposure(self) -> None:
        lengths = [20] * 30 + [40] * 10
        fit = fit_linear_hazard(_sample(lengths, [False] * 30 + [True] * 10))
        assert not isinstance(fit, NotEnoughData)
        assert fit.p0_floor == pytest.approx(30 / (30 * 20 + 10 * 40))
        assert fit.n_censored == 10
