"""The telemetry event union, discriminated on ``event_type``, and the one way to parse it.

``parse_event`` is the edge: it validates once and turns pydantic's errors into an
``InvalidInputError`` whose message names the field path and the reason (and the source, when
given). Past it, code trusts the type.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated

from pydantic import Field, TypeAdapter, ValidationError

from schemas.engines import EngineRegistered, Heartbeat, PolicyApplied
from schemas.errors import InvalidInputError
from schemas.gateway import GatewayCompressed, GatewayQueued, GatewayRouted, GatewayShed, GatewayUpstreamError
from schemas.requests import RequestAdmitted, RequestArrived, RequestFinished, RequestFirstToken, RequestPreempted
from schemas.steps import BfioSelfCheckReport, RankStepReport, StepReport

MAX_EVENT_BYTES = 64 * 1024

Event = Annotated[
    RequestArrived
    | RequestAdmitted
    | RequestFirstToken
    | RequestFinished
    | RequestPreempted
    | StepReport
    | RankStepReport
    | BfioSelfCheckReport
    | EngineRegistered
    | Heartbeat
    | PolicyApplied
    | GatewayRouted
    | GatewayQueued
    | GatewayCompressed
    | GatewayShed
    | GatewayUpstreamError,
    Field(discriminator="event_type"),
]

EVENT_TYPES: tuple[type[Event], ...] = (
    RequestArrived,
    RequestAdmitted,
    RequestFirstToken,
    RequestFinished,
    RequestPreempted,
    StepReport,
    RankStepReport,
    BfioSelfCheckReport,
    EngineRegistered,
    Heartbeat,
    PolicyApplied,
    GatewayRouted,
    GatewayQueued,
    GatewayCompressed,
    GatewayShed,
    GatewayUpstreamError,
)

EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)
_TAGS = frozenset(cls.model_fields["event_type"].default for cls in EVENT_TYPES)


def describe_validation_error(exc: ValidationError) -> tuple[str, str]:
    """Return (field path, reason) of the first error pydantic reported."""
    first = exc.errors(include_url=False)[0]
    if first["type"] in {"union_tag_invalid", "union_tag_not_found"}:
        return "event_type", first["msg"]
    loc = list(first["loc"])
    if loc and loc[0] in _TAGS:
        loc = loc[1:]
    path = ".".join(str(part) for part in loc) or "<event>"
    return path, first["msg"]


def parse_event(raw: bytes | str | None, *, source: str | Callable[[], str] | None = None) -> Event:
    """Validate one JSON-encoded event.

    Args:
        raw: the JSON text of one event (a Kafka record's value, which may be None: a tombstone).
        source: where it came from (``line 17``, ``gov.telemetry:0@42``), for the message; a callable
            is called only for a refused event (a consumer's record position is not worth spelling
            for every record it parses).

    Returns:
        The typed event.

    Raises:
        InvalidInputError: the text is not JSON, is too large, or fails the contract; the message
            names the field path and the reason, and its ``code`` says which (``no_value``,
            ``not_json``, ``oversized``, ``contract``).
    """
    if not isinstance(raw, bytes | str):
        spelled = _spelled(source)
        kind = "no value (a tombstone)" if raw is None else f"a {type(raw).__name__}, not JSON text"
        msg = f"the record holds {kind}{_where(spelled)}"
        raise InvalidInputError(msg, source=spelled, code="no_value" if raw is None else "not_json")
    if len(raw) > MAX_EVENT_BYTES:
        spelled = _spelled(source)
        msg = f"event is {len(raw)} bytes, more than {MAX_EVENT_BYTES}{_where(spelled)}"
        raise InvalidInputError(msg, source=spelled, code="oversized")
    try:
        return EVENT_ADAPTER.validate_json(raw)
    except ValidationError as exc:
        spelled = _spelled(source)
        path, reason = describe_validation_error(exc)
        msg = f"{path}: {reason}{_where(spelled)}"
        not_json = exc.errors(include_url=False)[0]["type"] == "json_invalid"
        raise InvalidInputError(msg, field=path, source=spelled, code="not_json" if not_json else "contract") from exc


def _spelled(source: str | Callable[[], str] | None) -> str | None:
    """``source`` as text: a callable's answer, for a refused event's message."""
    return source() if callable(source) else source


def _where(source: str | None) -> str:
    """The message's note of where the event came from (built only for a message)."""
    return f" ({source})" if source else ""


def encode_event(event: Event) -> bytes:
    """Return the canonical JSON bytes of ``event`` (what producers put on the wire)."""
    return event.model_dump_json(exclude_none=True).encode()


def event_json_schema() -> str:
    """Return the JSON Schema of the event union, as stable, indented text."""
    return json.dumps(EVENT_ADAPTER.json_schema(), indent=2, sort_keys=True) + "\n"
