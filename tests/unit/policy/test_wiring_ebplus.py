"""EB+ wiring: the inputs built from a real engine summary (calibration, KV capacity, hazard floor, guard)."""

from __future__ import annotations

import pytest

from decide.wiring.ebplus import ebplus_inputs, ebplus_spec
from decide.wiring.summary import engine_summary
from policies.ebplus.calibration import calibration_profile
from schemas.estimates import EngineSummary, LinearCostFit
from schemas.records import EstimateSnapshot
from services.replay.offline import OfflineControlPlane
from services.testing.models import changed
from tests.fixtures import last_snapshot


@pytest.fixture
def snapshot(demo_plane: OfflineControlPlane) -> EstimateSnapshot:
    """The last EB+ snapshot the demo's first H200 engine took (its registration names its calibration)."""
    return last_snapshot(demo_plane, "ebplus", "h200-0")


def _with(snapshot: EstimateSnapshot, **update: object) -> EstimateSnapshot:
    """The snapshot with some summary fields replaced."""
    return changed(snapshot, estimates=changed(engine_summary(snapshot), **update))


def _registered(summary: EngineSummary, **update: object) -> object:
    assert summary.engine is not None
    return changed(summary.engine, **update)


class TestEbplusInputs:
    def test_reads_the_hazard_means_n_obs_and_completions_of_the_summary(self, snapshot: EstimateSnapshot) -> None:
        summary = engine_summary(snapshot)
        inputs = ebplus_inputs(snapshot)
        assert inputs is not None
        assert summary.hazard is not None
        assert summary.engine is not None
        assert (inputs.p0, inputs.eta) == (summary.hazard.p0_per_token, summary.hazard.eta_per_token2)
        assert (inputs.mu_l_tokens, inputs.mu_o_tokens) == (summary.mu_l_tokens, summary.mu_o_tokens)
        assert (inputs.n_obs, inputs.completions) == (summary.n_obs_requests, summary.completions_total)
        assert inputs.max_num_seqs == summary.engine.max_num_seqs

    def test_calibration_found_by_the_hardware_profile(self, snapshot: EstimateSnapshot) -> None:
        summary = engine_summary(snapshot)
        assert summary.engine is not None
        assert summary.engine.hardware_profile is not None
        inputs = ebplus_inputs(snapshot)
        assert inputs is not None
        assert inputs.cost_model == calibration_profile(summary.engine.hardware_profile).cost_model
        assert inputs.cost_model_id == summary.engine.hardware_profile

    def test_calibration_found_by_model_and_gpu_without_a_profile(self, snapshot: EstimateSnapshot) -> None:
        summary = engine_summary(snapshot)
        assert summary.engine is not None
        inputs = ebplus_inputs(_with(snapshot, engine=_registered(summary, hardware_profile=None)))
        assert inputs is not None
        by_name = calibration_profile(f"{summary.engine.model}@{summary.engine.gpu}".lower())
        assert inputs.cost_model == by_name.cost_model
        assert inputs.cost_model_id == by_name.calib_id

    @pytest.mark.parametrize(
        ("model", "gpu"),
        [
            ("Qwen/Qwen3-8B", "H200"),
            ("/models/Qwen3-8B/", "NVIDIA H200"),
            ("qwen3-8b", "nvidia_h200"),
        ],
    )
    def test_the_registered_model_path_and_gpu_name_select_their_profile(
        self, snapshot: EstimateSnapshot, model: str, gpu: str
    ) -> None:
        """A served name with its org or directory and the GPU as nvidia-smi names it find qwen3-8b@h200."""
        summary = engine_summary(snapshot)
        registered = _registered(summary, hardware_profile=None, model=model, gpu=gpu)
        inputs = ebplus_inputs(_with(snapshot, engine=registered))
        assert inputs is not None
        assert (inputs.cost_model, inputs.cost_model_id) == (
            calibration_profile("qwen3-8b@h200").cost_model,
            "qwen3-8b@h200",
        )

    def test_the_declared_profile_wins_over_the_model_and_gpu(self, snapshot: EstimateSnapshot) -> None:
        summary = engine_summary(snapshot)
        registered = _registered(summary, hardware_profile="qwen3-8b@rtx-pro-6000", model="Qwen3-8B", gpu="H200")
        inputs = ebplus_inputs(_with(snapshot, engine=registered))
        assert inputs is not None
        assert inputs.cost_model_id == "qwen3-8b@rtx-pro-6000"

    def test_a_gpu_of_the_same_family_is_not_taken_for_a_calibrated_one(self, snapshot: EstimateSnapshot) -> None:
        """H200 NVL was not calibrated: no profile is guessed for it, so the cost model is left to the fits."""
        summary = engine_summary(snapshot)
        registered = _registered(summary, hardware_profile=None, model="Qwen/Qwen3-8B", gpu="NVIDIA H200 NVL")
        inputs = ebplus_inputs(_with(snapshot, engine=registered))
        assert inputs is not None
        assert (inputs.cost_model, inputs.declared_profile) == (None, None)

    def test_unknown_hardware_leaves_the_cost_model_to_the_params(self, snapshot: EstimateSnapshot) -> None:
        summary = engine_summary(snapshot)
        unknown = _registered(summary, hardware_profile=None, model="m", gpu="g")
        inputs = ebplus_inputs(_with(snapshot, engine=unknown))
        assert inputs is not None
        assert summary.cost.prefill is None  # mixed batching: no pure-prefill fit yet
        assert inputs.cost_model is None

    def test_unknown_hardware_with_online_fits_uses_the_engines_own_cost_model(
        self, snapshot: EstimateSnapshot
    ) -> None:
        summary = engine_summary(snapshot)
        unknown = _registered(summary, hardware_profile=None, model="m", gpu="g")
        prefill = LinearCostFit(alpha_s=0.02, beta_s_per_unit=1e-4, n_samples=10, residual_std_s=0.0)
        cost = changed(summary.cost, prefill=prefill)
        inputs = ebplus_inputs(_with(snapshot, engine=unknown, cost=cost))
        assert inputs is not None
        assert inputs.cost_model is not None
        assert summary.cost.decode is not None
        assert (inputs.cost_model.alpha_p_s, inputs.cost_model.beta_d_s_per_seq) == (
            0.02,
            summary.cost.decode.beta_s_per_unit,
        )
        assert inputs.cost_model_id == "online"

    def test_kv_capacity_comes_from_the_registration_else_the_last_step(self, snapshot: EstimateSnapshot) -> None:
        summary = engine_summary(snapshot)
        assert summary.engine is not None
        assert summary.last_step is not None
        registered = ebplus_inputs(snapshot)
        step = changed(summary.last_step, kv_capacity_tokens=99)
        unregistered = ebplus_inputs(_with(snapshot, engine=_registered(summary, kv_blocks_total=0), last_step=step))
        assert registered is not None
        assert unregistered is not None
        expected = summary.engine.kv_blocks_total * summary.engine.block_size_tokens
        assert (registered.kv_capacity_tokens, unregistered.kv_capacity_tokens) == (expected, 99)

    def test_non_positive_p0_of_bounded_lengths_is_floored_to_one_over_mu_o(self, snapshot: EstimateSnapshot) -> None:
        summary = engine_summary(snapshot)
        assert summary.hazard is not None
        assert summary.mu_o_tokens is not None
        hazard = changed(summary.hazard, p0_per_token=-0.0134)
        inputs = ebplus_inputs(_with(snapshot, hazard=hazard))
        assert inputs is not None
        assert inputs.p0 == pytest.approx(1.0 / summary.mu_o_tokens)

    def test_no_decision_without_a_hazard_fit(self, snapshot: EstimateSnapshot) -> None:
        assert ebplus_inputs(_with(snapshot, hazard=None)) is None

    def test_guard_reads_the_tightest_tier_slo_and_the_token_budget(self, snapshot: EstimateSnapshot) -> None:
        summary = engine_summary(snapshot)
        assert summary.engine is not None
        inputs = ebplus_inputs(snapshot)
        assert inputs is not None
        tightest = min(t.tbt_slo_s for t in summary.tiers.values() if t.tbt_slo_s is not None)
        assert (inputs.tbt_slo_min_s, inputs.token_budget_tokens) == (
            tightest,
            summary.engine.max_num_batched_tokens,
        )

    def test_no_tier_slo_leaves_the_guard_without_a_bound(self, snapshot: EstimateSnapshot) -> None:
        inputs = ebplus_inputs(_with(snapshot, tiers={}))
        assert inputs is not None
        assert inputs.tbt_slo_min_s is None


class TestEbplusSpec:
    def test_fires_every_t_upd_completions(self) -> None:
        spec = ebplus_spec()
        assert spec.trigger.describe() == "every 100 request.finished"

    def test_the_demo_stream_decides_eb_plus_from_its_snapshots(self, demo_plane: OfflineControlPlane) -> None:
        decided = {d.scope for d in demo_plane.decisions if d.kind == "ebplus" and d.accepted}
        snapshotted = {s.scope for s in demo_plane.snapshots if s.trigger.kind == "ebplus"}
        assert decided == snapshotted != set()
