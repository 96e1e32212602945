"""Least squares from sufficient statistics: mergeable, bounded, with an honest refusal.

DESIGN.md section 4 principle 4: regressions merge through their sufficient statistics. For
features x (p of them, the intercept included by the caller) and target y with weight w, the state
is X'WX (p x p), X'Wy (p), y'Wy, the sample count and the weight sum; folding is O(p^2) per
observation and memory is O(p^2) however long the stream. Merging adds the statistics, so
merge(a, b) fits exactly as folding both streams would (up to float rounding).

The fit solves the normal equations with ``numpy.linalg.lstsq`` (minimum-norm when the design is
rank-deficient) and reports its sample count and residual spread. Below ``min_samples`` it returns
``NotEnoughData``; it never raises for lack of data (STYLE.md section 5).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from estimators._input import check_format, require_count, require_finite, require_nonnegative
from schemas.errors import InvalidInputError


@dataclass(frozen=True, slots=True, kw_only=True)
class NotEnoughData:
    """A fit refused for lack of data: what was counted and the minimum it needs.

    Attributes:
        samples: the amount of data present (observations, or total weight where stated).
        minimum: the amount the fit needs.
        reason: which quantity fell short, e.g. ``"samples"`` or ``"total_weight"``.
    """

    samples: int
    minimum: int
    reason: str = "samples"


@dataclass(frozen=True, slots=True, kw_only=True)
class LeastSquaresFit:
    """Coefficients of a (weighted) least-squares fit and its quality.

    Attributes:
        coefficients: one per feature, in the order the features were given.
        n_samples: observations folded.
        residual_std: sqrt(weighted RSS / (sum of weights - rank)) in the target's unit; 0 when the fit
            is exact or there are no spare degrees of freedom.
        r_squared: 1 - RSS/TSS (weighted, about the weighted mean); None when TSS is 0.
        rank: numerical rank of the design.
    """

    coefficients: tuple[float, ...]
    n_samples: int
    residual_std: float
    r_squared: float | None
    rank: int


class LeastSquares:
    """Running sufficient statistics of a weighted linear regression y ~ x . b.

    Bad input: a NaN or infinite feature or target, a negative weight, or a feature vector of the
    wrong length raises ``InvalidInputError``.
    """

    __slots__ = ("_n", "_sw", "_swy", "_xtwx", "_xtwy", "_ytwy", "n_features")

    def __init__(self, *, n_features: int) -> None:
        """Create empty statistics for ``n_features`` features (>= 1)."""
        self.n_features = require_count("n_features", n_features, minimum=1)
        # Plain Python lists, not numpy: with a handful of features the per-update numpy overhead
        # (array creation, outer product) costs ten times the arithmetic; the sums are identical.
        self._xtwx: list[list[float]] = [[0.0] * n_features for _ in range(n_features)]
        self._xtwy: list[float] = [0.0] * n_features
        self._ytwy = 0.0
        self._sw = 0.0
        self._swy = 0.0
        self._n = 0

    @property
    def n_samples(self) -> int:
        """Observations folded so far."""
        return self._n

    def update(self, features: Sequence[float], target: float, *, weight: float = 1.0) -> None:
        """Fold one observation.

        Args:
            features: the feature vector (length ``n_features``; include a 1.0 for an intercept).
            target: the observed value.
            weight: its weight (>= 0).

        Raises:
            InvalidInputError: a non-finite value, a negative weight, or a wrong-length feature vector.
        """
        if len(features) != self.n_features:
            msg = f"features must have length {self.n_features}, got {len(features)}"
            raise InvalidInputError(msg, field="features", value=len(features))
        x = [float(v) for v in features]
        y = float(target)
        w = float(weight)
        # One finiteness test for the common case: a finite sum means no NaN and no infinity among
        # the terms; only a non-finite sum (or a negative weight) pays for the checks that name the field.
        if not (math.isfinite(sum(x) + y + w) and w >= 0.0):
            if not all(math.isfinite(v) for v in x):
                msg = f"features must be finite, got {list(features)!r}"
                raise InvalidInputError(msg, field="features", value=list(features))
            y = require_finite("target", target)
            w = require_nonnegative("weight", weight)
        xtwy = self._xtwy
        for i, row in enumerate(self._xtwx):
            wx_i = w * x[i]
            for j, x_j in enumerate(x):
                row[j] += wx_i * x_j
            xtwy[i] += wx_i * y
        self._ytwy += w * y * y
        self._sw += w
        self._swy += w * y
        self._n += 1

    def merge(self, other: LeastSquares) -> LeastSquares:
        """Statistics of both inputs' observations together.

        Raises:
            InvalidInputError: the feature counts differ.
        """
        if other.n_features != self.n_features:
            msg = f"cannot merge least squares with {self.n_features} and {other.n_features} features"
            raise InvalidInputError(msg, field="n_features", value=other.n_features)
        out = LeastSquares(n_features=self.n_features)
        out._xtwx = [[a + b for a, b in zip(r, q, strict=True)] for r, q in zip(self._xtwx, other._xtwx, strict=True)]
        out._xtwy = [a + b for a, b in zip(self._xtwy, other._xtwy, strict=True)]
        out._ytwy = self._ytwy + other._ytwy
        out._sw = self._sw + other._sw
        out._swy = self._swy + other._swy
        out._n = self._n + other._n
        return out

    def fit(self, *, min_samples: int | None = None) -> LeastSquaresFit | NotEnoughData:
        """Solve the normal equations.

        Args:
            min_samples: the fewest observations to fit from; default ``n_features + 1``.

        Returns:
            The fit, or ``NotEnoughData`` below ``min_samples`` or with zero total weight.
        """
        need = self.n_features + 1 if min_samples is None else min_samples
        if self._n < need or self._sw <= 0.0:
            return NotEnoughData(samples=self._n, minimum=need)
        xtwx = np.asarray(self._xtwx, dtype=np.float64)
        xtwy = np.asarray(self._xtwy, dtype=np.float64)
        coef, _, rank, _ = np.linalg.lstsq(xtwx, xtwy, rcond=None)
        rss = max(0.0, float(self._ytwy - 2.0 * coef @ xtwy + coef @ xtwx @ coef))
        dof = self._sw - int(rank)
        residual_std = math.sqrt(rss / dof) if dof > 0 else 0.0
        tss = self._ytwy - self._swy * self._swy / self._sw
        r_squared = 1.0 - rss / tss if tss > 1e-300 else None
        return LeastSquaresFit(
            coefficients=tuple(float(c) for c in coef),
            n_samples=self._n,
            residual_std=residual_std,
            r_squared=r_squared,
            rank=int(rank),
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-compatible state (format 1)."""
        return {
            "kind": "least_squares",
            "format": 1,
            "n_features": self.n_features,
            "xtwx": [list(row) for row in self._xtwx],
            "xtwy": list(self._xtwy),
            "ytwy": self._ytwy,
            "sw": self._sw,
            "swy": self._swy,
            "n": self._n,
        }

    @classmethod
    def from_dict(cls, data: object) -> LeastSquares:
        """Rebuild from ``to_dict`` output.

        Raises:
            InvalidInputError: wrong kind or format version.
        """
        d = check_format(data, kind="least_squares", version=1)
        out = cls(n_features=int(d["n_features"]))
        xtwx = [[float(v) for v in row] for row in d["xtwx"]]
        xtwy = [float(v) for v in d["xtwy"]]
        if (
            len(xtwx) != out.n_features
            or any(len(row) != out.n_features for row in xtwx)
            or len(xtwy) != out.n_features
        ):
            msg = f"least_squares state does not match n_features={out.n_features}"
            raise InvalidInputError(msg, field="xtwx", value=len(xtwx))
        out._xtwx = xtwx
        out._xtwy = xtwy
        out._ytwy = float(d["ytwy"])
        out._sw = float(d["sw"])
        out._swy = float(d["swy"])
        out._n = int(d["n"])
        return out
