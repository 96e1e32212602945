"""Records the control plane itself writes to Kafka: dead letters, estimate snapshots, decisions.

These are the log's account of what the control plane did (DESIGN principles 1, 6 and 8): an
invalid event is never dropped silently, every estimate snapshot a decision read is on
``gov.estimates``, and every decision is on ``gov.policy.decisions``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, JsonValue, model_validator

from schemas.envelope import EventTime, Identifier
from schemas.estimates import EstimateSummary, check_summary_format
from schemas.policy_docs.base import ContractModel, SourceOffset


class DeadLetter(ContractModel):
    """An event that failed its contract, with the reason and where it was read."""

    record_type: Literal["deadletter"] = "deadletter"
    reason: str = Field(max_length=2048)
    field: str | None = Field(default=None, max_length=512)
    source: SourceOffset
    raw: str = Field(max_length=70_000, description="the offending bytes, decoded as UTF-8 with replacement")


class EstimateSnapshot(ContractModel):
    """An immutable, versioned estimate snapshot written at a trigger position.

    ``estimates`` is one of the typed summaries of schemas/estimates.py, each with its wire format.
    """

    record_type: Literal["estimate_snapshot"] = "estimate_snapshot"
    deployment: Identifier
    scope: Identifier
    snapshot_id: str = Field(min_length=1, max_length=128)
    version: int = Field(ge=1)
    ts: EventTime
    trigger: str = Field(max_length=128, description="what fired: completions:100, interval:10s, ...")
    offsets: list[SourceOffset] = Field(default_factory=list)
    estimates: EstimateSummary

    @model_validator(mode="before")
    @classmethod
    def _summary_format(cls, data: Any) -> Any:
        """Refuse a summary of another wire format in one line, before its fields are validated."""
        if isinstance(data, dict):
            check_summary_format(data.get("estimates"))
        return data


class DecisionRecord(ContractModel):
    """One policy decision as appended to ``gov.policy.decisions`` (key ``kind:scope``)."""

    record_type: Literal["decision"] = "decision"
    deployment: Identifier
    kind: Identifier
    scope: Identifier
    version: int = Field(ge=1)
    accepted: bool = Field(description="False when the compare-and-set refused the write")
    document: dict[str, JsonValue]
