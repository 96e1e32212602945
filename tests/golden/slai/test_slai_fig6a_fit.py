"""Spec §5.4 / paper Fig. 6a: the batch-time line through the authors' plot1_results.csv."""

from __future__ import annotations

import pytest

from policies.slai.calibration import SlaiTimingProfile, fit_affine_batch_time, plot1_batch_times


@pytest.mark.paper(seed="000", ref="Fig. 6a; spec §5.4")
def test_plot1_fit_is_17_16_ms_plus_0_0547_ms_per_token() -> None:
    """Spec §5.4: "Least-squares fit: batch time ~ 17.16 ms + 0.0547 ms/token" (stated to 4 digits)."""
    fit = fit_affine_batch_time(plot1_batch_times())
    assert fit.a0_s == pytest.approx(0.01716, abs=5e-6)
    assert fit.a_tok_s_per_token == pytest.approx(0.0547e-3, abs=5e-8)


@pytest.mark.paper(seed="000", ref="Fig. 6a; spec §5.4")
def test_profile_at_512_tokens_is_within_2_ms_of_the_measured_46_51_ms() -> None:
    """Spec §5.4 row "512 | 212.2 | 46.51": one prefill chunk, one sequence, context of half a chunk."""
    t = SlaiTimingProfile().batch_time_s(tokens=512, seqs=1, context_tokens=256.0)
    assert t == pytest.approx(0.04651, abs=0.002)
