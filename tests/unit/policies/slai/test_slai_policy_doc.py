"""The SLAI boundary models: bounds, the rule's order, strictness."""

from __future__ import annotations

import pydantic
import pytest

from schemas.policy_docs.slai import SlaiPayload, SlaiWhatIfInput

GOOD = {
    "mode": "dynamic",
    "delta_fixed": 10.0,
    "delta_lo": 5.0,
    "delta_hi": 10.0,
    "kv_threshold_frac": 0.96,
    "tier_tbt_s": {"paid": 0.1, "free": 0.5},
    "default_tbt_s": 0.2,
    "token_budget_tokens": 512,
    "max_active": 128,
    "max_decodes": 128,
    "prefill_order": "spf",
}


class TestSlaiPayload:
    def test_paper_defaults_validate(self) -> None:
        assert SlaiPayload.model_validate(GOOD).delta_lo == 5.0

    def test_inverted_rule_is_refused(self) -> None:
        with pytest.raises(pydantic.ValidationError, match="delta_lo"):
            SlaiPayload.model_validate({**GOOD, "delta_lo": 11.0})

    @pytest.mark.parametrize(
        ("field", "value"), [("kv_threshold_frac", 1.5), ("prefill_order", "lifo"), ("delta_hi", -1.0)]
    )
    def test_out_of_contract_values_are_refused(self, field: str, value: object) -> None:
        with pytest.raises(pydantic.ValidationError, match=field):
            SlaiPayload.model_validate({**GOOD, field: value})


class TestSlaiWhatIfInput:
    def test_unknown_field_is_refused(self) -> None:
        with pytest.raises(pydantic.ValidationError, match="tbar"):
            SlaiWhatIfInput.model_validate_json('{"tbar": 0.05}')

    def test_integers_are_accepted_for_seconds_from_json(self) -> None:
        assert SlaiWhatIfInput.model_validate_json('{"now_s": 10, "tbar_s": 0.05}').now_s == 10.0
