"""The timing profile of the paper's testbed (spec §5.4, §5.6)."""

from __future__ import annotations

import pytest

from policies.slai.calibration import BatchTimePoint, SlaiTimingProfile, fit_affine_batch_time
from schemas.errors import InvalidInputError


class TestSlaiTimingProfile:
    def test_batch_time_adds_fixed_token_sequence_and_context_terms(self) -> None:
        t = SlaiTimingProfile().batch_time_s(tokens=512, seqs=10, context_tokens=1e5)
        assert t == pytest.approx(0.01716 + 5.47e-5 * 512 + 3e-4 * 10 + 2e-7 * 1e5, rel=1e-12)

    def test_empty_batch_takes_no_time(self) -> None:
        assert SlaiTimingProfile().batch_time_s(tokens=0, seqs=0, context_tokens=0.0) == 0.0

    def test_negative_tokens_are_refused(self) -> None:
        with pytest.raises(InvalidInputError, match="tokens"):
            SlaiTimingProfile().batch_time_s(tokens=-1, seqs=0, context_tokens=0.0)


class TestFitAffineBatchTime:
    def test_exact_line_is_recovered(self) -> None:
        points = [BatchTimePoint(tokens=n, batch_time_s=0.01 + 1e-4 * n) for n in (10, 20, 40)]
        fit = fit_affine_batch_time(points)
        assert (fit.a0_s, fit.a_tok_s_per_token) == (pytest.approx(0.01), pytest.approx(1e-4))

    def test_one_token_count_is_refused(self) -> None:
        with pytest.raises(InvalidInputError, match="two distinct"):
            fit_affine_batch_time([BatchTimePoint(tokens=5, batch_time_s=0.1)] * 2)
