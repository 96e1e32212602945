"""Shadow policies: a candidate configuration decided on the live snapshots, recorded, never written.

A shadow decides every snapshot the live policy service reads (the engine snapshots and the fleet
snapshots the live aggregators close) with its own configuration's params and ``applies_to``, from
its own previous documents, and its decision records go to ``gov.policy.decisions`` with
``shadow`` set to its name. It never touches the keys engines read; its previous documents live
with the service's committed state, so a restarted service continues each shadow's versions.
``governor shadow report`` joins shadow and live records on the snapshot they were decided from.
"""

from __future__ import annotations

import json

from decide.from_snapshot import decide_from_snapshot
from decide.registry import PolicySpec
from schemas.estimates import EngineSummary
from schemas.policy_docs.base import PolicyDocument
from schemas.records import DecisionRecord, EstimateSnapshot
from services.policy.config import PolicySet

SHADOW_STATE_PREFIX = "shadow-"


class ShadowPolicy:
    """One named shadow configuration and its own previous documents by (kind, scope)."""

    def __init__(self, name: str, policy_set: PolicySet) -> None:
        self.name = name
        self.policy_set = policy_set
        self._previous: dict[str, PolicyDocument] = {}

    @property
    def state_scope(self) -> str:
        """Store scope of this shadow's previous documents."""
        return SHADOW_STATE_PREFIX + self.name

    def on_snapshot(self, snapshot: EstimateSnapshot, fleet_snapshots: list[EstimateSnapshot]) -> list[DecisionRecord]:
        """Decide ``snapshot`` (or, for a fleet policy, the fleet snapshots it closed) as the shadow."""
        spec = self.policy_set.registry.get(snapshot.trigger.kind)
        if spec.scope == "fleet":
            return [r for s in fleet_snapshots if (r := self._decide(spec, s)) is not None]
        summary = snapshot.estimates
        engine = summary.engine if isinstance(summary, EngineSummary) else None
        if not self.policy_set.applies(spec.kind, snapshot.scope, engine):
            return []
        record = self._decide(spec, snapshot)
        return [] if record is None else [record]

    def _decide(self, spec: PolicySpec, snapshot: EstimateSnapshot) -> DecisionRecord | None:
        key = f"{spec.kind}:{snapshot.scope}"
        document = decide_from_snapshot(spec, snapshot, self._previous.get(key)).document
        if document is None:
            return None
        self._previous[key] = document
        return DecisionRecord(
            deployment=document.deployment,
            kind=spec.kind,
            scope=document.scope,
            version=document.version,
            accepted=False,
            document=json.loads(document.model_dump_json()),
            config=self.policy_set.digest,
            shadow=self.name,
        )

    def state(self) -> str:
        """The previous documents as JSON, ``kind:scope -> document``."""
        return json.dumps({key: json.loads(doc.model_dump_json()) for key, doc in sorted(self._previous.items())})

    def load(self, state: str) -> None:
        """Install previous documents read back from the store (kinds no longer registered are dropped)."""
        kinds = set(self.policy_set.registry.kinds())
        for key, body in json.loads(state).items():
            kind = key.split(":", 1)[0]
            if kind in kinds:
                document_type = self.policy_set.registry.get(kind).document_type
                self._previous[key] = document_type.model_validate_json(json.dumps(body))
