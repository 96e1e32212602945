"""Policy documents: the shared base and one document per paper."""

from schemas.policy_docs.base import ClampRecord, ContractModel, InputsDigest, PolicyDocument, SourceOffset
from schemas.policy_docs.ebplus import (
    BetaMbInput,
    CostModelInput,
    EbplusFallback,
    EbplusMode,
    EbplusParamsInput,
    EbplusPayload,
    EbplusPolicy,
    EbplusState,
    EbplusWhatIfInput,
    KvGate,
)

__all__ = [
    "BetaMbInput",
    "ClampRecord",
    "ContractModel",
    "CostModelInput",
    "EbplusFallback",
    "EbplusMode",
    "EbplusParamsInput",
    "EbplusPayload",
    "EbplusPolicy",
    "EbplusState",
    "EbplusWhatIfInput",
    "InputsDigest",
    "KvGate",
    "PolicyDocument",
    "SourceOffset",
]
