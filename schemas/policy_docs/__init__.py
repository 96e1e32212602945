"""Policy documents: the shared base and one document per paper."""

from schemas.policy_docs.base import ClampRecord, ContractModel, InputsDigest, PolicyDocument, SourceOffset
from schemas.policy_docs.slai import (
    SlaiParamsOverride,
    SlaiPayload,
    SlaiPolicy,
    SlaiState,
    SlaiTierEstimate,
    SlaiWhatIfInput,
)

__all__ = [
    "ClampRecord",
    "ContractModel",
    "InputsDigest",
    "PolicyDocument",
    "SlaiParamsOverride",
    "SlaiPayload",
    "SlaiPolicy",
    "SlaiState",
    "SlaiTierEstimate",
    "SlaiWhatIfInput",
    "SourceOffset",
]
