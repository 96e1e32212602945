"""What the FleetOpt planner reads from the estimators (seed 002 Algorithm 1 line 1; spec section 5.2).

The runtime builds ``FleetoptInputs`` from a fleet-wide estimate snapshot: the windowed arrival
rate, the total-length CDF on breakpoints, the measured compressibility p_c and the input share
of the total length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from policies.fleetopt.cdf import LengthCdf
from schemas.errors import InvalidInputError


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetoptInputs:
    """One estimate snapshot as plain numbers.

    Attributes:
        arrival_rate_per_s: fleet arrival rate lambda (req/s), > 0.
        cdf: CDF of L_total on breakpoints.
        p_c: effective compressibility of borderline traffic (safe share times compressor success), [0, 1].
        input_frac: E[l_in / L_total]; the reference hard-codes 0.8 (spec section 1.4), [0.5, 0.99].

    Raises:
        InvalidInputError: when a field is out of range.
    """

    arrival_rate_per_s: float
    cdf: LengthCdf
    p_c: float = 1.0
    input_frac: float = 0.8

    def __post_init__(self) -> None:
        if not (math.isfinite(self.arrival_rate_per_s) and self.arrival_rate_per_s > 0.0):
            msg = f"arrival_rate_per_s must be finite and > 0, got {self.arrival_rate_per_s}"
            raise InvalidInputError(msg, field="arrival_rate_per_s", value=self.arrival_rate_per_s)
        if not 0.0 <= self.p_c <= 1.0:
            msg = f"p_c must lie in [0, 1], got {self.p_c}"
            raise InvalidInputError(msg, field="p_c", value=self.p_c)
        # Below 0.5 a compressed request's output alone could exceed B_short at gamma = 2.
        if not 0.5 <= self.input_frac <= 0.99:
            msg = f"input_frac must lie in [0.5, 0.99], got {self.input_frac}"
            raise InvalidInputError(msg, field="input_frac", value=self.input_frac)
