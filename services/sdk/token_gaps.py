"""The token-gap summary a ``request.finished`` event carries (schemas/requests.py).

An engine measures the gaps between a request's consecutive output tokens; the finish reports their
mean, P99 and maximum and how many exceeded the tier's TBT SLO, so that SLAI's per-tier TBT tail and
attainment are estimated without shipping every gap.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict


class TokenGapSummary(TypedDict):
    """The ``RequestFinished`` fields of a request's token gaps."""

    tbt_mean_s: float | None
    tbt_p99_s: float | None
    tbt_max_s: float | None
    tbt_gaps: int
    tbt_gaps_over_slo: int


def token_gap_summary(gaps_s: Sequence[float], tbt_slo_s: float | None) -> TokenGapSummary:
    """Summarise ``gaps_s`` (seconds) against ``tbt_slo_s`` (None: no SLO, nothing counts as over)."""
    if not gaps_s:
        return TokenGapSummary(tbt_mean_s=None, tbt_p99_s=None, tbt_max_s=None, tbt_gaps=0, tbt_gaps_over_slo=0)
    ordered = sorted(gaps_s)
    return TokenGapSummary(
        tbt_mean_s=sum(ordered) / len(ordered),
        tbt_p99_s=ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
        tbt_max_s=ordered[-1],
        tbt_gaps=len(ordered),
        tbt_gaps_over_slo=0 if tbt_slo_s is None else sum(1 for gap in ordered if gap > tbt_slo_s),
    )
