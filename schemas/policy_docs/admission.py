"""The built-in admission-pressure policy document: a load signal a router or gateway can obey.

It is Governor's own small policy (not from the papers): from an engine's queue, KV use and the
ratio of arrivals to completions it says how hard the engine is pressed, so that a gateway can
steer or shed new work before queues explode.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from schemas.policy_docs.base import ContractModel, PolicyDocument

AdmissionLevel = Literal["ok", "busy", "overloaded"]


class AdmissionPayload(ContractModel):
    """What a gateway obeys: the pressure level and whether to hold new requests back."""

    pressure: float = Field(ge=0.0, le=1.0, description="0 idle .. 1 saturated")
    level: AdmissionLevel
    admit_fraction: float = Field(ge=0.0, le=1.0, description="share of new requests to send to this engine")


class AdmissionState(ContractModel):
    """Carried between decisions: the smoothed pressure and the last level, for hysteresis."""

    smoothed_pressure: float = Field(ge=0.0, le=1.0)
    level: AdmissionLevel


class AdmissionPolicy(PolicyDocument):
    """The admission-pressure document, one per engine."""

    kind: Literal["admission"] = "admission"
    payload: AdmissionPayload
    state: AdmissionState
