"""Output-length windows and Kaplan-Meier survival with right-censoring.

Sources: seed-001-ebplus.md section 3.3 and pitfall P2 (completed-only windows are censored and
length-biased; ``length``/``abort`` finishes are right-censored), seed-003-bfio.md sections 1.5 and
6.4 (per-class Kaplan-Meier survival S_c(n) = P(O > n) = prod_{j<=n} (1 - d_j / r_j), shipped to the
DP router as log-binned tables), DESIGN.md section 5 (censored finishes are never completions).

Discrete-time convention: lengths are whole output tokens. ``d_t`` counts requests that finished
normally at exactly t tokens; ``r_t`` counts requests observed for at least t tokens, events and
censored alike (a request censored at t was at risk at t and leaves the risk set after it).
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from estimators._input import check_format, require_count, require_finite, require_positive
from schemas.errors import InvalidInputError, LateEventError

DEFAULT_WINDOW_REQUESTS = 500  # seed-001 section 3.1: W = 500 (VLLM_PD_IFR_WINDOW_SIZE)


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputLengthSample:
    """The contents of an output-length window, oldest first.

    Attributes:
        lengths_tokens: observed output length of each request (tokens, >= 0).
        censored: True where the length is a lower bound (finish ``length``/``abort``, or in flight).
    """

    lengths_tokens: tuple[int, ...]
    censored: tuple[bool, ...]

    def __post_init__(self) -> None:
        if len(self.lengths_tokens) != len(self.censored):
            msg = f"lengths_tokens and censored differ in length: {len(self.lengths_tokens)} != {len(self.censored)}"
            raise InvalidInputError(msg, field="censored", value=len(self.censored))

    @property
    def n_samples(self) -> int:
        """Number of requests in the sample."""
        return len(self.lengths_tokens)

    @property
    def n_censored(self) -> int:
        """Number of right-censored requests in the sample."""
        return sum(self.censored)

    def with_in_flight(self, ages_tokens: Sequence[int]) -> OutputLengthSample:
        """This sample plus in-flight requests, censored at their current age in tokens.

        seed-003 section 1.5: counting in-flight requests as censored removes the length bias of a
        window of finished requests only.
        """
        ages = tuple(require_count("ages_tokens", a) for a in ages_tokens)
        return OutputLengthSample(
            lengths_tokens=self.lengths_tokens + ages, censored=self.censored + (True,) * len(ages)
        )

    def event_and_risk_counts(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Per-token event counts d_t and at-risk counts r_t for t = 0..max length.

        Returns:
            ``(d, r)``, both of shape (max_length + 1,): ``d[t]`` = finished normally at exactly t,
            ``r[t]`` = observed for at least t tokens. Empty arrays for an empty sample.
        """
        if not self.lengths_tokens:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty
        lengths = np.asarray(self.lengths_tokens, dtype=np.int64)
        cens = np.asarray(self.censored, dtype=bool)
        size = int(lengths.max()) + 1
        d = np.bincount(lengths[~cens], minlength=size).astype(np.int64)
        all_counts = np.bincount(lengths, minlength=size)
        r = np.cumsum(all_counts[::-1])[::-1].astype(np.int64)
        return d, r


@dataclass(frozen=True, slots=True, kw_only=True)
class SurvivalCurve:
    """Kaplan-Meier estimate of S(t) = P(O > t) as a right-continuous step function.

    Attributes:
        tokens: distinct event lengths t_1 < t_2 < ... (tokens) where S drops.
        survival: S just after each of them, same length as ``tokens``; S = 1 before ``tokens[0]``.
        n_samples: requests in the sample; n_censored: how many of them were censored.
    """

    tokens: tuple[int, ...]
    survival: tuple[float, ...]
    n_samples: int
    n_censored: int

    def at(self, t_tokens: float) -> float:
        """S(t) = P(O > t): the survival after the last event length <= t (1.0 before the first)."""
        i = bisect.bisect_right(self.tokens, t_tokens)
        return 1.0 if i == 0 else self.survival[i - 1]


@dataclass(frozen=True, slots=True, kw_only=True)
class SurvivalTable:
    """Survival sampled on log-spaced bin edges, the form BF-IO ships to the DP router.

    Attributes:
        bin_edges_tokens: increasing edges in tokens (the first is 0).
        survival: S(edge) = P(O > edge) at each edge, non-increasing, same length.
        n_samples, n_censored: sample size behind the table.
    """

    bin_edges_tokens: tuple[int, ...]
    survival: tuple[float, ...]
    n_samples: int
    n_censored: int


