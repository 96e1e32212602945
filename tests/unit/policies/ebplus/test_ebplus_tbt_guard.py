"""policies/ebplus/tbt_guard.py and its use in decide: EB refused where its refill stall breaks a TBT SLO, MB
steps bounded by a token budget that fits it."""

from __future__ import annotations

import dataclasses

import pytest

from policies.ebplus.calibration import QWEN3_8B_RTX_PRO_6000, calibration_profile
from policies.ebplus.decide import decide
from policies.ebplus.inputs import CostModel, EbplusInputs
from policies.ebplus.params import EbplusParams
from policies.ebplus.tbt_guard import mb_step_budget_tokens, mixed_step_s, refill_stall_s, tbt_guard
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


class TestMbStepBudget:
    def test_rtx_budget_is_the_largest_whose_full_step_fits_the_paid_slo(self) -> None:
        """256 decodes on an RTX PRO 6000: the 8,192-token step costs ~0.6 s; the budget's step fits 0.1 s."""
        budget = mb_step_budget_tokens(cost=RTX_COST, max_num_seqs=256, tbt_slo_min_s=0.1, token_budget_tokens=8192)
        assert budget is not None
        assert 256 < budget < 8192
        assert mixed_step_s(cost=RTX_COST, tokens=budget, decodes=256) <= 0.1
        assert mixed_step_s(cost=RTX_COST, tokens=budget + 1, decodes=256) > 0.1
        assert mixed_step_s(cost=RTX_COST, tokens=8192, decodes=256) > 0.5

    def test_fewer_decodes_than_slots_stay_within_the_slo(self) -> None:
        """The budget prices every slot decoding; any smaller decode count under it is cheaper."""
        budget = mb_step_budget_tokens(cost=RTX_COST, max_num_seqs=256, tbt_slo_min_s=0.1, token_budget_tokens=8192)
        assert budget is not None
        assert all(mixed_step_s(cost=RTX_COST, tokens=budget, decodes=d) <= 0.1 for d in range(1, 257))

    def test_no_budget_when_the_engines_own_already_fits(self) -> None:
        assert (
            mb_step_budget_tokens(cost=RTX_COST, max_num_seqs=256, tbt_slo_min_s=1.0, token_budget_tokens=8192) is None
        )

    def test_no_budget_when_decoding_every_slot_alone_breaks_the_slo(self) -> None:
        """1,024 decodes cost more than 0.1 s on their own: no prefill budget can help."""
        assert (
            mb_step_budget_tokens(cost=RTX_COST, max_num_seqs=1024, tbt_slo_min_s=0.1, token_budget_tokens=8192) is None
        )

    def test_without_a_mixed_profile_the_step_is_priced_by_its_parts(self) -> None:
        linear = CostModel(
            alpha_p_s=0.01, beta_p_s_per_token=1e-4, alpha_d_s=0.02, beta_d_s_per_seq=1e-4, alpha_mb_s=0.0, beta_mb=None
        )
        budget = mb_step_budget_tokens(cost=linear, max_num_seqs=100, tbt_slo_min_s=0.1, token_budget_tokens=None)
        # 0.02 + 1e-4 * 100 + 1e-4 * (budget - 100) <= 0.1: budget - 100 = 700 prefill tokens.
        assert budget == 800

    @pytest.mark.parametrize(
        ("field", "max_num_seqs", "tbt_slo_min_s", "token_budget_tokens"),
        [("max_num_seqs", 0, 0.1, 8192), ("tbt_slo_min_s", 256, 0.0, 8192), ("token_budget_tokens", 256, 0.1, 0)],
    )
    def test_out_of_range_input_is_refused(
        self, field: str, max_num_seqs: int, tbt_slo_min_s: float, token_budget_tokens: int
    ) -> None:
        with pytest.raises(InvalidInputError) as caught:
            mb_step_budget_tokens(
                cost=RTX_COST,
                max_num_seqs=max_num_seqs,
                tbt_slo_min_s=tbt_slo_min_s,
                token_budget_tokens=token_budget_tokens,
            )
        assert caught.value.field == field


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

    def test_a_paid_tier_slo_bounds_the_mb_step_budget(self) -> None:
        inputs = dataclasses.replace(SATURATED_RTX, tbt_slo_min_s=0.1, max_num_seqs=256)
        decision = decide(inputs, None, RTX, now_s=10.0)
        expected = mb_step_budget_tokens(cost=RTX_COST, max_num_seqs=256, tbt_slo_min_s=0.1, token_budget_tokens=8192)
        assert expected is not None
        assert decision.payload.mb_token_budget_tokens == expected
        assert decision.diagnostics["mb_token_budget_tokens"] == expected

    def test_the_mb_budget_needs_a_tier_slo_and_the_guard(self) -> None:
        inputs = dataclasses.replace(SATURATED_RTX, max_num_seqs=256)
        assert decide(inputs, None, RTX, now_s=10.0).payload.mb_token_budget_tokens is None
        guarded_off = dataclasses.replace(RTX, tbt_guard=False)
        tight = dataclasses.replace(inputs, tbt_slo_min_s=0.1)
        assert decide(tight, None, guarded_off, now_s=10.0).payload.mb_token_budget_tokens is None

    def test_the_mb_budget_can_be_turned_off_keeping_the_eb_guard(self) -> None:
        inputs = dataclasses.replace(SATURATED_RTX, tbt_slo_min_s=0.1, max_num_seqs=256)
        decision = decide(inputs, None, dataclasses.replace(RTX, mb_step_budget=False), now_s=10.0)
        assert decision.payload.mb_token_budget_tokens is None
        assert (decision.payload.mode, decision.diagnostics["mode_reason"]) == ("MB", "tbt_guard")

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
