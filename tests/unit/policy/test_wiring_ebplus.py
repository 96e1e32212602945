"""EB+ wiring: the inputs built from an engine summary (calibration, KV capacity, hazard floor)."""

from __future__ import annotations

import pytest
from pydantic import JsonValue

from policies.ebplus.calibration import QWEN3_8B_H200, QWEN3_8B_RTX_PRO_6000, calibration_profile
from schemas.records import EstimateSnapshot
from services.policy.wiring.ebplus import ebplus_inputs, ebplus_spec


def _snapshot(*, engine: dict[str, JsonValue] | None = None, p0: float = 0.004) -> EstimateSnapshot:
    estimates: dict[str, JsonValue] = {
        "engine": engine
        if engine is not None
        else {
            "model": "Qwen3-8B",
            "gpu": "RTX-PRO-6000",
            "max_num_seqs": 512,
            "kv_blocks_total": 1000,
            "block_size_tokens": 16,
        },
        "hazard": {"p0": p0, "eta": 1e-6, "n_samples": 200},
        "mu_l_tokens": 512.0,
        "mu_o_tokens": 256.0,
        "n_obs": 700.0,
        "last_step": {"kv_capacity_tokens": 99.0},
        "completions_total": 200,
    }
    return EstimateSnapshot(
        deployment="d", scope="e0", snapshot_id="s", version=1, ts=1.0, trigger="t", estimates=estimates
    )


class TestEbplusInputs:
    def test_calibration_found_by_model_and_gpu(self) -> None:
        inputs = ebplus_inputs(_snapshot())
        assert inputs is not None
        assert inputs.cost_model == calibration_profile(QWEN3_8B_RTX_PRO_6000).cost_model

    def test_hardware_profile_names_the_calibration_first(self) -> None:
        engine: dict[str, JsonValue] = {
            "hardware_profile": QWEN3_8B_H200,
            "model": "Qwen3-8B",
            "gpu": "RTX-PRO-6000",
            "max_num_seqs": 8,
        }
        inputs = ebplus_inputs(_snapshot(engine=engine))
        assert inputs is not None
        assert inputs.cost_model == calibration_profile(QWEN3_8B_H200).cost_model

    def test_unknown_hardware_leaves_the_cost_model_to_the_params(self) -> None:
        inputs = ebplus_inputs(_snapshot(engine={"model": "m", "gpu": "g", "max_num_seqs": 8}))
        assert inputs is not None
        assert inputs.cost_model is None

    def test_unknown_hardware_with_online_fits_uses_the_engines_own_cost_model(self) -> None:
        snapshot = _snapshot(engine={"model": "m", "gpu": "g", "max_num_seqs": 8})
        snapshot.estimates["cost"] = {
            "prefill": {"alpha_s": 0.02, "beta_s_per_unit": 1e-4},
            "decode": {"alpha_s": 0.01, "beta_s_per_unit": 2e-4},
        }
        inputs = ebplus_inputs(snapshot)
        assert inputs is not None
        assert inputs.cost_model is not None
        assert (inputs.cost_model.alpha_p_s, inputs.cost_model.beta_d_s_per_seq) == (0.02, 2e-4)

    def test_kv_capacity_comes_from_the_registration_else_the_last_step(self) -> None:
        registered = ebplus_inputs(_snapshot())
        unregistered = ebplus_inputs(_snapshot(engine={"max_num_seqs": 8}))
        assert registered is not None
        assert unregistered is not None
        assert (registered.kv_capacity_tokens, unregistered.kv_capacity_tokens) == (16_000, 99)

    def test_non_positive_p0_of_bounded_lengths_is_floored_to_one_over_mu_o(self) -> None:
        inputs = ebplus_inputs(_snapshot(p0=-0.0134))
        assert inputs is not None
        assert inputs.p0 == pytest.approx(1.0 / 256.0)

    def test_no_decision_without_a_hazard_fit(self) -> None:
        snapshot = _snapshot()
        estimates = dict(snapshot.estimates)
        estimates["hazard"] = None
        bare = EstimateSnapshot(
            deployment="d", scope="e0", snapshot_id="s", version=1, ts=1.0, trigger="t", estimates=estimates
        )
        assert ebplus_inputs(bare) is None

    def test_guard_reads_the_tightest_tier_slo_and_the_token_budget(self) -> None:
        snapshot = _snapshot(
            engine={"model": "Qwen3-8B", "gpu": "RTX-PRO-6000", "max_num_seqs": 8, "max_num_batched_tokens": 8192}
        )
        estimates = dict(snapshot.estimates)
        estimates["tiers"] = {"free": {"tbt_slo_s": 0.5}, "paid": {"tbt_slo_s": 0.1}, "batch": {"tbt_slo_s": None}}
        tiered = EstimateSnapshot(
            deployment="d", scope="e0", snapshot_id="s", version=1, ts=1.0, trigger="t", estimates=estimates
        )
        inputs = ebplus_inputs(tiered)
        assert inputs is not None
        assert (inputs.tbt_slo_min_s, inputs.token_budget_tokens) == (0.1, 8192)

    def test_no_tier_slo_leaves_the_guard_without_a_bound(self) -> None:
        inputs = ebplus_inputs(_snapshot())
        assert inputs is not None
        assert (inputs.tbt_slo_min_s, inputs.token_budget_tokens) == (None, None)


class TestEbplusSpec:
    def test_fires_every_t_upd_completions_and_reads_the_cost_fits(self) -> None:
        spec = ebplus_spec()
        assert spec.trigger.describe() == "every 100 request.finished"
        assert "cost" in spec.reads
