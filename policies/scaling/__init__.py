"""The scaler's pure core: FleetOpt pool sizes to replica changes under min/max, step, cool-down and hold."""

from policies.scaling.plan import FLEETOPT_POOLS, FleetoptPoolName, plan_targets
from policies.scaling.rules import (
    PlanTarget,
    PoolDecision,
    PoolLimits,
    PoolMemory,
    ScaleReason,
    decide_pool,
    desired_replicas,
    replicas_for_gpus,
)

__all__ = [
    "FLEETOPT_POOLS",
    "FleetoptPoolName",
    "PlanTarget",
    "PoolDecision",
    "PoolLimits",
    "PoolMemory",
    "ScaleReason",
    "decide_pool",
    "desired_replicas",
    "plan_targets",
    "replicas_for_gpus",
]
