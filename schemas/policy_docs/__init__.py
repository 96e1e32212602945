"""Policy documents: the shared base and one document per policy."""

from schemas.policy_docs.admission import AdmissionPayload, AdmissionPolicy, AdmissionState
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
from schemas.policy_docs.slai import (
    SlaiParamsOverride,
    SlaiPayload,
    SlaiPolicy,
    SlaiState,
    SlaiTierEstimate,
    SlaiWhatIfInput,
)

POLICY_DOCUMENTS: tuple[type[PolicyDocument], ...] = (
    AdmissionPolicy,
    EbplusPolicy,
    SlaiPolicy,
)

__all__ = [
    "POLICY_DOCUMENTS",
    "AdmissionPayload",
    "AdmissionPolicy",
    "AdmissionState",
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
    "SlaiParamsOverride",
    "SlaiPayload",
    "SlaiPolicy",
    "SlaiState",
    "SlaiTierEstimate",
    "SlaiWhatIfInput",
    "SourceOffset",
]
