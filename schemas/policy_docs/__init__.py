"""Policy documents: the shared base and one document per paper."""

from schemas.policy_docs.base import ClampRecord, ContractModel, InputsDigest, PolicyDocument, SourceOffset

__all__ = ["ClampRecord", "ContractModel", "InputsDigest", "PolicyDocument", "SourceOffset"]