def kaplan_meier(sample: OutputLengthSample) -> SurvivalCurve:
    """Kaplan-Meier product-limit estimate of output-length survival (seed-003 section 1.5).

    S(t) = prod_{j <= t} (1 - d_j / r_j); censored requests count in r_j up to their censoring length
    and never as events. With no censoring this is the empirical survival of the sample.
    """
    d, r = sample.event_and_risk_counts()
    event_tokens = np.flatnonzero(d)
    if event_tokens.size == 0:
        return SurvivalCurve(tokens=(), survival=(), n_samples=sample.n_samples, n_censored=sample.n_censored)
    factors = 1.0 - d[event_tokens] / r[event_tokens]
    surv = np.cumprod(factors)
    return SurvivalCurve(
        tokens=tuple(int(t) for t in event_tokens),
        survival=tuple(float(s) for s in surv),
        n_samples=sample.n_samples,
        n_censored=sample.n_censored,
    )


def log_bin_edges_tokens(*, max_tokens: int, bins_per_octave: int = 4) -> tuple[int, ...]:
    """Integer bin edges 0, 1, 2, ... growing geometrically up to ``max_tokens`` (inclusive).

    seed-003 section 6.4 asks for log-spaced bins up to max_tokens; rounding to whole tokens and
    dropping duplicates keeps every edge an exact token count.

    Raises:
        InvalidInputError: ``max_tokens`` < 1 or ``bins_per_octave`` < 1.
    """
    require_count("max_tokens", max_tokens, minimum=1)
    require_count("bins_per_octave", bins_per_octave, minimum=1)
    n = math.ceil(math.log2(max_tokens) * bins_per_octave)
    grid = {0, max_tokens}
    grid.update(min(max_tokens, round(2.0 ** (i / bins_per_octave))) for i in range(n + 1))
    return tuple(sorted(grid))


def survival_table(curve: SurvivalCurve, bin_edges_tokens: Sequence[int]) -> SurvivalTable:
    """Sample a Kaplan-Meier curve at the given edges (see ``log_bin_edges_tokens``).

    Raises:
        InvalidInputError: the edges are not strictly increasing non-negative integers.
    """
    edges = tuple(require_count("bin_edges_tokens", e) for e in bin_edges_tokens)
    if any(b <= a for a, b in itertools.pairwise(edges)):
        msg = f"bin_edges_tokens must be strictly increasing, got {edges[:8]}..."
        raise InvalidInputError(msg, field="bin_edges_tokens", value=edges)
    return SurvivalTable(
        bin_edges_tokens=edges,
        survival=tuple(curve.at(e) for e in edges),
        n_samples=curve.n_samples,
        n_censored=curve.n_censored,
    )


