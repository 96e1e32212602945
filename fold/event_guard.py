"""What the stream processor checks of an engine's event before folding it: duplicates, ``seq`` and time.

docs/contracts.md promises that ``event_id`` deduplicates and ``seq`` detects gaps and restarts.
``EventGuard`` keeps, per engine and inside the engine's folded state (so a restarted processor and
an offline replay of the log decide exactly as the live one did):

- the last ``dedup_window`` event ids: an event whose id is among them is a duplicate (a producer's
  retried batch, a record produced twice), skipped and counted;
- the producer generation (``source_epoch``) and the highest ``seq`` folded in it: a ``seq`` more
  than one past it is a gap (events lost between the engine and the log), counted with the number
  of events missing; a higher ``source_epoch`` is an engine restart (its ``seq`` starts again at 0),
  and an event of an older generation than one already folded is refused (``stale_epoch``);
- the engine's watermark, the highest event time folded since the last anchor: an event more than
  ``max_ahead_s`` ahead of it or ``max_behind_s`` behind it is refused (``event_time_ahead`` /
  ``event_time_behind``), so one event with a wrong clock cannot move a window, a trigger or a fleet
  slot. A restart anchors the watermark afresh at its first event, and so does the
  ``reanchor_after``-th out-of-bounds event in a row (an engine whose clock really jumped loses
  ``reanchor_after - 1`` events, then is followed again, instead of being refused for good).

An engine is one producer, except a data-parallel engine whose ranks publish separately (vLLM's internal
data parallelism: each rank's engine core is a process with its own ``seq`` and ``source_epoch``, every
event stamped with its rank). Its registration says so (``dp_size`` > 1 and a ``dp_rank`` on the
``engine.registered`` envelope; the simulator's DP engine, one producer for all ranks, registers without
a rank), and from then on the guard follows ``seq`` and ``source_epoch`` per ``dp_rank``: a rank's first
event starts its own generation, and one rank's restart is not the others'. Deduplication and the
watermark stay per engine (event ids carry the rank; the ranks share one clock).

Everything is a function of the engine's event sequence, never of the wall clock.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from schemas.engines import EngineRegistered
from schemas.errors import FutureEventError, InvalidInputError, LateEventError
from schemas.events import Event

FORMAT = 2  # 2: seq and epoch per producer (``producers``, ``rank_producers``)
READABLE_FORMATS = (1, 2)  # a format-1 state is one producer


@dataclass(frozen=True, slots=True, kw_only=True)
class GuardLimits:
    """The bounds of ``EventGuard`` (Settings: ``GOVERNOR_DEDUP_WINDOW_EVENTS`` and the others).

    Attributes:
        dedup_window: how many of an engine's latest event ids are remembered for deduplication.
        max_ahead_s: how far an event's time may lead the engine's watermark, seconds.
        max_behind_s: how far an event's time may trail the engine's watermark, seconds.
        reanchor_after: the out-of-bounds event, counted in a row, that moves the watermark to itself.
    """

    dedup_window: int = 1024
    max_ahead_s: float = 300.0
    max_behind_s: float = 300.0
    reanchor_after: int = 16


DEFAULT_LIMITS = GuardLimits()


@dataclass(frozen=True, slots=True)
class Admission:
    """What the guard made of one event that was not refused.

    Attributes:
        duplicate: its ``event_id`` was folded already: skip it.
        seq_missing: how many ``seq`` numbers it skipped past the highest one folded (0: no gap).
        restart: it opened a new producer generation of its engine (``source_epoch`` went up).
    """

    duplicate: bool = False
    seq_missing: int = 0
    restart: bool = False


ADMITTED = Admission()
DUPLICATE = Admission(duplicate=True)
RESTARTED = Admission(restart=True)


class EventGuard:
    """Deduplication, ``seq`` gaps and restarts, and event-time bounds of one engine's stream."""

    def __init__(self, limits: GuardLimits = DEFAULT_LIMITS) -> None:
        self.limits = limits
        self.rank_producers = False
        self.producers: dict[int | None, tuple[int, int]] = {}
        self.watermark_s: float | None = None
        self.out_of_bounds = 0
        self.duplicates = 0
        self.seq_gaps = 0
        self.seq_missing = 0
        self.restarts = 0
        self._ids: deque[str] = deque()
        self._id_set: set[str] = set()

    @property
    def epoch(self) -> int | None:
        """The newest producer generation folded (of any rank), or None before the first event."""
        return max((epoch for epoch, _ in self.producers.values()), default=None)

    def admit(self, event: Event) -> Admission:
        """Check ``event`` and record it as folded unless it is a duplicate.

        Raises:
            InvalidInputError: the event belongs to an older producer generation (code ``stale_epoch``),
                or its time is out of bounds (``LateEventError``, ``FutureEventError``); nothing but the
                count of out-of-bounds events in a row changes.
        """
        if isinstance(event, EngineRegistered) and event.dp_size > 1 and event.dp_rank is not None:
            self.rank_producers = True
        producer = event.dp_rank if self.rank_producers else None
        current = self.producers.get(producer)
        epoch = event.source_epoch
        if current is not None and epoch < current[0]:
            msg = (
                f"source_epoch {epoch} of engine {event.engine_id} is older than its current epoch {current[0]} "
                "(the producer restarted since)"
            )
            raise InvalidInputError(msg, field="source_epoch", value=epoch, code="stale_epoch")
        event_id = event.event_id
        if event_id in self._id_set:
            self.duplicates += 1
            return DUPLICATE
        seq, ts, watermark = event.seq, event.ts, self.watermark_s
        if current is not None and epoch > current[0]:
            admission = self._restart(event, producer)
        else:
            if watermark is not None and not -self.limits.max_behind_s <= ts - watermark <= self.limits.max_ahead_s:
                self._out_of_bounds(event, watermark)
                watermark = None  # not refused: this event re-anchors the watermark
            self.out_of_bounds = 0
            admission = ADMITTED
            max_seq = None if current is None else current[1]
            if max_seq is not None and seq > max_seq + 1:
                admission = self._gap(seq - max_seq - 1)
            self.producers[producer] = (epoch, seq if max_seq is None else max(seq, max_seq))
            self.watermark_s = ts if watermark is None or ts > watermark else watermark
        self._remember(event_id)
        return admission

    def _restart(self, event: Event, producer: int | None) -> Admission:
        """A new producer generation: count it, start its ``seq`` and anchor the watermark at it."""
        self.restarts += 1
        self.producers[producer] = (event.source_epoch, event.seq)
        self.watermark_s = event.ts
        self.out_of_bounds = 0
        return RESTARTED

    def _gap(self, missing: int) -> Admission:
        self.seq_gaps += 1
        self.seq_missing += missing
        return Admission(seq_missing=missing)

    def _out_of_bounds(self, event: Event, watermark: float) -> None:
        """Count an out-of-bounds event and refuse it, unless it is the one in a row that re-anchors."""
        limits = self.limits
        ahead = event.ts - watermark > limits.max_ahead_s
        self.out_of_bounds += 1
        if self.out_of_bounds >= limits.reanchor_after:
            return
        where = f"engine {event.engine_id}, event_id {event.event_id}"
        if ahead:
            msg = f"ts={event.ts} is more than {limits.max_ahead_s} s ahead of the watermark {watermark} ({where})"
            raise FutureEventError(msg, ts=event.ts, watermark_s=watermark, allowed_lead_s=limits.max_ahead_s)
        msg = f"ts={event.ts} is more than {limits.max_behind_s} s behind the watermark {watermark} ({where})"
        raise LateEventError(msg, ts=event.ts, watermark_s=watermark, allowed_lateness_s=limits.max_behind_s)

    def _remember(self, event_id: str) -> None:
        ids = self._ids
        while len(ids) >= self.limits.dedup_window:
            self._id_set.discard(ids.popleft())
        ids.append(event_id)
        self._id_set.add(event_id)

    def to_dict(self) -> dict[str, Any]:
        """JSON-compatible state, ids oldest first."""
        return {
            "format": FORMAT,
            "rank_producers": self.rank_producers,
            "producers": [[producer, epoch, max_seq] for producer, (epoch, max_seq) in self.producers.items()],
            "watermark_s": self.watermark_s,
            "out_of_bounds": self.out_of_bounds,
            "duplicates": self.duplicates,
            "seq_gaps": self.seq_gaps,
            "seq_missing": self.seq_missing,
            "restarts": self.restarts,
            "ids": list(self._ids),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], limits: GuardLimits = DEFAULT_LIMITS) -> EventGuard:
        """Rebuild what ``to_dict`` wrote, under ``limits`` (a smaller window keeps the newest ids).

        Raises:
            InvalidInputError: a state of another format version.
        """
        if data["format"] not in READABLE_FORMATS:
            msg = f"event guard format must be one of {READABLE_FORMATS}, got {data['format']!r}"
            raise InvalidInputError(msg, field="format", value=data["format"])
        guard = cls(limits)
        if data["format"] == 1:
            if data["epoch"] is not None and data["max_seq"] is not None:
                guard.producers[None] = (int(data["epoch"]), int(data["max_seq"]))
        else:
            guard.rank_producers = bool(data["rank_producers"])
            for producer, epoch, max_seq in data["producers"]:
                guard.producers[None if producer is None else int(producer)] = (int(epoch), int(max_seq))
        guard.watermark_s = None if data["watermark_s"] is None else float(data["watermark_s"])
        guard.out_of_bounds = int(data["out_of_bounds"])
        guard.duplicates = int(data["duplicates"])
        guard.seq_gaps = int(data["seq_gaps"])
        guard.seq_missing = int(data["seq_missing"])
        guard.restarts = int(data["restarts"])
        for event_id in data["ids"]:
            guard._remember(str(event_id))
        return guard
