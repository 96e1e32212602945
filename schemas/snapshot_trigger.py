"""What fired an estimate snapshot: the policy kind it was taken for and the cause, ``kind:cause`` on the wire.

``EstimateSnapshot.trigger`` travels as one string, ``ebplus:every 40 request.finished`` or
``fleetopt:fleet slot 12``; the policy service decides a snapshot with the policy its kind names.
``SnapshotTrigger`` is that string typed: built with ``SnapshotTrigger(kind=..., cause=...)``,
written by ``str()``, read by ``parse``. No other code formats or splits the string.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from pydantic import PlainSerializer, PlainValidator, WithJsonSchema

MAX_TRIGGER_CHARS = 128
TRIGGER_PATTERN = r"^[^:\s]+:.*$"


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotTrigger:
    """The policy ``kind`` a snapshot was taken for and the ``cause`` that fired it (``every 5s``, ``join``)."""

    kind: str
    cause: str

    def __post_init__(self) -> None:
        if not self.kind or ":" in self.kind or any(c.isspace() for c in self.kind):
            msg = f"a trigger's kind must be a non-empty word without ':' or spaces, got {self.kind!r}"
            raise ValueError(msg)
        text = str(self)
        if len(text) > MAX_TRIGGER_CHARS:
            msg = f"a trigger must be at most {MAX_TRIGGER_CHARS} characters, got {len(text)} ({text[:40]!r}...)"
            raise ValueError(msg)

    def __str__(self) -> str:
        """The wire form, ``kind:cause``."""
        return f"{self.kind}:{self.cause}"

    @classmethod
    def parse(cls, text: str) -> SnapshotTrigger:
        """Read the wire form ``kind:cause`` (the kind ends at the first ``:``).

        Raises:
            ValueError: no ``:``, an empty kind, or more than ``MAX_TRIGGER_CHARS`` characters.
        """
        kind, colon, cause = text.partition(":")
        if not colon:
            msg = f"a trigger reads 'kind:cause', got {text[:MAX_TRIGGER_CHARS]!r}"
            raise ValueError(msg)
        return cls(kind=kind, cause=cause)


def _validate(value: object) -> SnapshotTrigger:
    """Take a ``SnapshotTrigger`` as it is and parse the wire string; refuse anything else."""
    if isinstance(value, SnapshotTrigger):
        return value
    if isinstance(value, str):
        return SnapshotTrigger.parse(value)
    msg = f"a trigger is a 'kind:cause' string, got {type(value).__name__}"
    raise ValueError(msg)


TriggerField = Annotated[
    SnapshotTrigger,
    PlainValidator(_validate),
    PlainSerializer(str, return_type=str),
    WithJsonSchema({"type": "string", "maxLength": MAX_TRIGGER_CHARS, "pattern": TRIGGER_PATTERN}),
]
