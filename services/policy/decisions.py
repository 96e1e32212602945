"""``DecisionMaker``: from an estimate snapshot to stored, announced and recorded decisions.

The live policy service and the offline replay both call ``on_snapshot`` (STYLE principle 2). An
engine-scope snapshot is decided at once: find the policy it was taken for, read its previous
document from the store, decide (decide/from_snapshot.py), compare-and-set the new version into
the store (which announces it). A fleet-scope policy's per-engine slot contributions go to that
policy's ``FleetAggregator`` instead, and each fleet slot they close is decided the same way. A BF-IO
snapshot of an engine registered as a rank of a ``dp_group`` goes to ``DpGroups`` and is decided for the
group, whose bundle ``governor gateway`` reads (decide/wiring/bfio.py).

The policy set (services/policy/config.py) can narrow the engines a kind decides for
(``applies_to``); an engine outside it is skipped as ``not_applicable``. While an operator's pin
holds a key (services/policy/pins.py), the decision is recorded but not written.

With a signing keyring, every document is signed before it is stored (schemas/signing.py).

A stored value the policy cannot build upon (not JSON, not a valid document, a key of another Redis
type, a version outside the contract's bound, or not validly signed while the keyring is set: someone
else wrote it) is reported once per key (``policy_key_unreadable``) and replaced: the next decision
starts afresh and is numbered above the stored value's version (when it has one inside the bound),
so one malformed key never blocks its scope and a huge version cannot freeze it.

Two phases, for the live service's outbox order (services/delivery.py): ``stage`` decides and returns
the decision records with the writes they imply, without writing (later snapshots of the same batch
build on the staged documents); the caller flushes the records to ``gov.policy.decisions`` and only
then calls ``apply`` to compare-and-set the writes into the store. ``on_snapshot`` does both at once
(the offline replay and tests).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import structlog
from pydantic import ValidationError

from decide.from_snapshot import Outcome, decide_from_snapshot
from decide.registry import PolicyRegistry, PolicySpec
from decide.wiring.bfio import BFIO_KIND, DpGroups
from fold.fleet import FleetAggregator, SilenceRule
from fold.triggers import EverySeconds
from schemas.errors import UnreadableValueError
from schemas.estimates import EngineSummary, FleetSilence
from schemas.policy_docs.base import PolicyDocument
from schemas.records import DecisionRecord, EstimateSnapshot
from schemas.signing import PolicyKeyring, sign, signature_problem
from services.health import ServiceMetrics
from services.policy.config import PolicySet
from services.policy.pins import PinBoard
from services.store.policy_versions import stored_version
from services.store.protocol import Store

log = structlog.get_logger(__name__)

FLEET_STATE_PREFIX = "fleet-"
UNREADABLE_KEYS_LOGGED = 1000  # keys reported once each; the set is capped


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyWrite:
    """A decided document not yet compare-and-set into the store, and the record that announces it."""

    kind: str
    scope: str
    version: int
    document_json: str
    record: DecisionRecord


@dataclass(slots=True)
class Handled:
    """What one snapshot led to: fleet snapshots built (for the log), decision records, and their writes."""

    fleet_snapshots: list[EstimateSnapshot] = field(default_factory=list)
    records: list[DecisionRecord] = field(default_factory=list)
    writes: list[PolicyWrite] = field(default_factory=list)


class DecisionMaker:
    """Decide, store and record, for every registered policy of one deployment."""

    def __init__(
        self,
        registry: PolicyRegistry,
        store: Store,
        *,
        pins: PinBoard | None = None,
        keyring: PolicyKeyring | None = None,
        metrics: ServiceMetrics | None = None,
        fleet_silence: SilenceRule = "lag",
    ) -> None:
        """``fleet_silence`` is how the fleet aggregators find an engine silent (fold/fleet.py):
        ``lag`` for the offline replay, ``declared`` for the live service."""
        self.policy_set = PolicySet(registry=registry)
        self.fleet_silence: SilenceRule = fleet_silence
        self._metrics = metrics
        self._store = store
        self._pins = pins
        self._keyring = keyring
        self.aggregators: dict[str, FleetAggregator] = {}
        self.dp_groups: DpGroups | None = None
        self.skipped: dict[str, int] = {}
        self.unreadable_keys = 0
        self._staged: dict[tuple[str, str], PolicyDocument] = {}
        self._reported: set[tuple[str, str]] = set()

    def configure(self, policy_set: PolicySet) -> None:
        """Decide with ``policy_set`` from the next snapshot on (a config record, applied in log order)."""
        self.policy_set = policy_set

    def previous(self, spec: PolicySpec, scope: str) -> tuple[PolicyDocument | None, int]:
        """Return the document the next decision of (kind, scope) builds on, and the version to number above.

        A staged (decided, not yet written) document wins over the store. A stored value that does not
        validate, or is not validly signed while the keyring is set, is not built upon (reported once
        per key): the newest valid document of the key's history is, and the next version is numbered
        above both, so the decision replaces the bad value and engines that cached the last good
        document take it.
        """
        staged = self._staged.get((spec.kind, scope))
        if staged is not None:
            return staged, staged.version
        try:
            raw = self._store.get_policy(spec.kind, scope)
        except UnreadableValueError as exc:
            self._unreadable(spec.kind, scope, str(exc))
            raw = ""
        if raw is None:
            return None, 0
        document, problem = self._readable(spec, raw) if raw else (None, "")
        if document is not None:
            return document, document.version
        if raw:
            self._unreadable(spec.kind, scope, problem)
        floor_version = stored_version(raw) or 0
        for entry in self._history(spec.kind, scope):
            earlier, _ = self._readable(spec, entry)
            if earlier is not None:
                return earlier, max(floor_version, earlier.version)
        return None, floor_version

    def _history(self, kind: str, scope: str) -> list[str]:
        """The key's history, newest first; none when its key holds another type (``put_policy`` replaces it)."""
        try:
            return self._store.policy_history(kind, scope)
        except UnreadableValueError as exc:
            self._unreadable(kind, scope, str(exc))
            return []

    def _readable(self, spec: PolicySpec, raw: str) -> tuple[PolicyDocument | None, str]:
        """The document in ``raw`` when it validates (and is validly signed, with a keyring), else why not."""
        try:
            document = spec.document_type.model_validate_json(raw)
        except ValidationError as exc:
            return None, exc.errors(include_url=False)[0]["msg"]
        problem = None if self._keyring is None else signature_problem(document, self._keyring)
        if problem is not None:
            return None, f"not validly signed ({problem})"
        return document, ""

    def _unreadable(self, kind: str, scope: str, reason: str) -> None:
        self.unreadable_keys += 1
        if self._metrics is not None:
            self._metrics.stored_value_unreadable("policy_key")
        key = (kind, scope)
        if key not in self._reported and len(self._reported) < UNREADABLE_KEYS_LOGGED:
            self._reported.add(key)
            log.warning("policy_key_unreadable", kind=kind, scope=scope, reason=reason, action="overwrite")

    def on_snapshot(self, snapshot: EstimateSnapshot) -> Handled:
        """Decide from ``snapshot`` and write the decisions at once (``stage`` then ``apply``)."""
        handled = self.stage(snapshot)
        refused = self.apply(list(handled.writes))
        handled.records = [refused.get(id(record), record) for record in handled.records]
        return handled

    def apply(self, writes: list[PolicyWrite]) -> dict[int, DecisionRecord]:
        """Compare-and-set staged ``writes`` in order, taking each off the list once done.

        Returns:
            For each write the store refused (someone wrote an equal or newer version between the read
            and the write), the corrected record (``accepted`` False), by ``id`` of the staged record.

        Raises:
            BackendUnavailableError: the store failed; ``writes`` holds what is left, the failed write
                first, so a retry with the same list resumes there. A write that landed although its
                reply was lost is refused on the retry as not newer, and counts as written.
        """
        refused: dict[int, DecisionRecord] = {}
        while writes:
            write = writes[0]
            written = self._store.put_policy(write.kind, write.scope, write.version, write.document_json)
            if not written and self._store_version(write.kind, write.scope) != write.version:
                refused[id(write.record)] = write.record.model_copy(update={"accepted": False})
            staged = self._staged.get((write.kind, write.scope))
            if staged is not None and staged.version == write.version:
                del self._staged[(write.kind, write.scope)]
            writes.pop(0)
        return refused

    def discard_staged(self) -> None:
        """Forget staged documents (their batch failed before its writes and will be decided again)."""
        self._staged.clear()

    def _store_version(self, kind: str, scope: str) -> int | None:
        try:
            return stored_version(self._store.get_policy(kind, scope))
        except UnreadableValueError:
            return None

    def stage(self, snapshot: EstimateSnapshot) -> Handled:
        """Decide from ``snapshot`` (or fold it into its fleet aggregator) without writing; return what followed."""
        spec = self.policy_set.registry.get(snapshot.trigger.kind)
        handled = Handled()
        if spec.scope == "fleet":
            silence = snapshot.estimates if isinstance(snapshot.estimates, FleetSilence) else None
            if snapshot.scope == "fleet" and silence is None:
                return handled
            aggregator = self._aggregator(spec, snapshot.deployment)
            quarantined = set(aggregator.quarantined)
            silenced = set(aggregator.silenced)
            for fleet_snapshot in aggregator.add(snapshot):
                handled.fleet_snapshots.append(fleet_snapshot)
                self._decide(spec, fleet_snapshot, handled)
            _report_quarantine(spec.kind, quarantined, aggregator)
            _report_silence(spec.kind, silenced, aggregator, silence)
            return handled
        summary = snapshot.estimates
        engine = summary.engine if isinstance(summary, EngineSummary) else None
        if not self.policy_set.applies(spec.kind, snapshot.scope, engine):
            self.skipped["not_applicable"] = self.skipped.get("not_applicable", 0) + 1
            return handled
        group = self._dp_groups(spec).add(snapshot) if spec.kind == BFIO_KIND else None
        self._decide(spec, snapshot if group is None else group, handled)
        return handled

    def _dp_groups(self, spec: PolicySpec) -> DpGroups:
        """The BF-IO groups, decided once per slot of the spec's interval."""
        if self.dp_groups is None:
            assert isinstance(spec.trigger, EverySeconds)
            self.dp_groups = DpGroups(slot_s=spec.trigger.seconds)
        return self.dp_groups

    def aggregator_states(self) -> dict[str, str]:
        """Each fleet aggregator's state (JSON) under its store scope ``fleet-{kind}``."""
        return {FLEET_STATE_PREFIX + kind: json.dumps(a.to_dict()) for kind, a in self.aggregators.items()}

    def load_aggregators(self, states: dict[str, str]) -> None:
        """Install aggregator states read back from the store."""
        for state in states.values():
            aggregator = FleetAggregator.from_dict(json.loads(state), silence=self.fleet_silence)
            self.aggregators[aggregator.kind] = aggregator

    def fleet_scopes(self) -> list[str]:
        """Store scopes of the registered fleet policies' aggregators."""
        return [FLEET_STATE_PREFIX + spec.kind for spec in self.policy_set.registry if spec.scope == "fleet"]

    def _aggregator(self, spec: PolicySpec, deployment: str) -> FleetAggregator:
        aggregator = self.aggregators.get(spec.kind)
        if aggregator is None:
            assert isinstance(spec.trigger, EverySeconds)
            aggregator = FleetAggregator(
                deployment=deployment, kind=spec.kind, slot_s=spec.trigger.seconds, silence=self.fleet_silence
            )
            self.aggregators[spec.kind] = aggregator
        return aggregator

    def _decide(self, spec: PolicySpec, snapshot: EstimateSnapshot, handled: Handled) -> None:
        previous, floor_version = self.previous(spec, snapshot.scope)
        outcome: Outcome = decide_from_snapshot(spec, snapshot, previous, floor_version=floor_version)
        if outcome.document is None:
            reason = outcome.skipped or "unknown"
            self.skipped[reason] = self.skipped.get(reason, 0) + 1
            return
        document = outcome.document if self._keyring is None else sign(outcome.document, self._keyring.signing)
        held = self._pins is not None and self._pins.holds(spec.kind, document.scope)
        document_json = document.model_dump_json()
        record = DecisionRecord(
            deployment=document.deployment,
            kind=spec.kind,
            scope=document.scope,
            version=document.version,
            accepted=not held,
            document=json.loads(document_json),
            config=self.policy_set.digest,
            held_by_pin=held,
        )
        handled.records.append(record)
        if not held:
            self._staged[(spec.kind, document.scope)] = document
            handled.writes.append(
                PolicyWrite(
                    kind=spec.kind,
                    scope=document.scope,
                    version=document.version,
                    document_json=document_json,
                    record=record,
                )
            )


