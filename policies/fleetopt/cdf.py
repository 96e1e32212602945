"""Workload length CDF F(L_total) and its pool slices (seed 002 section 2.3, Eqs. 1-2).

The CDF is piecewise linear between breakpoints (token threshold, cumulative fraction), starting
at (0, 0); spec seed-002 section 3.3 ships the paper's three workloads in this form. ``alpha`` and
``beta`` (Table 2) read it by linear interpolation; the per-pool calibrations slice it at B_short
and gamma*B_short (spec section 2.3, pitfall 5).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from schemas.errors import InvalidInputError


@dataclass(frozen=True, slots=True, kw_only=True)
class LengthCdf:
    """CDF of the total request length L_total = prompt + output tokens, as breakpoints.

    Attributes:
        tokens: strictly increasing positive integer thresholds t_k.
        frac: non-decreasing F(L_total <= t_k) in [0, 1], the last one exactly 1.0.

    Raises:
        InvalidInputError: on empty, unsorted, out-of-range or unterminated breakpoints.
    """

    tokens: tuple[int, ...]
    frac: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.tokens or len(self.tokens) != len(self.frac):
            msg = f"cdf needs as many tokens as frac, at least one, got {len(self.tokens)} and {len(self.frac)}"
            raise InvalidInputError(msg, field="cdf", value=(len(self.tokens), len(self.frac)))
        prev_t, prev_f = 0, 0.0
        for i, (t, f) in enumerate(zip(self.tokens, self.frac, strict=True)):
            if t <= prev_t:
                msg = f"cdf[{i}].tokens must be > {prev_t} (strictly increasing), got {t}"
                raise InvalidInputError(msg, field=f"cdf[{i}].tokens", value=t)
            if not prev_f <= f <= 1.0:
                msg = f"cdf[{i}].frac must lie in [{prev_f}, 1.0] (non-decreasing), got {f}"
                raise InvalidInputError(msg, field=f"cdf[{i}].frac", value=f)
            prev_t, prev_f = t, f
        if self.frac[-1] != 1.0:
            msg = f"cdf must end at frac 1.0, got {self.frac[-1]}"
            raise InvalidInputError(msg, field=f"cdf[{len(self.frac) - 1}].frac", value=self.frac[-1])

    @property
    def max_tokens(self) -> int:
        """The last breakpoint: no request is longer."""
        return self.tokens[-1]

    def at(self, x_tokens: float) -> float:
        """F(x) by linear interpolation between breakpoints; 0 at x <= 0 and 1 past the last one."""
        if x_tokens <= 0:
            return 0.0
        k = bisect.bisect_left(self.tokens, x_tokens)
        if k == len(self.tokens):
            return 1.0
        prev_t, prev_f = (self.tokens[k - 1], self.frac[k - 1]) if k > 0 else (0, 0.0)
        t, f = self.tokens[k], self.frac[k]
        return prev_f + (f - prev_f) * (x_tokens - prev_t) / (t - prev_t)

    def short_slice(self, b_short_tokens: int) -> LengthCdf | None:
        """Breakpoints <= B_short renormalised by the last of them (spec section 2.3, reference slicing).

        No breakpoint is interpolated at B_short, so a partial top bucket is dropped, as the paper's
        reference calibration does. None when no breakpoint with positive mass lies at or below B_short.
        """
        kept = [(t, f) for t, f in zip(self.tokens, self.frac, strict=True) if t <= b_short_tokens]
        if not kept or kept[-1][1] <= 0.0:
            return None
        top = kept[-1][1]
        return LengthCdf(tokens=tuple(t for t, _ in kept), frac=tuple(f / top for _, f in kept))

    def long_slice(self, gamma_b_tokens: int) -> LengthCdf | None:
        """Breakpoints > gamma*B_short, renormalised with the interpolated F(gamma*B) (spec section 2.3).

        None when no breakpoint lies above gamma*B or less than 1e-6 of the mass does (the
        reference's cut-off).
        """
        f_gb = self.at(gamma_b_tokens)
        kept = [(t, f) for t, f in zip(self.tokens, self.frac, strict=True) if t > gamma_b_tokens]
        if not kept or 1.0 - f_gb <= 1e-6:
            return None
        frac = [min(1.0, max(0.0, (f - f_gb) / (1.0 - f_gb))) for _, f in kept]
        frac[-1] = 1.0
        return LengthCdf(tokens=tuple(t for t, _ in kept), frac=tuple(frac))

    def breakpoint_candidates(self, *, lo_frac: float = 0.01, hi_frac: float = 0.999) -> tuple[int, ...]:
        """B_short candidates: every breakpoint but the last with lo_frac <= F(t) <= hi_frac (spec section 2.4)."""
        pairs = zip(self.tokens[:-1], self.frac[:-1], strict=True)
        return tuple(t for t, f in pairs if lo_frac <= f <= hi_frac)
