"""BF-IO wiring: the bundle's inputs from a real DP engine summary, and the registered spec."""

from __future__ import annotations

import pytest

from schemas.estimates import StepModelFit
from schemas.policy_docs import BfioPolicy
from schemas.records import EstimateSnapshot
from services.policy.runner import decide_from_snapshot
from services.policy.specs import default_registry
from services.policy.wiring.bfio import bfio_inputs, bfio_spec
from services.policy.wiring.summary import engine_summary
from services.replay.offline import OfflineControlPlane
from services.triggers import EverySeconds
from tests.fixtures import last_snapshot


@pytest.fixture
def snapshot(demo_plane: OfflineControlPlane) -> EstimateSnapshot:
    """The last BF-IO snapshot of the demo's DP engine (4 ranks x 16 slots)."""
    return last_snapshot(demo_plane, "bfio", "dp-0")


def _with(snapshot: EstimateSnapshot, **update: object) -> EstimateSnapshot:
    return snapshot.model_copy(update={"estimates": engine_summary(snapshot).model_copy(update=update)})


class TestBfioInputs:
    def test_reads_shape_survival_and_step_model(self, snapshot: EstimateSnapshot) -> None:
        """G = dp_size, B = max_num_seqs / G, the survival table as class default, the fitted C and t_l."""
        summary = engine_summary(snapshot)
        assert summary.survival is not None
        assert summary.dp is not None
        assert summary.dp.step_model is not None
        inputs = bfio_inputs(snapshot)
        assert inputs is not None
        assert (inputs.num_ranks, inputs.slots_per_rank) == (4, 16)
        assert inputs.default_class == "default"
        (table,) = inputs.survival_tables
        assert table.edges_tokens == tuple(summary.survival.bin_edges_tokens)
        assert table.survival_frac == tuple(summary.survival.survival_frac)
        assert table.n_events == summary.survival.n_samples - summary.survival.n_censored
        model = summary.dp.step_model
        assert (inputs.step_c_s, inputs.step_t_l_s_per_token) == (model.c_s, model.t_l_s_per_token)

    def test_an_engine_without_a_registration_gets_no_bundle(self, snapshot: EstimateSnapshot) -> None:
        assert bfio_inputs(_with(snapshot, engine=None)) is None

    def test_missing_survival_and_unphysical_fit_are_left_out(self, snapshot: EstimateSnapshot) -> None:
        """No survival table and a negative t_l: no tables and no fitted step model (defaults apply)."""
        summary = engine_summary(snapshot)
        assert summary.dp is not None
        bad_fit = StepModelFit(c_s=0.005, t_l_s_per_token=-1e-7, n_samples=40)
        dp = summary.dp.model_copy(update={"step_model": bad_fit})
        inputs = bfio_inputs(_with(snapshot, survival=None, dp=dp))
        assert inputs is not None
        assert inputs.survival_tables == ()
        assert inputs.default_class is None
        assert inputs.step_c_s is None
        assert inputs.step_t_l_s_per_token is None


class TestBfioSpec:
    def test_registered_by_default_every_second(self) -> None:
        """default_registry runs the BF-IO bundle per engine on an event-time interval."""
        spec = default_registry().get("bfio")
        assert spec.scope == "engine"
        assert spec.trigger == EverySeconds(seconds=1.0)
        assert spec.document_type is BfioPolicy

    def test_decides_a_bundle_from_a_snapshot(self, snapshot: EstimateSnapshot) -> None:
        """The spec turns the DP summary into a BF-IO document with the fitted step model."""
        summary = engine_summary(snapshot)
        assert summary.dp is not None
        assert summary.dp.step_model is not None
        outcome = decide_from_snapshot(bfio_spec(interval_s=0.5), snapshot, None)
        document = outcome.document
        assert isinstance(document, BfioPolicy)
        assert document.scope == "dp-0"
        assert document.payload.step_model.c_s == pytest.approx(summary.dp.step_model.c_s)
        assert [t.traffic_class for t in document.payload.survival_tables] == ["default"]

    def test_only_dp_engines_are_snapshotted_for_it(self, demo_plane: OfflineControlPlane) -> None:
        assert {s.scope for s in demo_plane.snapshots if s.trigger.startswith("bfio:")} == {"dp-0"}
