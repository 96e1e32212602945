"""Empirical discrete hazard of output length and the EB+ FitLinearHazard.

Sources: EB+ paper (seeds/001) section 3.4 and App. E: h^(t) = #{O = t} / #{O >= t} over the window
W_O, fitted as h(t) = p0 + eta t by weighted least squares up to t95; seed-001-ebplus.md section 3.3
fixes the reference code's exact procedure, implemented here step by step:

1. fewer than W_min = 30 samples: no fit;
2. t_start = max(s[int(0.05 n)], 1) on the sorted lengths s (the 5th percentile), t95 = s[int(0.95 n)],
   then t95 = max(t95, t_start + 10);
3. for each integer t in [t_start, min(t95, max s)] with S(t) >= 5: h = d_t / S(t), weight S(t);
4. total weight below 10: no fit;
5. normal equations for (p0, eta); |det| < 1e-10 gives p0 = 1/mean, eta = 0;
6. eta = max(eta, 0) and p0 = max(p0, 1/mean) (the geometric floor).

Deviation: censoring (seed-001 pitfall P2, recommended option 2). S(t) is the risk set r_t, which also
holds requests censored at or after t (``length``/``abort`` finishes, in-flight requests), and d_t
counts normal finishes only. The percentiles use all observed lengths and the floor 1/mean becomes the
censored geometric MLE d / sum(lengths) (events per token of exposure). With no censored entries every
step equals the reference code. Where the code keeps the previous (p0, eta) for lack of data, this
function returns ``NotEnoughData`` and the caller keeps its previous estimate.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from estimators.least_squares import NotEnoughData
from estimators.survival import OutputLengthSample

MIN_SAMPLES = 30  # seed-001 section 3.1: W_min = 30 (VLLM_PD_IFR_MIN_SAMPLES)
MIN_AT_RISK = 5  # seed-001 section 3.3 step 4: skip t with S(t) < 5
MIN_TOTAL_WEIGHT = 10  # seed-001 section 3.3 step 5: need sum of weights >= 10
MIN_FIT_SPAN_TOKENS = 10  # seed-001 section 3.3 step 2: t95 >= t_start + 10
DET_EPS = 1e-10  # seed-001 section 3.3 step 6


@dataclass(frozen=True, slots=True, kw_only=True)
class HazardTable:
    """Empirical discrete hazard h(t) = d_t / r_t at every t >= 1 with someone at risk.

    Attributes:
        tokens: t values (tokens), increasing.
        events: d_t, normal finishes at exactly t.
        at_risk: r_t, requests observed for at least t tokens (censored ones included).
        hazard: d_t / r_t.
    """

    tokens: tuple[int, ...]
    events: tuple[int, ...]
    at_risk: tuple[int, ...]
    hazard: tuple[float, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class LinearHazardFit:
    """Result of FitLinearHazard: h(t) = p0 + eta t after the reference post-processing.

    Attributes:
        p0: intercept after the floor (per token).
        eta: slope after clamping at 0 (per token squared).
        p0_raw, eta_raw: the weighted least-squares solution before post-processing.
        p0_floor: the geometric floor 1/mean (censored: events per token of exposure).
        t_start_tokens, t95_tokens: the fitted range [t_start, t95].
        n_samples, n_censored: window size and how many entries were censored.
        n_points: integer t values that entered the fit; total_weight: their summed S(t).
        degenerate: True when |det| < 1e-10 and the CFR fallback was used.
    """

    p0: float
    eta: float
    p0_raw: float
    eta_raw: float
    p0_floor: float
    t_start_tokens: int
    t95_tokens: int
    n_samples: int
    n_censored: int
    n_points: int
    total_weight: float
    degenerate: bool


def empirical_hazard(sample: OutputLengthSample) -> HazardTable:
    """The empirical discrete hazard of the sample (EB+ paper App. E.1, with censoring)."""
    d, r = sample.event_and_risk_counts()
    t = np.arange(1, d.size, dtype=np.int64)
    keep = r[1:] > 0
    t = t[keep]
    return HazardTable(
        tokens=tuple(int(x) for x in t),
        events=tuple(int(x) for x in d[t]),
        at_risk=tuple(int(x) for x in r[t]),
        hazard=tuple(float(x) for x in d[t] / r[t]),
    )


def fit_linear_hazard(
    sample: OutputLengthSample,
    *,
    min_samples: int = MIN_SAMPLES,
    min_at_risk: int = MIN_AT_RISK,
    min_total_weight: int = MIN_TOTAL_WEIGHT,
) -> LinearHazardFit | NotEnoughData:
    """FitLinearHazard of EB+ Algorithm 1 (seed-001 section 3.3), censoring-aware.

    Args:
        sample: the output-length window (``OutputLengthWindow.snapshot()``).
        min_samples: W_min; fewer entries give ``NotEnoughData(reason="samples")``.
        min_at_risk: t values with S(t) below this are skipped.
        min_total_weight: a summed weight below this gives ``NotEnoughData(reason="total_weight")``.

    Returns:
        The fit, or ``NotEnoughData``; the caller then keeps its previous (p0, eta).
    """
    n = sample.n_samples
    if n < min_samples:
        return NotEnoughData(samples=n, minimum=min_samples, reason="samples")
    s = np.sort(np.asarray(sample.lengths_tokens, dtype=np.int64))
    t_start = max(int(s[max(0, int(0.05 * n))]), 1)
    t95 = max(int(s[int(0.95 * n)]), t_start + MIN_FIT_SPAN_TOKENS)
    d, r = sample.event_and_risk_counts()
    n_events = int(d.sum())
    exposure_tokens = int(s.sum())
    p0_floor = n_events / exposure_tokens if exposure_tokens > 0 else 0.0
    t_hi = min(t95, d.size - 1)
    t = np.arange(t_start, t_hi + 1, dtype=np.int64)
    t = t[r[t] >= min_at_risk]
    w = r[t].astype(np.float64)
    h = d[t] / w
    tf = t.astype(np.float64)
    sw = float(w.sum())
    if sw < min_total_weight:
        return NotEnoughData(samples=int(sw), minimum=min_total_weight, reason="total_weight")
    swt = float(np.dot(w, tf))
    swt2 = float(np.dot(w, tf * tf))
    swh = float(np.dot(w, h))
    swth = float(np.dot(w, tf * h))
    det = sw * swt2 - swt * swt
    degenerate = abs(det) < DET_EPS
    if degenerate:
        p0_raw, eta_raw = p0_floor, 0.0
    else:
        p0_raw = (swt2 * swh - swt * swth) / det
        eta_raw = (sw * swth - swt * swh) / det
    return LinearHazardFit(
        p0=max(p0_raw, p0_floor),
        eta=max(eta_raw, 0.0),
        p0_raw=p0_raw,
        eta_raw=eta_raw,
        p0_floor=p0_floor,
        t_start_tokens=t_start,
        t95_tokens=t95,
        n_samples=n,
        n_censored=sample.n_censored,
        n_points=int(t.size),
        total_weight=sw,
        degenerate=degenerate,
    )
