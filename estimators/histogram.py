"""Total-length histogram on fixed log buckets, time-windowed, mergeable, with a piecewise-linear CDF.

Sources: seed-002-fleetopt.md section 5.2 (counts of L_total per bucket on at least the paper's 18
breakpoints plus a > 65,536 overflow bucket, 1-min slots in a ring, per-engine sketches merged at fleet
level) and section 3.3 (the CDF tables F(L_total <= t) the planner reads, evaluated between breakpoints
by linear interpolation, i.e. uniform mass inside a bucket).

Buckets: edges 0, then 2^k (1 + i/8) for k = 0..15 and i = 0..7, then 65,536. Every FleetOpt
breakpoint (64, 128, 256, 512, 768 = 1.5 * 512, ...) is an edge, so F at a breakpoint is an exact
cumulative count. Bucket j holds lengths in (e_j, e_{j+1}] (bucket 0 also holds 0); the last bucket is
the overflow (65,536, max seen]. Exact sums of lengths and squared lengths are kept beside the counts,
so the mean and second moment are exact, not bucketised.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from estimators._input import check_format, require_fraction, require_nonnegative
from estimators.window import SlotRing
from schemas.errors import InvalidInputError

FLEETOPT_BREAKPOINTS_TOKENS = (
    64, 128, 256, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152, 65536,
)  # fmt: skip  # seed-002 section 3.3
SUB_BUCKETS_PER_OCTAVE = 8
MAX_EDGE_TOKENS = 65536
BUCKET_EDGES_TOKENS: tuple[float, ...] = tuple(
    sorted({0.0, float(MAX_EDGE_TOKENS)} | {2.0**k * (1 + i / 8) for k in range(16) for i in range(8)})
)
N_BUCKETS = len(BUCKET_EDGES_TOKENS)  # in-range buckets plus the overflow bucket
OVERFLOW_BUCKET = N_BUCKETS - 1
DEFAULT_SLOT_S = 60.0  # seed-002 section 5.2: 1-min tumbling buckets in a ring
DEFAULT_N_SLOTS = 60  # one hour of 1-min slots
_BUCKET_OF_TOKENS: list[int] = np.maximum(
    np.searchsorted(np.asarray(BUCKET_EDGES_TOKENS), np.arange(MAX_EDGE_TOKENS + 1), side="left") - 1, 0
).tolist()


def bucket_of(length_tokens: float) -> int:
    """Index of the bucket holding ``length_tokens`` (>= 0); the overflow bucket above 65,536."""
    if length_tokens > MAX_EDGE_TOKENS:
        return OVERFLOW_BUCKET
    if type(length_tokens) is int:
        return _BUCKET_OF_TOKENS[length_tokens]
    return max(bisect_left(BUCKET_EDGES_TOKENS, length_tokens) - 1, 0)


@dataclass(frozen=True, slots=True, kw_only=True)
class LengthDistribution:
    """A snapshot of a length histogram: counts per bucket and exact moments.

    Attributes:
        counts: mass per bucket, ``N_BUCKETS`` entries (the last is the overflow bucket).
        total: summed counts.
        sum_tokens, sum_sq_tokens: exact sums of lengths and squared lengths.
        max_tokens: the largest length seen (closes the overflow bucket), or 0.0 when empty.
    """

    counts: tuple[float, ...]
    total: float
    sum_tokens: float
    sum_sq_tokens: float
    max_tokens: float

    @property
    def mean_tokens(self) -> float | None:
        """Mean length, or None when empty."""
        return self.sum_tokens / self.total if self.total > 0 else None

    @property
    def second_moment_tokens2(self) -> float | None:
        """E[L^2] in tokens squared, or None when empty."""
        return self.sum_sq_tokens / self.total if self.total > 0 else None

    def _knots(self) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """CDF knots (x, F): every edge, then the overflow's upper end at max_tokens."""
        c = np.asarray(self.counts, dtype=np.float64)
        cum = np.concatenate(([0.0], np.cumsum(c[:-1]))) / self.total
        x = np.asarray(BUCKET_EDGES_TOKENS, dtype=np.float64)
        top = max(self.max_tokens, float(MAX_EDGE_TOKENS))
        return np.append(x, top), np.append(cum, 1.0)

    def cdf(self, t_tokens: float) -> float:
        """F(t) = P(L <= t), linear inside each bucket; 0.0 for an empty histogram."""
        if self.total <= 0:
            return 0.0
        x, f = self._knots()
        return float(np.interp(t_tokens, x, f, left=0.0, right=1.0))

    def quantile(self, q: float) -> float:
        """Smallest t with F(t) = q under the piecewise-linear CDF (tokens).

        Raises:
            InvalidInputError: ``q`` outside [0, 1], or an empty histogram.
        """
        q = require_fraction("q", q)
        if self.total <= 0:
            msg = "quantile of an empty length histogram"
            raise InvalidInputError(msg, field="total", value=self.total)
        x, f = self._knots()
        j = int(np.searchsorted(f, q, side="left"))
        if j == 0:
            return float(x[0])
        f_lo, f_hi = f[j - 1], f[j]
        return float(x[j - 1] + (x[j] - x[j - 1]) * (q - f_lo) / (f_hi - f_lo))

    def ks_distance(self, other: LengthDistribution) -> float:
        """Kolmogorov-Smirnov distance sup_t |F(t) - G(t)| between the two piecewise-linear CDFs.

        Both CDFs are linear between the shared knots, so the supremum sits on a knot of either.
        """
        if self.total <= 0 or other.total <= 0:
            msg = "KS distance needs two non-empty histograms"
            raise InvalidInputError(msg, field="total", value=(self.total, other.total))
        x = np.union1d(self._knots()[0], other._knots()[0])
        return float(max(abs(self.cdf(float(t)) - other.cdf(float(t))) for t in x))

    @classmethod
    def from_cdf(cls, points: Sequence[tuple[float, float]], *, total: float = 1.0) -> LengthDistribution:
        """The distribution with F(t_k) = F_k at the given points and uniform mass between them.

        This is how the FleetOpt CDF files (``[[tokens, F], ...]``) become a histogram: mass
        F_k - F_{k-1} spread over (t_{k-1}, t_k] (t_0 = 0) in proportion to bucket width. Mass above the
        last point goes to the overflow bucket, closed at twice the last point.

        Raises:
            InvalidInputError: a point is not a bucket edge, or t or F is not increasing, or F > 1.
        """
        edges = np.asarray(BUCKET_EDGES_TOKENS, dtype=np.float64)
        counts = np.zeros(N_BUCKETS, dtype=np.float64)
        s1 = s2 = 0.0
        prev_t, prev_f = 0.0, 0.0
        for t, f in points:
            if t not in BUCKET_EDGES_TOKENS or t <= prev_t or f < prev_f or f > 1.0:
                msg = f"CDF point ({t}, {f}) must be a bucket edge with t and F increasing and F <= 1"
                raise InvalidInputError(msg, field="points", value=(t, f))
            lo = BUCKET_EDGES_TOKENS.index(prev_t)
            hi = BUCKET_EDGES_TOKENS.index(t)
            a, b = edges[lo:hi], edges[lo + 1 : hi + 1]
            m = (f - prev_f) * total * (b - a) / (t - prev_t)
            counts[lo:hi] += m
            s1 += float(np.dot(m, (a + b) / 2))
            s2 += float(np.dot(m, (a * a + a * b + b * b) / 3))
            prev_t, prev_f = t, f
        top = prev_t
        if prev_f < 1.0:
            top = 2.0 * prev_t
            m_over = (1.0 - prev_f) * total
            counts[OVERFLOW_BUCKET] += m_over
            s1 += m_over * (prev_t + top) / 2
            s2 += m_over * (prev_t * prev_t + prev_t * top + top * top) / 3
        return cls(
            counts=tuple(float(c) for c in counts),
            total=float(counts.sum()),
            sum_tokens=s1,
            sum_sq_tokens=s2,
            max_tokens=top,
        )