def _report_quarantine(kind: str, before: set[str], aggregator: FleetAggregator) -> None:
    """Log each engine the fleet aggregator quarantined (a far clock) or trusted again, once per change."""
    newest = max(aggregator.watermarks.values(), default=None)
    for engine in sorted(set(aggregator.quarantined) - before):
        log.warning(
            "engine_quarantined",
            kind=kind,
            engine_id=engine,
            engine_slot=aggregator.quarantined[engine],
            fleet_slot=newest,
            max_lead_slots=aggregator.silent_slots,
        )
    for engine in sorted(before - set(aggregator.quarantined)):
        log.info("engine_trusted_again", kind=kind, engine_id=engine, fleet_slot=newest)


def _report_silence(kind: str, before: set[str], aggregator: FleetAggregator, silence: FleetSilence | None) -> None:
    """Log each engine a declaration made silent (or that it left unchanged), and each that spoke again."""
    for engine in sorted(set(aggregator.silenced) - before):
        log.warning(
            "engine_declared_silent",
            kind=kind,
            engine_id=engine,
            engine_slot=aggregator.silenced[engine],
            waited_s=None if silence is None else silence.waited_s,
        )
    if silence is not None and silence.engine not in aggregator.silenced:
        log.info("silence_declaration_stale", kind=kind, engine_id=silence.engine, engine_slot=silence.engine_slot)
    for engine in sorted(before - set(aggregator.silenced)):
        log.info("engine_speaks_again", kind=kind, engine_id=engine, fleet_slot=aggregator.closed_through)
