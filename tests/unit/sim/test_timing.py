"""Timing models: each paper's formula, by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from policies.ebplus.calibration import calibration_profile
from schemas.errors import InvalidInputError
from services.sim.scenario import load_scenario
from services.sim.timing import BatchShape, BfioTiming, EbTiming, JitteredTiming, SlaiTiming

EB = EbTiming(
    alpha_p_s=0.01,
    beta_p_s_per_token=0.001,
    alpha_d_s=0.005,
    beta_d_s_per_seq=0.002,
    alpha_mb_s=0.002,
    c0_s_per_token=0.001,
    c1_s_per_token=0.002,
    c2_s_per_token=0.004,
)


def _shape(prefill: int, decodes: int, *, exclusive: bool = False) -> BatchShape:
    return BatchShape(
        prefill_tokens=prefill,
        num_prefill_requests=1 if prefill else 0,
        decode_requests=decodes,
        decode_context_tokens=100 * decodes,
        exclusive=exclusive,
    )


class TestEbTiming:
    def test_mixed_step_is_alpha_mb_plus_quadratic_beta_times_tokens(self) -> None:
        # r = 25 / 100 = 0.25: beta = 0.001 + 0.002 * 0.25 + 0.004 * 0.0625 = 0.00175
        assert EB.step_time_s(_shape(75, 25)) == pytest.approx(0.002 + 0.00175 * 100)

    def test_pure_batches_of_a_mixed_scheduler_use_the_mixed_formula(self) -> None:
        assert EB.step_time_s(_shape(0, 10)) == pytest.approx(0.002 + 0.007 * 10)
        assert EB.step_time_s(_shape(0, 3)) == pytest.approx(0.002 + 0.007 * 3)

    def test_mixed_step_never_undercuts_the_exclusive_floor_of_its_kind(self) -> None:
        """A lone decode: mixed 0.002 + 0.007 = 9 ms, but alpha_d + beta_d = 7 ms is below; prefill 10 tokens:
        mixed 12 ms < alpha_p + 10 beta_p = 20 ms, so 20 ms."""
        assert EB.step_time_s(_shape(0, 1)) == pytest.approx(0.009)
        assert EB.step_time_s(_shape(10, 0)) == pytest.approx(0.020)

    def test_exclusive_batches_use_prefill_and_decode_formulas(self) -> None:
        assert EB.step_time_s(_shape(200, 0, exclusive=True)) == pytest.approx(0.01 + 0.001 * 200)
        assert EB.step_time_s(_shape(0, 8, exclusive=True)) == pytest.approx(0.005 + 0.002 * 8)

    def test_negative_coefficient_is_refused_with_its_name(self) -> None:
        with pytest.raises(InvalidInputError, match="alpha_d_s must be >= 0, got -1"):
            EbTiming(
                alpha_p_s=0,
                beta_p_s_per_token=0,
                alpha_d_s=-1,
                beta_d_s_per_seq=0,
                alpha_mb_s=0,
                c0_s_per_token=0,
                c1_s_per_token=0,
                c2_s_per_token=0,
            )


class TestSlaiTiming:
    def test_batch_time_sums_fixed_token_sequence_and_context_terms(self) -> None:
        model = SlaiTiming(a0_s=0.017, a_tok_s_per_token=5e-5, a_seq_s_per_seq=3e-4, a_ctx_s_per_token=2e-7)
        shape = BatchShape(
            prefill_tokens=100,
            num_prefill_requests=1,
            decode_requests=10,
            decode_context_tokens=5000,
            prefill_context_tokens=50.0,
        )
        assert model.step_time_s(shape) == pytest.approx(0.017 + 5e-5 * 110 + 3e-4 * 11 + 2e-7 * 5050)


class TestBfioTiming:
    @pytest.mark.paper(seed="003", ref="section 1.3")
    def test_step_at_80k_tokens_is_about_12_9_ms(self) -> None:
        """Spec: 'At about 80k tokens per rank, a step is about 12.9 ms' with C = 4.8875 ms, t_l = 1.00525e-7."""
        shape = BatchShape(
            prefill_tokens=0,
            num_prefill_requests=0,
            decode_requests=72,
            decode_context_tokens=80_000,
            max_rank_load_tokens=80_000,
        )
        assert BfioTiming().step_time_s(shape) == pytest.approx(12.9e-3, abs=0.05e-3)


class TestFromCalibration:
    def test_eb_timing_takes_the_ebplus_calibration_cost_model(self) -> None:
        """policies/ebplus/calibration.py's Qwen3-8B H200 profile (spec 6.4) prices a step as by hand."""
        timing = EbTiming.from_cost_model(calibration_profile("qwen3-8b@h200").cost_model)
        # 1000 decodes + 2048 prefill tokens: r = 1000 / 3048
        r = 1000 / 3048
        beta = 2.494e-5 + 5.193e-5 * r + 1.478e-5 * r * r
        assert timing.step_time_s(_shape(2048, 1000)) == pytest.approx(1.2786e-3 + beta * 3048)


