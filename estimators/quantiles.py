"""Mergeable quantile sketch with a relative-error guarantee (DDSketch-style log buckets).

Sources: seed-000-slai.md section 4.3 items 1, 3 and 4 (P50/P99 of step time, per-tier TBT and TTFT
from a mergeable sketch), seed-002-fleetopt.md section 5.2 (TTFT and queue wait per pool), and the
DDSketch construction (Masson, Rim, Lee, VLDB 2019), implemented here from its definition: with
gamma = (1 + a) / (1 - a), a positive value x goes to bucket k = ceil(log_gamma x), and bucket k is
read back as 2 gamma^k / (gamma + 1), which is within relative error a of every value in the bucket.
Quantile q returns the bucket of the sorted sample's element floor(q (n - 1)), so the answer is within
relative error ``relative_accuracy`` of that exact order statistic.

No maintained sketch library is installed in the project environment, hence this implementation.
Values below ``min_value`` (default 1e-9 s) count in a zero bucket. Memory: at most ``max_buckets``
buckets; beyond that the lowest buckets are collapsed into one (the guarantee then holds for quantiles
above the collapsed range, as in DDSketch). Merging adds bucket counts, exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from estimators._input import check_format, require_count, require_fraction, require_nonnegative, require_positive
from estimators.window import SlotRing
from schemas.errors import InvalidInputError

DEFAULT_RELATIVE_ACCURACY = 0.01
DEFAULT_MAX_BUCKETS = 2048
MIN_VALUE = 1e-9


@dataclass(frozen=True, slots=True, kw_only=True)
class QuantileSummary:
    """Count, exact mean, extremes and chosen quantiles of a sketch.

    Attributes:
        count: values folded; mean: exact mean (None when empty); min_value, max_value: exact extremes.
        quantiles: ``(q, value)`` pairs, each value within the sketch's relative accuracy.
    """

    count: int
    mean: float | None
    min_value: float | None
    max_value: float | None
    quantiles: tuple[tuple[float, float], ...]


class QuantileSketch:
    """DDSketch-style sketch of non-negative values (seconds, tokens).

    Bad input: NaN, infinite or negative values raise ``InvalidInputError``.
    """

    __slots__ = ("_bins", "_count", "_inv_log_gamma", "_max", "_min", "_sum", "_zero", "gamma", "max_buckets",
                 "relative_accuracy")  # fmt: skip

    def __init__(
        self, *, relative_accuracy: float = DEFAULT_RELATIVE_ACCURACY, max_buckets: int = DEFAULT_MAX_BUCKETS
    ) -> None:
        """Create an empty sketch with relative accuracy in (0, 1) and a bucket cap (>= 16)."""
        a = require_positive("relative_accuracy", relative_accuracy)
        if a >= 1.0:
            msg = f"relative_accuracy must be < 1, got {relative_accuracy!r}"
            raise InvalidInputError(msg, field="relative_accuracy", value=relative_accuracy)
        self.relative_accuracy = a
        self.max_buckets = require_count("max_buckets", max_buckets, minimum=16)
        self.gamma = (1.0 + a) / (1.0 - a)
        self._inv_log_gamma = 1.0 / math.log(self.gamma)
        self._bins: dict[int, int] = {}
        self._zero = 0
        self._count = 0
        self._sum = 0.0
        self._min = math.inf
        self._max = -math.inf

    @property
    def count(self) -> int:
        """Values folded."""
        return self._count

    def update(self, value: float) -> None:
        """Fold one value (>= 0).

        Raises:
            InvalidInputError: ``value`` is NaN, infinite or negative.
        """
        if not (value >= 0.0 and value < math.inf):
            require_nonnegative("value", value)
        self._add(value, None if value < MIN_VALUE else math.ceil(math.log(value) * self._inv_log_gamma))

    def _add(self, value: float, k: int | None) -> None:
        """Count a checked ``value`` in bucket ``k`` (None: the zero bucket); ``k`` comes from ``update``."""
        if k is None:
            self._zero += 1
        else:
            bins = self._bins
            bins[k] = bins.get(k, 0) + 1
            if len(bins) > self.max_buckets:
                self._collapse()
        self._count += 1
        self._sum += value
        self._min = min(self._min, value)
        self._max = max(self._max, value)

    def _collapse(self) -> None:
        keys = sorted(self._bins)
        excess = len(keys) - self.max_buckets
        target = keys[excess]
        self._bins[target] += sum(self._bins.pop(k) for k in keys[:excess])

    def quantile(self, q: float) -> float | None:
        """Value at quantile ``q`` in [0, 1] (relative error <= relative_accuracy), None when empty."""
        q = require_fraction("q", q)
        if self._count == 0:
            return None
        return self._quantile(q, sorted(self._bins))

    def _quantile(self, q: float, keys: list[int]) -> float:
        """``quantile(q)`` of a non-empty sketch whose bucket keys, sorted, are ``keys``."""
        rank = q * (self._count - 1)
        seen = self._zero
        if seen > rank:
            return 0.0
        for k in keys:
            seen += self._bins[k]
            if seen > rank:
                value = 2.0 * self.gamma**k / (self.gamma + 1.0)
                return min(max(value, self._min), self._max)
        return self._max

    def summary(self, quantiles: tuple[float, ...] = (0.5, 0.9, 0.99)) -> QuantileSummary:
        """Count, mean, extremes and the requested quantiles."""
        if self._count == 0:
            return QuantileSummary(count=0, mean=None, min_value=None, max_value=None, quantiles=())
        keys = sorted(self._bins)  # once for every quantile asked
        return QuantileSummary(
            count=self._count,
            mean=self._sum / self._count,
            min_value=self._min,
            max_value=self._max,
            quantiles=tuple((q, self._quantile(require_fraction("q", q), keys)) for q in quantiles),
        )

    def merge(self, other: QuantileSketch) -> QuantileSketch:
        """A sketch of both inputs' values (bucket counts add exactly).

        Raises:
            InvalidInputError: the sketches differ in relative accuracy.
        """
        if other.relative_accuracy != self.relative_accuracy:
            msg = f"cannot merge sketches of accuracy {self.relative_accuracy} and {other.relative_accuracy}"
            raise InvalidInputError(msg, field="relative_accuracy", value=other.relative_accuracy)
        out = QuantileSketch(relative_accuracy=self.relative_accuracy, max_buckets=self.max_buckets)
        out._bins = dict(self._bins)
        for k, c in other._bins.items():
            out._bins[k] = out._bins.get(k, 0) + c
        while len(out._bins) > out.max_buckets:
            out._collapse()
        out._zero = self._zero + other._zero
        out._count = self._count + other._count
        out._sum = self._sum + other._sum
        out._min = min(self._min, other._min)
        out._max = max(self._max, other._max)
        return out

    def n_buckets(self) -> int:
        """Buckets in use (bounded by ``max_buckets``)."""
        return len(self._bins)

    def to_dict(self) -> dict[str, Any]:
        """JSON-compatible state (format 1)."""
        return {
            "kind": "quantile_sketch",
            "format": 1,
            "relative_accuracy": self.relative_accuracy,
            "max_buckets": self.max_buckets,
            "bins": [[k, c] for k, c in sorted(self._bins.items())],
            "zero": self._zero,
            "count": self._count,
            "sum": self._sum,
            "min": None if self._count == 0 else self._min,
            "max": None if self._count == 0 else self._max,
        }

    @classmethod
    def from_dict(cls, data: object) -> QuantileSketch:
        """Rebuild from ``to_dict`` output; raises ``InvalidInputError`` on a wrong kind or format."""
        d = check_format(data, kind="quantile_sketch", version=1)
        out = cls(relative_accuracy=float(d["relative_accuracy"]), max_buckets=int(d["max_buckets"]))
        out._bins = {int(k): int(c) for k, c in d["bins"]}
        out._zero = int(d["zero"])
        out._count = int(d["count"])
        out._sum = float(d["sum"])
        out._min = math.inf if d["min"] is None else float(d["min"])
        out._max = -math.inf if d["max"] is None else float(d["max"])
        return out


class WindowedQuantileSketch:
    """One ``QuantileSketch`` per event-time slot; the snapshot merges the live slots.

    seed-000-slai.md section 4.3: a 60 s window with 5 s hops is ``slot_s=5, n_slots=12``. Per-tier
    TBT/TTFT sketches are one instance per tier. A cumulative sketch (never evicted) is kept beside the
    window for the paper's cumulative statistics (SLAI's tbar is a cumulative mean).

    Bad input and lateness: as ``QuantileSketch`` and ``SlotRing``.
    """

    __slots__ = ("_cumulative", "_ring", "_slots", "max_buckets", "relative_accuracy")

    def __init__(
        self,
        *,
        slot_s: float = 5.0,
        n_slots: int = 12,
        relative_accuracy: float = DEFAULT_RELATIVE_ACCURACY,
        max_buckets: int = DEFAULT_MAX_BUCKETS,
        allowed_lateness_s: float = math.inf,
    ) -> None:
        """Create an empty windowed sketch."""
        self._ring = SlotRing(slot_s=slot_s, n_slots=n_slots, allowed_lateness_s=allowed_lateness_s)
        self.relative_accuracy = relative_accuracy
        self.max_buckets = max_buckets
        self._slots = [
            QuantileSketch(relative_accuracy=relative_accuracy, max_buckets=max_buckets) for _ in range(n_slots)
        ]
        self._cumulative = QuantileSketch(relative_accuracy=relative_accuracy, max_buckets=max_buckets)

    @property
    def ring(self) -> SlotRing:
        """The slot ring (window parameters and watermark)."""
        return self._ring

    def update(self, *, ts_s: float, value: float) -> None:
        """Fold ``value`` at event time ``ts_s``.

        Raises:
            InvalidInputError: bad value or time. LateEventError: too late for the window.
        """
        if not (value >= 0.0 and value < math.inf):
            require_nonnegative("value", value)
        pos, reset = self._ring.place(ts_s)
        if reset:
            self._slots[pos] = QuantileSketch(relative_accuracy=self.relative_accuracy, max_buckets=self.max_buckets)
        cumulative = self._cumulative
        # The slot and the cumulative sketch share gamma, so the bucket is computed once for both.
        k = None if value < MIN_VALUE else math.ceil(math.log(value) * cumulative._inv_log_gamma)
        self._slots[pos]._add(value, k)
        cumulative._add(value, k)

    def advance(self, ts_s: float) -> None:
        """Move the watermark to ``ts_s`` without an event."""
        self._ring.advance(ts_s)

    def snapshot(self, *, closed_only: bool = False) -> QuantileSketch:
        """The merged sketch of the live window."""
        out = QuantileSketch(relative_accuracy=self.relative_accuracy, max_buckets=self.max_buckets)
        bins = out._bins
        for p in self._ring.live_positions(closed_only=closed_only):
            # The slots' counts added in one pass, collapsed once at the end: the same sketch as
            # merging slot by slot (a collapse keeps the highest ``max_buckets`` keys of everything
            # seen either way), without a new sketch per slot.
            slot = self._slots[p]
            if slot._count == 0:
                continue
            for k, c in slot._bins.items():
                bins[k] = bins.get(k, 0) + c
            out._zero += slot._zero
            out._count += slot._count
            out._sum += slot._sum
            out._min = min(out._min, slot._min)
            out._max = max(out._max, slot._max)
        while len(bins) > out.max_buckets:
            out._collapse()
        return out

    def cumulative(self) -> QuantileSketch:
        """The sketch of every value ever folded (the paper's cumulative statistics)."""
        return self._cumulative.merge(QuantileSketch(relative_accuracy=self.relative_accuracy))

    def merge(self, other: WindowedQuantileSketch) -> WindowedQuantileSketch:
        """Slot-wise merge (equal to folding both streams in event-time order)."""
        ring, plan = self._ring.merged_with(other._ring)
        out = WindowedQuantileSketch(
            slot_s=ring.slot_s,
            n_slots=ring.n_slots,
            relative_accuracy=self.relative_accuracy,
            max_buckets=self.max_buckets,
        )
        out._ring = ring
        for pos, a, b in plan:
            for src, p in ((self, a), (other, b)):
                if p is not None:
                    out._slots[pos] = out._slots[pos].merge(src._slots[p])
        out._cumulative = self._cumulative.merge(other._cumulative)
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-compatible state (format 1)."""
        return {
            "kind": "windowed_quantile_sketch",
            "format": 1,
            "ring": self._ring.to_dict(),
            "cumulative": self._cumulative.to_dict(),
            "slots": [[p, self._slots[p].to_dict()] for p in self._ring.live_positions()],
        }

    @classmethod
    def from_dict(cls, data: object) -> WindowedQuantileSketch:
        """Rebuild from ``to_dict`` output; raises ``InvalidInputError`` on a wrong kind or format."""
        d = check_format(data, kind="windowed_quantile_sketch", version=1)
        ring = SlotRing.from_dict(d["ring"])
        cumulative = QuantileSketch.from_dict(d["cumulative"])
        out = cls(
            slot_s=ring.slot_s,
            n_slots=ring.n_slots,
            relative_accuracy=cumulative.relative_accuracy,
            max_buckets=cumulative.max_buckets,
        )
        out._ring = ring
        out._cumulative = cumulative
        for p, s in d["slots"]:
            out._slots[int(p)] = QuantileSketch.from_dict(s)
        return out
