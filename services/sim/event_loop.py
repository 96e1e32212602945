"""The discrete-event core: an event-time clock and a heap of events ordered by (time_s, seq).

Shape after vidur (STYLE section 7): entities (engines, routers) live apart from events; the
loop pops the earliest event and hands it to one handler, which returns the new events to
schedule. ``seq`` is the loop's own push counter, so equal-time events run in push order and a run
is reproducible bit for bit. Nothing here reads a wall clock; the live mode paces the loop from
outside through the ``before`` hook.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from schemas.errors import InvalidInputError


@dataclass(frozen=True, slots=True, kw_only=True)
class SimEvent:
    """Base of every simulator event: the event time it fires at, seconds."""

    time_s: float


class EventLoop:
    """A heap of ``SimEvent`` ordered by (time_s, push order) and the current event time."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, SimEvent]] = []
        self._pushed = 0
        self.now_s = 0.0

    def push(self, event: SimEvent) -> None:
        """Schedule ``event``.

        Raises:
            InvalidInputError: the event lies in the past of the clock.
        """
        if event.time_s < self.now_s:
            msg = f"time_s {event.time_s} is before the clock {self.now_s} ({type(event).__name__})"
            raise InvalidInputError(msg, field="time_s", value=event.time_s)
        heapq.heappush(self._heap, (event.time_s, self._pushed, event))
        self._pushed += 1

    def __len__(self) -> int:
        return len(self._heap)

    def run(
        self,
        handle: Callable[[SimEvent], Iterable[SimEvent]],
        *,
        until_s: float,
        before: Callable[[float], None] | None = None,
    ) -> None:
        """Handle events in order until the next one lies after ``until_s`` or none is left.

        Args:
            handle: returns the events an event causes.
            until_s: the simulated end time; later events stay queued.
            before: called with each event's time before it is handled (live pacing).
        """
        heap = self._heap
        while heap and heap[0][0] <= until_s:
            time_s, _, event = heapq.heappop(heap)
            if before is not None:
                before(time_s)
            self.now_s = time_s
            for new in handle(event):
                self.push(new)
        self.now_s = max(self.now_s, until_s)
