"""Event-time slot rings and count windows: the window machinery every estimator shares.

DESIGN.md section 4 principle 2: windows use event time and counts, never wall time. A slot ring
divides event time into fixed slots of ``slot_s`` seconds and keeps the last ``n_slots`` of them;
an event is placed by its own timestamp, so a replay gives the same windows as the live stream.

Lateness: the watermark is the largest event time seen. An event more than ``allowed_lateness_s``
behind the watermark, or one whose slot has already left the ring, raises ``LateEventError``
(schemas/errors.py); the caller dead-letters or counts it. Nothing is silently dropped.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from estimators._input import check_format, require_count, require_finite, require_nonnegative, require_positive
from schemas.errors import InvalidInputError, LateEventError


class SlotRing:
    """Index arithmetic for a ring of ``n_slots`` event-time slots of ``slot_s`` seconds each.

    The ring itself stores no payload: an estimator keeps its per-slot arrays with ``n_slots`` rows
    and asks the ring where an event goes (``place``, O(1)) and which rows are live (``live_positions``).
    The live window is the slots ``(head - n_slots, head]``, where ``head`` is the slot of the
    watermark; that is exactly the last ``n_slots * slot_s`` seconds of event time, slot-aligned.
    """

    __slots__ = ("_slot_ids", "allowed_lateness_s", "head_slot", "n_slots", "slot_s", "watermark_s")

    def __init__(self, *, slot_s: float, n_slots: int, allowed_lateness_s: float = math.inf) -> None:
        """Create an empty ring.

        Args:
            slot_s: slot width in seconds of event time (> 0).
            n_slots: number of slots kept (>= 1).
            allowed_lateness_s: how far behind the watermark an event may be (>= 0, inf allowed).

        Raises:
            InvalidInputError: a parameter is out of range.
        """
        self.slot_s = require_positive("slot_s", slot_s)
        self.n_slots = require_count("n_slots", n_slots, minimum=1)
        if math.isnan(allowed_lateness_s) or allowed_lateness_s < 0:
            msg = f"allowed_lateness_s must be >= 0, got {allowed_lateness_s!r}"
            raise InvalidInputError(msg, field="allowed_lateness_s", value=allowed_lateness_s)
        self.allowed_lateness_s = float(allowed_lateness_s)
        self._slot_ids: list[int | None] = [None] * n_slots
        self.head_slot: int | None = None
        self.watermark_s: float | None = None

    @property
    def window_s(self) -> float:
        """Length of the window in seconds of event time."""
        return self.slot_s * self.n_slots

    def slot_of(self, ts_s: float) -> int:
        """Absolute slot index of event time ``ts_s``."""
        return math.floor(ts_s / self.slot_s)

    def advance(self, ts_s: float) -> None:
        """Move the watermark to ``ts_s`` if it is later, without placing an event.

        A service calls this on a heartbeat or a closed fleet slot, so that a silent stream reads as
        zero activity rather than as its last busy window.

        Raises:
            InvalidInputError: ``ts_s`` is not finite.
        """
        ts = require_finite("ts", ts_s)
        if self.watermark_s is None or ts > self.watermark_s:
            self.watermark_s = ts
            slot = self.slot_of(ts)
            if self.head_slot is None or slot > self.head_slot:
                self.head_slot = slot

    def place(self, ts_s: float) -> tuple[int, bool]:
        """Advance the watermark with ``ts_s`` and say where the event goes.

        Returns:
            ``(position, reset)``: the row of the owner's storage for the event's slot, and True when
            that row still holds an older slot and must be zeroed before use.

        Raises:
            InvalidInputError: ``ts_s`` is not finite.
            LateEventError: ``ts_s`` is older than the watermark minus the allowed lateness, or its slot
                has left the ring.
        """
        ts = require_finite("ts", ts_s)
        watermark = self.watermark_s
        slot = math.floor(ts / self.slot_s)
        if watermark is not None and self.head_slot is not None and watermark <= ts:
            # In order (the common case): the watermark and the head move to this event, no lateness check.
            self.watermark_s = ts
            self.head_slot = max(self.head_slot, slot)
            position = slot % self.n_slots
            reset = self._slot_ids[position] != slot
            self._slot_ids[position] = slot
            return position, reset
        if watermark is not None and ts < watermark - self.allowed_lateness_s:
            msg = (
                f"ts={ts} is {watermark - ts:.6g} s behind the watermark {watermark}, "
                f"beyond the allowed lateness {self.allowed_lateness_s} s"
            )
            raise LateEventError(msg, ts=ts, watermark_s=watermark, allowed_lateness_s=self.allowed_lateness_s)
        self.advance(ts)
        head = self.head_slot if self.head_slot is not None else slot
        if slot <= head - self.n_slots:
            wm = self.watermark_s if self.watermark_s is not None else ts
            msg = f"ts={ts} falls in slot {slot}, which has left the window ending at slot {head}"
            raise LateEventError(msg, ts=ts, watermark_s=wm, allowed_lateness_s=self.allowed_lateness_s)
        position = slot % self.n_slots
        reset = self._slot_ids[position] != slot
        self._slot_ids[position] = slot
        return position, reset

    def live_positions(self, *, closed_only: bool = False) -> list[int]:
        """Rows of the ring whose slots lie in the live window, oldest slot first.

        Args:
            closed_only: leave out the head slot, which is still filling.
        """
        if self.head_slot is None:
            return []
        head = self.head_slot - 1 if closed_only else self.head_slot
        lo = self.head_slot - self.n_slots
        live = [(s, p) for p, s in enumerate(self._slot_ids) if s is not None and lo < s <= head]
        return [p for _, p in sorted(live)]

    def slot_id(self, position: int) -> int | None:
        """Absolute slot index held by row ``position``, or None when the row was never used."""
        return self._slot_ids[position]

    def to_dict(self) -> dict[str, Any]:
        """JSON-compatible state (format 1)."""
        return {
            "kind": "slot_ring",
            "format": 1,
            "slot_s": self.slot_s,
            "n_slots": self.n_slots,
            "allowed_lateness_s": None if math.isinf(self.allowed_lateness_s) else self.allowed_lateness_s,
            "slot_ids": list(self._slot_ids),
            "head_slot": self.head_slot,
            "watermark_s": self.watermark_s,
        }

    @classmethod
    def from_dict(cls, data: object) -> SlotRing:
        """Rebuild a ring from ``to_dict`` output.

        Raises:
            InvalidInputError: wrong kind or format version.
        """
        d = check_format(data, kind="slot_ring", version=1)
        lateness = d["allowed_lateness_s"]
        ring = cls(
            slot_s=float(d["slot_s"]),
            n_slots=int(d["n_slots"]),
            allowed_lateness_s=math.inf if lateness is None else float(lateness),
        )
        ring._slot_ids = [None if s is None else int(s) for s in d["slot_ids"]]
        ring.head_slot = None if d["head_slot"] is None else int(d["head_slot"])
        ring.watermark_s = None if d["watermark_s"] is None else float(d["watermark_s"])
        return ring

    def same_shape(self, other: SlotRing) -> bool:
        """True when ``other`` has the same slot width and slot count (so the two can merge)."""
        return self.slot_s == other.slot_s and self.n_slots == other.n_slots

    def merged_with(self, other: SlotRing) -> tuple[SlotRing, list[tuple[int, int | None, int | None]]]:
        """A ring covering both inputs' live windows, and how to fill it.

        Returns:
            The merged ring and, for each of its live slots, ``(new_position, self_position, other_position)``
            where a source position is None when that input has no data for the slot.

        Raises:
            InvalidInputError: the rings differ in shape.
        """
        if not self.same_shape(other):
            shapes = f"({self.slot_s}, {self.n_slots}) and ({other.slot_s}, {other.n_slots})"
            msg = f"cannot merge slot rings of shape {shapes}"
            raise InvalidInputError(msg, field="slot_ring", value=(other.slot_s, other.n_slots))
        merged = SlotRing(
            slot_s=self.slot_s,
            n_slots=self.n_slots,
            allowed_lateness_s=min(self.allowed_lateness_s, other.allowed_lateness_s),
        )
        for wm in (self.watermark_s, other.watermark_s):
            if wm is not None:
                merged.advance(wm)
        if merged.head_slot is None:
            return merged, []
        lo = merged.head_slot - merged.n_slots
        by_slot: dict[int, list[int | None]] = {}
        for which, ring in enumerate((self, other)):
            for p in ring.live_positions():
                s = ring._slot_ids[p]
                if s is not None and s > lo:
                    by_slot.setdefault(s, [None, None])[which] = p
        plan: list[tuple[int, int | None, int | None]] = []
        for s in sorted(by_slot):
            pos = s % merged.n_slots
            merged._slot_ids[pos] = s
            a, b = by_slot[s]
            plan.append((pos, a, b))
        return merged, plan


class CountWindowMean:
    """Mean of the last ``capacity`` values (the EB+ paper's window mean, e.g. mu_L over W_L).

    seed-001 section 3.1: the paper's mu_L is the mean of the window W_L of the last W = 500 prompt
    lengths. The running sum is re-added from the window every ``capacity`` evictions, so float error
    cannot drift however long the stream. Memory is O(capacity); updates O(1) amortised.
    """

    __slots__ = ("_evictions", "_sum", "_values", "capacity")

    def __init__(self, *, capacity: int = 500) -> None:
        """Create an empty window of ``capacity`` values (>= 1)."""
        self.capacity = require_count("capacity", capacity, minimum=1)
        self._values: deque[float] = deque(maxlen=capacity)
        self._sum = 0.0
        self._evictions = 0

    def update(self, value: float) -> None:
        """Append a value (finite, >= 0), evicting the oldest beyond ``capacity``.

        Raises:
            InvalidInputError: ``value`` is NaN, infinite or negative.
        """
        x = require_nonnegative("value", value)
        if len(self._values) == self.capacity:
            self._sum -= self._values[0]
            self._evictions += 1
        self._values.append(x)
        self._sum += x
        if self._evictions >= self.capacity:
            self._sum = math.fsum(self._values)
            self._evictions = 0

    def merge(self, other: CountWindowMean) -> CountWindowMean:
        """The window of ``self``'s values followed by ``other``'s, trimmed to ``capacity``.

        Count windows carry no timestamps, so a merge means "other came after self"; that is what
        folding the concatenated stream gives.
        """
        out = CountWindowMean(capacity=self.capacity)
        for v in (*self._values, *other._values):
            out.update(v)
        return out

    @property
    def n_samples(self) -> int:
        """Number of values in the window."""
        return len(self._values)

    def values(self) -> tuple[float, ...]:
        """The window's values, oldest first."""
        return tuple(self._values)

    def snapshot(self) -> float | None:
        """Mean of the window, or None when it is empty."""
        if not self._values:
            return None
        return self._sum / len(self._values)

    def to_dict(self) -> dict[str, Any]:
        """JSON-compatible state (format 1)."""
        return {"kind": "count_window_mean", "format": 1, "capacity": self.capacity, "values": list(self._values)}

    @classmethod
    def from_dict(cls, data: object) -> CountWindowMean:
        """Rebuild from ``to_dict`` output.

        Raises:
            InvalidInputError: wrong kind or format version, or a bad value.
        """
        d = check_format(data, kind="count_window_mean", version=1)
        out = cls(capacity=int(d["capacity"]))
        for v in d["values"]:
            out.update(float(v))
        return out
