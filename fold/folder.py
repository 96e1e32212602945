"""The pure fold: telemetry events into per-engine estimates, and the trigger positions.

``Folder`` holds the estimate state of the engines a processor owns. ``admit`` checks one event
against its engine's guard (fold/event_guard.py: duplicates are skipped, ``seq`` gaps and
restarts counted, events of an older generation or out of time bounds refused); ``apply`` folds an
admitted event into its engine's estimates and returns the estimate snapshots taken at this
position: for each registered engine-scope policy whose trigger fires here (every N events of a
type, or every T seconds of event time on that engine's stream), and, for each fleet-scope policy,
the engine's contribution to the fleet slot this event's time has just left (fold/fleet.py).
Everything is a function of the event sequence alone, so the live processor and the offline
replay produce identical snapshots (DESIGN principle 2), and an engine's state round-trips
through JSON for the store.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable

from fold.engine_estimates import EngineEstimates
from fold.event_guard import DEFAULT_LIMITS, Admission, GuardLimits
from fold.fleet import CONTRIBUTION_TRIGGER, JOIN_TRIGGER, FleetSlot
from fold.snapshot_id import snapshot_id
from fold.triggers import EveryEvents, EverySeconds, TriggerSpec
from schemas.engines import EngineRegistered
from schemas.errors import InvalidInputError
from schemas.estimates import EngineRegistration, FleetContribution, FleetJoin
from schemas.events import Event
from schemas.names import RecordPosition
from schemas.records import EstimateSnapshot
from schemas.snapshot_trigger import SnapshotTrigger

REGISTRATION_GRACE_S = 60.0  # event time an engine's events wait for its registration (the services' default)


class Folder:
    """Per-engine estimates of one deployment, and the snapshots their triggers take.

    An engine exists for the control plane (its triggers fire, it contributes to fleet slots) once it
    has registered (``engine.registered``) or once ``registration_grace_s`` of event time have passed
    since its first event. Until then its events are folded but take no snapshot, so a stray event
    with a made-up engine id creates no policy document.
    """

    def __init__(
        self,
        deployment: str,
        registry: Iterable[TriggerSpec],
        *,
        registration_grace_s: float = REGISTRATION_GRACE_S,
        limits: GuardLimits = DEFAULT_LIMITS,
    ) -> None:
        """Fold for ``deployment``, snapshotting for each policy of ``registry`` (a ``PolicyRegistry``).

        ``limits`` bound every engine's guard; the live processor and an offline replay that are to
        agree must use the same.
        """
        self._deployment = deployment
        self._registration_grace_s = registration_grace_s
        self._limits = limits
        specs = list(registry)
        self._specs: list[TriggerSpec] = [spec for spec in specs if spec.scope == "engine"]
        self._fleet_specs: list[TriggerSpec] = [spec for spec in specs if spec.scope == "fleet"]
        self.engines: dict[str, EngineEstimates] = {}
        self._folded_through: dict[str, dict[str, int]] = {}
        self._first_ts: dict[str, float] = {}
        self._held: dict[str, list[EstimateSnapshot]] = {}
        self._applicable: dict[str, tuple[EngineRegistration | None, list[TriggerSpec]]] = {}

    def has(self, engine_id: str) -> bool:
        """True when the engine's estimates are in memory."""
        return engine_id in self.engines

    def load(self, engine_id: str, state_json: str | None) -> None:
        """Install an engine's stored state (or a fresh one when None).

        Raises:
            InvalidInputError: ``state_json`` is not a state this fold wrote (not JSON, another shape or
                format, or another engine's): nothing of the engine is installed, and the caller decides
                what replaces it (the stream processor reports it and starts the engine afresh).
        """
        self._first_ts.pop(engine_id, None)
        self._held.pop(engine_id, None)
        if state_json is None:
            self.engines[engine_id] = EngineEstimates(engine_id, self._limits)
            self._folded_through[engine_id] = {}
            return
        try:
            data = json.loads(state_json)
            folded_through = {str(k): int(v) for k, v in data.pop("folded_through", {}).items()}
            held = [EstimateSnapshot.model_validate(snapshot) for snapshot in data.pop("held_contributions", [])]
            first_ts = data.pop("first_ts", None)
            estimates = EngineEstimates.from_dict(data, self._limits)
            first = None if first_ts is None else float(first_ts)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            msg = f"stored state of engine {engine_id} cannot be read: {type(exc).__name__}: {exc}"[:500]
            raise InvalidInputError(msg, field="state", value=engine_id) from exc
        if estimates.engine_id != engine_id:
            msg = f"stored state of engine {engine_id} holds the estimates of engine {estimates.engine_id}"
            raise InvalidInputError(msg, field="state.engine_id", value=estimates.engine_id)
        self._folded_through[engine_id] = folded_through
        if held:
            self._held[engine_id] = held
        if first is not None:
            self._first_ts[engine_id] = first
        self.engines[engine_id] = estimates

    def drop(self, engine_ids: list[str]) -> None:
        """Forget engines (their partition moved to another processor)."""
        for engine_id in engine_ids:
            self.engines.pop(engine_id, None)
            self._folded_through.pop(engine_id, None)
            self._first_ts.pop(engine_id, None)
            self._held.pop(engine_id, None)
            self._applicable.pop(engine_id, None)

    def state_json(self, engine_id: str) -> str:
        """Return the engine's state as JSON, for the store, with the last position folded per partition."""
        data = self.engines[engine_id].to_dict() | {
            "folded_through": self._folded_through.get(engine_id, {}),
            "first_ts": self._first_ts.get(engine_id),
            "held_contributions": [
                json.loads(snapshot.model_dump_json()) for snapshot in self._held.get(engine_id, [])
            ],
        }
        return json.dumps(data, separators=(",", ":"))

    def admitted(self, engine_id: str) -> bool:
        """True when the engine has registered, or its first event is ``registration_grace_s`` behind its latest."""
        estimates = self.engines.get(engine_id)
        if estimates is None:
            return False
        if estimates.engine is not None:
            return True
        first_ts = self._first_ts.get(engine_id)
        last_ts = estimates.last_ts
        return first_ts is not None and last_ts is not None and last_ts - first_ts >= self._registration_grace_s

    def already_folded(self, engine_id: str, position: RecordPosition) -> bool:
        """True when the engine's state already holds the event at ``position``.

        The applied offsets and an engine's state are committed together, but a new owner reads the
        offsets at assignment and the state only at the engine's first event; a commit by the previous
        owner in between makes the state newer than the offsets. The state's own positions close that
        window: whatever it already holds is skipped.
        """
        folded = self._folded_through.get(engine_id, {})
        last = folded.get(position.field)
        return last is not None and position.offset <= last

    def summary_json(self, engine_id: str) -> str:
        """Return the engine's current estimate summary as JSON, for readers of Redis."""
        return self.engines[engine_id].summary().model_dump_json()

    def release(self, watermark_ts: float | None) -> list[EstimateSnapshot]:
        """Hand over the held fleet contributions whose event time is at or before ``watermark_ts`` (None: all).

        ``fold`` holds an engine's slot contributions instead of returning them; the caller releases
        them once its event-time watermark (the oldest progress among the partitions it still has to
        read) has passed them. They come out sorted by event time, so the fleet sees them in one
        order whatever the pace at which partitions were read.
        """
        released: list[EstimateSnapshot] = []
        for engine_id in list(self._held):
            held = self._held[engine_id]
            ready = [s for s in held if watermark_ts is None or s.ts <= watermark_ts]
            if not ready:
                continue
            released.extend(ready)
            rest = [s for s in held if not (watermark_ts is None or s.ts <= watermark_ts)]
            if rest:
                self._held[engine_id] = rest
            else:
                del self._held[engine_id]
        return sorted(released, key=lambda s: (s.ts, s.scope, s.version))

    def holding(self) -> list[str]:
        """The engines with fleet contributions held for release."""
        return sorted(self._held)

    def fold(self, event: Event, position: RecordPosition) -> list[EstimateSnapshot]:
        """Admit ``event``, apply it unless it is a duplicate, and return the engine-scope snapshots taken here.

        Fleet contributions the event closes are held for ``release``.

        Raises:
            InvalidInputError: the engine's guard refused the event (see ``admit``).
        """
        if self.admit(event, position).duplicate:
            return []
        return self.apply(event, position)

    def admit(self, event: Event, position: RecordPosition) -> Admission:
        """Check ``event`` against its engine's guard (an unknown engine starts empty); see ``EngineEstimates.admit``.

        The position counts as folded whatever the guard says (a duplicate or a refusal changes the
        guard's counts), so a new owner that loads this state skips it (``already_folded``).

        Raises:
            InvalidInputError: the event belongs to an older producer generation, or its time is out of
                bounds; its ``code`` says which.
        """
        engine_id = event.engine_id
        if engine_id not in self.engines:
            self.engines[engine_id] = EngineEstimates(engine_id, self._limits)
        self._folded_through.setdefault(engine_id, {})[position.field] = position.offset
        return self.engines[engine_id].admit(event)

    def apply(self, event: Event, position: RecordPosition) -> list[EstimateSnapshot]:
        """Fold an admitted ``event`` and return the snapshots taken at this position (possibly none)."""
        engine_id = event.engine_id
        estimates = self.engines[engine_id]
        self._first_ts.setdefault(engine_id, event.ts)
        admitted = isinstance(event, EngineRegistered) or self.admitted(engine_id)
        for fleet_spec in self._fleet_specs:
            taken = self._contribution(fleet_spec, estimates, event, position)
            if taken and admitted:
                self._held.setdefault(engine_id, []).extend(taken)
        estimates.fold(event)
        if not (admitted or self.admitted(engine_id)):
            return []
        snapshots: list[EstimateSnapshot] = []
        for spec in self._applicable_specs(estimates):
            if self._fires(spec, estimates, event):
                snapshots.append(self._snapshot(spec, estimates, event.ts, position))
        return snapshots

    def _applicable_specs(self, estimates: EngineEstimates) -> list[TriggerSpec]:
        """The engine-scope specs whose ``applies_to`` accepts the engine, in registry order.

        They depend on the registration alone, which a new ``engine.registered`` (or a load) replaces
        as a whole, so they are judged once per registration rather than at every event.
        """
        cached = self._applicable.get(estimates.engine_id)
        if cached is not None and cached[0] is estimates.engine:
            return cached[1]
        specs = [spec for spec in self._specs if spec.applies_to is None or spec.applies_to(estimates.engine)]
        self._applicable[estimates.engine_id] = (estimates.engine, specs)
        return specs

    def _contribution(
        self, spec: TriggerSpec, estimates: EngineEstimates, event: Event, position: RecordPosition
    ) -> list[EstimateSnapshot]:
        """Fold ``event`` into the engine's current fleet slot; return the old slot's contribution when it starts a
        new one, and the engine's ``FleetJoin`` at its first event (fold/fleet.py)."""
        assert isinstance(spec.trigger, EverySeconds)
        index = math.floor(event.ts / spec.trigger.seconds)
        current = estimates.fleet_slots.get(spec.kind)
        summary: FleetJoin | FleetContribution | None = None
        if current is None:
            summary = FleetJoin(slot_index=index)
        elif index > current.index:
            summary = current.contribution()
        if current is None or index > current.index:
            current = estimates.fleet_slots[spec.kind] = FleetSlot(index=index)
        current.fold(event)
        if summary is None:
            return []
        trigger = JOIN_TRIGGER if isinstance(summary, FleetJoin) else CONTRIBUTION_TRIGGER
        version = summary.slot_index + 1  # numbered by slot: the engine's own snapshot counter stays gap-free
        return [
            EstimateSnapshot(
                deployment=self._deployment,
                scope=estimates.engine_id,
                snapshot_id=snapshot_id(estimates.engine_id, version, summary),
                version=version,
                ts=event.ts,
                trigger=SnapshotTrigger(kind=spec.kind, cause=trigger),
                offsets=[position.source_offset()],
                estimates=summary,
            )
        ]

    def _fires(self, spec: TriggerSpec, estimates: EngineEstimates, event: Event) -> bool:
        """Advance ``spec``'s trigger on this engine and say whether it fires here (``spec`` applies to the engine)."""
        trigger = spec.trigger
        if isinstance(trigger, EveryEvents):
            if event.event_type != trigger.event_type:
                return False
            count = estimates.trigger_counts.get(spec.kind, 0) + 1
            if count >= trigger.n:
                estimates.trigger_counts[spec.kind] = 0
                return True
            estimates.trigger_counts[spec.kind] = count
            return False
        assert isinstance(trigger, EverySeconds)
        last = estimates.last_fired_ts.get(spec.kind)
        if last is None:
            estimates.last_fired_ts[spec.kind] = event.ts
            return False
        if event.ts - last >= trigger.seconds:
            estimates.last_fired_ts[spec.kind] = event.ts
            return True
        return False

    def _snapshot(
        self, spec: TriggerSpec, estimates: EngineEstimates, ts: float, position: RecordPosition
    ) -> EstimateSnapshot:
        estimates.snapshot_version += 1
        summary = estimates.summary()
        version = estimates.snapshot_version
        return EstimateSnapshot(
            deployment=self._deployment,
            scope=estimates.engine_id,
            snapshot_id=snapshot_id(estimates.engine_id, version, summary),
            version=version,
            ts=ts,
            trigger=SnapshotTrigger(kind=spec.kind, cause=spec.trigger.describe()),
            offsets=[position.source_offset()],
            estimates=summary,
        )
