"""Clamp-and-flag guardrails shared by every policy (DESIGN principle 7).

A decided parameter outside its bounds is clamped to the nearest bound and the clamp is
recorded, so that the decision's diagnostics say what was changed; a raw out-of-bounds value is
never pushed to an engine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from schemas.errors import InvalidInputError


@dataclass(frozen=True, slots=True, kw_only=True)
class Bound:
    """Closed interval [lo, hi] for one pushed parameter."""

    name: str
    lo: float
    hi: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.lo) and math.isfinite(self.hi)) or self.lo > self.hi:
            msg = f"bound {self.name} must have finite lo <= hi, got [{self.lo}, {self.hi}]"
            raise InvalidInputError(msg, field=self.name, value=(self.lo, self.hi))


@dataclass(frozen=True, slots=True, kw_only=True)
class Clamp:
    """Record of one clamped parameter: what was decided and what is pushed instead."""

    name: str
    decided: float
    pushed: float


def clamp(value: float, bound: Bound, clamps: list[Clamp]) -> float:
    """Return ``value`` clamped to ``bound``, appending a ``Clamp`` to ``clamps`` when it moved.

    A NaN is clamped to the lower bound (the conservative end for every pushed parameter) and
    flagged, never pushed.
    """
    if math.isnan(value):
        clamps.append(Clamp(name=bound.name, decided=value, pushed=bound.lo))
        return bound.lo
    pushed = min(max(value, bound.lo), bound.hi)
    if pushed != value:
        clamps.append(Clamp(name=bound.name, decided=value, pushed=pushed))
    return pushed
