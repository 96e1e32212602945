"""Unit tests of policies/ebplus/calibration.py (spec section 6.4 profiles)."""

from __future__ import annotations

import pytest

from policies.ebplus.calibration import CALIBRATION_PROFILES, QWEN3_8B_H200, QWEN3_8B_RTX_PRO_6000, calibration_profile
from schemas.errors import InvalidInputError


class TestCalibrationProfile:
    @pytest.mark.paper(seed="001", ref="spec section 6.4 (repo calibration JSONs)")
    def test_qwen3_8b_h200_holds_the_repo_coefficients(self) -> None:
        cost = calibration_profile(QWEN3_8B_H200).cost_model
        assert (cost.alpha_p_s, cost.beta_p_s_per_token, cost.alpha_d_s, cost.beta_d_s_per_seq) == (
            1.2786e-3,
            2.4853e-5,
            8.9212e-3,
            4.5865e-5,
        )
        assert cost.beta_mb is not None
        assert cost.beta_mb.at(1.0) == pytest.approx(2.494e-5 + 5.193e-5 + 1.478e-5)

    @pytest.mark.paper(seed="001", ref="spec section 6.4 (repo calibration JSONs)")
    def test_qwen3_8b_rtx_has_beta_mb_and_alpha_mb_equal_to_alpha_p(self) -> None:
        cost = calibration_profile(QWEN3_8B_RTX_PRO_6000).cost_model
        assert cost.alpha_mb_s == cost.alpha_p_s == 4.6912e-3
        assert cost.beta_mb is not None
        assert cost.beta_mb.c1_s_per_token == 1.968926e-4

    def test_fourteen_profiles_and_only_qwen3_8b_profiles_carry_beta_mb(self) -> None:
        assert len(CALIBRATION_PROFILES) == 14
        with_beta_mb = sorted(cid for cid, p in CALIBRATION_PROFILES.items() if p.cost_model.beta_mb is not None)
        assert with_beta_mb == [QWEN3_8B_H200, QWEN3_8B_RTX_PRO_6000]

    def test_unknown_id_is_refused_listing_the_known_ones(self) -> None:
        with pytest.raises(InvalidInputError, match="qwen3-8b@h200") as info:
            calibration_profile("gpt-9@tpu")
        assert info.value.field == "calibration_id"
