"""Windowed sums of BF-IO's self-check reports: both decisions' realised imbalance per event-time slot.

For the online self-check (policies/bfio/selfcheck.py). An engine reports, per period, the summed realised
imbalance of the H = 0 and the lookahead decisions of the steps it judged; the stream processor keeps
those sums in a ring of event-time slots (DESIGN.md section 4 principle 2: event time, so a replay of
the log gives the same sums as the live stream), and the BF-IO decision compares the two over the
window. A report counts in the slot of its own event time; the window is the live slots, the one
still filling included, so the newest reports count as soon as they are folded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from estimators._input import check_format, require_count, require_nonnegative
from estimators.window import SlotRing

FIELDS = ("judged_steps", "differing_steps", "expired_steps", "myopic", "lookahead", "squared_difference", "shadow_s")


@dataclass(frozen=True, slots=True, kw_only=True)
class ShadowSums:
    """The window's totals and the last report's horizon and side in force."""

    window_s: float
    judged_steps: int
    differing_steps: int
    expired_steps: int
    myopic_imbalance_tokens: float
    lookahead_imbalance_tokens: float
    squared_difference_tokens2: float
    shadow_compute_s: float
    lookahead_horizon_steps: int
    lookahead_in_force: bool


class ShadowJudgementWindow:
    """Self-check sums per event-time slot over the last ``n_slots * slot_s`` seconds.

    Bad input (a negative count or sum) raises ``InvalidInputError``; a report too late for the window
    raises ``LateEventError`` (``SlotRing.place``). Update is O(1); memory is O(n_slots).
    """

    __slots__ = ("_horizon", "_in_force", "_ring", "_sums")

    def __init__(self, *, slot_s: float = 1.0, n_slots: int = 10) -> None:
        self._ring = SlotRing(slot_s=slot_s, n_slots=n_slots)
        self._sums = [[0.0] * len(FIELDS) for _ in range(n_slots)]
        self._horizon = 0
        self._in_force = False

    def update(
        self,
        *,
        ts_s: float,
        judged_steps: int,
        differing_steps: int,
        expired_steps: int,
        myopic_tokens: float,
        lookahead_tokens: float,
        squared_difference_tokens2: float,
        shadow_s: float,
        lookahead_horizon_steps: int,
        lookahead_in_force: bool,
    ) -> None:
        """Add one report at event time ``ts_s``.

        Raises:
            InvalidInputError: a negative count or sum.
            LateEventError: ``ts_s`` is too late for the window.
        """
        require_count("judged_steps", judged_steps)
        require_count("differing_steps", differing_steps)
        require_count("expired_steps", expired_steps)
        values = (
            float(judged_steps),
            float(differing_steps),
            float(expired_steps),
            require_nonnegative("myopic_tokens", myopic_tokens),
            require_nonnegative("lookahead_tokens", lookahead_tokens),
            require_nonnegative("squared_difference_tokens2", squared_difference_tokens2),
            require_nonnegative("shadow_s", shadow_s),
        )
        position, reset = self._ring.place(ts_s)
        row = self._sums[position]
        if reset:
            row[:] = [0.0] * len(FIELDS)
        for index, value in enumerate(values):
            row[index] += value
        self._horizon = lookahead_horizon_steps
        self._in_force = lookahead_in_force

    def snapshot(self) -> ShadowSums | None:
        """The totals over the live slots, or None before the first report."""
        positions = self._ring.live_positions()
        if not positions:
            return None
        totals = [sum(self._sums[p][i] for p in positions) for i in range(len(FIELDS))]
        return ShadowSums(
            window_s=self._ring.window_s,
            judged_steps=int(totals[0]),
            differing_steps=int(totals[1]),
            expired_steps=int(totals[2]),
            myopic_imbalance_tokens=totals[3],
            lookahead_imbalance_tokens=totals[4],
            squared_difference_tokens2=totals[5],
            shadow_compute_s=totals[6],
            lookahead_horizon_steps=self._horizon,
            lookahead_in_force=self._in_force,
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-compatible state (format 1)."""
        return {
            "kind": "shadow_judgements",
            "format": 1,
            "ring": self._ring.to_dict(),
            "slots": [[p, self._sums[p]] for p in self._ring.live_positions()],
            "horizon": self._horizon,
            "in_force": self._in_force,
        }

    @classmethod
    def from_dict(cls, data: object) -> ShadowJudgementWindow:
        """Rebuild from ``to_dict`` output.

        Raises:
            InvalidInputError: wrong kind or format version.
        """
        d = check_format(data, kind="shadow_judgements", version=1)
        ring = SlotRing.from_dict(d["ring"])
        out = cls(slot_s=ring.slot_s, n_slots=ring.n_slots)
        out._ring = ring
        for position, values in d["slots"]:
            out._sums[int(position)] = [float(v) for v in values]
        out._horizon = int(d["horizon"])
        out._in_force = bool(d["in_force"])
        return out
