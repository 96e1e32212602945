"""Fleet scope on closed slots (DESIGN principle 2): per-engine slot contributions and their merge.

An engine's stream is cut into event-time slots of ``slot_s``. When an engine's event time enters
a new slot, the slot it leaves is *closed for that engine* and its contribution (arrivals,
finished requests, token sums, total-length bucket counts) becomes an estimate snapshot of that
engine. The stream processor holds contributions until its event-time watermark passes them and
sends them, in event-time order, to the one ``fleet`` partition of ``gov.estimates``, so every
reader sees them in one order whatever the pace at which telemetry was folded, and the one
policy-service member that owns that partition owns the fleet.

``FleetAggregator`` merges contributions. An engine's watermark is the last slot it has closed
(from the slot its event time has entered, so an engine idle for a few slots still advances). A
fleet slot closes when every live engine's watermark has passed it and some engine is
``grace_slots`` past it; each closed fleet slot yields a fleet snapshot over the last
``window_slots`` closed slots. An engine whose watermark trails the newest by more than
``silent_slots`` is silent: it stops holding the fleet back and is named in every fleet snapshot
(``silent_engines``) until it speaks again. All of this is event time: the merge is a sum and the
rules read only watermarks, so catch-up, rebuild and live reading give the same fleet snapshots.
A second contribution for an (engine, slot) (a processor re-folding after a crash) is skipped
(``duplicate_contributions``); one for a slot already closed is dropped (``late_contributions``).

Event-time sanity from an engine's first contribution (issue 34 item 4): an engine whose
watermark would lead the newest watermark of the other engines by more than ``silent_slots``
(the lead that would make every other engine silent) is *quarantined*, not trusted: its
contributions are dropped and counted (``quarantined_contributions``), it holds no watermark, and
it is named in every fleet snapshot (``quarantined_engines``). Without this one engine with a
clock 700 s ahead, registered or not, made every real engine silent, got their contributions
dropped as late and had FleetOpt plan from it alone. A quarantined engine is trusted again when
the fleet catches up with it (the lead of its latest contribution falls within the bound), or
when at least as many engines agree with its clock (within the bound of it, quarantined ones
included) as there are live engines that do not: a whole fleet whose clocks jumped together (a
restart after a long stop) is followed once half of it has spoken, while a lone far clock in a
fleet of several is not. The very first engine of a deployment has nothing to be compared with
and is trusted. This is event time only (the fleet partition's order), so live, rebuild and
offline replay quarantine the same engines.

Deviation: a deployment whose only established engine disagrees with one new far-clock engine
cannot tell which clock is wrong; the tie trusts the newcomer (one engine against one).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from estimators import BUCKET_EDGES_TOKENS, FLEETOPT_BREAKPOINTS_TOKENS, bucket_of
from schemas.errors import InvalidInputError
from schemas.estimates import FleetContribution, FleetSummary, LengthCdfPoint
from schemas.events import Event
from schemas.records import EstimateSnapshot
from schemas.requests import RequestArrived, RequestFinished
from services.stream.snapshot_id import snapshot_id

FORMAT = 1
CONTRIBUTION_TRIGGER = "contribution"
OVERFLOW_EDGE_TOKENS = 131_072
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

    def add(self, contribution: FleetContribution, engine: str) -> None:
        self.arrivals += contribution.arrivals
        self.finished += contribution.finished
        self.prompt_tokens += contribution.prompt_tokens
        self.output_tokens += contribution.output_tokens
        for bucket, count in contribution.length_counts.items():
            self.length_counts[int(bucket)] = self.length_counts.get(int(bucket), 0) + count
        self.engines.add(engine)


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
    ) -> None:
        self.deployment = deployment
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
        if not isinstance(contribution, FleetContribution):
            msg = f"fleet {self.kind!r} expects slot contributions, got a {contribution.summary_type} summary"
            raise InvalidInputError(msg, field="estimates.summary_type", value=contribution.summary_type)
        index = contribution.slot_index
        engine = snapshot.scope
        if self._merged(index, engine):
            self.duplicate_contributions += 1
            return []
        entered = math.floor(snapshot.ts / self.slot_s)
        if not self._trusted(engine, max(self.watermarks.get(engine, index), index, entered - 1)):
            self.quarantined_contributions += 1
            return []
        if self.closed_through is not None and index <= self.closed_through:
            self.late_contributions += 1
            return []
        self.pending.setdefault(index, _MergedSlot()).add(contribution, engine)
        newest = max(self.watermarks.values())
        live_engines = sorted(e for e, w in self.watermarks.items() if w >= newest - self.silent_slots)
        silent_engines = sorted(set(self.watermarks) - set(live_engines))
        closable = min(*(self.watermarks[e] for e in live_engines), newest - self.grace_slots)
        snapshots = []
        start = (self.closed_through + 1) if self.closed_through is not None else min(self.pending)
        for slot in range(start, closable + 1):
            merged = self.pending.pop(slot, _MergedSlot())
            self.window.append((slot, merged))
            self.closed_through = slot
            snapshots.append(self._snapshot(slot, live_engines, silent_engines))
        return snapshots

    def _trusted(self, engine: str, watermark: int) -> bool:
        """Whether ``engine``'s clock, at ``watermark``, may move the fleet; record its watermark where it is held.

        Quarantines an engine that leads the others by more than ``silent_slots`` unless at least as
        many engines agree with it as there are live engines that do not (module docstring). A
        quarantined engine's watermark is the claim of its latest contribution alone, so it is
        trusted again as soon as the fleet catches up with what it says now.
        """
        others = {e: w for e, w in self.watermarks.items() if e != engine}
        if not others or watermark - max(others.values()) <= self.silent_slots:
            self.quarantined.pop(engine, None)
            self.watermarks[engine] = watermark
            return True
        self.watermarks.pop(engine, None)
        self.quarantined[engine] = watermark
        newest = max(others.values())
        live = sum(1 for w in others.values() if w >= newest - self.silent_slots)
        agreeing = [e for e, w in self.quarantined.items() if abs(w - watermark) <= self.silent_slots]
        if len(agreeing) < live:
            return False
        for agreed in agreeing:
            self.watermarks[agreed] = self.quarantined.pop(agreed)
        return True

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
            trigger=f"{self.kind}:fleet slot {slot}",
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

        return {
            "format": FORMAT,
            "deployment": self.deployment,
            "kind": self.kind,
            "slot_s": self.slot_s,
            "window_slots": self.window_slots,
            "silent_slots": self.silent_slots,
            "watermarks": self.watermarks,
            "pending": {str(k): merged(v) for k, v in self.pending.items()},
            "closed_through": self.closed_through,
            "window": [[slot, merged(m)] for slot, m in self.window],
            "version": self.version,
            "late_contributions": self.late_contributions,
            "duplicate_contributions": self.duplicate_contributions,
            "grace_slots": self.grace_slots,
            "quarantined": self.quarantined,
            "quarantined_contributions": self.quarantined_contributions,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FleetAggregator:
        """Rebuild what ``to_dict`` wrote."""

        def merged(d: dict[str, Any]) -> _MergedSlot:
            return _MergedSlot(
                arrivals=int(d["arrivals"]),
                finished=int(d["finished"]),
                prompt_tokens=int(d["prompt_tokens"]),
                output_tokens=int(d["output_tokens"]),
                length_counts={int(k): int(v) for k, v in d["length_counts"].items()},
                engines=set(d["engines"]),
            )

        aggregator = cls(
            deployment=data["deployment"],
            kind=data["kind"],
            slot_s=float(data["slot_s"]),
            window_slots=int(data["window_slots"]),
            silent_slots=int(data["silent_slots"]),
            grace_slots=int(data.get("grace_slots", 1)),
        )
        aggregator.quarantined = {str(k): int(v) for k, v in data.get("quarantined", {}).items()}
        aggregator.quarantined_contributions = int(data.get("quarantined_contributions", 0))
        aggregator.watermarks = {str(k): int(v) for k, v in data["watermarks"].items()}
        aggregator.pending = {int(k): merged(v) for k, v in data["pending"].items()}
        aggregator.closed_through = data["closed_through"]
        aggregator.window.extend((int(slot), merged(m)) for slot, m in data["window"])
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
