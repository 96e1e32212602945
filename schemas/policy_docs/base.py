"""The policy-document base model every pushed decision shares (DESIGN sections 4.5-4.7, 5).

Every document carries a monotonic ``version``, the event time it was computed at, the event
time it stays valid until, the digest of the inputs it was decided from, the decision's
diagnostics, the clamps applied by the guardrails, the version it replaces and, where the
deployment has a signing key, the policy service's signature (schemas/signing.py).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

FiniteTime = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]
MAX_VERSION = 2**53 - 1
"""The largest policy version (docs/contracts.md): the compare-and-set runs in Redis Lua, whose numbers are
doubles, exact for integers below 2**53 only. A version above it is refused at write and not read as a
version (the stored value counts as absent and is overwritten), so no value can freeze a scope."""
DiagnosticValue = float | int | str | bool | None


class ContractModel(BaseModel):
    """Base of every boundary model: frozen, strict, no unknown fields, no NaN or inf."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)


class SourceOffset(ContractModel):
    """One Kafka position a decision's inputs had folded up to."""

    topic: str = Field(min_length=1, max_length=249)
    partition: int = Field(ge=0)
    offset: int = Field(ge=-1)


class InputsDigest(ContractModel):
    """What a decision was computed from: the estimate snapshot and the Kafka offsets behind it."""

    snapshot_id: str = Field(min_length=1, max_length=128, description="content hash of the estimate snapshot")
    estimate_versions: dict[str, int] = Field(default_factory=dict)
    offsets: list[SourceOffset] = Field(default_factory=list)
    engines: list[str] = Field(default_factory=list, description="engines whose telemetry the inputs cover")


class ClampRecord(ContractModel):
    """A parameter the guardrails moved into its bounds before the push."""

    name: str = Field(min_length=1, max_length=128)
    decided: float | None = Field(description="the decided value; None when it was NaN")
    pushed: float


class DocumentSignature(ContractModel):
    """HMAC-SHA256 of a document's canonical encoding (schemas/signing.py) and the id of its key."""

    key_id: str = Field(min_length=1, max_length=64)
    hmac_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class PolicyDocument(ContractModel):
    """Fields every policy document shares; the four paper documents extend it."""

    kind: str = Field(min_length=1, max_length=32)
    scope: str = Field(min_length=1, max_length=128, description="engine id, DP deployment or fleet name")
    deployment: str = Field(min_length=1, max_length=128)
    version: int = Field(ge=1, le=MAX_VERSION)
    computed_at: FiniteTime = Field(description="event time the decision was computed at, seconds")
    valid_until: FiniteTime = Field(description="event time after which engines fall back, seconds")
    inputs: InputsDigest
    diagnostics: dict[str, DiagnosticValue] = Field(default_factory=dict)
    clamps: list[ClampRecord] = Field(default_factory=list)
    previous_version: int | None = Field(default=None, ge=1, le=MAX_VERSION)
    signature: DocumentSignature | None = Field(
        default=None, description="the policy service's signature; None where the deployment has no signing key"
    )

    @model_validator(mode="after")
    def _check_order(self) -> PolicyDocument:
        if self.valid_until < self.computed_at:
            msg = f"valid_until ({self.valid_until}) must not precede computed_at ({self.computed_at})"
            raise ValueError(msg)
        if self.previous_version is not None and self.previous_version >= self.version:
            msg = f"previous_version ({self.previous_version}) must be below version ({self.version})"
            raise ValueError(msg)
        return self
