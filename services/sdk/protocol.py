"""The two seams between an engine and the control plane: where telemetry goes, where policies come from.

A real engine uses the Kafka ``TelemetryPublisher`` and the Redis ``PolicyClient``; the simulator's
offline loop mode plugs the in-process control plane into the same seams, and tests use the
in-memory implementations below. Neither method may block for long or raise into the engine's
loop (DESIGN principle 5).
"""

from __future__ import annotations

from typing import Protocol

from schemas.events import Event
from schemas.policy_docs.base import PolicyDocument


class TelemetrySink(Protocol):
    """Where an engine's events go, in the engine's own order."""

    def publish(self, event: Event) -> None:
        """Hand one event over; never blocks for long and never raises."""
        ...


class PolicySource(Protocol):
    """Where an engine reads the policy documents it obeys."""

    def current(self, kind: str, scope: str, now_s: float) -> PolicyDocument | None:
        """Return the valid document of ``kind`` for ``scope`` at event time ``now_s``, or None.

        None means: no valid document (none yet, or past ``valid_until``); the engine then applies
        the policy's documented safe defaults.
        """
        ...


class ListSink:
    """A ``TelemetrySink`` that keeps every event in a list (tests, recording a simulated run)."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def publish(self, event: Event) -> None:
        """Append ``event``."""
        self.events.append(event)


class StaticPolicySource:
    """A ``PolicySource`` serving fixed documents (tests, what-if runs), honouring ``valid_until``."""

    def __init__(self, documents: list[PolicyDocument] | None = None) -> None:
        self._documents: dict[tuple[str, str], PolicyDocument] = {}
        for document in documents or []:
            self.put(document)

    def put(self, document: PolicyDocument) -> None:
        """Serve ``document`` for its (kind, scope) from now on."""
        self._documents[(document.kind, document.scope)] = document

    def current(self, kind: str, scope: str, now_s: float) -> PolicyDocument | None:
        """Return the stored document while ``now_s <= valid_until``, else None."""
        document = self._documents.get((kind, scope))
        if document is None or now_s > document.valid_until:
            return None
        return document
