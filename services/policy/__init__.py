"""The policy service: snapshots from ``gov.estimates`` decided (decide/) and written, with its Kafka loop."""

from services.policy.decisions import DecisionMaker
from services.policy.service import PolicyService

__all__ = ["DecisionMaker", "PolicyService"]
