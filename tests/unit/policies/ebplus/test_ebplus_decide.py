"""Unit tests of policies/ebplus/decide.py and online_update.py: Algorithm 1 cadence, state carry-over, clamps."""

from __future__ import annotations

import dataclasses

import pytest

from policies.decision import Decision
from policies.ebplus.decide import decide
from policies.ebplus.inputs import CostModel, EbplusInputs
from policies.ebplus.memory_safe_batch import NStarMethod
from policies.ebplus.online_update import update_threshold
from policies.ebplus.params import EbplusParams, RhsThreshold
from schemas.errors import InvalidInputError
from schemas.policy_docs.base import ClampRecord, InputsDigest
from schemas.policy_docs.ebplus import EbplusPayload, EbplusPolicy, EbplusState

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
)
RTX = EbplusParams(calibration_id="qwen3-8b@rtx-pro-6000")
FITTED = CostModel(
    alpha_p_s=0.1, beta_p_s_per_token=2.5e-5, alpha_d_s=0.01, beta_d_s_per_seq=5e-5, alpha_mb_s=0.1, beta_mb=None
)


def _document(decision: Decision[EbplusPayload, EbplusState], version: int, now_s: float) -> EbplusPolicy:
    """Wrap a decision the way the runtime will, so the next decide can read it back."""
    return EbplusPolicy(
        scope="engine-0",
        deployment="test",
        version=version,
        computed_at=now_s,
        valid_until=now_s + decision.valid_for_s,
        inputs=InputsDigest(snapshot_id=f"s{version}"),
        diagnostics=dict(decision.diagnostics),
        clamps=[ClampRecord(name=c.name, decided=c.decided, pushed=c.pushed) for c in decision.clamps],
        previous_version=version - 1 if version > 1 else None,
        payload=decision.payload,
        state=decision.state,
    )


