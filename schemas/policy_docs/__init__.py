"""Policy documents: the shared base and one document per paper."""

from schemas.policy_docs.base import ClampRecord, ContractModel, InputsDigest, PolicyDocument, SourceOffset
from schemas.policy_docs.fleetopt import (
    FleetoptCost,
    FleetoptFleet,
    FleetoptParamsOverrides,
    FleetoptPayload,
    FleetoptPlanInputs,
    FleetoptPolicy,
    FleetoptPoolHold,
    FleetoptPoolPrediction,
    FleetoptPoolSpec,
    FleetoptPredictions,
    FleetoptRouting,
    FleetoptState,
    FleetoptWhatIfInput,
)

__all__ = [
    "ClampRecord",
    "ContractModel",
    "FleetoptCost",
    "FleetoptFleet",
    "FleetoptParamsOverrides",
    "FleetoptPayload",
    "FleetoptPlanInputs",
    "FleetoptPolicy",
    "FleetoptPoolHold",
    "FleetoptPoolPrediction",
    "FleetoptPoolSpec",
    "FleetoptPredictions",
    "FleetoptRouting",
    "FleetoptState",
    "FleetoptWhatIfInput",
    "InputsDigest",
    "PolicyDocument",
    "SourceOffset",
]
