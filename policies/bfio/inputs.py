"""Inputs of the BF-IO bundle decision: plain numbers the runtime copies from estimate snapshots.

specs/seed-003-bfio.md section 6.4: Kaplan-Meier survival of output length per class (with n_samples and
n_censored) and the step-time regression Delta_t = C + t_l max_g L_g (paper Eq. 6).
"""

from __future__ import annotations

from dataclasses import dataclass

from policies.bfio.selfcheck import SelfCheckWindow
from schemas.errors import InvalidInputError


@dataclass(frozen=True, slots=True, kw_only=True)
class SurvivalTable:
    """One class's output-length survival S(n) = P(O > n) at bin edges, as the estimator publishes it.

    Attributes:
        traffic_class: the class the table describes.
        edges_tokens: strictly increasing output lengths, tokens.
        survival_frac: S at each edge, non-increasing in [0, 1].
        n_samples: requests in the window, finished or censored.
        n_censored: of those, right-censored (length/abort finishes and requests still in flight).
    """

    traffic_class: str
    edges_tokens: tuple[float, ...]
    survival_frac: tuple[float, ...]
    n_samples: int
    n_censored: int

    def __post_init__(self) -> None:
        if len(self.edges_tokens) != len(self.survival_frac) or not self.edges_tokens:
            msg = (
                f"survival table {self.traffic_class!r}: edges_tokens ({len(self.edges_tokens)}) and "
                f"survival_frac ({len(self.survival_frac)}) must be non-empty and of equal length"
            )
            raise InvalidInputError(msg, field="survival_tables", value=self.traffic_class)
        if not 0 <= self.n_censored <= self.n_samples:
            msg = (
                f"survival table {self.traffic_class!r}: need 0 <= n_censored <= n_samples, "
                f"got {self.n_censored}, {self.n_samples}"
            )
            raise InvalidInputError(msg, field="n_censored", value=self.n_censored)

    @property
    def n_events(self) -> int:
        """Uncensored finishes: the observations that carry hazard information."""
        return self.n_samples - self.n_censored


@dataclass(frozen=True, slots=True, kw_only=True)
class BfioInputs:
    """What the BF-IO bundle decision reads from one estimate snapshot.

    Attributes:
        num_ranks: G, data-parallel ranks of the deployment.
        slots_per_rank: B, concurrent requests per rank.
        survival_tables: per-class survival of output length.
        default_class: class whose table serves requests of classes without one, or None.
        step_c_s: fitted fixed step overhead C, seconds; None when the fit has no data yet.
        step_t_l_s_per_token: fitted per-token step latency t_l; None when the fit has no data yet.
        self_check: the windowed realised imbalance of both decisions (H = 0 and the lookahead) the
            engine judged, or None before its first report (policies/bfio/selfcheck.py).
    """

    num_ranks: int
    slots_per_rank: int
    survival_tables: tuple[SurvivalTable, ...] = ()
    default_class: str | None = None
    step_c_s: float | None = None
    step_t_l_s_per_token: float | None = None
    self_check: SelfCheckWindow | None = None

    def __post_init__(self) -> None:
        for name, value in (("num_ranks", self.num_ranks), ("slots_per_rank", self.slots_per_rank)):
            if value < 1:
                msg = f"{name} must be >= 1, got {value}"
                raise InvalidInputError(msg, field=name, value=value)