class OutputLengthWindow:
    """The last W finished requests' output lengths, optionally also bounded to the last T seconds.

    seed-001 section 3.1 (W_O, W = 500) extended with censoring (pitfall P2): each entry is
    ``(ts_s, output_tokens, censored)``. Count bound: at most ``capacity`` entries, oldest evicted
    first. Time bound (``window_s`` set): entries older than the newest event time minus
    ``window_s`` are evicted. Events arrive in event-time order per engine; an event older than the
    newest by more than ``allowed_lateness_s`` raises ``LateEventError``. A late-but-allowed event is
    appended in arrival order (it still counts in the count window).

    Bad input: negative or non-integer ``output_tokens`` and non-finite ``ts_s`` raise
    ``InvalidInputError``. Update is O(1) amortised; memory is O(capacity).
    """

    __slots__ = ("_entries", "allowed_lateness_s", "capacity", "newest_ts_s", "window_s")

    def __init__(
        self,
        *,
        capacity: int = DEFAULT_WINDOW_REQUESTS,
        window_s: float | None = None,
        allowed_lateness_s: float = math.inf,
    ) -> None:
        """Create an empty window.

        Args:
            capacity: W, the most entries kept (>= 1).
            window_s: T, the most seconds of event time kept, or None for a pure count window.
            allowed_lateness_s: how far an event may lag the newest event time.
        """
        self.capacity = require_count("capacity", capacity, minimum=1)
        self.window_s = None if window_s is None else require_positive("window_s", window_s)
        if math.isnan(allowed_lateness_s) or allowed_lateness_s < 0:
            msg = f"allowed_lateness_s must be >= 0, got {allowed_lateness_s!r}"
            raise InvalidInputError(msg, field="allowed_lateness_s", value=allowed_lateness_s)
        self.allowed_lateness_s = float(allowed_lateness_s)
        self._entries: deque[tuple[float, int, bool]] = deque(maxlen=capacity)
        self.newest_ts_s: float | None = None

    def update(self, *, ts_s: float, output_tokens: int, censored: bool) -> None:
        """Fold one finished request.

        Args:
            ts_s: event time of the finish (s).
            output_tokens: output length O in tokens (>= 0 integer).
            censored: True for a ``length``/``abort`` finish (O is a lower bound).

        Raises:
            InvalidInputError: bad ``ts_s`` or ``output_tokens``.
            LateEventError: ``ts_s`` lags the newest event time by more than the allowed lateness.
        """
        if type(output_tokens) is not int or output_tokens < 0:
            require_count("output_tokens", output_tokens)
        if not math.isfinite(ts_s):
            require_finite("ts", ts_s)
        newest = self.newest_ts_s
        if newest is None or ts_s > newest:
            self.newest_ts_s = newest = ts_s
        elif ts_s < newest - self.allowed_lateness_s:
            msg = f"ts={ts_s} lags the newest finish {newest} by more than {self.allowed_lateness_s} s"
            raise LateEventError(msg, ts=ts_s, watermark_s=newest, allowed_lateness_s=self.allowed_lateness_s)
        entries = self._entries
        entries.append((ts_s, output_tokens, bool(censored)))
        if self.window_s is not None:
            cutoff = newest - self.window_s
            while entries[0][0] < cutoff:
                entries.popleft()

    def merge(self, other: OutputLengthWindow) -> OutputLengthWindow:
        """The window of both inputs' entries in event-time order, then trimmed to W and T.

        Equal to folding the event-time-ordered interleaving of the two streams (ties: ``self``
        first). Both windows must share capacity and window_s.

        Raises:
            InvalidInputError: the windows' parameters differ.
        """
        if (self.capacity, self.window_s) != (other.capacity, other.window_s):
            msg = f"cannot merge windows ({self.capacity}, {self.window_s}) and ({other.capacity}, {other.window_s})"
            raise InvalidInputError(msg, field="capacity", value=other.capacity)
        out = OutputLengthWindow(
            capacity=self.capacity,
            window_s=self.window_s,
            allowed_lateness_s=min(self.allowed_lateness_s, other.allowed_lateness_s),
        )
        tagged = [(e[0], 0, i, e) for i, e in enumerate(self._entries)]
        tagged += [(e[0], 1, i, e) for i, e in enumerate(other._entries)]
        tagged.sort(key=lambda x: (x[0], x[1], x[2]))
        out.allowed_lateness_s = math.inf
        for _, _, _, (ts, n, c) in tagged:
            out.update(ts_s=ts, output_tokens=n, censored=c)
        out.allowed_lateness_s = min(self.allowed_lateness_s, other.allowed_lateness_s)
        return out

    def __len__(self) -> int:
        """Number of entries in the window."""
        return len(self._entries)

    def snapshot(self) -> OutputLengthSample:
        """The window's contents, oldest first."""
        return OutputLengthSample(
            lengths_tokens=tuple(e[1] for e in self._entries), censored=tuple(e[2] for e in self._entries)
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-compatible state (format 1)."""
        return {
            "kind": "output_length_window",
            "format": 1,
            "capacity": self.capacity,
            "window_s": self.window_s,
            "allowed_lateness_s": None if math.isinf(self.allowed_lateness_s) else self.allowed_lateness_s,
            "newest_ts_s": self.newest_ts_s,
            "entries": [[ts, n, c] for ts, n, c in self._entries],
        }

    @classmethod
    def from_dict(cls, data: object) -> OutputLengthWindow:
        """Rebuild from ``to_dict`` output.

        Raises:
            InvalidInputError: wrong kind or format version, or a bad entry.
        """
        d = check_format(data, kind="output_length_window", version=1)
        lateness = d["allowed_lateness_s"]
        out = cls(
            capacity=int(d["capacity"]),
            window_s=None if d["window_s"] is None else float(d["window_s"]),
            allowed_lateness_s=math.inf if lateness is None else float(lateness),
        )
        for ts, n, c in d["entries"]:
            require_count("output_tokens", n)
            out._entries.append((require_finite("ts", ts), n, bool(c)))
        out.newest_ts_s = None if d["newest_ts_s"] is None else float(d["newest_ts_s"])
        return out


DEFAULT_IN_FLIGHT_CAPACITY = 65_536  # ours: far above any engine's running set (G B = 32 x 72 = 2,304)


class InFlightAges:
    """Lower bounds on the output tokens generated so far by an engine's running requests.

    seed-003 section 1.5 and 6.3 (and seed-001 pitfall P2): a request still running is right-censored
    at its current age, and counting it removes the length bias of a window of finished requests.
    Engines do not emit per-token events (spec 6.3), so the age is rebuilt from the events they do
    emit: ``request.first_token`` starts a request at age 1, and each later ``step`` in which the
    engine decoded at least as many requests as are tracked here (``num_decode_requests``) adds one
    token to every tracked request. A step that decoded fewer (a scheduler deferring decodes, as SLAI
    may) adds nothing, so the age never exceeds the true count and censoring at it stays valid. A
    request whose first token arrived after the previous step report starts counting at the next
    one, because that report may be the step that produced its first token. ``request.preempted``
    carries the exact count; the request is then frozen at it (recompute does not re-announce a first
    token). ``request.finished`` drops the request.

    Memory: at most ``capacity`` requests, the oldest first-token evicted (a request whose finish was
    lost must not leak). Pure: ages are counted in events, never in wall time.
    """

    __slots__ = ("_frozen", "_pending", "_started_at_tick", "capacity", "ticks")

    def __init__(self, *, capacity: int = DEFAULT_IN_FLIGHT_CAPACITY) -> None:
        """Create an empty tracker holding at most ``capacity`` requests (>= 1)."""
        self.capacity = require_count("capacity", capacity, minimum=1)
        self.ticks = 0
        self._started_at_tick: dict[str, int] = {}
        self._pending: dict[str, None] = {}
        self._frozen: dict[str, int] = {}

    def __len__(self) -> int:
        """Requests tracked."""
        return len(self._started_at_tick) + len(self._pending) + len(self._frozen)

    def first_token(self, request_id: str) -> None:
        """A request produced its first token: track it from age 1."""
        self._drop(request_id)
        self._pending[request_id] = None
        if len(self) > self.capacity:
            self._evict_oldest()

    def step(self, *, num_decode_requests: int) -> None:
        """One engine step: advance every counting request if the step decoded all of them.

        Raises:
            InvalidInputError: a negative ``num_decode_requests``.
        """
        require_count("num_decode_requests", num_decode_requests)
        if self._started_at_tick and num_decode_requests >= len(self._started_at_tick):
            self.ticks += 1
        for request_id in self._pending:
            self._started_at_tick[request_id] = self.ticks
        self._pending.clear()

    def preempted(self, request_id: str, *, generated_tokens: int) -> None:
        """A running request was preempted with ``generated_tokens`` output so far: freeze it there."""
        require_count("generated_tokens", generated_tokens)
        self._drop(request_id)
        if generated_tokens >= 1:
            self._frozen[request_id] = generated_tokens

    def finished(self, request_id: str) -> None:
        """A request left the engine (its finish goes to the output-length window)."""
        self._drop(request_id)

    def drain(self) -> tuple[int, ...]:
        """The engine restarted: return every tracked request's age and forget them all.

        The requests were lost, not finished: their output length is right-censored at the age
        returned (seed-003 section 1.5), and the caller puts them in its window as censored.
        """
        ages = self.ages_tokens()
        self.ticks = 0
        self._started_at_tick.clear()
        self._pending.clear()
        self._frozen.clear()
        return ages

    def ages_tokens(self) -> tuple[int, ...]:
        """Each tracked request's age lower bound (tokens >= 1), in a deterministic order."""
        counting = (1 + self.ticks - start for start in self._started_at_tick.values())
        return (*counting, *(1 for _ in self._pending), *self._frozen.values())

    def _drop(self, request_id: str) -> None:
        self._started_at_tick.pop(request_id, None)
        self._pending.pop(request_id, None)
        self._frozen.pop(request_id, None)

    def _evict_oldest(self) -> None:
        for group in (self._frozen, self._started_at_tick, self._pending):
            if group:
                del group[next(iter(group))]
                return

    def to_dict(self) -> dict[str, Any]:
        """JSON-compatible state (format 1); insertion order is kept, so ages replay identically."""
        return {
            "kind": "in_flight_ages",
            "format": 1,
            "capacity": self.capacity,
            "ticks": self.ticks,
            "started_at_tick": [[r, t] for r, t in self._started_at_tick.items()],
            "pending": list(self._pending),
            "frozen": [[r, n] for r, n in self._frozen.items()],
        }

    @classmethod
    def from_dict(cls, data: object) -> InFlightAges:
        """Rebuild from ``to_dict`` output.

        Raises:
            InvalidInputError: wrong kind or format version, or a bad entry.
        """
        d = check_format(data, kind="in_flight_ages", version=1)
        out = cls(capacity=int(d["capacity"]))
        out.ticks = require_count("ticks", d["ticks"])
        out._started_at_tick = {str(r): require_count("started_at_tick", t) for r, t in d["started_at_tick"]}
        out._pending = dict.fromkeys(str(r) for r in d["pending"])
        out._frozen = {str(r): require_count("generated_tokens", n, minimum=1) for r, n in d["frozen"]}
        return out
