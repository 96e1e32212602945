"""Cost-model fits: EB+ per batch kind and beta_MB(r), BF-IO step model, SLAI batch time."""

from __future__ import annotations

import numpy as np
import pytest

from estimators.cost_model import (
    BatchTimeModel,
    LinearCostFit,
    LinearCostModel,
    MixedCostFit,
    MixedCostModel,
    StepTimeFit,
    StepTimeModel,
)
from estimators.least_squares import NotEnoughData
from schemas.errors import InvalidInputError
from schemas.steps import BatchKind


class TestLinearCostModel:
    def test_recovers_alpha_and_beta_per_kind(self) -> None:
        model = LinearCostModel()
        for n in range(1, 40):
            model.update(kind=BatchKind.PREFILL, n_units=100.0 * n, duration_s=0.02 + 2.5e-5 * 100 * n)
            model.update(kind=BatchKind.DECODE, n_units=float(n), duration_s=0.01 + 5e-5 * n)
        prefill, decode = model.fit(BatchKind.PREFILL), model.fit(BatchKind.DECODE)
        assert isinstance(prefill, LinearCostFit)
        assert isinstance(decode, LinearCostFit)
        assert (prefill.alpha_s, prefill.beta_s_per_unit) == pytest.approx((0.02, 2.5e-5))
        assert (decode.alpha_s, decode.beta_s_per_unit) == pytest.approx((0.01, 5e-5))
        assert decode.n_samples == 39
        assert model.fit(BatchKind.MIXED) == NotEnoughData(samples=0, minimum=10)

    def test_merge_and_round_trip_keep_the_fit(self) -> None:
        a, b = LinearCostModel(), LinearCostModel()
        for n in range(20):
            (a if n % 2 else b).update(kind=BatchKind.DECODE, n_units=float(n), duration_s=0.01 + 1e-4 * n)
        merged = LinearCostModel.from_dict(a.merge(b).to_dict()).fit(BatchKind.DECODE)
        assert isinstance(merged, LinearCostFit)
        assert merged.n_samples == 20
        assert merged.beta_s_per_unit == pytest.approx(1e-4)

    def test_negative_duration_raises(self) -> None:
        with pytest.raises(InvalidInputError, match="duration_s"):
            LinearCostModel().update(kind=BatchKind.DECODE, n_units=1.0, duration_s=-0.1)


class TestMixedCostModel:
    def test_recovers_the_quadratic_beta_mb(self) -> None:
        rng = np.random.default_rng(5)
        model = MixedCostModel()
        for _ in range(200):
            n = int(rng.integers(256, 8192))
            r = float(rng.random())
            d = round(r * n)
            rr = d / n
            model.update(
                n_prefill_tokens=n - d, n_decode_tokens=d, duration_s=0.015 + (2e-5 + 3e-5 * rr - 4e-5 * rr**2) * n
            )
        fit = model.fit()
        assert isinstance(fit, MixedCostFit)
        assert (fit.alpha_mb_s, fit.a, fit.b, fit.c) == pytest.approx((0.015, 2e-5, 3e-5, -4e-5), rel=1e-5)
        assert fit.beta_mb_s_per_token(0.5) == pytest.approx(2e-5 + 1.5e-5 - 1e-5, rel=1e-5)

    def test_needs_three_decode_ratio_bins(self) -> None:
        model = MixedCostModel()
        for _ in range(20):
            model.update(n_prefill_tokens=100, n_decode_tokens=100, duration_s=0.02)
        assert model.fit() == NotEnoughData(samples=1, minimum=3, reason="ratio_bins")

    def test_step_without_tokens_raises(self) -> None:
        with pytest.raises(InvalidInputError, match="at least one token"):
            MixedCostModel().update(n_prefill_tokens=0, n_decode_tokens=0, duration_s=0.01)


class TestStepTimeModel:
    def test_recovers_c_and_t_l(self) -> None:
        """BF-IO code constants (seed-003 section 1.3): C = 4.8875 ms, t_l = 1.00525e-7 s/token."""
        model = StepTimeModel()
        for load in range(10_000, 100_000, 5_000):
            model.update(max_rank_load_tokens=float(load), duration_s=4.8875e-3 + 1.00525e-7 * load)
        fit = model.fit()
        assert isinstance(fit, StepTimeFit)
        assert (fit.c_s, fit.t_l_s_per_token) == pytest.approx((4.8875e-3, 1.00525e-7), rel=1e-6)
        assert StepTimeModel.from_dict(model.to_dict()).fit() == fit


class TestBatchTimeModel:
    def test_predicts_a_staircase_batch_time(self) -> None:
        rng = np.random.default_rng(9)
        model = BatchTimeModel(t_col_tokens=256)
        for _ in range(100):
            tau = float(rng.integers(1, 2048))
            ctx, pre, seqs = float(rng.integers(0, 10**5)), float(rng.integers(0, 10**6)), int(rng.integers(1, 64))
            t = 0.005 + 1e-6 * tau + 2e-3 * np.ceil(tau / 256) + 1e-8 * ctx + 1e-9 * pre + 1e-5 * seqs
            model.update(tau_tokens=tau, decode_context_tokens=ctx, prefill_attn_tokens2=pre, n_seqs=seqs, duration_s=t)
        fit = model.fit()
        assert not isinstance(fit, NotEnoughData)
        assert fit.a_stair_s == pytest.approx(2e-3, rel=1e-4)
        assert fit.residual_std_s < 1e-9
        assert fit.n_samples == 100
