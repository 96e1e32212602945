"""The BF-IO bundle decision: usable survival tables, H cap and hysteresis, step model, clamps."""

from __future__ import annotations

import pytest

from policies.bfio.decide import decide
from policies.bfio.inputs import BfioInputs, SurvivalTable
from policies.bfio.params import BfioParams
from schemas.errors import InvalidInputError
from schemas.policy_docs.base import InputsDigest
from schemas.policy_docs.bfio import BfioPayload, BfioPolicy, BfioState


def _table(name: str = "chat", events: int = 500, median_edge: float = 64.0) -> SurvivalTable:
    return SurvivalTable(
        traffic_class=name,
        edges_tokens=(1.0, median_edge, 4 * median_edge),
        survival_frac=(0.9, 0.5, 0.1),
        n_samples=events + 100,
        n_censored=100,
    )


def _previous(payload: BfioPayload, state: BfioState) -> BfioPolicy:
    return BfioPolicy(
        scope="dp0",
        deployment="test",
        version=1,
        computed_at=0.0,
        valid_until=30.0,
        inputs=InputsDigest(snapshot_id="s"),
        payload=payload,
        state=state,
    )


LOOKAHEAD = BfioParams(horizon_steps=20)  # the paper's Table 1 H, as an operator would configure it


class TestDecide:
    def test_default_is_myopic_even_with_a_usable_table(self) -> None:
        """Lookahead is the operator's choice: by default H = 0, which H > 0 never beat without length hints."""
        inputs = BfioInputs(num_ranks=32, slots_per_rank=72, survival_tables=(_table(),), default_class="chat")
        decision = decide(inputs, None, BfioParams(), 0.0)
        assert decision.payload.horizon_steps == 0
        assert decision.payload.horizon_grid_steps == [0]
        assert [t.traffic_class for t in decision.payload.survival_tables] == ["chat"]

    def test_usable_table_keeps_the_configured_horizon_and_ships_the_table(self) -> None:
        inputs = BfioInputs(num_ranks=32, slots_per_rank=72, survival_tables=(_table(),), default_class="chat")
        decision = decide(inputs, None, LOOKAHEAD, 0.0)
        assert decision.payload.horizon_steps == 20
        assert decision.payload.horizon_grid_steps == [0, 1, 2, 4, 8, 16, 20]
        assert [t.traffic_class for t in decision.payload.survival_tables] == ["chat"]
        assert decision.payload.default_class == "chat"
        assert decision.valid_for_s == 30.0

    def test_thin_tables_are_dropped_and_h_falls_to_zero(self) -> None:
        inputs = BfioInputs(num_ranks=4, slots_per_rank=8, survival_tables=(_table(events=10),), default_class="chat")
        decision = decide(inputs, None, BfioParams(), 0.0)
        assert decision.payload.horizon_steps == 0
        assert decision.payload.survival_tables == []
        assert decision.payload.default_class is None
        assert decision.diagnostics["dropped_tables"] == 1

    def test_h_is_capped_at_the_shortest_median_output(self) -> None:
        inputs = BfioInputs(num_ranks=4, slots_per_rank=8, survival_tables=(_table(median_edge=7.0), _table("code")))
        decision = decide(inputs, None, LOOKAHEAD, 0.0)
        assert decision.payload.horizon_steps == 7

    def test_a_new_h_needs_two_proposals_in_a_row(self) -> None:
        params = LOOKAHEAD
        long = BfioInputs(num_ranks=4, slots_per_rank=8, survival_tables=(_table(),))
        short = BfioInputs(num_ranks=4, slots_per_rank=8, survival_tables=(_table(median_edge=4.0),))
        first = decide(long, None, params, 0.0)
        second = decide(short, _previous(first.payload, first.state), params, 1.0)
        assert second.payload.horizon_steps == 20
        assert (second.state.pending_horizon_steps, second.state.pending_count) == (4, 1)
        third = decide(short, _previous(second.payload, second.state), params, 2.0)
        assert third.payload.horizon_steps == 4
        assert third.state.pending_horizon_steps is None

    def test_fitted_step_model_replaces_the_reference_constants(self) -> None:
        fitted = BfioInputs(num_ranks=4, slots_per_rank=8, step_c_s=0.02, step_t_l_s_per_token=2e-7)
        assert decide(fitted, None, BfioParams(), 0.0).payload.step_model.c_s == 0.02
        unfitted = BfioInputs(num_ranks=4, slots_per_rank=8)
        assert decide(unfitted, None, BfioParams(), 0.0).payload.step_model.c_s == pytest.approx(4.8875e-3)

    def test_out_of_bound_parameters_are_clamped_and_flagged(self) -> None:
        inputs = BfioInputs(num_ranks=4, slots_per_rank=8, step_c_s=3.0)
        decision = decide(inputs, None, BfioParams(candidate_window=5000), 0.0)
        assert decision.payload.candidate_window == 1024
        assert decision.payload.step_model.c_s == 1.0
        assert {c.name for c in decision.clamps} == {"candidate_window", "step_model.c_s"}

    def test_bad_inputs_are_refused(self) -> None:
        with pytest.raises(InvalidInputError, match="num_ranks"):
            BfioInputs(num_ranks=0, slots_per_rank=8)
        with pytest.raises(InvalidInputError, match="aging_deadline_s"):
            BfioParams(aging_deadline_s=-1.0)
