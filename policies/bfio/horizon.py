"""The horizon grid of the BF-IO objective: offsets h in 0..H and their weights omega_h.

J = sum_{h=0..H} omega_h Imbalance(k+h) (paper section 4, Algorithm 1; omega_h = 1 in the paper).
specs/seed-003-bfio.md section 2.7 step 1 evaluates J on quadrature points {0, 1, 2, 4, ..., H}; here each
grid point carries the summed weight of the offsets up to the next grid point, so the grid weights add up
to the full-horizon weights and J on the grid is a left Riemann sum of J over every h.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from policies.bfio.params import WeightScheme
from schemas.errors import InvalidInputError


@dataclass(frozen=True, slots=True, kw_only=True)
class HorizonGrid:
    """Offsets and weights the objective is evaluated on.

    Attributes:
        offsets_steps: shape (K,), strictly increasing decode-step offsets starting at 0.
        weights: shape (K,), omega of each offset (the block sum of per-step weights).
    """

    offsets_steps: npt.NDArray[np.float64]
    weights: npt.NDArray[np.float64]

    @property
    def size(self) -> int:
        """Number of grid points K."""
        return int(self.offsets_steps.shape[0])


def build_horizon_grid(horizon_steps: int, *, dyadic: bool, scheme: WeightScheme, decay_gamma: float) -> HorizonGrid:
    """Return the grid for lookahead ``horizon_steps`` (H).

    Args:
        horizon_steps: H >= 0; H = 0 gives the single offset 0 (myopic BF-IO).
        dyadic: use {0, 1, 2, 4, ..., H} instead of every offset 0..H.
        scheme: per-step weight omega_h: 1 (uniform) or decay_gamma**h (decay).
        decay_gamma: the decay factor in [0, 1].

    Raises:
        InvalidInputError: H < 0 or decay_gamma outside [0, 1].
    """
    if horizon_steps < 0:
        msg = f"horizon_steps must be >= 0, got {horizon_steps}"
        raise InvalidInputError(msg, field="horizon_steps", value=horizon_steps)
    if not 0.0 <= decay_gamma <= 1.0:
        msg = f"decay_gamma must be in [0, 1], got {decay_gamma}"
        raise InvalidInputError(msg, field="decay_gamma", value=decay_gamma)
    every = np.arange(horizon_steps + 1, dtype=np.float64)
    per_step = np.ones_like(every) if scheme is WeightScheme.UNIFORM else decay_gamma**every
    if not dyadic:
        return HorizonGrid(offsets_steps=every, weights=per_step)
    points = [0]
    step = 1
    while step < horizon_steps:
        points.append(step)
        step *= 2
    if horizon_steps > 0:
        points.append(horizon_steps)
    offsets = np.asarray(points, dtype=np.int64)
    block_ends = np.append(offsets[1:], horizon_steps + 1)
    cumulative = np.concatenate(([0.0], np.cumsum(per_step)))
    weights = cumulative[block_ends] - cumulative[offsets]
    return HorizonGrid(offsets_steps=offsets.astype(np.float64), weights=weights)
