"""The SLAI decision: paper defaults pushed, diagnostics, guardrails, state carried over."""

from __future__ import annotations

import dataclasses

import pytest

from policies.decision import Decision
from policies.slai.decide import decide, unchanged
from policies.slai.inputs import SlaiInputs, TierObservation
from policies.slai.offset_rule import offset_for_kv_use, offset_rule_of
from policies.slai.params import OffsetMode, PrefillOrder, SlaiParams
from schemas.errors import InvalidInputError
from schemas.policy_docs.base import InputsDigest
from schemas.policy_docs.slai import SlaiPolicy, SlaiState

LOADED = SlaiInputs(
    tbar_s=0.05,
    step_time_p99_s=0.075,
    kv_use_frac=0.97,
    ttft_p50_s=0.8,
    arrival_rate_per_s=1.4,
    batch_time_a0_s=0.01716,
    batch_time_a_tok_s_per_token=5.47e-5,
    tiers=(
        TierObservation(tier="paid", tbt_p99_s=0.09, tbt_attainment_frac=0.995, tbt_samples=500),
        TierObservation(tier="free", tbt_p99_s=0.2, tbt_attainment_frac=1.0, tbt_samples=5000),
    ),
)


def wrap(decision_payload: object, state: object, version: int = 1) -> SlaiPolicy:
    return SlaiPolicy.model_validate(
        {
            "scope": "e1",
            "deployment": "d",
            "version": version,
            "computed_at": 0.0,
            "valid_until": 60.0,
            "inputs": InputsDigest(snapshot_id="s"),
            "payload": decision_payload,
            "state": state,
        }
    )


class TestDecide:
    def test_default_decision_pushes_the_papers_dynamic_rule(self) -> None:
        payload = decide(LOADED, None, SlaiParams(), 100.0).payload
        assert (payload.mode, payload.delta_lo, payload.delta_hi, payload.kv_threshold_frac) == (
            "dynamic",
            5.0,
            10.0,
            0.96,
        )
        assert payload.tier_tbt_s == {"paid": 0.1, "free": 0.5}
        assert (payload.token_budget_tokens, payload.max_active, payload.max_decodes) == (512, 128, 128)
        assert payload.prefill_order == "spf"
        assert payload.tbar_seed_s == 0.05

    def test_diagnostics_carry_floor_windows_and_delta_in_effect(self) -> None:
        d = decide(LOADED, None, SlaiParams(), 100.0).diagnostics
        assert d["delta_min"] == pytest.approx(3.0)
        assert d["delta_lo_below_floor"] is False
        assert d["delta_in_effect"] == 10.0  # KV 0.97 >= 0.96
        assert d["window_s.free.lo"] == pytest.approx(0.25)
        assert d["window_s.free.hi"] == pytest.approx(0.0)
        assert d["window_s.paid.lo"] == pytest.approx(-0.15)
        assert d["budget_within_min_tbt_tokens"] == 1514  # floor((0.1 - 0.01716) / 5.47e-5)

    def test_low_delta_below_a_high_floor_is_flagged_not_moved(self) -> None:
        spiky = SlaiInputs(tbar_s=0.02, step_time_p99_s=0.08)
        decision = decide(spiky, None, SlaiParams(), 0.0)
        assert decision.diagnostics["delta_min"] == pytest.approx(8.0)
        assert decision.diagnostics["delta_lo_below_floor"] is True
        assert decision.payload.delta_lo == 5.0

    def test_missing_estimates_leave_derived_diagnostics_none(self) -> None:
        d = decide(SlaiInputs(), None, SlaiParams(), 0.0).diagnostics
        assert (d["delta_min"], d["delta_in_effect"], d["tbar_s"]) == (None, None, None)
        assert "window_s.free.lo" not in d

    def test_fixed_mode_and_fcfs_reach_the_payload(self) -> None:
        params = SlaiParams(offset_mode=OffsetMode.FIXED, prefill_order=PrefillOrder.FCFS)
        payload = decide(LOADED, None, params, 0.0).payload
        assert (payload.mode, payload.delta_fixed, payload.prefill_order) == ("fixed", 10.0, "fcfs")

    def test_out_of_bounds_parameter_is_clamped_and_flagged(self) -> None:
        decision = decide(LOADED, None, SlaiParams(delta_hi=150.0, delta_fixed=120.0), 0.0)
        assert decision.payload.delta_hi == 100.0
        assert sorted((c.name, c.decided, c.pushed) for c in decision.clamps) == [
            ("delta", 120.0, 100.0),
            ("delta", 150.0, 100.0),
        ]

    def test_payload_rule_round_trips_to_the_engine_rule(self) -> None:
        rule = offset_rule_of(decide(LOADED, None, SlaiParams(), 0.0).payload)
        assert (offset_for_kv_use(0.95, rule), offset_for_kv_use(0.96, rule)) == (5.0, 10.0)

    def test_state_counts_decisions_across_documents(self) -> None:
        first = decide(LOADED, None, SlaiParams(), 0.0)
        second = decide(LOADED, wrap(first.payload, first.state), SlaiParams(), 10.0)
        assert second.state.decisions == 2

    def test_the_seed_holds_within_the_tolerance_and_follows_beyond_it(self) -> None:
        """tbar_seed_s moves only when the estimate moves by more than 10% of the pushed value."""
        first = decide(LOADED, None, SlaiParams(), 0.0)
        previous = wrap(first.payload, first.state)
        near = decide(dataclasses.replace(LOADED, tbar_s=0.054), previous, SlaiParams(), 2.0)
        far = decide(dataclasses.replace(LOADED, tbar_s=0.056), previous, SlaiParams(), 2.0)
        assert (near.payload.tbar_seed_s, far.payload.tbar_seed_s) == (0.05, 0.056)
        assert unchanged(previous, near)
        assert not unchanged(previous, far)

    def test_a_tuner_step_is_news_even_with_the_same_payload(self) -> None:
        first = decide(LOADED, None, SlaiParams(), 0.0)
        previous = wrap(first.payload, first.state)
        same = decide(LOADED, previous, SlaiParams(), 2.0)
        pending = same.state.model_dump() | {"pending_direction": -1, "pending_count": 1}
        stepped = Decision(
            payload=same.payload,
            state=SlaiState.model_validate(pending),
            diagnostics={},
            clamps=(),
            valid_for_s=same.valid_for_s,
        )
        assert unchanged(previous, same)
        assert not unchanged(previous, stepped)

    def test_valid_for_comes_from_params(self) -> None:
        assert decide(LOADED, None, SlaiParams(valid_for_s=15.0), 0.0).valid_for_s == 15.0

    def test_non_finite_time_is_refused(self) -> None:
        with pytest.raises(InvalidInputError, match="now_s"):
            decide(LOADED, None, SlaiParams(), float("nan"))


class TestSlaiInputs:
    def test_kv_use_above_one_is_refused(self) -> None:
        with pytest.raises(InvalidInputError, match="kv_use_frac"):
            SlaiInputs(kv_use_frac=1.2)

    def test_negative_tier_p99_is_refused_with_the_tier_named(self) -> None:
        with pytest.raises(InvalidInputError, match=r"tiers\[paid\]"):
            TierObservation(tier="paid", tbt_p99_s=-1.0)


class TestSlaiParams:
    def test_inverted_rule_is_refused(self) -> None:
        with pytest.raises(InvalidInputError, match="delta_lo"):
            SlaiParams(delta_lo=12.0, delta_hi=10.0)

    def test_unknown_tier_falls_back_to_the_repo_default_tbt(self) -> None:
        assert SlaiParams().tbt_for("enterprise") == 0.2
