"""The FleetOpt plan's fleet half as per-pool targets for the scaler (spec seed-002 section 5.3).

FleetOpt names two pools, ``short`` and ``long``; the scaler's pools carry the same names, so a
plan's ``fleet.short.n_gpus`` sizes the pool called ``short``.
"""

from __future__ import annotations

from typing import Literal

from policies.scaling.rules import PlanTarget
from schemas.policy_docs.fleetopt import FleetoptPolicy

FleetoptPoolName = Literal["short", "long"]
FLEETOPT_POOLS: tuple[FleetoptPoolName, ...] = ("short", "long")


def plan_targets(plan: FleetoptPolicy) -> dict[str, PlanTarget]:
    """Each FleetOpt pool's GPUs, with the plan's version and event time, keyed by pool name."""
    specs = {"short": plan.payload.fleet.short, "long": plan.payload.fleet.long}
    return {
        name: PlanTarget(n_gpus=spec.n_gpus, plan_version=plan.version, computed_at_s=plan.computed_at)
        for name, spec in specs.items()
    }
