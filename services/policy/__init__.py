"""Policy services: the registry, the snapshot-to-document runner and the live service."""

from services.policy.decisions import DecisionMaker
from services.policy.registry import PolicyRegistry, PolicySpec
from services.policy.service import PolicyService
from services.policy.specs import default_registry

__all__ = [
    "DecisionMaker",
    "PolicyRegistry",
    "PolicyService",
    "PolicySpec",
    "default_registry",
]