class TestDecide:
    def test_cold_start_on_a_saturated_rtx_engine_picks_eb_with_algorithm1_values(self) -> None:
        decision = decide(SATURATED_RTX, None, RTX, now_s=10.0)
        assert decision.payload.mode == "EB"
        assert decision.diagnostics["algorithm1_ran"] is True
        assert decision.payload.theta == pytest.approx(0.0571512, abs=1e-6)
        assert decision.payload.k == int(decision.payload.theta * decision.payload.n)
        assert decision.state.switch_count == 1
        assert decision.state.last_switch_s == 10.0
        assert decision.state.cooldown_remaining == 3

    def test_light_load_stays_in_mixed_batching(self) -> None:
        decision = decide(dataclasses.replace(SATURATED_RTX, n_obs=32.0), None, RTX, now_s=0.0)
        assert decision.payload.mode == "MB"
        assert decision.diagnostics["mode_reason"] == "hold"

    def test_too_few_hazard_samples_hold_the_cold_start_defaults(self) -> None:
        decision = decide(dataclasses.replace(SATURATED_RTX, hazard_samples=29), None, RTX, now_s=0.0)
        assert (decision.payload.mode, decision.payload.theta, decision.payload.n) == ("MB", 0.7, 1024)
        assert decision.payload.k == 716
        assert decision.diagnostics["mode_reason"] == "insufficient_samples"
        assert decision.state.evaluations == 0

    def test_algorithm1_waits_for_t_upd_completions_but_the_mode_is_still_evaluated(self) -> None:
        first = decide(SATURATED_RTX, None, RTX, now_s=0.0)
        between = dataclasses.replace(SATURATED_RTX, completions=150, p0=1 / 64)
        second = decide(between, _document(first, 1, 0.0), RTX, now_s=1.0)
        assert second.diagnostics["algorithm1_ran"] is False
        assert second.payload.theta == first.payload.theta
        assert second.state.evaluations == 2
        third = decide(dataclasses.replace(between, completions=200), _document(second, 2, 1.0), RTX, now_s=2.0)
        assert third.diagnostics["algorithm1_ran"] is True
        assert third.payload.theta != first.payload.theta

    def test_theta_is_ema_smoothed_across_updates(self) -> None:
        first = decide(SATURATED_RTX, None, RTX, now_s=0.0)
        later = dataclasses.replace(SATURATED_RTX, completions=200, p0=1 / 64)
        second = decide(later, _document(first, 1, 0.0), RTX, now_s=1.0)
        raw = second.diagnostics["theta_raw"]
        assert isinstance(raw, float)
        assert second.payload.theta == pytest.approx(0.3 * raw + 0.7 * first.payload.theta)

    def test_cooldown_holds_eb_after_the_load_drops(self) -> None:
        first = decide(SATURATED_RTX, None, RTX, now_s=0.0)
        drained = dataclasses.replace(SATURATED_RTX, n_obs=20.0, completions=200)
        second = decide(drained, _document(first, 1, 0.0), RTX, now_s=1.0)
        assert (second.payload.mode, second.diagnostics["mode_reason"]) == ("EB", "cooldown")
        assert second.state.cooldown_remaining == 2

    def test_theta_floor_is_applied_and_flagged(self) -> None:
        params = dataclasses.replace(RTX, theta_min=0.7)
        decision = decide(SATURATED_RTX, None, params, now_s=0.0)
        assert decision.payload.theta == 0.7
        assert [c.name for c in decision.clamps] == ["theta"]

    def test_n_above_max_num_seqs_is_clamped_and_flagged(self) -> None:
        decision = decide(dataclasses.replace(SATURATED_RTX, kv_capacity_tokens=5_000_000), None, RTX, now_s=0.0)
        assert decision.payload.n == 1024
        assert any(c.name == "n" and c.decided > 1024 for c in decision.clamps)

    def test_without_any_cost_model_it_probes_eb_and_keeps_the_state(self) -> None:
        """No profile and no online fit: EB at theta_default, N = max_num_seqs, state untouched."""
        previous_state = EbplusState(mode="MB")
        decision = decide(SATURATED_RTX, None, EbplusParams(calibration_id=None), now_s=5.0)
        assert (decision.payload.mode, decision.payload.calib_id) == ("EB", "probe")
        assert (decision.payload.theta, decision.payload.n, decision.payload.k) == (0.7, 1024, 716)
        assert decision.state == previous_state
        assert decision.diagnostics["mode_reason"] == "probing_cost_model"

    def test_online_cost_model_overrides_the_profile(self) -> None:
        decision = decide(
            dataclasses.replace(SATURATED_RTX, cost_model=FITTED, p0=0.01, mu_o_tokens=100.0), None, RTX, 0.0
        )
        assert decision.payload.calib_id == "online"
        assert decision.diagnostics["theta0"] == pytest.approx(0.34047, abs=5e-6)
        assert decision.payload.mode == "MB"

    def test_the_default_params_assume_no_profile_and_probe(self) -> None:
        """No profile of the engine's own and none named by the operator: the probe, never a fixed profile."""
        decision = decide(SATURATED_RTX, None, EbplusParams(), now_s=5.0)
        assert (decision.payload.calib_id, decision.diagnostics["calib_source"]) == ("probe", "probe")

    def test_a_profile_the_engine_did_not_declare_is_marked_assumed_with_the_reason(self) -> None:
        decision = decide(SATURATED_RTX, None, RTX, now_s=5.0)
        assert decision.payload.calib_id == "qwen3-8b@rtx-pro-6000"
        assert decision.diagnostics["calib_source"] == "assumed"
        assert "no known profile" in str(decision.diagnostics["calib_reason"])

    def test_the_engines_own_profile_is_recorded_by_its_id_not_as_online(self) -> None:
        registered = dataclasses.replace(SATURATED_RTX, cost_model=FITTED, cost_model_id="qwen3-8b@h200")
        decision = decide(registered, None, RTX, now_s=5.0)
        assert (decision.payload.calib_id, decision.diagnostics["calib_source"]) == ("qwen3-8b@h200", "engine")
        assert "calib_reason" not in decision.diagnostics
        assert "declared_profile_unused" not in decision.diagnostics

    def test_a_declared_profile_that_is_not_used_is_named_in_the_decision(self) -> None:
        """A typo in GOVERNOR_HARDWARE_PROFILE is not silent: the decision names the id it could not use."""
        typo = dataclasses.replace(SATURATED_RTX, declared_profile="qwen3-8b-h200")
        assert decide(typo, None, RTX, now_s=5.0).diagnostics["declared_profile_unused"] == "qwen3-8b-h200"
        assert decide(typo, None, EbplusParams(), now_s=5.0).diagnostics["declared_profile_unused"] == "qwen3-8b-h200"

    def test_p0_is_floored_at_one_over_mu_o(self) -> None:
        decision = decide(dataclasses.replace(SATURATED_RTX, p0=1e-4, eta=-1e-6), None, RTX, now_s=0.0)
        assert decision.diagnostics["p0"] == pytest.approx(1 / 256)
        assert decision.diagnostics["eta"] == 0.0

    def test_theta_star_rhs_option_changes_the_rhs(self) -> None:
        paper = decide(SATURATED_RTX, None, RTX, now_s=0.0)
        code = decide(SATURATED_RTX, None, dataclasses.replace(RTX, rhs_threshold=RhsThreshold.THETA_STAR), now_s=0.0)
        assert paper.diagnostics["rhs"] == pytest.approx(code.diagnostics["rhs"])  # eta = 0: theta* = theta0
        ifr = dataclasses.replace(SATURATED_RTX, eta=1e-5)
        assert (
            decide(ifr, None, RTX, 0.0).diagnostics["rhs"]
            != decide(ifr, None, dataclasses.replace(RTX, rhs_threshold=RhsThreshold.THETA_STAR), 0.0).diagnostics[
                "rhs"
            ]
        )

    def test_negative_event_time_is_refused(self) -> None:
        with pytest.raises(InvalidInputError, match="now_s"):
            decide(SATURATED_RTX, None, RTX, now_s=-1.0)

    def test_bad_input_is_refused_naming_the_field(self) -> None:
        with pytest.raises(InvalidInputError, match="mu_o_tokens"):
            dataclasses.replace(SATURATED_RTX, mu_o_tokens=0.0)