class LengthHistogram:
    """Length counts on the fixed buckets, kept per event-time slot in a ring (window = n_slots * slot_s).

    Bad input: a negative, NaN or infinite length raises ``InvalidInputError``; an event older than the
    allowed lateness, or outside the window, raises ``LateEventError`` (``estimators.window``).
    Update is O(1); memory is O(n_slots * N_BUCKETS).
    """

    __slots__ = ("_counts", "_max", "_ring", "_sum", "_sum_sq")

    def __init__(
        self, *, slot_s: float = DEFAULT_SLOT_S, n_slots: int = DEFAULT_N_SLOTS, allowed_lateness_s: float = math.inf
    ) -> None:
        """Create an empty windowed histogram (see ``SlotRing`` for the parameters)."""
        self._ring = SlotRing(slot_s=slot_s, n_slots=n_slots, allowed_lateness_s=allowed_lateness_s)
        self._counts: list[list[float]] = [[0.0] * N_BUCKETS for _ in range(n_slots)]
        self._sum = [0.0] * n_slots
        self._sum_sq = [0.0] * n_slots
        self._max = [0.0] * n_slots

    @property
    def ring(self) -> SlotRing:
        """The slot ring (window parameters and watermark)."""
        return self._ring

    def _reset(self, pos: int) -> None:
        self._counts[pos] = [0.0] * N_BUCKETS
        self._sum[pos] = self._sum_sq[pos] = self._max[pos] = 0.0

    def update(self, *, ts_s: float, length_tokens: float) -> None:
        """Fold one request's length at event time ``ts_s``.

        Raises:
            InvalidInputError: bad ``length_tokens`` or ``ts_s``.
            LateEventError: ``ts_s`` is too late for the window.
        """
        if not (type(length_tokens) is int and length_tokens >= 0):
            require_nonnegative("length_tokens", length_tokens)
        pos, reset = self._ring.place(ts_s)
        if reset:
            self._reset(pos)
        self._counts[pos][bucket_of(length_tokens)] += 1.0
        self._sum[pos] += length_tokens
        self._sum_sq[pos] += length_tokens * length_tokens
        if length_tokens > self._max[pos]:
            self._max[pos] = float(length_tokens)

    def advance(self, ts_s: float) -> None:
        """Move the watermark to ``ts_s`` without an event (old slots leave the window)."""
        self._ring.advance(ts_s)

    def snapshot(self, *, closed_only: bool = False) -> LengthDistribution:
        """The distribution over the live window (``closed_only``: without the filling head slot)."""
        live = self._ring.live_positions(closed_only=closed_only)
        counts = np.zeros(N_BUCKETS, dtype=np.float64)
        for p in live:
            counts += np.asarray(self._counts[p], dtype=np.float64)
        return LengthDistribution(
            counts=tuple(float(c) for c in counts),
            total=float(counts.sum()),
            sum_tokens=math.fsum(self._sum[p] for p in live),
            sum_sq_tokens=math.fsum(self._sum_sq[p] for p in live),
            max_tokens=max((self._max[p] for p in live), default=0.0),
        )

    def merge(self, other: LengthHistogram) -> LengthHistogram:
        """The fleet histogram of two engines' histograms: slot-wise sums over the later window.

        Equal to folding both streams in event-time order into one histogram.

        Raises:
            InvalidInputError: the windows differ in slot width or count.
        """
        ring, plan = self._ring.merged_with(other._ring)
        out = LengthHistogram(slot_s=ring.slot_s, n_slots=ring.n_slots)
        out._ring = ring
        for pos, a, b in plan:
            for src, p in ((self, a), (other, b)):
                if p is None:
                    continue
                row = out._counts[pos]
                for j, c in enumerate(src._counts[p]):
                    row[j] += c
                out._sum[pos] += src._sum[p]
                out._sum_sq[pos] += src._sum_sq[p]
                out._max[pos] = max(out._max[pos], src._max[p])
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-compatible state (format 1); only live slots are written."""
        live = self._ring.live_positions()
        return {
            "kind": "length_histogram",
            "format": 1,
            "n_buckets": N_BUCKETS,
            "ring": self._ring.to_dict(),
            "slots": [[p, self._counts[p], self._sum[p], self._sum_sq[p], self._max[p]] for p in live],
        }

    @classmethod
    def from_dict(cls, data: object) -> LengthHistogram:
        """Rebuild from ``to_dict`` output.

        Raises:
            InvalidInputError: wrong kind, format version or bucket layout.
        """
        d = check_format(data, kind="length_histogram", version=1)
        if d["n_buckets"] != N_BUCKETS:
            msg = f"n_buckets must be {N_BUCKETS}, got {d['n_buckets']!r}"
            raise InvalidInputError(msg, field="n_buckets", value=d["n_buckets"])
        ring = SlotRing.from_dict(d["ring"])
        out = cls(slot_s=ring.slot_s, n_slots=ring.n_slots)
        out._ring = ring
        for p, counts, s1, s2, mx in d["slots"]:
            out._counts[p] = [float(c) for c in counts]
            out._sum[p], out._sum_sq[p], out._max[p] = float(s1), float(s2), float(mx)
        return out
