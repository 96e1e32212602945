"""Data-parallel rank load state: L_g, Imbalance(k), the gap D(k) and idle fractions.

Source: seed-003-bfio.md section 1.4. Imbalance(k) = G max_g L_g - sum_g L_g (tokens, eq. 2);
AvgImbalance is its plain per-step mean (eq. 7); D(k) = max_g L_g - min_g L_g; the load-based idle
fraction mean_g (1 - L_g / max_h L_h) = Imbalance / (G max L); the balance ratio is 1 minus it; the
time-based idle fraction sum_g (max_j T_j - T_g) / (G T_step) uses measured local compute times.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from estimators._input import check_format, require_nonnegative, require_positive
from schemas.errors import InvalidInputError


@dataclass(frozen=True, slots=True, kw_only=True)
class RankLoad:
    """Load state of one DP step.

    Attributes:
        loads_tokens: L_g per rank (resident tokens).
        imbalance_tokens: G max L - sum L.
        gap_tokens: D = max L - min L.
        imbalance_per_total_frac: Imbalance / sum L (0 when idle).
        idle_load_frac: Imbalance / (G max L), the load-based idle fraction (0 when idle).
        balance_ratio: mean L / max L (1 when idle).
        idle_time_frac: time-based idle fraction, None without local times and step time.
    """

    loads_tokens: tuple[float, ...]
    imbalance_tokens: float
    gap_tokens: float
    imbalance_per_total_frac: float
    idle_load_frac: float
    balance_ratio: float
    idle_time_frac: float | None


def rank_load(
    loads_tokens: Sequence[float],
    *,
    local_times_s: Sequence[float] | None = None,
    step_time_s: float | None = None,
) -> RankLoad:
    """Imbalance metrics of one step (seed-003 section 1.4).

    Args:
        loads_tokens: L_g per rank (>= 0, at least one rank).
        local_times_s: measured local compute time per rank (same length), optional.
        step_time_s: the step's time T_step (> 0), needed with ``local_times_s``.

    Raises:
        InvalidInputError: no ranks, a negative or non-finite value, or mismatched lengths.
    """
    loads = tuple(require_nonnegative("loads_tokens", x) for x in loads_tokens)
    if not loads:
        msg = "loads_tokens must name at least one rank, got none"
        raise InvalidInputError(msg, field="loads_tokens", value=())
    g = len(loads)
    mx, mn, total = max(loads), min(loads), sum(loads)
    imbalance = g * mx - total
    idle_time = None
    if local_times_s is not None and step_time_s is not None:
        times = tuple(require_nonnegative("local_times_s", t) for t in local_times_s)
        if len(times) != g:
            msg = f"local_times_s must have {g} entries, got {len(times)}"
            raise InvalidInputError(msg, field="local_times_s", value=len(times))
        t_step = require_positive("step_time_s", step_time_s)
        idle_time = sum(max(times) - t for t in times) / (g * t_step)
    return RankLoad(
        loads_tokens=loads,
        imbalance_tokens=imbalance,
        gap_tokens=mx - mn,
        imbalance_per_total_frac=imbalance / total if total > 0 else 0.0,
        idle_load_frac=imbalance / (g * mx) if mx > 0 else 0.0,
        balance_ratio=total / (g * mx) if mx > 0 else 1.0,
        idle_time_frac=idle_time,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class DpLoadSummary:
    """Per-step averages since the start (AvgImbalance of seed-003 eq. 7) and the latest step."""

    n_steps: int
    avg_imbalance_tokens: float | None
    avg_idle_load_frac: float | None
    last: RankLoad | None


class DpLoadTracker:
    """Running per-step averages of imbalance and load-based idle fraction for one DP deployment.

    Merging adds the sums (per-step averages over both streams). Bad input as ``rank_load``.
    """

    __slots__ = ("_last", "_n", "_sum_idle", "_sum_imbalance")

    def __init__(self) -> None:
        """Create an empty tracker."""
        self._n = 0
        self._sum_imbalance = 0.0
        self._sum_idle = 0.0
        self._last: RankLoad | None = None

    def update(self, loads_tokens: Sequence[float]) -> RankLoad:
        """Fold one step's per-rank loads and return its metrics."""
        step = rank_load(loads_tokens)
        self._n += 1
        self._sum_imbalance += step.imbalance_tokens
        self._sum_idle += step.idle_load_frac
        self._last = step
        return step

    def snapshot(self) -> DpLoadSummary:
        """Averages so far and the last step."""
        if self._n == 0:
            return DpLoadSummary(n_steps=0, avg_imbalance_tokens=None, avg_idle_load_frac=None, last=None)
        return DpLoadSummary(
            n_steps=self._n,
            avg_imbalance_tokens=self._sum_imbalance / self._n,
            avg_idle_load_frac=self._sum_idle / self._n,
            last=self._last,
        )

    def merge(self, other: DpLoadTracker) -> DpLoadTracker:
        """Averages over both trackers' steps; ``last`` is ``other``'s when it has one."""
        out = DpLoadTracker()
        out._n = self._n + other._n
        out._sum_imbalance = self._sum_imbalance + other._sum_imbalance
        out._sum_idle = self._sum_idle + other._sum_idle
        out._last = other._last if other._last is not None else self._last
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-compatible state (format 1)."""
        return {
            "kind": "dp_load_tracker",
            "format": 1,
            "n": self._n,
            "sum_imbalance": self._sum_imbalance,
            "sum_idle": self._sum_idle,
            "last_loads": None if self._last is None else list(self._last.loads_tokens),
        }

    @classmethod
    def from_dict(cls, data: object) -> DpLoadTracker:
        """Rebuild from ``to_dict`` output; raises ``InvalidInputError`` on a wrong kind or format."""
        d = check_format(data, kind="dp_load_tracker", version=1)
        out = cls()
        out._n = int(d["n"])
        out._sum_imbalance = float(d["sum_imbalance"])
        out._sum_idle = float(d["sum_idle"])
        out._last = None if d["last_loads"] is None else rank_load(d["last_loads"])
        return out