class TestJitteredTiming:
    SHAPE = BatchShape(prefill_tokens=0, num_prefill_requests=0, decode_requests=64, decode_context_tokens=0)

    def test_noise_is_unbiased_with_the_asked_spread(self) -> None:
        """Over 20,000 steps the mean factor is 1 within 0.1% (4 standard errors at 3%) and the spread 3% +- 0.2%."""
        base = BfioTiming(c_s=0.01, t_l_s_per_token=0.0)
        timing = JitteredTiming(base, jitter_frac=0.03, seed=7)
        factors = np.array([timing.step_time_s(self.SHAPE) / 0.01 for _ in range(20_000)])
        assert float(factors.mean()) == pytest.approx(1.0, abs=1e-3)
        assert float(factors.std()) == pytest.approx(0.03, abs=2e-3)

    def test_same_seed_same_times_and_zero_jitter_is_the_base(self) -> None:
        base = BfioTiming(c_s=0.01, t_l_s_per_token=0.0)
        first = [JitteredTiming(base, jitter_frac=0.05, seed=3).step_time_s(self.SHAPE) for _ in range(3)]
        again = [JitteredTiming(base, jitter_frac=0.05, seed=3).step_time_s(self.SHAPE) for _ in range(3)]
        assert first == again
        assert JitteredTiming(base, jitter_frac=0.0, seed=3).step_time_s(self.SHAPE) == 0.01

    def test_out_of_range_jitter_is_refused(self) -> None:
        with pytest.raises(InvalidInputError, match="jitter_frac"):
            JitteredTiming(BfioTiming(), jitter_frac=0.6, seed=0)


class TestScenarioJitter:
    def test_jitter_is_off_by_default_and_per_engine_when_asked(self, tmp_path: Path) -> None:
        """The shipped scenarios stay noise-free; ``jitter_frac`` gives each engine its own seeded stream."""
        assert not isinstance(load_scenario("smoke").engines[0].timing, JitteredTiming)
        path = tmp_path / "s.toml"
        path.write_text(
            '[timing.t]\nmodel = "bfio"\nc_s = 0.01\nt_l_s_per_token = 0.0\njitter_frac = 0.03\n'
            "[scenarios.s]\nduration_s = 1.0\nseed = 5\n"
            '[[scenarios.s.engines]]\ncount = 2\ntiming = "t"\n'
            '[[scenarios.s.phases]]\narrivals = { kind = "poisson", rate_per_s = 1.0 }\n'
            'lengths = { kind = "fixed", prompt_tokens = 8, output_tokens = 8 }\n'
        )
        engines = load_scenario("s", path=path).engines
        shape = TestJitteredTiming.SHAPE
        times = [engine.timing.step_time_s(shape) for engine in engines]
        assert all(isinstance(engine.timing, JitteredTiming) for engine in engines)
        assert times[0] != times[1]
        assert times == [engine.timing.step_time_s(shape) for engine in load_scenario("s", path=path).engines]
