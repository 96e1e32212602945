"""Per-request output-length hints the simulator hands the BF-IO router: true or noisy lengths.

The paper's lookahead (arXiv:2601.17855 section 6; specs/seed-003-bfio.md section 1.5) knows every
request's true output length o_i. The reference code draws its estimate as
o_est = round(o_i U[1 - e, 1 + e]) and reports e = 0; the spec measured that e = 0.2 loses about 78%
of the H > 0 gain (section 5.3). ``LengthHints`` gives the router the same estimate, so the value of
a hint is measured rather than assumed: ``error_frac = 0`` is the paper's setting (true lengths),
0.1, 0.2 and 0.5 are hints off by up to 10%, 20% and 50%.

The noise is a pure function of (seed, request id), drawn from a CRC-32 of both, so a request's hint is
the same at every step (as a client's header would be) and a run stays a pure function of its seeds.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

from schemas.errors import InvalidInputError
from services.sim.request import SimRequest

_CRC_RANGE = float(1 << 32)


@dataclass(frozen=True, slots=True, kw_only=True)
class LengthHints:
    """Output-length hints o^_i = max(1, round(o_i U[1 - e, 1 + e])) of the true length o_i.

    Attributes:
        error_frac: e, the largest relative error of a hint, in [0, 1).
        seed: seeds the per-request noise (independent of the workload's seed).

    Raises:
        InvalidInputError: ``error_frac`` outside [0, 1).
    """

    error_frac: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.error_frac) and 0.0 <= self.error_frac < 1.0):
            msg = f"error_frac must be in [0, 1), got {self.error_frac}"
            raise InvalidInputError(msg, field="error_frac", value=self.error_frac)

    def hint_tokens(self, request: SimRequest) -> float:
        """The hint for ``request``: its output length (``max_tokens`` applied) times the request's noise."""
        true_tokens = request.target_output_tokens
        if self.error_frac == 0.0:
            return float(true_tokens)
        u = zlib.crc32(f"{self.seed}:{request.spec.request_id}".encode()) / _CRC_RANGE
        return float(max(1, round(true_tokens * (1.0 + self.error_frac * (2.0 * u - 1.0)))))
