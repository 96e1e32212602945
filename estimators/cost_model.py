"""Iteration-time cost models fitted online from step events, from mergeable sufficient statistics.

Sources:
- EB+ (seed-001-ebplus.md sections 1.2, 4.2 and 5.3): per batch kind T = alpha + beta n, with n the
  prefill tokens of a prefill step and the decode requests of a decode step; mixed steps
  T = alpha_MB + beta_MB(r) n_tok with beta_MB(r) = a + b r + c r^2 over the decode ratio
  r = n_decode / n_tok.
- BF-IO (seed-003-bfio.md sections 1.3 and 6.4): T_step = C + t_l max_g L_g.
- SLAI (seed-000-slai.md section 4.3 item 6): T_B ~ a0 + a_tok tau + a_stair ceil(tau / t_col)
  + a_dec sum_decode_ctx + a_pre sum_prefill_attn + a_seq n_seqs.

Every fit reports its sample count and residual spread and returns ``NotEnoughData`` below its
minimum (``estimators.least_squares``). The statistics are cumulative; a service that wants a long
sliding window keeps one model per event-time block and merges the live blocks.

Deviation (beta_MB): the paper fits a quadratic through per-r points of 1/throughput. Here the
quadratic is fitted jointly with alpha_MB by one linear regression on the features
(1, n, r n, r^2 n), which is exact least squares on the step model and mergeable; the decode-ratio
bins only guard identifiability (the fit needs steps in at least 3 of the ``n_ratio_bins`` bins).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from estimators._input import check_format, require_count, require_nonnegative
from estimators.least_squares import LeastSquares, LeastSquaresFit, NotEnoughData
from schemas.errors import InvalidInputError
from schemas.steps import BatchKind

DEFAULT_MIN_SAMPLES = 10
MIN_RATIO_BINS = 3  # a quadratic in r needs at least three distinct r values


@dataclass(frozen=True, slots=True, kw_only=True)
class LinearCostFit:
    """T = alpha_s + beta_s_per_unit n for one batch kind.

    Attributes:
        alpha_s: fixed overhead per step (s).
        beta_s_per_unit: marginal cost per prefill token or per decode request (s).
        n_samples, residual_std_s, r_squared: fit quality.
    """

    alpha_s: float
    beta_s_per_unit: float
    n_samples: int
    residual_std_s: float
    r_squared: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class MixedCostFit:
    """Mixed steps: T = alpha_mb_s + (a + b r + c r^2) n_tok.

    Attributes:
        alpha_mb_s: fixed overhead (s); a, b, c: beta_MB(r) coefficients (s/token).
        n_samples, residual_std_s, r_squared: fit quality; ratio_bins_used: occupied decode-ratio bins.
    """

    alpha_mb_s: float
    a: float
    b: float
    c: float
    n_samples: int
    residual_std_s: float
    r_squared: float | None
    ratio_bins_used: int

    def beta_mb_s_per_token(self, r: float) -> float:
        """beta_MB(r) = a + b r + c r^2 (s/token) at decode ratio r."""
        return self.a + self.b * r + self.c * r * r


@dataclass(frozen=True, slots=True, kw_only=True)
class StepTimeFit:
    """BF-IO step model T = c_s + t_l_s_per_token max_g L_g."""

    c_s: float
    t_l_s_per_token: float
    n_samples: int
    residual_std_s: float
    r_squared: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchTimeFit:
    """SLAI batch-time regression coefficients (s per unit of each feature)."""

    a0_s: float
    a_tok_s: float
    a_stair_s: float
    a_dec_s: float
    a_pre_s: float
    a_seq_s: float
    n_samples: int
    residual_std_s: float
    r_squared: float | None


def _duration(duration_s: float) -> float:
    return require_nonnegative("duration_s", duration_s)


class LinearCostModel:
    """Per-batch-kind fits of T = alpha + beta n (EB+: alpha_p/beta_p, alpha_d/beta_d, and a mixed line).

    Bad input: a negative or non-finite count or duration raises ``InvalidInputError``.
    """

    __slots__ = ("_fits",)

    def __init__(self) -> None:
        """Create empty statistics for every batch kind."""
        self._fits = {kind: LeastSquares(n_features=2) for kind in BatchKind}

    def update(self, *, kind: BatchKind, n_units: float, duration_s: float) -> None:
        """Fold one step: ``n_units`` prefill tokens (prefill), decode requests (decode) or tokens (mixed)."""
        n = require_nonnegative("n_units", n_units)
        fits = self._fits.get(kind) if type(kind) is BatchKind else None
        (fits or self._fits[BatchKind(kind)]).update((1.0, n), _duration(duration_s))

    def fit(self, kind: BatchKind, *, min_samples: int = DEFAULT_MIN_SAMPLES) -> LinearCostFit | NotEnoughData:
        """The fit for ``kind``, or ``NotEnoughData`` below ``min_samples`` steps."""
        f = self._fits[BatchKind(kind)].fit(min_samples=min_samples)
        if isinstance(f, NotEnoughData):
            return f
        return LinearCostFit(
            alpha_s=f.coefficients[0],
            beta_s_per_unit=f.coefficients[1],
            n_samples=f.n_samples,
            residual_std_s=f.residual_std,
            r_squared=f.r_squared,
        )

    def merge(self, other: LinearCostModel) -> LinearCostModel:
        """Statistics of both models' steps."""
        out = LinearCostModel()
        out._fits = {k: self._fits[k].merge(other._fits[k]) for k in BatchKind}
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-compatible state (format 1)."""
        return {"kind": "linear_cost_model", "format": 1, "fits": {k.value: v.to_dict() for k, v in self._fits.items()}}

    @classmethod
    def from_dict(cls, data: object) -> LinearCostModel:
        """Rebuild from ``to_dict`` output; raises ``InvalidInputError`` on a wrong kind or format."""
        d = check_format(data, kind="linear_cost_model", version=1)
        out = cls()
        out._fits = {k: LeastSquares.from_dict(d["fits"][k.value]) for k in BatchKind}
        return out


class MixedCostModel:
    """alpha_MB and beta_MB(r) = a + b r + c r^2 from mixed steps (EB+ Eq. 8's LHS input).

    Bad input: negative or non-finite counts or durations, or a step with no tokens, raise
    ``InvalidInputError``.
    """

    __slots__ = ("_bins", "_ls", "n_ratio_bins")

    def __init__(self, *, n_ratio_bins: int = 10) -> None:
        """Create empty statistics with ``n_ratio_bins`` equal decode-ratio bins over [0, 1]."""
        self.n_ratio_bins = require_count("n_ratio_bins", n_ratio_bins, minimum=MIN_RATIO_BINS)
        self._ls = LeastSquares(n_features=4)
        self._bins = [0] * n_ratio_bins

    def update(self, *, n_prefill_tokens: int, n_decode_tokens: int, duration_s: float) -> None:
        """Fold one mixed step (n_tok = prefill + decode tokens, r = decode / n_tok)."""
        p = require_nonnegative("n_prefill_tokens", n_prefill_tokens)
        d = require_nonnegative("n_decode_tokens", n_decode_tokens)
        n = p + d
        if n <= 0:
            msg = "a mixed step must carry at least one token, got 0"
            raise InvalidInputError(msg, field="n_prefill_tokens", value=(n_prefill_tokens, n_decode_tokens))
        r = d / n
        self._ls.update((1.0, n, r * n, r * r * n), _duration(duration_s))
        self._bins[min(int(r * self.n_ratio_bins), self.n_ratio_bins - 1)] += 1

    def fit(self, *, min_samples: int = DEFAULT_MIN_SAMPLES) -> MixedCostFit | NotEnoughData:
        """The fit, or ``NotEnoughData`` below ``min_samples`` steps or fewer than 3 occupied ratio bins."""
        used = sum(1 for c in self._bins if c > 0)
        if used < MIN_RATIO_BINS:
            return NotEnoughData(samples=used, minimum=MIN_RATIO_BINS, reason="ratio_bins")
        f = self._ls.fit(min_samples=min_samples)
        if isinstance(f, NotEnoughData):
            return f
        alpha, a, b, c = f.coefficients
        return MixedCostFit(
            alpha_mb_s=alpha,
            a=a,
            b=b,
            c=c,
            n_samples=f.n_samples,
            residual_std_s=f.residual_std,
            r_squared=f.r_squared,
            ratio_bins_used=used,
        )

    def merge(self, other: MixedCostModel) -> MixedCostModel:
        """Statistics of both models' steps (same bin count required)."""
        if other.n_ratio_bins != self.n_ratio_bins:
            msg = f"cannot merge mixed cost models with {self.n_ratio_bins} and {other.n_ratio_bins} bins"
            raise InvalidInputError(msg, field="n_ratio_bins", value=other.n_ratio_bins)
        out = MixedCostModel(n_ratio_bins=self.n_ratio_bins)
        out._ls = self._ls.merge(other._ls)
        out._bins = [x + y for x, y in zip(self._bins, other._bins, strict=True)]
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-compatible state (format 1)."""
        return {"kind": "mixed_cost_model", "format": 1, "ls": self._ls.to_dict(), "bins": list(self._bins)}

    @classmethod
    def from_dict(cls, data: object) -> MixedCostModel:
        """Rebuild from ``to_dict`` output; raises ``InvalidInputError`` on a wrong kind or format."""
        d = check_format(data, kind="mixed_cost_model", version=1)
        out = cls(n_ratio_bins=len(d["bins"]))
        out._ls = LeastSquares.from_dict(d["ls"])
        out._bins = [int(c) for c in d["bins"]]
        return out


class StepTimeModel:
    """BF-IO step model T = C + t_l max_g L_g (seed-003 section 1.3, eq. 6 of the paper's simulator)."""

    __slots__ = ("_ls",)

    def __init__(self) -> None:
        """Create empty statistics."""
        self._ls = LeastSquares(n_features=2)

    def update(self, *, max_rank_load_tokens: float, duration_s: float) -> None:
        """Fold one DP step: the largest per-rank resident load (tokens) and the step time."""
        x = require_nonnegative("max_rank_load_tokens", max_rank_load_tokens)
        self._ls.update((1.0, x), _duration(duration_s))

    def fit(self, *, min_samples: int = DEFAULT_MIN_SAMPLES) -> StepTimeFit | NotEnoughData:
        """(C, t_l), or ``NotEnoughData`` below ``min_samples`` steps."""
        f = self._ls.fit(min_samples=min_samples)
        if isinstance(f, NotEnoughData):
            return f
        return StepTimeFit(
            c_s=f.coefficients[0],
            t_l_s_per_token=f.coefficients[1],
            n_samples=f.n_samples,
            residual_std_s=f.residual_std,
            r_squared=f.r_squared,
        )

    def merge(self, other: StepTimeModel) -> StepTimeModel:
        """Statistics of both models' steps."""
        out = StepTimeModel()
        out._ls = self._ls.merge(other._ls)
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-compatible state (format 1)."""
        return {"kind": "step_time_model", "format": 1, "ls": self._ls.to_dict()}

    @classmethod
    def from_dict(cls, data: object) -> StepTimeModel:
        """Rebuild from ``to_dict`` output; raises ``InvalidInputError`` on a wrong kind or format."""
        d = check_format(data, kind="step_time_model", version=1)
        out = cls()
        out._ls = LeastSquares.from_dict(d["ls"])
        return out


class BatchTimeModel:
    """SLAI batch-time regression (seed-000 section 4.3 item 6), with the staircase term ceil(tau / t_col).

    The design is often rank-deficient (tau and its staircase move together); the fit is then the
    minimum-norm solution and reports ``rank`` through its residuals only.
    """

    __slots__ = ("_ls", "t_col_tokens")

    def __init__(self, *, t_col_tokens: int) -> None:
        """Create empty statistics; ``t_col_tokens`` is the staircase width (tokens, >= 1)."""
        self.t_col_tokens = require_count("t_col_tokens", t_col_tokens, minimum=1)
        self._ls = LeastSquares(n_features=6)

    def update(
        self,
        *,
        tau_tokens: float,
        decode_context_tokens: float,
        prefill_attn_tokens2: float,
        n_seqs: int,
        duration_s: float,
    ) -> None:
        """Fold one step: batch tokens tau, summed decode context, summed prefill attention work, sequences."""
        tau = require_nonnegative("tau_tokens", tau_tokens)
        features = (
            1.0,
            tau,
            float(math.ceil(tau / self.t_col_tokens)),
            require_nonnegative("decode_context_tokens", decode_context_tokens),
            require_nonnegative("prefill_attn_tokens2", prefill_attn_tokens2),
            require_nonnegative("n_seqs", n_seqs),
        )
        self._ls.update(features, _duration(duration_s))

    def fit(self, *, min_samples: int = 20) -> BatchTimeFit | NotEnoughData:
        """The coefficients, or ``NotEnoughData`` below ``min_samples`` steps."""
        f: LeastSquaresFit | NotEnoughData = self._ls.fit(min_samples=min_samples)
        if isinstance(f, NotEnoughData):
            return f
        a0, a_tok, a_stair, a_dec, a_pre, a_seq = f.coefficients
        return BatchTimeFit(
            a0_s=a0,
            a_tok_s=a_tok,
            a_stair_s=a_stair,
            a_dec_s=a_dec,
            a_pre_s=a_pre,
            a_seq_s=a_seq,
            n_samples=f.n_samples,
            residual_std_s=f.residual_std,
            r_squared=f.r_squared,
        )

    def merge(self, other: BatchTimeModel) -> BatchTimeModel:
        """Statistics of both models' steps (same t_col required)."""
        if other.t_col_tokens != self.t_col_tokens:
            msg = f"cannot merge batch-time models with t_col {self.t_col_tokens} and {other.t_col_tokens}"
            raise InvalidInputError(msg, field="t_col_tokens", value=other.t_col_tokens)
        out = BatchTimeModel(t_col_tokens=self.t_col_tokens)
        out._ls = self._ls.merge(other._ls)
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-compatible state (format 1)."""
        return {"kind": "batch_time_model", "format": 1, "t_col_tokens": self.t_col_tokens, "ls": self._ls.to_dict()}

    @classmethod
    def from_dict(cls, data: object) -> BatchTimeModel:
        """Rebuild from ``to_dict`` output; raises ``InvalidInputError`` on a wrong kind or format."""
        d = check_format(data, kind="batch_time_model", version=1)
        out = cls(t_col_tokens=int(d["t_col_tokens"]))
        out._ls = LeastSquares.from_dict(d["ls"])
        return out
