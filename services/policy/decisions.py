"""``DecisionMaker``: from an estimate snapshot to a stored, announced and recorded decision.

The live policy service and the offline replay both call ``on_snapshot`` (STYLE principle 2):
find the policy the snapshot was taken for, read its previous document from the store, decide
(services/policy/runner.py), compare-and-set the new version into the store (which announces it)
and return the decision record for ``gov.policy.decisions``.
"""

from __future__ import annotations

import json

from pydantic import ValidationError

from schemas.errors import InvalidInputError
from schemas.policy_docs.base import PolicyDocument
from schemas.records import DecisionRecord, EstimateSnapshot
from services.policy.registry import PolicyRegistry, PolicySpec
from services.policy.runner import Outcome, decide_from_snapshot, snapshot_kind
from services.store.protocol import Store


class DecisionMaker:
    """Decide, store and record, for every registered policy of one deployment."""

    def __init__(self, registry: PolicyRegistry, store: Store) -> None:
        self._registry = registry
        self._store = store
        self.skipped: dict[str, int] = {}

    def previous(self, spec: PolicySpec, scope: str) -> PolicyDocument | None:
        """Return the stored document of the policy for ``scope``, or None.

        Raises:
            InvalidInputError: the stored document does not validate (it is not ours to overwrite).
        """
        raw = self._store.get_policy(spec.kind, scope)
        if raw is None:
            return None
        try:
            return spec.document_type.model_validate_json(raw)
        except ValidationError as exc:
            msg = f"stored {spec.kind} document for {scope} is invalid: {exc.errors(include_url=False)[0]['msg']}"
            raise InvalidInputError(msg, field="document") from exc

    def on_snapshot(self, snapshot: EstimateSnapshot) -> DecisionRecord | None:
        """Decide from ``snapshot``; return the decision record, or None when nothing was decided."""
        spec = self._registry.get(snapshot_kind(snapshot))
        outcome: Outcome = decide_from_snapshot(spec, snapshot, self.previous(spec, snapshot.scope))
        if outcome.document is None:
            reason = outcome.skipped or "unknown"
            self.skipped[reason] = self.skipped.get(reason, 0) + 1
            return None
        document = outcome.document
        accepted = self._store.put_policy(spec.kind, document.scope, document.version, document.model_dump_json())
        return DecisionRecord(
            deployment=document.deployment,
            kind=spec.kind,
            scope=document.scope,
            version=document.version,
            accepted=accepted,
            document=json.loads(document.model_dump_json()),
        )
