"""``OfflineControlPlane``: the whole control loop in-process, on event time, without Kafka or Redis.

It is at once a ``TelemetrySink`` (events go in, in order) and a ``PolicySource`` (documents come
out), so the simulator's offline loop mode and ``governor replay --offline`` run the very same
fold and decide code as the live services (DESIGN principle 2), deterministically.
"""

from __future__ import annotations

from decide.registry import PolicyRegistry
from fold.folder import Folder
from schemas.errors import InvalidInputError
from schemas.events import Event
from schemas.names import RecordPosition
from schemas.policy_docs.base import PolicyDocument
from schemas.records import DecisionRecord, EstimateSnapshot
from services.policy.decisions import DecisionMaker
from services.store.memory_store import MemoryStore

OFFLINE_TOPIC = "offline"


class OfflineControlPlane:
    """Fold events, take snapshots, decide and serve documents, all in-process."""

    def __init__(self, deployment: str, registry: PolicyRegistry) -> None:
        self.deployment = deployment
        self.registry = registry
        self.store = MemoryStore()
        self.folder = Folder(deployment, registry)
        self.decider = DecisionMaker(registry, self.store)
        self.snapshots: list[EstimateSnapshot] = []
        self.decisions: list[DecisionRecord] = []
        self.events_folded = 0
        self.refused: dict[str, int] = {}
        self._documents: dict[tuple[str, str], PolicyDocument] = {}

    def publish(self, event: Event) -> None:
        """Fold one event; decide at every snapshot it triggers (one merged stream: its time is the watermark).

        An event its engine's guard refuses (an older producer generation, a time out of bounds) is
        counted in ``refused`` under its code, as the live processor dead-letters it; a duplicate
        folds nothing.
        """
        position = RecordPosition(OFFLINE_TOPIC, 0, self.events_folded)
        self.events_folded += 1
        try:
            taken = self.folder.fold(event, position)
        except InvalidInputError as exc:
            self.refused[exc.code] = self.refused.get(exc.code, 0) + 1
            return
        for snapshot in [*self.folder.release(event.ts), *taken]:
            self.snapshots.append(snapshot)
            self.apply_snapshot(snapshot)

    def apply_snapshot(self, snapshot: EstimateSnapshot) -> None:
        """Decide from one snapshot and keep the decisions (and the fleet snapshots it closed)."""
        handled = self.decider.on_snapshot(snapshot)
        self.snapshots.extend(handled.fleet_snapshots)
        for record in handled.records:
            self.decisions.append(record)
            if record.accepted:
                spec = self.registry.get(record.kind)
                self._documents[(record.kind, record.scope)] = spec.document_type.model_validate(record.document)

    def current(self, kind: str, scope: str, now_s: float) -> PolicyDocument | None:
        """Return the latest document of (kind, scope) while it is valid at ``now_s``."""
        document = self._documents.get((kind, scope))
        if document is None or now_s > document.valid_until:
            return None
        return document
