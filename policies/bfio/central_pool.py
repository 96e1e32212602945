"""Central-pool mode: BF-IO assignments computed by the policy service; specs/seed-003-bfio.md sections 6.1, 6.5.

When requests wait in a central pool for much longer than the control loop takes (the overloaded regime,
TTFT of seconds), the policy service may solve (IO) from step and queue telemetry and push one short-lived
assignment per request (``bfio:{dep}:assign:{req_id}``). Each carries the bundle version and the last
decode step it is valid for; the router applies it only while it is still valid against live capacity
and solves locally otherwise (``BfioRouter.route(pushed=...)``).

The plan is computed by the same router code as the hot path, with a clock that never advances, so the
solve is deterministic and never falls back on time (a policy service has no per-step deadline).
"""

from __future__ import annotations

from dataclasses import dataclass

from policies.bfio.params import BfioParams
from policies.bfio.router import BfioRouter
from schemas.policy_docs.bfio import BfioAssignment, BfioPolicy, BfioStepInput


@dataclass(frozen=True, slots=True, kw_only=True)
class AssignmentPlan:
    """Assignments for one step's waiting pool.

    Attributes:
        assignments: one per admitted request, each valid until ``valid_until_step``.
        objective_j_tokens: predicted J of the plan, or None when BF-IO did not run (fallback mode).
        fallback_reason: why the plan is not BF-IO (no_bundle, bundle_expired), or None.
        forced: requests admitted by the starvation guard.
    """

    assignments: tuple[BfioAssignment, ...]
    objective_j_tokens: float | None
    fallback_reason: str | None
    forced: int


def _frozen_clock() -> float:
    return 0.0


def decide_assignments(step: BfioStepInput, policy: BfioPolicy, params: BfioParams) -> AssignmentPlan:
    """Solve one step of (IO) for the central pool and return per-request assignments with their validity.

    Args:
        step: waiting pool, ranks and event time of the step (``step.bundle`` is ignored: ``policy`` rules).
        policy: the bundle in force; past its ``valid_until`` the plan is JSQ-by-load, flagged.
        params: ``assignment_ttl_steps`` sets each assignment's ``valid_until_step``.
    """
    router = BfioRouter(clock=_frozen_clock, policy=policy)
    waiting, active, free_slots = router.batches(step.waiting, step.ranks)
    routing = router.route(
        waiting=waiting, active=active, free_slots=free_slots, now_s=step.now_s, step_index=step.step_index
    )
    objective = routing.objective_j_tokens
    assignments = tuple(
        BfioAssignment(
            request_id=request_id,
            rank=rank,
            bundle_version=policy.version,
            computed_at_step=step.step_index,
            valid_until_step=step.step_index + params.assignment_ttl_steps,
            plan_objective_j_tokens=max(0.0, objective or 0.0),
        )
        for request_id, rank in routing.assignments
    )
    return AssignmentPlan(
        assignments=assignments,
        objective_j_tokens=objective,
        fallback_reason=routing.fallback_reason,
        forced=routing.forced,
    )
