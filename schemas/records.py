"""Records the control plane itself writes to Kafka: dead letters, estimate snapshots, configs, decisions.

These are the log's account of what the control plane did (DESIGN principles 1, 6 and 8): an
invalid event is never dropped silently, every estimate snapshot a decision read is on
``gov.estimates``, every policy configuration the policy service applied is on ``gov.estimates``
between the snapshots it was applied before, and every decision (the policy's own, a shadow
policy's, an operator's pin or unpin) is on ``gov.policy.decisions``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, JsonValue, model_validator

from schemas.envelope import EventTime, Identifier
from schemas.errors import InputErrorCode
from schemas.estimates import EstimateSummary, check_summary_format
from schemas.policy_docs.base import ContractModel, DocumentSignature, SourceOffset
from schemas.snapshot_trigger import TriggerField


class DeadLetter(ContractModel):
    """An event that failed its contract, with the reason and where it was read."""

    record_type: Literal["deadletter"] = "deadletter"
    code: InputErrorCode = Field(default="contract", description="why (schemas/errors.py); older records lack it")
    reason: str = Field(max_length=2048)
    field: str | None = Field(default=None, max_length=512)
    source: SourceOffset
    raw: str = Field(max_length=70_000, description="the offending bytes, decoded as UTF-8 with replacement")


SnapshotProducer = Literal["stream", "policy"]


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
    trigger: TriggerField = Field(
        description="what fired, ``kind:cause``: the policy kind it was taken for and why (ebplus:every 40 "
        "request.finished, fleetopt:fleet slot 12, ...)"
    )
    offsets: list[SourceOffset] = Field(default_factory=list)
    estimates: EstimateSummary
    producer: SnapshotProducer | None = Field(
        default=None, description="the service that took it: stream (engines' snapshots) or policy (fleet snapshots)"
    )
    signature: DocumentSignature | None = Field(
        default=None, description="the producer's HMAC-SHA256 (schemas/signing.py); None: the deployment signs nothing"
    )

    @model_validator(mode="before")
    @classmethod
    def _summary_format(cls, data: Any) -> Any:
        """Refuse a summary of another wire format in one line, before its fields are validated."""
        if isinstance(data, dict):
            check_summary_format(data.get("estimates"))
        return data


class PolicyConfigRecord(ContractModel):
    """A policy configuration as the policy service applies it, in the order of ``gov.estimates``.

    ``name`` is ``live`` for the configuration the service decides with, or a shadow policy's name.
    A record with no ``config`` returns ``live`` to the built-in defaults, or stops the shadow.
    The configuration itself is validated by the policy service (services/policy/config.py).
    """

    record_type: Literal["policy_config"] = "policy_config"
    deployment: Identifier
    name: Identifier
    config: dict[str, JsonValue] | None
    digest: str | None = Field(max_length=64, description="content hash of ``config``; None without one")
    source: str = Field(default="", max_length=1024, description="the file it was read from, for the record")


class CheckpointDocument(ContractModel):
    """A policy document as the store held it when a checkpoint was taken (the next decision builds on it)."""

    kind: Identifier
    scope: Identifier
    document: str = Field(description="the stored document JSON, as written")


class StateCheckpoint(ContractModel):
    """A service's committed state of one partition, with the offset it covers, on ``gov.checkpoints``.

    Written after a commit, every ``GOVERNOR_CHECKPOINT_INTERVAL_S``, keyed
    ``{deployment}:{consumer}:{topic}:{partition}`` on a compacted topic, so the last checkpoint of each
    partition stays after the records it was folded from have expired. A service that finds no applied
    offset for a partition in Redis resumes from it: ``states`` and ``values`` go back into Redis with
    ``offset`` as the applied offset, and the log is read from ``offset + 1`` (services/checkpoints.py).
    """

    record_type: Literal["state_checkpoint"] = "state_checkpoint"
    format: Literal[1] = 1
    deployment: Identifier
    consumer: Identifier = Field(description="the service whose state it is: ``stream`` or ``policy``")
    topic: str = Field(min_length=1, max_length=249, description="the topic the state was folded from")
    partition: int = Field(ge=0)
    offset: int = Field(ge=0, description="the last offset of the partition the state covers")
    topic_id: str | None = Field(description="the id of the log ``offset`` refers to; None where the broker has none")
    states: dict[str, str] = Field(description="store scope -> state JSON, as the service commits them")
    values: dict[str, str] = Field(
        default_factory=dict, description="Redis key -> value written with the states (the engines' summaries)"
    )
    documents: list[CheckpointDocument] = Field(
        default_factory=list, description="the policy documents the partition's decisions build on (policy service)"
    )


class PinDetails(ContractModel):
    """What an operator pinned: the payload keys set, for how long, and the version it replaced."""

    values: dict[str, JsonValue] = Field(description="dotted payload key -> value the pin set")
    for_s: float = Field(gt=0.0, allow_inf_nan=False, description="how long the pin holds, wall-clock seconds")
    expires_at_unix_s: float = Field(ge=0.0, allow_inf_nan=False, description="wall-clock time the pin expires")
    replaced_version: int = Field(ge=1, description="the version of the document the pin replaced")


class DecisionRecord(ContractModel):
    """One policy decision as appended to ``gov.policy.decisions`` (key ``kind:scope``).

    ``origin`` says who decided: the policy service (``policy``) or an operator (``pin``, ``unpin``).
    A policy decision is written to the key engines read unless a shadow policy made it
    (``shadow``), or an operator's pin holds the key (``held_by_pin``); ``accepted`` says whether
    it was written.
    """

    record_type: Literal["decision"] = "decision"
    deployment: Identifier
    kind: Identifier
    scope: Identifier
    version: int = Field(ge=1)
    accepted: bool = Field(description="False when the document was not written (refused, shadow or pinned)")
    document: dict[str, JsonValue]
    origin: Literal["policy", "pin", "unpin"] = "policy"
    config: str | None = Field(default=None, max_length=64, description="digest of the config it was decided with")
    shadow: Identifier | None = Field(default=None, description="the shadow policy that decided it; never written")
    held_by_pin: bool = Field(default=False, description="an operator's pin held the key, so it was not written")
    pin: PinDetails | None = Field(default=None, description="what the operator pinned (origin pin or unpin)")
