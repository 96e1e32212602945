"""policies/ebplus/tbt_guard.py and its use in decide: EB refused where its refill stall breaks a TBT SLO."""

from __future__ import annotations

import dataclasses

import pytest

from policies.ebplus.calibration import QWEN3_8B_RTX_PRO_6000, calibration_profile
from policies.ebplus.decide import decide
from policies.ebplus.inputs import EbplusInputs
from policies.ebplus.params import EbplusParams
from policies.ebplus.tbt_guard import refill_stall_s, tbt_guard
from schemas.errors import InvalidInputError
from schemas.policy_docs.base import InputsDigest
from schemas.policy_docs.ebplus import EbplusPolicy

RTX_COST = calibration_profile(QWEN3_8B_RTX_PRO_6000).cost_model
RTX = EbplusParams(calibration_id=QWEN3_8B_RTX_PRO_6000)
SATURATED_RTX = EbplusInputs(
    p0=1 / 256,
    eta=0.0,
    hazard_samples=500,
    mu_l_tokens=512.0,
    mu_o_tokens=256.0,
    n_obs=2048.0,
    cost_model=None,
    kv_capacity_tokens=440_000,
    max_num_seqs=1024,
    completions=100,
    token_budget_tokens=8192,
)


class TestRefillStall:
    def test_stall_prices_every_prefill_chunk_then_one_decode_step(self) -> None:
        """k = 20 prompts of 512 tokens under an 8,192-token budget: two chunks, 10,240 tokens, then N = 256 decodes."""
        stall = refill_stall_s(cost=RTX_COST, k=20, n=256, mu_l_tokens=512.0, token_budget_tokens=8192)
        expected = 2 * 4.6912e-3 + 5.0079e-5 * 10_240 + 1.03760e-2 + 1.03881e-4 * 256
        assert stall == pytest.approx(expected, rel=1e-12)

    def test_unknown_budget_prices_one_chunk(self) -> None:
        stall = refill_stall_s(cost=RTX_COST, k=20, n=256, mu_l_tokens=512.0, token_budget_tokens=None)
        assert stall == pytest.approx(4.6912e-3 + 5.0079e-5 * 10_240 + 1.03760e-2 + 1.03881e-4 * 256, rel=1e-12)

    @pytest.mark.parametrize(
        ("field", "k", "n", "mu_l_tokens", "token_budget_tokens"),
        [
            ("k", 0, 64, 512.0, 8192),
            ("n", 4, 0, 512.0, 8192),
            ("mu_l_tokens", 4, 64, 0.0, 8192),
            ("token_budget_tokens", 4, 64, 512.0, 0),
        ],
    )
    def test_out_of_range_input_is_refused(
        self, field: str, k: int, n: int, mu_l_tokens: float, token_budget_tokens: int
    ) -> None:
        with pytest.raises(InvalidInputError) as caught:
            refill_stall_s(cost=RTX_COST, k=k, n=n, mu_l_tokens=mu_l_tokens, token_budget_tokens=token_budget_tokens)
        assert caught.value.field == field

    def test_guard_blocks_only_a_stall_over_the_slo(self) -> None:
        stall = refill_stall_s(cost=RTX_COST, k=1, n=16, mu_l_tokens=512.0, token_budget_tokens=8192)
        at = tbt_guard(cost=RTX_COST, k=1, n=16, mu_l_tokens=512.0, token_budget_tokens=8192, tbt_slo_min_s=stall)
        under = tbt_guard(
            cost=RTX_COST, k=1, n=16, mu_l_tokens=512.0, token_budget_tokens=8192, tbt_slo_min_s=stall * 0.999
        )
        assert (at.blocks_eb, under.blocks_eb) == (False, True)

    def test_non_positive_slo_is_refused(self) -> None:
        with pytest.raises(InvalidInputError):
            tbt_guard(cost=RTX_COST, k=1, n=1, mu_l_tokens=1.0, token_budget_tokens=None, tbt_slo_min_s=0.0)


class TestDecideWithGuard:
    def test_a_paid_tier_slo_keeps_a_saturated_rtx_engine_in_mixed_batching(self) -> None:
        decision = decide(dataclasses.replace(SATURATED_RTX, tbt_slo_min_s=0.1), None, RTX, now_s=10.0)
        assert decision.payload.mode == "MB"
        assert decision.diagnostics["mode_reason"] == "tbt_guard"
        assert decision.diagnostics["tbt_slo_min_s"] == 0.1
        stall = decision.diagnostics["refill_stall_s"]
        assert isinstance(stall, float)
        assert stall > 0.1
        assert decision.state.switch_count == 0
        assert decision.state.cooldown_remaining == 0

    def test_a_loose_slo_lets_eq8_choose_eb(self) -> None:
        decision = decide(dataclasses.replace(SATURATED_RTX, tbt_slo_min_s=30.0), None, RTX, now_s=10.0)
        assert decision.payload.mode == "EB"
        assert decision.diagnostics["mode_reason"] == "switched"

    def test_guard_off_restores_the_paper_rule(self) -> None:
        params = dataclasses.replace(RTX, tbt_guard=False)
        decision = decide(dataclasses.replace(SATURATED_RTX, tbt_slo_min_s=0.1), None, params, now_s=10.0)
        assert decision.payload.mode == "EB"
        assert "refill_stall_s" not in decision.diagnostics

    def test_an_engine_in_eb_leaves_it_at_once_despite_its_cooldown(self) -> None:
        """A tight tier appearing while the engine runs EB (in cooldown) switches it to MB on this evaluation."""
        first = decide(SATURATED_RTX, None, RTX, now_s=10.0)
        assert (first.payload.mode, first.state.cooldown_remaining) == ("EB", 3)
        previous = EbplusPolicy(
            scope="engine-0",
            deployment="test",
            version=1,
            computed_at=10.0,
            valid_until=10.0 + first.valid_for_s,
            inputs=InputsDigest(snapshot_id="s1"),
            payload=first.payload,
            state=first.state,
        )
        second = decide(dataclasses.replace(SATURATED_RTX, tbt_slo_min_s=0.1), previous, RTX, now_s=12.0)
        assert second.payload.mode == "MB"
        assert second.diagnostics["mode_reason"] == "tbt_guard"
        assert (second.state.switch_count, second.state.last_switch_s, second.state.cooldown_remaining) == (2, 12.0, 3)
