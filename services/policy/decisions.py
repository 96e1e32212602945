"""``DecisionMaker``: from an estimate snapshot to stored, announced and recorded decisions.

The live policy service and the offline replay both call ``on_snapshot`` (STYLE principle 2). An
engine-scope snapshot is decided at once: find the policy it was taken for, read its previous
document from the store, decide (services/policy/runner.py), compare-and-set the new version into
the store (which announces it). A fleet-scope policy's per-engine slot contributions go to that
policy's ``FleetAggregator`` instead, and each fleet slot they close is decided the same way.

The policy set (services/policy/config.py) can narrow the engines a kind decides for
(``applies_to``); an engine outside it is skipped as ``not_applicable``. While an operator's pin
holds a key (services/policy/pins.py), the decision is recorded but not written.

With a signing keyring, every document is signed before it is stored (schemas/signing.py), and a
stored previous document that is not validly signed is not built upon (someone else wrote it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from pydantic import ValidationError

from schemas.errors import InvalidInputError
from schemas.estimates import EngineSummary
from schemas.policy_docs.base import PolicyDocument
from schemas.records import DecisionRecord, EstimateSnapshot
from schemas.signing import PolicyKeyring, sign, signature_problem
from services.policy.config import PolicySet
from services.policy.pins import PinBoard
from services.policy.registry import PolicyRegistry, PolicySpec
from services.policy.runner import Outcome, decide_from_snapshot, snapshot_kind
from services.store.protocol import Store
from services.stream.fleet import FleetAggregator
from services.triggers import EverySeconds

FLEET_STATE_PREFIX = "fleet-"


@dataclass(slots=True)
class Handled:
    """What one snapshot led to: fleet snapshots built (for the log) and decision records."""

    fleet_snapshots: list[EstimateSnapshot] = field(default_factory=list)
    records: list[DecisionRecord] = field(default_factory=list)


class DecisionMaker:
    """Decide, store and record, for every registered policy of one deployment."""

    def __init__(
        self,
        registry: PolicyRegistry,
        store: Store,
        *,
        pins: PinBoard | None = None,
        keyring: PolicyKeyring | None = None,
    ) -> None:
        self.policy_set = PolicySet(registry=registry)
        self._store = store
        self._pins = pins
        self._keyring = keyring
        self.aggregators: dict[str, FleetAggregator] = {}
        self.skipped: dict[str, int] = {}

    def configure(self, policy_set: PolicySet) -> None:
        """Decide with ``policy_set`` from the next snapshot on (a config record, applied in log order)."""
        self.policy_set = policy_set

    def previous(self, spec: PolicySpec, scope: str) -> PolicyDocument | None:
        """Return the stored document of the policy for ``scope``, or None.

        Raises:
            InvalidInputError: the stored document does not validate, or is not validly signed while
                the keyring is set (either way it is not ours to build upon or overwrite).
        """
        raw = self._store.get_policy(spec.kind, scope)
        if raw is None:
            return None
        try:
            document = spec.document_type.model_validate_json(raw)
        except ValidationError as exc:
            msg = f"stored {spec.kind} document for {scope} is invalid: {exc.errors(include_url=False)[0]['msg']}"
            raise InvalidInputError(msg, field="document") from exc
        problem = None if self._keyring is None else signature_problem(document, self._keyring)
        if problem is not None:
            msg = f"stored {spec.kind} document for {scope} is not validly signed ({problem})"
            raise InvalidInputError(msg, field="signature")
        return document

    def on_snapshot(self, snapshot: EstimateSnapshot) -> Handled:
        """Decide from ``snapshot`` (or fold it into its fleet aggregator) and return what followed."""
        spec = self.policy_set.registry.get(snapshot_kind(snapshot))
        handled = Handled()
        if spec.scope == "fleet":
            if snapshot.scope == "fleet":
                return handled
            for fleet_snapshot in self._aggregator(spec, snapshot.deployment).add(snapshot):
                handled.fleet_snapshots.append(fleet_snapshot)
                self._decide(spec, fleet_snapshot, handled)
            return handled
        summary = snapshot.estimates
        engine = summary.engine if isinstance(summary, EngineSummary) else None
        if not self.policy_set.applies(spec.kind, snapshot.scope, engine):
            self.skipped["not_applicable"] = self.skipped.get("not_applicable", 0) + 1
            return handled
        self._decide(spec, snapshot, handled)
        return handled

    def aggregator_states(self) -> dict[str, str]:
        """Each fleet aggregator's state (JSON) under its store scope ``fleet-{kind}``."""
        return {FLEET_STATE_PREFIX + kind: json.dumps(a.to_dict()) for kind, a in self.aggregators.items()}

    def load_aggregators(self, states: dict[str, str]) -> None:
        """Install aggregator states read back from the store."""
        for state in states.values():
            aggregator = FleetAggregator.from_dict(json.loads(state))
            self.aggregators[aggregator.kind] = aggregator

    def fleet_scopes(self) -> list[str]:
        """Store scopes of the registered fleet policies' aggregators."""
        return [FLEET_STATE_PREFIX + spec.kind for spec in self.policy_set.registry if spec.scope == "fleet"]

    def _aggregator(self, spec: PolicySpec, deployment: str) -> FleetAggregator:
        aggregator = self.aggregators.get(spec.kind)
        if aggregator is None:
            assert isinstance(spec.trigger, EverySeconds)
            aggregator = FleetAggregator(deployment=deployment, kind=spec.kind, slot_s=spec.trigger.seconds)
            self.aggregators[spec.kind] = aggregator
        return aggregator

    def _decide(self, spec: PolicySpec, snapshot: EstimateSnapshot, handled: Handled) -> None:
        outcome: Outcome = decide_from_snapshot(spec, snapshot, self.previous(spec, snapshot.scope))
        if outcome.document is None:
            reason = outcome.skipped or "unknown"
            self.skipped[reason] = self.skipped.get(reason, 0) + 1
            return
        document = outcome.document if self._keyring is None else sign(outcome.document, self._keyring.signing)
        held = self._pins is not None and self._pins.holds(spec.kind, document.scope)
        accepted = not held and self._store.put_policy(
            spec.kind, document.scope, document.version, document.model_dump_json()
        )
        handled.records.append(
            DecisionRecord(
                deployment=document.deployment,
                kind=spec.kind,
                scope=document.scope,
                version=document.version,
                accepted=accepted,
                document=json.loads(document.model_dump_json()),
                config=self.policy_set.digest,
                held_by_pin=held,
            )
        )
