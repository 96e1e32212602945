"""Policy documents: the shared base and one document per policy."""

from schemas.policy_docs.admission import AdmissionPayload, AdmissionPolicy, AdmissionState
from schemas.policy_docs.base import ClampRecord, ContractModel, InputsDigest, PolicyDocument, SourceOffset

POLICY_DOCUMENTS: tuple[type[PolicyDocument], ...] = (AdmissionPolicy,)

__all__ = [
    "POLICY_DOCUMENTS",
    "AdmissionPayload",
    "AdmissionPolicy",
    "AdmissionState",
    "ClampRecord",
    "ContractModel",
    "InputsDigest",
    "PolicyDocument",
    "SourceOffset",
]
