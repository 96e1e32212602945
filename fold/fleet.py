"""Fleet scope on closed slots (DESIGN principle 2): per-engine slot contributions and their merge.

An engine's stream is cut into event-time slots of ``slot_s``. When an engine's event time enters
a new slot, the slot it leaves is *closed for that engine* and its contribution (arrivals,
finished requests, token sums, total-length bucket counts) becomes an estimate snapshot of that
engine. The stream processor holds contributions until its event-time watermark passes them and
sends them, in event-time order, to the one ``fleet`` partition of ``gov.estimates``, so every
reader sees them in one order whatever the pace at which telemetry was folded, and the one
policy-service member that owns that partition owns the fleet.

``FleetAggregator`` merges contributions. An engine's watermark is the last slot it has closed
(from the slot its event time has entered, so an engine idle for a few slots still advances).
The fleet knows an engine from its ``FleetJoin``, which the processor sends (through the same
watermark) at the engine's first event: its watermark is then the slot before its first. Knowing
engines only from their first contribution let a processor that died before releasing its
engines' first slots (or one that started late) find the fleet's first slots closed without them. A
fleet slot closes when every live engine's watermark has passed it and some engine is
``grace_slots`` past it; each closed fleet slot yields a fleet snapshot over the last
``window_slots`` closed slots. An engine whose watermark trails the newest by more than
``silent_slots`` is *overdue*. What follows depends on the aggregator's silence rule:

* ``lag`` (the offline replay, which reads every engine's stream complete and in event-time order):
  an overdue engine is silent at once;
* ``declared`` (the live policy service): an overdue engine still holds the fleet back, because on a
  live fleet it may only be late in the reading: its stream processor died and the partition is
  moving to another member, or that member's fetches came back late under load, while the other
  processors' contributions went on reaching the fleet partition. Only when the fleet's owner has
  waited ``fleet_silence_wait_s`` of wall-clock time on it does it write a ``FleetSilence``
  declaration to the fleet partition, and the engine is silent from the point of the log where that
  declaration stands (if the engine has not spoken since: a declaration older than the engine's
  latest contribution is ignored).

A silent engine stops holding the fleet back and is named in every fleet snapshot (``silent_engines``)
until it speaks again (``lag``: within ``silent_slots`` of the newest; ``declared``: up to the last
closed slot). The merge is a sum and the rules read only watermarks and the declarations' places in
the fleet partition, so catch-up, rebuild and live reading give the same fleet snapshots. Under the
``lag`` rule that held only where the fleet partition's order did not depend on the pace of the
processors: a member killed mid-stream, or one slowed by a busy machine, made engines silent in the
live run that the rebuild and the offline replay never found silent (their contributions were then
dropped as late, and FleetOpt decided from part of the fleet).
A second contribution for an (engine, slot) (a processor re-folding after a crash) is skipped
(``duplicate_contributions``); one for a slot already closed is dropped (``late_contributions``).

Event-time sanity from an engine's first contribution: an engine whose clock
leads the fleet's by more than ``silent_slots`` (the lead that would make every other engine
silent) is *quarantined*, not trusted: its contributions are dropped and counted
(``quarantined_contributions``), it holds no watermark, and it is named in every fleet snapshot
(``quarantined_engines``). Without this one engine with a clock 700 s ahead, registered or not,
made every real engine silent, got their contributions dropped as late and had FleetOpt plan from
it alone. Which clock is the fleet's must not depend on which engine the fleet partition delivers
first, so whenever an engine contributes trust is decided again over all engines, trusted and
quarantined (a quarantined engine's clock is the claim of its latest contribution alone):

* the clocks are grouped by agreement: sorted with the slots still pending and the last closed
  slot, and cut wherever two neighbours are more than ``silent_slots`` apart (the pending and
  closed slots bridge an engine that ran on slot by slot while others stopped);
* an engine that trails the fleet's closed history (its clock lies inside the closed slots but
  more than ``silent_slots`` behind the last) has stopped or lags: it is silent, trusted, and has
  no say, so a fleet that shrank is not outvoted by the engines that left it;
* the group with the most engines is the fleet's clock; on a tie, the group whose engines hold
  more pending contributions (the clock the fleet's unmerged data is on), then the lower clock.
  One engine against one cannot be told apart; the lower clock is the cheaper mistake: a clock
  ahead that is trusted closes slots for good and makes the others' contributions late, while a
  clock quarantined in error is trusted again as soon as the fleet catches up with it or another
  engine agrees with it;
* every engine of a group ahead of the fleet's is quarantined, and its pending contributions are
  taken back out of the merge (counted as quarantined); every other engine is trusted.

So a whole fleet whose clocks jumped together (a restart after a long stop) is followed once more
of it has spoken at the new clock than at the old one, a lone far clock in a fleet of several is
not, and a ghost quarantined whether it spoke before or after the real engines. Slots already
closed stay closed: a lone first engine can close slots alone only ``grace_slots`` behind its own
watermark, so a ghost with one contribution closes nothing, but one that came first with
``grace_slots`` + 1 slots or more has closed slots the real engines' contributions then arrive
late for. This is event time only (the fleet partition's order), so live, rebuild and offline
replay quarantine the same engines.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal

from estimators import BUCKET_EDGES_TOKENS, FLEETOPT_BREAKPOINTS_TOKENS, bucket_of
from fold.snapshot_id import snapshot_id
from schemas.errors import InvalidInputError
from schemas.estimates import FleetContribution, FleetJoin, FleetSilence, FleetSummary, LengthCdfPoint
from schemas.events import Event
from schemas.records import EstimateSnapshot
from schemas.requests import RequestArrived, RequestFinished
from schemas.snapshot_trigger import SnapshotTrigger

FORMAT = 2
CONTRIBUTION_TRIGGER = "contribution"
JOIN_TRIGGER = "join"
OVERFLOW_EDGE_TOKENS = 131_072
SilenceRule = Literal["lag", "declared"]
_INTEGER_EDGES = [(j, int(e)) for j, e in enumerate(BUCKET_EDGES_TOKENS) if e >= 1 and e == int(e)]


@dataclass(slots=True)
class FleetSlot:
    """One engine's contribution to one fleet slot, accumulated event by event."""

    index: int
    arrivals: int = 0
    finished: int = 0
    prompt_tokens: int = 0
    output_tokens: int = 0
    length_counts: dict[int, int] = field(default_factory=dict)

    def fold(self, event: Event) -> None:
        """Count an arrival, or a finished request's lengths."""
        if isinstance(event, RequestArrived):
            self.arrivals += 1
        elif isinstance(event, RequestFinished):
            self.finished += 1
            self.prompt_tokens += event.prompt_tokens
            self.output_tokens += event.output_tokens
            bucket = bucket_of(event.prompt_tokens + event.output_tokens)
            self.length_counts[bucket] = self.length_counts.get(bucket, 0) + 1

    def contribution(self) -> FleetContribution:
        """The slot's counts as the summary of the engine's contribution snapshot."""
        return FleetContribution(
            slot_index=self.index,
            arrivals=self.arrivals,
            finished=self.finished,
            prompt_tokens=self.prompt_tokens,
            output_tokens=self.output_tokens,
            length_counts={str(k): v for k, v in sorted(self.length_counts.items())},
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-compatible form (bucket indexes as strings), for the engine's stored state."""
        return {
            "index": self.index,
            "arrivals": self.arrivals,
            "finished": self.finished,
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens,
            "length_counts": {str(k): v for k, v in sorted(self.length_counts.items())},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FleetSlot:
        """Rebuild what ``to_dict`` wrote."""
        return cls(
            index=int(data["index"]),
            arrivals=int(data["arrivals"]),
            finished=int(data["finished"]),
            prompt_tokens=int(data["prompt_tokens"]),
            output_tokens=int(data["output_tokens"]),
            length_counts={int(k): int(v) for k, v in data["length_counts"].items()},
        )


@dataclass(slots=True)
class _MergedSlot:
    arrivals: int = 0
    finished: int = 0
    prompt_tokens: int = 0
    output_tokens: int = 0
    length_counts: dict[int, int] = field(default_factory=dict)
    engines: set[str] = field(default_factory=set)
    parts: dict[str, FleetContribution] = field(default_factory=dict)
    """Each engine's contribution while the slot is pending, so one that loses trust can be taken back out."""

    def add(self, contribution: FleetContribution, engine: str) -> None:
        self._count(contribution, 1)
        self.engines.add(engine)
        self.parts[engine] = contribution

    def take_out(self, engine: str) -> bool:
        """Remove ``engine``'s pending contribution from the sums; False when none is held separately."""
        part = self.parts.pop(engine, None)
        if part is None:
            return False
        self._count(part, -1)
        self.engines.discard(engine)
        return True

    def _count(self, contribution: FleetContribution, sign: int) -> None:
        self.arrivals += sign * contribution.arrivals
        self.finished += sign * contribution.finished
        self.prompt_tokens += sign * contribution.prompt_tokens
        self.output_tokens += sign * contribution.output_tokens
        for bucket, count in contribution.length_counts.items():
            left = self.length_counts.get(int(bucket), 0) + sign * count
            if left:
                self.length_counts[int(bucket)] = left
            else:
                self.length_counts.pop(int(bucket), None)


class FleetAggregator:
    """Merge engines' slot contributions into fleet snapshots on closed slots."""

    def __init__(
        self,
        *,
        deployment: str,
        kind: str,
        slot_s: float,
        window_slots: int = 60,
        silent_slots: int = 3,
        grace_slots: int = 1,
        silence: SilenceRule = "lag",
    ) -> None:
        self.deployment = deployment
        self.silence: SilenceRule = silence
        self.silenced: dict[str, int] = {}
        self.kind = kind
        self.slot_s = slot_s
        self.window_slots = window_slots
        self.silent_slots = silent_slots
        self.grace_slots = grace_slots
        self.watermarks: dict[str, int] = {}
        self.quarantined: dict[str, int] = {}
        self.quarantined_contributions = 0
        self.pending: dict[int, _MergedSlot] = {}
        self.closed_through: int | None = None
        self.first_closed: int | None = None
        self.window: deque[tuple[int, _MergedSlot]] = deque(maxlen=window_slots)
        self.version = 0
        self.late_contributions = 0
        self.duplicate_contributions = 0

    def add(self, snapshot: EstimateSnapshot) -> list[EstimateSnapshot]:
        """Fold one engine contribution; return the fleet snapshots of the slots it closes.

        Raises:
            InvalidInputError: the snapshot carries another summary than a fleet contribution.
        """
        contribution = snapshot.estimates
        if isinstance(contribution, FleetSilence):
            return self._declared_silent(contribution)
        if isinstance(contribution, FleetJoin):
            return self._joined(snapshot.scope, contribution.slot_index)
        if not isinstance(contribution, FleetContribution):
            msg = f"fleet {self.kind!r} expects slot contributions, got a {contribution.summary_type} summary"
            raise InvalidInputError(msg, field="estimates.summary_type", value=contribution.summary_type)
        index = contribution.slot_index
        engine = snapshot.scope
        if self._merged(index, engine):
            self.duplicate_contributions += 1
            return []
        claim = max(index, math.floor(snapshot.ts / self.slot_s) - 1)
        if engine in self.quarantined:
            self.quarantined[engine] = claim
        else:
            self.watermarks[engine] = max(self.watermarks.get(engine, index), claim)
        late = self.closed_through is not None and index <= self.closed_through
        if not late:
            self.pending.setdefault(index, _MergedSlot()).add(contribution, engine)
        self._retrust()
        if late:
            if engine in self.quarantined:
                self.quarantined_contributions += 1
            else:
                self.late_contributions += 1
        caught_up = self.closed_through is None or self.watermarks.get(engine, -1) >= self.closed_through
        if engine in self.silenced and caught_up:
            del self.silenced[engine]
        return self._close()

    def overdue(self) -> dict[str, int]:
        """Under the ``declared`` rule, each engine holding the fleet back from too far behind, and its slot.

        These trail the newest engine by more than ``silent_slots`` and are not declared silent; the
        fleet's owner declares one silent (``FleetSilence``) once it has waited long enough on it.
        """
        if self.silence != "declared" or not self.watermarks:
            return {}
        newest = max(self.watermarks.values())
        return {
            engine: slot
            for engine, slot in sorted(self.watermarks.items())
            if engine not in self.silenced and slot < newest - self.silent_slots
        }

    def _joined(self, engine: str, slot: int) -> list[EstimateSnapshot]:
        """Wait for an engine from its first slot on: a known engine changes nothing, a new one holds ``slot``."""
        if engine in self.watermarks or engine in self.quarantined:
            return []
        self.watermarks[engine] = slot - 1
        self._retrust()
        return self._close()

    def _declared_silent(self, silence: FleetSilence) -> list[EstimateSnapshot]:
        """Apply a declaration read from the fleet partition; ignored unless the engine still trails where it did."""
        engine = silence.engine
        if self.silence != "declared" or engine in self.silenced or self.watermarks.get(engine) != silence.engine_slot:
            return []
        self.silenced[engine] = silence.engine_slot
        return self._close()

    def _retrust(self) -> None:
        """Decide again which engines' clocks are the fleet's, over all engines (module docstring).

        Moves engines between ``watermarks`` and ``quarantined`` and takes the pending contributions
        of every quarantined engine back out of the merge, counting each as quarantined.
        """
        clocks = {**self.watermarks, **self.quarantined}
        voters = {e: w for e, w in clocks.items() if not self._stale(w)}
        closed = [] if self.closed_through is None else [self.closed_through]
        points = sorted({*voters.values(), *self.pending, *closed})
        chains: list[tuple[int, int]] = []
        for point in points:
            if chains and point - chains[-1][1] <= self.silent_slots:
                chains[-1] = (chains[-1][0], point)
            else:
                chains.append((point, point))
        members: dict[int, list[str]] = {}
        for engine, clock in voters.items():
            members.setdefault(next(i for i, (_, top) in enumerate(chains) if clock <= top), []).append(engine)
        held = {e: sum(1 for m in self.pending.values() if e in m.engines) for e in voters}
        ranked = sorted(members, key=lambda i: (-len(members[i]), -sum(held[e] for e in members[i]), i))
        ceiling = chains[ranked[0]][1] if ranked else None
        for engine, clock in sorted(clocks.items()):
            if ceiling is not None and engine in voters and clock > ceiling:
                self.watermarks.pop(engine, None)
                self.silenced.pop(engine, None)
                self.quarantined[engine] = clock
                self._take_out(engine)
            elif engine in self.quarantined:
                self.watermarks[engine] = self.quarantined.pop(engine)

    def _stale(self, clock: int) -> bool:
        """True when ``clock`` lies inside the closed slots but more than ``silent_slots`` behind the last."""
        if self.closed_through is None or self.first_closed is None:
            return False
        return self.first_closed <= clock < self.closed_through - self.silent_slots

    def _take_out(self, engine: str) -> None:
        """Take ``engine``'s pending contributions back out of the merge, counting each as quarantined."""
        for index in sorted(self.pending):
            merged = self.pending[index]
            if merged.take_out(engine):
                self.quarantined_contributions += 1
                if not merged.engines:
                    del self.pending[index]

    def _close(self) -> list[EstimateSnapshot]:
        """Close every fleet slot the trusted watermarks have passed; return their fleet snapshots."""
        if not self.watermarks or (self.closed_through is None and not self.pending):
            return []
        newest = max(self.watermarks.values())
        if self.silence == "lag":
            live_engines = sorted(e for e, w in self.watermarks.items() if w >= newest - self.silent_slots)
        else:
            live_engines = sorted(e for e in self.watermarks if e not in self.silenced)
        if not live_engines:
            return []
        silent_engines = sorted(set(self.watermarks) - set(live_engines))
        closable = min(*(self.watermarks[e] for e in live_engines), newest - self.grace_slots)
        snapshots = []
        start = (self.closed_through + 1) if self.closed_through is not None else min(self.pending)
        for slot in range(start, closable + 1):
            merged = self.pending.pop(slot, _MergedSlot())
            merged.parts.clear()
            self.window.append((slot, merged))
            if self.first_closed is None:
                self.first_closed = slot
            self.closed_through = slot
            snapshots.append(self._snapshot(slot, live_engines, silent_engines))
        return snapshots

    def _merged(self, index: int, engine: str) -> bool:
        """True when ``engine``'s contribution to slot ``index`` is already pending or in the window."""
        pending = self.pending.get(index)
        if pending is not None:
            return engine in pending.engines
        return any(slot == index and engine in merged.engines for slot, merged in self.window)

    def _snapshot(self, slot: int, live: list[str], silent: list[str]) -> EstimateSnapshot:
        self.version += 1
        estimates = fleet_estimates(
            self.window,
            self.slot_s,
            live,
            late_contributions=self.late_contributions,
            duplicate_contributions=self.duplicate_contributions,
            silent_engines=silent,
            quarantined_engines=sorted(self.quarantined),
            quarantined_contributions=self.quarantined_contributions,
        )
        ts = (slot + 1) * self.slot_s
        return EstimateSnapshot(
            deployment=self.deployment,
            scope="fleet",
            snapshot_id=snapshot_id("fleet", self.version, estimates),
            version=self.version,
            ts=ts,
            trigger=SnapshotTrigger(kind=self.kind, cause=f"fleet slot {slot}"),
            offsets=[],
            estimates=estimates,
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-compatible state, for the store."""

        def merged(m: _MergedSlot) -> dict[str, Any]:
            return {
                "arrivals": m.arrivals,
                "finished": m.finished,
                "prompt_tokens": m.prompt_tokens,
                "output_tokens": m.output_tokens,
                "length_counts": {str(k): v for k, v in m.length_counts.items()},
                "engines": sorted(m.engines),
            }

        def held(m: _MergedSlot) -> dict[str, Any]:
            parts = {e: part.model_dump(mode="json") for e, part in sorted(m.parts.items())}
            return {**merged(m), "parts": parts}

        return {
            "format": FORMAT,
            "deployment": self.deployment,
            "kind": self.kind,
            "slot_s": self.slot_s,
            "window_slots": self.window_slots,
            "silent_slots": self.silent_slots,
            "watermarks": self.watermarks,
            "pending": {str(k): held(v) for k, v in self.pending.items()},
            "closed_through": self.closed_through,
            "first_closed": self.first_closed,
            "window": [[slot, merged(m)] for slot, m in self.window],
            "version": self.version,
            "late_contributions": self.late_contributions,
            "duplicate_contributions": self.duplicate_contributions,
            "grace_slots": self.grace_slots,
            "quarantined": self.quarantined,
            "quarantined_contributions": self.quarantined_contributions,
            "silenced": self.silenced,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, silence: SilenceRule = "lag") -> FleetAggregator:
        """Rebuild what ``to_dict`` wrote, in this format or the previous one, to decide silence by ``silence``.

        A state of format 1 kept no per-engine parts of pending slots, so the contributions pending in
        it cannot be taken back out if their engine loses trust; and no first closed slot, so the
        oldest closed slot of its window stands for it (an engine behind that is not taken as stale).
        """

        def merged(d: dict[str, Any]) -> _MergedSlot:
            return _MergedSlot(
                arrivals=int(d["arrivals"]),
                finished=int(d["finished"]),
                prompt_tokens=int(d["prompt_tokens"]),
                output_tokens=int(d["output_tokens"]),
                length_counts={int(k): int(v) for k, v in d["length_counts"].items()},
                engines=set(d["engines"]),
                parts={e: FleetContribution.model_validate(p) for e, p in d.get("parts", {}).items()},
            )

        aggregator = cls(
            deployment=data["deployment"],
            kind=data["kind"],
            slot_s=float(data["slot_s"]),
            window_slots=int(data["window_slots"]),
            silent_slots=int(data["silent_slots"]),
            grace_slots=int(data.get("grace_slots", 1)),
            silence=silence,
        )
        aggregator.silenced = {str(k): int(v) for k, v in data.get("silenced", {}).items()}
        aggregator.quarantined = {str(k): int(v) for k, v in data.get("quarantined", {}).items()}
        aggregator.quarantined_contributions = int(data.get("quarantined_contributions", 0))
        aggregator.watermarks = {str(k): int(v) for k, v in data["watermarks"].items()}
        aggregator.pending = {int(k): merged(v) for k, v in data["pending"].items()}
        aggregator.closed_through = data["closed_through"]
        aggregator.window.extend((int(slot), merged(m)) for slot, m in data["window"])
        first_closed = data.get("first_closed", aggregator.window[0][0] if aggregator.window else None)
        aggregator.first_closed = None if first_closed is None else int(first_closed)
        aggregator.version = int(data["version"])
        aggregator.late_contributions = int(data["late_contributions"])
        aggregator.duplicate_contributions = int(data.get("duplicate_contributions", 0))
        return aggregator


def fleet_estimates(
    window: deque[tuple[int, _MergedSlot]] | list[tuple[int, _MergedSlot]],
    slot_s: float,
    engines: list[str],
    *,
    late_contributions: int,
    duplicate_contributions: int,
    silent_engines: list[str],
    quarantined_engines: list[str] | None = None,
    quarantined_contributions: int = 0,
) -> FleetSummary:
    """The fleet summary over ``window``: arrival rates, the total-length CDF, the token split."""
    slots = list(window)
    covered_s = len(slots) * slot_s
    arrivals = sum(m.arrivals for _, m in slots)
    per_minute = sorted(m.arrivals * 60.0 / slot_s for _, m in slots)
    counts: dict[int, int] = {}
    for _, m in slots:
        for bucket, count in m.length_counts.items():
            counts[bucket] = counts.get(bucket, 0) + count
    finished = sum(counts.values())
    prompt = sum(m.prompt_tokens for _, m in slots)
    output = sum(m.output_tokens for _, m in slots)
    return FleetSummary(
        engines=list(engines),
        slots=len(slots),
        covered_s=covered_s,
        arrival_rate_per_s=arrivals / covered_s if covered_s else None,
        arrival_rate_p95_per_min=per_minute[min(len(per_minute) - 1, math.ceil(0.95 * len(per_minute)) - 1)]
        if per_minute
        else None,
        finished=finished,
        input_frac=prompt / (prompt + output) if prompt + output else None,
        length_cdf=_cdf_points(counts, finished),
        late_contributions=late_contributions,
        duplicate_contributions=duplicate_contributions,
        silent_engines=list(silent_engines),
        quarantined_engines=list(quarantined_engines or []),
        quarantined_contributions=quarantined_contributions,
    )


def _cdf_points(counts: dict[int, int], total: int) -> list[LengthCdfPoint] | None:
    """F(L_total <= t) at every integer bucket edge, ending at 1.0 (at 131,072 when lengths overflow 64K)."""
    if total == 0:
        return None
    points: list[LengthCdfPoint] = []
    cumulative = 0
    last_bucket = max(counts)
    for j, edge in _INTEGER_EDGES[1:]:
        cumulative = sum(c for b, c in counts.items() if b < j)
        if edge in FLEETOPT_BREAKPOINTS_TOKENS or cumulative:
            points.append(LengthCdfPoint(length_tokens=edge, cdf_frac=cumulative / total))
        if j > last_bucket:
            break
    if points[-1].cdf_frac != 1.0:
        points.append(LengthCdfPoint(length_tokens=OVERFLOW_EDGE_TOKENS, cdf_frac=1.0))
    return points