class TestUpdateThreshold:
    def test_delta_theta_is_capped_at_five_theta0(self) -> None:
        """Spec Appendix A item 4's uniform case: a steep eta would give Delta_theta ~ 0.63; the cap holds 5 theta0."""
        cost = CostModel(
            alpha_p_s=1.2786e-3,
            beta_p_s_per_token=2.4853e-5,
            alpha_d_s=8.9212e-3,
            beta_d_s_per_seq=4.5865e-5,
            alpha_mb_s=1.2786e-3,
            beta_mb=None,
        )
        update = update_threshold(
            p0=0.00382,
            eta=9.41e-5,
            mu_l_tokens=512.0,
            cost=cost,
            kv_capacity_tokens=700_000,
            max_num_seqs=1024,
            theta_hat_prev=None,
            n_hat_prev=1024,
            params=EbplusParams(),
        )
        assert update.delta_theta_raw > 0.5
        assert update.delta_theta == pytest.approx(5 * update.base.theta0)
        assert update.theta_hat == pytest.approx(6 * update.base.theta0)

    def test_auto_n_off_keeps_max_num_seqs_and_clt_option_is_used(self) -> None:
        common = {
            "p0": 1 / 256,
            "eta": 0.0,
            "mu_l_tokens": 512.0,
            "cost": FITTED,
            "kv_capacity_tokens": 700_000,
            "max_num_seqs": 4096,
            "theta_hat_prev": None,
            "n_hat_prev": None,
        }
        off = update_threshold(**common, params=EbplusParams(auto_n=False))
        assert off.n_hat == 4096
        eq6 = update_threshold(**common, params=EbplusParams())
        clt = update_threshold(**common, params=EbplusParams(n_star_method=NStarMethod.CLT))
        assert clt.n_hat != eq6.n_hat


class TestEbplusParams:
    def test_theta_min_above_theta_max_is_refused(self) -> None:
        with pytest.raises(InvalidInputError, match="theta_min"):
            EbplusParams(theta_min=0.9, theta_max=0.8)

    def test_eps_outside_the_code_clamp_is_refused(self) -> None:
        with pytest.raises(InvalidInputError, match="eps_oom"):
            EbplusParams(eps_oom=0.9)
