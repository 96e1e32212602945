"""Arrival and completion rates over event-time windows, and a high quantile of per-minute rates.

Sources: seed-002-fleetopt.md section 5.2 (arrival counts per second and per minute; the planner's
lambda_plan is a high quantile, e.g. p95, of 1-min rates over an hour), seed-001-ebplus.md section 5.4
(arrival and completion rate over 10 s / 60 s windows), seed-000-slai.md section 4.3 item 5 (lambda per
tier = counts / W).

Rates read closed slots only (DESIGN.md section 4 principle 2): the head slot is still filling, so
counting it would bias the latest rate low. Call ``advance(ts_s)`` on heartbeats so that a silent
stream reads as zero rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from estimators._input import check_format, require_count, require_fraction, require_positive
from estimators.window import SlotRing
from schemas.errors import InvalidInputError

DEFAULT_WINDOW_S = 3600.0  # seed-002 section 5.2: p95 of 1-min rates over 1 h
DEFAULT_SHORT_WINDOW_S = 10.0  # seed-001 section 5.4: 10 s / 60 s windows
MINUTE_S = 60.0


@dataclass(frozen=True, slots=True, kw_only=True)
class RateSnapshot:
    """Rates over closed slots of the window.

    Attributes:
        rate_per_s: events per second over the last ``short_window_s`` of closed slots.
        rate_per_min: events per minute over the last closed minute of slots.
        window_rate_per_s: events per second over all closed slots covered since the first event.
        high_quantile: the quantile level q of ``high_rate_per_min``.
        high_rate_per_min: the q-quantile (linear) of per-minute counts over complete closed minutes,
            or None before the first complete minute.
        n_minutes: complete closed minutes behind ``high_rate_per_min``.
        covered_s: seconds of closed window behind ``window_rate_per_s``.
        n_events: events in the closed window.
    """

    rate_per_s: float
    rate_per_min: float
    window_rate_per_s: float
    high_quantile: float
    high_rate_per_min: float | None
    n_minutes: int
    covered_s: float
    n_events: float


class EventRate:
    """Counts of events (arrivals, completions) per event-time slot; rates from closed slots.

    Bad input: a non-finite ``ts_s`` or a negative count raises ``InvalidInputError``; an event too
    late for the window raises ``LateEventError``. Update is O(1); memory is O(window_s / slot_s).
    """

    __slots__ = ("_counts", "_first_slot", "_ring", "high_quantile", "short_window_s")

    def __init__(
        self,
        *,
        slot_s: float = 1.0,
        window_s: float = DEFAULT_WINDOW_S,
        short_window_s: float = DEFAULT_SHORT_WINDOW_S,
        high_quantile: float = 0.95,
        allowed_lateness_s: float = math.inf,
    ) -> None:
        """Create an empty rate window.

        Args:
            slot_s: slot width (s); must divide one minute.
            window_s: window length (s), a whole number of minutes.
            short_window_s: span of ``rate_per_s`` (s), a whole number of slots.
            high_quantile: level of the per-minute rate quantile (e.g. 0.95).
            allowed_lateness_s: see ``SlotRing``.

        Raises:
            InvalidInputError: parameters that do not tile minutes and slots.
        """
        require_positive("slot_s", slot_s)
        self.high_quantile = require_fraction("high_quantile", high_quantile)
        self.short_window_s = require_positive("short_window_s", short_window_s)
        for name, span in (("window_s", window_s), ("short_window_s", short_window_s), ("minute", MINUTE_S)):
            k = span / slot_s
            if k < 1 or abs(k - round(k)) > 1e-9:
                msg = f"{name} ({span} s) must be a whole number of slots of {slot_s} s"
                raise InvalidInputError(msg, field=name, value=span)
        if abs(window_s / MINUTE_S - round(window_s / MINUTE_S)) > 1e-9:
            msg = f"window_s must be a whole number of minutes, got {window_s}"
            raise InvalidInputError(msg, field="window_s", value=window_s)
        n_slots = round(window_s / slot_s)
        self._ring = SlotRing(slot_s=slot_s, n_slots=n_slots, allowed_lateness_s=allowed_lateness_s)
        self._counts = [0.0] * n_slots
        self._first_slot: int | None = None

    @property
    def ring(self) -> SlotRing:
        """The slot ring (window parameters and watermark)."""
        return self._ring

    def update(self, *, ts_s: float, count: int = 1) -> None:
        """Count ``count`` events at event time ``ts_s``.

        Raises:
            InvalidInputError: bad ``ts_s`` or ``count``.
            LateEventError: ``ts_s`` is too late for the window.
        """
        if type(count) is not int or count < 0:
            require_count("count", count)
        pos, reset = self._ring.place(ts_s)
        if reset:
            self._counts[pos] = 0.0
        self._counts[pos] += count
        slot = self._ring.slot_of(ts_s)
        if self._first_slot is None or slot < self._first_slot:
            self._first_slot = slot

    def advance(self, ts_s: float) -> None:
        """Move the watermark to ``ts_s`` without an event."""
        self._ring.advance(ts_s)

    def _closed_counts(self) -> tuple[int, np.ndarray[Any, np.dtype[np.float64]]]:
        """(first slot index, counts per closed slot from the window start or first event, in order)."""
        ring = self._ring
        if ring.head_slot is None or self._first_slot is None:
            return 0, np.zeros(0, dtype=np.float64)
        lo = max(ring.head_slot - ring.n_slots + 1, self._first_slot)
        hi = ring.head_slot  # exclusive: the head slot is still filling
        counts = np.zeros(max(hi - lo, 0), dtype=np.float64)
        for p in ring.live_positions(closed_only=True):
            s = ring.slot_id(p)
            if s is not None and lo <= s < hi:
                counts[s - lo] = self._counts[p]
        return lo, counts

    def snapshot(self) -> RateSnapshot:
        """Rates over the closed slots of the window."""
        slot_s = self._ring.slot_s
        lo, counts = self._closed_counts()
        k_short = round(self.short_window_s / slot_s)
        k_min = round(MINUTE_S / slot_s)
        short = counts[-k_short:]
        last_min = counts[-k_min:]
        first_minute = -(-lo // k_min)  # first minute whose slots all lie in the window
        minute_counts = [
            float(counts[m * k_min - lo : (m + 1) * k_min - lo].sum())
            for m in range(first_minute, (lo + counts.size) // k_min)
        ]
        high = float(np.quantile(minute_counts, self.high_quantile)) if minute_counts else None
        return RateSnapshot(
            rate_per_s=float(short.sum()) / (short.size * slot_s) if short.size else 0.0,
            rate_per_min=float(last_min.sum()) * MINUTE_S / (last_min.size * slot_s) if last_min.size else 0.0,
            window_rate_per_s=float(counts.sum()) / (counts.size * slot_s) if counts.size else 0.0,
            high_quantile=self.high_quantile,
            high_rate_per_min=high,
            n_minutes=len(minute_counts),
            covered_s=counts.size * slot_s,
            n_events=float(counts.sum()),
        )

    def merge(self, other: EventRate) -> EventRate:
        """Fleet rate of two streams: slot-wise sums (equal to folding both streams in event-time order).

        Raises:
            InvalidInputError: the windows differ in shape.
        """
        ring, plan = self._ring.merged_with(other._ring)
        out = EventRate(
            slot_s=ring.slot_s,
            window_s=ring.window_s,
            short_window_s=self.short_window_s,
            high_quantile=self.high_quantile,
        )
        out._ring = ring
        for pos, a, b in plan:
            out._counts[pos] = (self._counts[a] if a is not None else 0.0) + (
                other._counts[b] if b is not None else 0.0
            )
        firsts = [f for f in (self._first_slot, other._first_slot) if f is not None]
        out._first_slot = min(firsts) if firsts else None
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-compatible state (format 1)."""
        return {
            "kind": "event_rate",
            "format": 1,
            "short_window_s": self.short_window_s,
            "high_quantile": self.high_quantile,
            "ring": self._ring.to_dict(),
            "first_slot": self._first_slot,
            "slots": [[p, self._counts[p]] for p in self._ring.live_positions()],
        }

    @classmethod
    def from_dict(cls, data: object) -> EventRate:
        """Rebuild from ``to_dict`` output.

        Raises:
            InvalidInputError: wrong kind or format version.
        """
        d = check_format(data, kind="event_rate", version=1)
        ring = SlotRing.from_dict(d["ring"])
        out = cls(
            slot_s=ring.slot_s,
            window_s=ring.window_s,
            short_window_s=float(d["short_window_s"]),
            high_quantile=float(d["high_quantile"]),
        )
        out._ring = ring
        out._first_slot = None if d["first_slot"] is None else int(d["first_slot"])
        for p, c in d["slots"]:
            out._counts[int(p)] = float(c)
        return out
