"""The event envelope every telemetry event carries (DESIGN section 5).

``schema_version`` pins the contract; ``event_id`` is unique for dedup; ``ts`` is event time in
seconds; ``seq`` is per-producer monotonic so consumers can detect gaps and restarts, and
``source_epoch`` (the producer's restart generation) disambiguates a ``seq`` that starts again at 0.

Two kinds of names (docs/contracts.md, "Identifiers and key namespaces"):

- ``Identifier``: a name that may become part of a Redis key or a store scope (deployment, engine,
  policy kind, scope, shadow name). It refuses ``:`` (the key separator), ``/`` and path-like forms
  (a leading or trailing ``.``, ``..``), so no identifier can reach into another key's namespace
  (schemas/names.py); ``EngineId`` also refuses the scopes the control plane reserves (``fleet``).
- ``Label``: a name that is only ever a value (a model such as ``Qwen/Qwen3-8B``, a GPU, a pool,
  a tier, a request or event id): it keeps ``:`` and ``/`` and never builds a key.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

from schemas.names import IDENTIFIER_PATTERN, RESERVED_SCOPES
from schemas.policy_docs.base import ContractModel

SCHEMA_VERSION = 1
MAX_ID_CHARS = 128

LABEL_PATTERN = r"^[A-Za-z0-9_.:/@-]+$"


def _not_reserved(engine_id: str) -> str:
    """Refuse an engine id that names a scope of the control plane's own (an engine ``fleet`` would be the fleet)."""
    if engine_id in RESERVED_SCOPES:
        msg = f"engine id {engine_id!r} is reserved for the control plane's own scope"
        raise ValueError(msg)
    return engine_id


Identifier = Annotated[str, Field(min_length=1, max_length=MAX_ID_CHARS, pattern=IDENTIFIER_PATTERN)]
EngineId = Annotated[Identifier, AfterValidator(_not_reserved)]
Label = Annotated[str, Field(min_length=1, max_length=MAX_ID_CHARS, pattern=LABEL_PATTERN)]
EventTime = Annotated[float, Field(ge=0.0, allow_inf_nan=False, description="event time, seconds")]
Tokens = Annotated[int, Field(ge=0, le=10_000_000)]
Seconds = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]


class Envelope(ContractModel):
    """Fields every event shares; each event type subclasses it with its ``event_type`` literal."""

    schema_version: int = Field(default=SCHEMA_VERSION, ge=SCHEMA_VERSION, le=SCHEMA_VERSION)
    event_id: Label
    ts: EventTime
    deployment: Identifier
    engine_id: EngineId
    dp_rank: int | None = Field(default=None, ge=0, le=4096)
    seq: int = Field(ge=0, description="per-producer monotonic sequence number")
    source_epoch: int = Field(default=0, ge=0, description="producer restart generation")
    policy_versions: dict[Identifier, int] = Field(
        default_factory=dict, max_length=16, description="policy kind -> version in effect"
    )
