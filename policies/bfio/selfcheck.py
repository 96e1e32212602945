"""BF-IO's online self-check: judge H = 0 against the configured H > 0 by realised imbalance.

The router shadows one decision beside the one it applies at every step (``BfioRouter``: H = 0 beside
the lookahead, or the lookahead beside H = 0 once H = 0 is in force). Once the placed requests' real
progress is known, each decision is judged by the lookahead's objective (the IO problem's J), computed
with the requests' realised remaining lengths instead of the prediction:

    R(D) = sum_k omega_k Imbalance(k + h_k),   Imbalance = G max_g L_g - sum_g L_g   (Eq. 2)

on the lookahead's grid h_k and weights omega_k, where L_g(k + h) sums s_i + a_i + delta h over the
requests on rank g at step k (the active ones and those decision D placed) that are still running at
k + h. Later admissions are left out: they are the same for both decisions only in distribution, and
the step-k choice is what is judged. With exact predictions the lookahead's decision minimises R (up
to the solver's gap); the check asks whether the predictions deliver that on the live stream. Both
decisions are judged on the same R, so H = 0 is not favoured by its own (h = 0 only) objective.
Measured: the lookahead's decayed weights judge with three to five times the paired z of a uniform
sum over 0..H on the saturated workload (docs/policies/bfio.md, "Online self-check").

``choose_horizon`` turns the windowed sums of both (the stream processor folds them per engine,
fold/engine_estimates.py) into the horizon to publish, with hysteresis: the side in force keeps
its place unless the other's realised imbalance is lower by more than ``margin_frac`` and by more than
``z_threshold`` standard errors of the paired per-step difference.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def realised_objective(
    rank: IntArray,
    context_tokens: FloatArray,
    remaining_tokens: FloatArray,
    *,
    num_ranks: int,
    offsets_steps: FloatArray,
    weights: FloatArray,
    drift_tokens_per_step: float = 1.0,
) -> float:
    """J = sum_k omega_k Imbalance(k + h_k) of one step's requests under one assignment, realised (Eq. 2).

    Args:
        rank: shape (M,), the rank of each request (active at step k, or placed there by the decision).
        context_tokens: shape (M,), s_i + a_i at step k (a placed request: its prompt).
        remaining_tokens: shape (M,), tokens each request still generated from step k on (its realised
            output minus a_i); a request counts at offset h while ``remaining_tokens > h``, so values above
            the last offset only need to be known to exceed it.
        num_ranks: G.
        offsets_steps: shape (K,), the offsets h_k (the lookahead's grid).
        weights: shape (K,), omega_k (the lookahead's weights).
        drift_tokens_per_step: delta, the context growth per step (paper section 5: one token).

    Returns:
        The realised objective, tokens.
    """
    alive = remaining_tokens[None, :] > offsets_steps[:, None]
    loads = np.where(alive, context_tokens[None, :] + drift_tokens_per_step * offsets_steps[:, None], 0.0)
    num_offsets = offsets_steps.shape[0]
    cells = (np.arange(num_offsets)[:, None] * num_ranks + rank[None, :]).ravel()
    per_rank = np.bincount(cells, weights=loads.ravel(), minlength=num_offsets * num_ranks)
    per_rank = per_rank.reshape(num_offsets, num_ranks)
    return float(((num_ranks * per_rank.max(axis=1) - per_rank.sum(axis=1)) * weights).sum())


@dataclass(frozen=True, slots=True, kw_only=True)
class SelfCheckWindow:
    """Windowed sums of the judged steps, as the estimate snapshot carries them.

    Attributes:
        judged_steps: steps judged in the window (both decisions by BF-IO, outcomes known).
        myopic_imbalance_tokens: sum over them of R(H = 0's decision).
        lookahead_imbalance_tokens: sum over them of R(the lookahead's decision).
        squared_difference_tokens2: sum over them of (R(lookahead) - R(H = 0))^2, for the spread.
    """

    judged_steps: int
    myopic_imbalance_tokens: float
    lookahead_imbalance_tokens: float
    squared_difference_tokens2: float


class SelfCheckVerdict(StrEnum):
    """Why ``choose_horizon`` chose what it chose (recorded in the decision's diagnostics)."""

    TOO_FEW_STEPS = "too_few_steps"
    WITHIN_MARGIN = "within_margin"
    MYOPIC_WINS = "myopic_wins"
    LOOKAHEAD_WINS = "lookahead_wins"


def paired_z(window: SelfCheckWindow) -> float | None:
    """How many standard errors H = 0's summed realised imbalance lies below the lookahead's (paired by step).

    The two decisions of a step share its state, so their difference d_k = R_k(lookahead) - R_k(H = 0)
    is judged, not the two sums apart: z = sum d / sqrt(n s^2) with s^2 the sample variance of d.
    Positive: H = 0 did better. None with fewer than two judged steps; +-inf when every d_k is equal.
    """
    n = window.judged_steps
    if n < 2:
        return None
    gap = window.lookahead_imbalance_tokens - window.myopic_imbalance_tokens
    variance = max(0.0, (window.squared_difference_tokens2 - gap * gap / n) / (n - 1))
    if variance == 0.0:
        return 0.0 if gap == 0.0 else math.copysign(math.inf, gap)
    return gap / math.sqrt(n * variance)


def choose_horizon(
    window: SelfCheckWindow | None,
    *,
    lookahead_in_force: bool,
    margin_frac: float,
    z_threshold: float,
    min_judged_steps: int,
) -> tuple[bool, SelfCheckVerdict]:
    """Whether the lookahead should be in force next, with hysteresis.

    With the lookahead in force, H = 0 takes over when its windowed realised imbalance is below the
    lookahead's by more than ``margin_frac`` of the lookahead's *and* by more than ``z_threshold``
    standard errors of the paired difference (``paired_z``); with H = 0 in force, the lookahead comes
    back on the mirror condition. Otherwise (inside either margin, or with fewer than
    ``min_judged_steps`` judged steps in the window) the side in force stays, so windowed noise does
    not flap the horizon.

    Returns:
        (lookahead in force next, the verdict).
    """
    if window is None or window.judged_steps < max(2, min_judged_steps):
        return lookahead_in_force, SelfCheckVerdict.TOO_FEW_STEPS
    myopic, lookahead = window.myopic_imbalance_tokens, window.lookahead_imbalance_tokens
    z = paired_z(window)
    assert z is not None
    if lookahead_in_force and myopic < (1.0 - margin_frac) * lookahead and z > z_threshold:
        return False, SelfCheckVerdict.MYOPIC_WINS
    if not lookahead_in_force and lookahead < (1.0 - margin_frac) * myopic and -z > z_threshold:
        return True, SelfCheckVerdict.LOOKAHEAD_WINS
    return lookahead_in_force, SelfCheckVerdict.WITHIN_MARGIN
