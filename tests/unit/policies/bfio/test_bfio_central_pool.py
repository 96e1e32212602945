"""Central-pool assignments: per-request assignments with validity, computed like the router's."""

from __future__ import annotations

from policies.bfio.central_pool import decide_assignments
from policies.bfio.decide import build_payload
from policies.bfio.params import BfioParams
from schemas.policy_docs.base import InputsDigest
from schemas.policy_docs.bfio import (
    ActiveRequestDoc,
    BfioPolicy,
    BfioState,
    BfioStepInput,
    RankDoc,
    WaitingRequestDoc,
)


def _policy(valid_until: float) -> BfioPolicy:
    payload = build_payload(BfioParams(), horizon_steps=0)
    return BfioPolicy(
        scope="dp0",
        deployment="test",
        version=7,
        computed_at=0.0,
        valid_until=valid_until,
        inputs=InputsDigest(snapshot_id="s"),
        payload=payload,
        state=BfioState(horizon_steps=0),
    )


STEP = BfioStepInput(
    step_index=40,
    now_s=2.0,
    waiting=[WaitingRequestDoc(request_id=f"r{i}", prompt_tokens=p, arrival_s=1.0) for i, p in enumerate([10, 30, 50])],
    ranks=[
        RankDoc(free_slots=1, active=[ActiveRequestDoc(prompt_tokens=100, generated_tokens=0)]),
        RankDoc(free_slots=1, active=[ActiveRequestDoc(prompt_tokens=70, generated_tokens=0)]),
    ],
)


class TestDecideAssignments:
    def test_assignments_carry_bundle_version_and_validity_window(self) -> None:
        plan = decide_assignments(STEP, _policy(valid_until=10.0), BfioParams(assignment_ttl_steps=25))
        # Loads 100 and 70, one slot each, prompts 10/30/50: the best pairs (10->0, 30->1), (30->0, 50->1)
        # and (10->0, 50->1) all leave J = 10; the solver breaks the tie towards the FIFO front.
        assert plan.objective_j_tokens == 10.0
        assert {(a.request_id, a.rank) for a in plan.assignments} == {("r0", 0), ("r1", 1)}
        assert all(a.bundle_version == 7 for a in plan.assignments)
        assert all((a.computed_at_step, a.valid_until_step) == (40, 65) for a in plan.assignments)
        assert plan.fallback_reason is None

    def test_expired_bundle_gives_a_flagged_jsq_plan(self) -> None:
        plan = decide_assignments(STEP, _policy(valid_until=1.0), BfioParams())
        assert plan.fallback_reason == "bundle_expired"
        assert plan.objective_j_tokens is None
        assert len(plan.assignments) == 2
