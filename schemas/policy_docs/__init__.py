"""Policy documents: the shared base and one document per paper."""

from schemas.policy_docs.base import ClampRecord, ContractModel, InputsDigest, PolicyDocument, SourceOffset
from schemas.policy_docs.bfio import (
    ActiveRequestDoc,
    BfioAssignment,
    BfioParamsOverride,
    BfioPayload,
    BfioPolicy,
    BfioState,
    BfioStepInput,
    BfioWhatIfInput,
    RankDoc,
    StepModelDoc,
    SurvivalTableDoc,
    SurvivalTableInput,
    WaitingRequestDoc,
)

__all__ = [
    "ActiveRequestDoc",
    "BfioAssignment",
    "BfioParamsOverride",
    "BfioPayload",
    "BfioPolicy",
    "BfioState",
    "BfioStepInput",
    "BfioWhatIfInput",
    "ClampRecord",
    "ContractModel",
    "InputsDigest",
    "PolicyDocument",
    "RankDoc",
    "SourceOffset",
    "StepModelDoc",
    "SurvivalTableDoc",
    "SurvivalTableInput",
    "WaitingRequestDoc",
]
