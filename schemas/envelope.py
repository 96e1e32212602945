"""The event envelope every telemetry event carries (DESIGN section 5).

``schema_version`` pins the contract; ``event_id`` is unique for dedup; ``ts`` is event time in
seconds; ``seq`` is per-producer monotonic so consumers can detect gaps and restarts, and
``source_epoch`` (the producer's restart generation) disambiguates a ``seq`` that starts again at 0.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from schemas.policy_docs.base import ContractModel

SCHEMA_VERSION = 1
MAX_ID_CHARS = 128

Identifier = Annotated[str, Field(min_length=1, max_length=MAX_ID_CHARS, pattern=r"^[A-Za-z0-9_.:/@-]+$")]
EventTime = Annotated[float, Field(ge=0.0, allow_inf_nan=False, description="event time, seconds")]
Tokens = Annotated[int, Field(ge=0, le=10_000_000)]
Seconds = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]


class Envelope(ContractModel):
    """Fields every event shares; each event type subclasses it with its ``event_type`` literal."""

    schema_version: int = Field(default=SCHEMA_VERSION, ge=SCHEMA_VERSION, le=SCHEMA_VERSION)
    event_id: Identifier
    ts: EventTime
    deployment: Identifier
    engine_id: Identifier
    dp_rank: int | None = Field(default=None, ge=0, le=4096)
    seq: int = Field(ge=0, description="per-producer monotonic sequence number")
    source_epoch: int = Field(default=0, ge=0, description="producer restart generation")
    policy_versions: dict[Identifier, int] = Field(
        default_factory=dict, max_length=16, description="policy kind -> version in effect"
    )
