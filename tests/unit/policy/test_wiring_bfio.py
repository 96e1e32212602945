"""BF-IO wiring: the bundle's inputs from a DP engine summary, and the registered spec."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import JsonValue

from schemas.policy_docs import BfioPolicy
from schemas.records import EstimateSnapshot
from services.policy.registry import EverySeconds
from services.policy.runner import decide_from_snapshot
from services.policy.specs import default_registry
from services.policy.wiring.bfio import bfio_inputs, bfio_spec


def _snapshot(estimates: dict[str, Any]) -> EstimateSnapshot:
    body: dict[str, JsonValue] = estimates
    return EstimateSnapshot(
        deployment="dep",
        scope="dp-0",
        snapshot_id="sha256:test",
        version=1,
        ts=10.0,
        trigger="bfio:every 1s",
        estimates=body,
    )


SURVIVAL = {
    "bin_edges_tokens": [0, 1, 2, 4, 8, 16],
    "survival": [1.0, 0.9, 0.7, 0.5, 0.2, 0.0],
    "n_samples": 120,
    "n_censored": 20,
}
ENGINE = {"dp_size": 4, "max_num_seqs": 288}
DP = {"step_model": {"c_s": 0.005, "t_l_s_per_token": 1e-7, "n_samples": 40}}


class TestBfioInputs:
    def test_reads_shape_survival_and_step_model(self) -> None:
        """G = dp_size, B = max_num_seqs / G, the survival table as class default, the fitted C and t_l."""
        inputs = bfio_inputs(_snapshot({"engine": ENGINE, "survival": SURVIVAL, "dp": DP}))
        assert inputs is not None
        assert (inputs.num_ranks, inputs.slots_per_rank) == (4, 72)
        assert inputs.default_class == "default"
        (table,) = inputs.survival_tables
        assert table.edges_tokens == (0.0, 1.0, 2.0, 4.0, 8.0, 16.0)
        assert table.survival_frac[3] == 0.5
        assert table.n_events == 100
        assert (inputs.step_c_s, inputs.step_t_l_s_per_token) == (0.005, 1e-7)

    def test_an_engine_without_dp_size_gets_no_bundle(self) -> None:
        """A single engine (no dp_size in its registration) is not a DP deployment."""
        assert bfio_inputs(_snapshot({"engine": {"max_num_seqs": 256}, "survival": SURVIVAL})) is None
        assert bfio_inputs(_snapshot({})) is None

    def test_missing_survival_and_unphysical_fit_are_left_out(self) -> None:
        """No survival table and a negative t_l: no tables and no fitted step model (defaults apply)."""
        dp = {"step_model": {"c_s": 0.005, "t_l_s_per_token": -1e-7, "n_samples": 40}}
        inputs = bfio_inputs(_snapshot({"engine": ENGINE, "survival": None, "dp": dp}))
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

    def test_decides_a_bundle_from_a_snapshot(self) -> None:
        """The spec turns a DP summary into a BF-IO document: H capped at the median output (4 tokens)."""
        spec = bfio_spec(interval_s=0.5)
        outcome = decide_from_snapshot(spec, _snapshot({"engine": ENGINE, "survival": SURVIVAL, "dp": DP}), None)
        document = outcome.document
        assert isinstance(document, BfioPolicy)
        assert document.scope == "dp-0"
        assert document.payload.horizon_steps == 4
        assert document.payload.step_model.c_s == pytest.approx(0.005)
        assert [t.traffic_class for t in document.payload.survival_tables] == ["default"]

    def test_skips_a_single_engine(self) -> None:
        """No inputs, no document."""
        outcome = decide_from_snapshot(bfio_spec(), _snapshot({"engine": {"max_num_seqs": 8}}), None)
        assert outcome.document is None
