"""Lookahead workload predictions W^_i^H(k) from output-length survival; specs/seed-003-bfio.md section 1.5.

The paper (section 4) leaves the predictor open. Governor predicts from a censoring-aware Kaplan-Meier
survival table S_c(n) = P(O > n) of output length per traffic class (built in estimators/):

- an active request i of age a_i (tokens generated) is alive h steps later with probability
  q_i(h) = S_c(a_i + h) / S_c(a_i), and 0 once a_i + h reaches its max_tokens;
- its expected workload is w^_i(h) = (s_i + a_i + delta h) q_i(h) (expected-value lookahead);
- a request admitted now contributes (s_j + delta h) S_c(h), or the constant s_j (the reference code's
  convention, ``NewRequestModel.CONST_S``).

A request may carry an output-length hint o^_i (predicted output tokens: a client's estimate, a length
predictor's, or a tight max_tokens). Where one is present and the request is younger than it, the
lookahead trusts it as the reference code trusts its o_est: the request is alive exactly while
a_i + delta h < min(o^_i, max_tokens_i), so w^_i(h) = (s_i + a_i + delta h) 1[a_i + delta h < o^_i].
A request that has outlived its hint is predicted from the survival table again (the hint is spent).
With true lengths as hints this is the paper's setting (section 6: the lookahead knows o_i).

Deviation: the reference code projects with the true output length (an oracle) and ignores the +1 per
step growth; we use the survival-based expectation and include growth, as the spec's design recommends.
Deviation: when S_c(a_i) = 0 (the request outlived every observation of its class) the table says nothing
about it, so it is predicted alive (q = 1) rather than dividing by zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from policies.bfio.params import NewRequestModel
from schemas.errors import InvalidInputError

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

_DENSE_LIMIT_TOKENS = 1 << 20


@dataclass(frozen=True, slots=True, kw_only=True)
class SurvivalCurve:
    """A right-continuous step survival function S(n) = P(O > n) of output length in tokens.

    S(n) = survival_frac[j] for edges_tokens[j] <= n < edges_tokens[j + 1], S(n) = 1 below the first
    edge and S(n) = survival_frac[-1] from the last edge on (the Kaplan-Meier convention).

    Attributes:
        edges_tokens: shape (m,), strictly increasing, >= 0.
        survival_frac: shape (m,), non-increasing values in [0, 1].
    """

    edges_tokens: FloatArray
    survival_frac: FloatArray
    _dense: FloatArray | None = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        edges, surv = self.edges_tokens, self.survival_frac
        if edges.ndim != 1 or edges.shape != surv.shape or edges.shape[0] == 0:
            msg = f"edges_tokens and survival_frac must be equal-length 1-D arrays, got {edges.shape}, {surv.shape}"
            raise InvalidInputError(msg, field="edges_tokens", value=edges.shape)
        if not (np.all(np.isfinite(edges)) and edges[0] >= 0 and np.all(np.diff(edges) > 0)):
            msg = f"edges_tokens must be finite, >= 0 and strictly increasing, got {edges.tolist()[:8]}"
            raise InvalidInputError(msg, field="edges_tokens", value=edges.tolist()[:8])
        if not (np.all(surv >= 0) and np.all(surv <= 1) and np.all(np.diff(surv) <= 0)):
            msg = f"survival_frac must be non-increasing within [0, 1], got {surv.tolist()[:8]}"
            raise InvalidInputError(msg, field="survival_frac", value=surv.tolist()[:8])
        if edges[-1] <= _DENSE_LIMIT_TOKENS and np.all(edges == np.floor(edges)):
            dense = self._search(np.arange(int(edges[-1]) + 1, dtype=np.float64))
            object.__setattr__(self, "_dense", dense)

    def at(self, n_tokens: FloatArray) -> FloatArray:
        """Return S(n) elementwise for an array of output lengths (any shape).

        With integer edges up to ``_DENSE_LIMIT_TOKENS`` this is a table lookup at floor(n) (exact, since S
        only steps at integer edges), an order of magnitude faster than a binary search per element.
        """
        if self._dense is not None:
            index = np.clip(n_tokens, 0, self._dense.shape[0] - 1).astype(np.int64)
            values: FloatArray = self._dense[index]
            return values
        return self._search(n_tokens)

    @property
    def dense_length(self) -> int | None:
        """Length of the whole-token lookup table (ages 0..last edge), or None without one."""
        return None if self._dense is None else int(self._dense.shape[0])

    def _search(self, n_tokens: FloatArray) -> FloatArray:
        index = np.searchsorted(self.edges_tokens, n_tokens, side="right") - 1
        values = self.survival_frac[np.clip(index, 0, None)]
        return np.where(index < 0, 1.0, values)

    def median_tokens(self) -> float | None:
        """Smallest edge at which S drops to 0.5 or below, or None when the table never gets there."""
        below = np.flatnonzero(self.survival_frac <= 0.5)
        return None if below.size == 0 else float(self.edges_tokens[below[0]])


def conditional_survival(
    curve: SurvivalCurve | None, age_tokens: FloatArray, max_tokens: FloatArray, offsets_steps: FloatArray, drift: float
) -> FloatArray:
    """Return q_i(h) = P(alive at k + h | alive at age a_i), shape (N, K).

    Args:
        curve: the class's survival table; None when there is none (only max_tokens then ends a request).
        age_tokens: shape (N,), tokens generated so far (a_i).
        max_tokens: shape (N,), the request's output cap (np.inf when none); q = 0 once a_i + h reaches it.
        offsets_steps: shape (K,), the horizon offsets h.
        drift: tokens generated per step (delta), so age at k + h is a_i + delta h.
    """
    future_age = age_tokens[:, None] + drift * offsets_steps[None, :]
    if curve is None:
        q = np.ones_like(future_age)
    else:
        now = curve.at(age_tokens)
        exhausted = now <= 0
        q = curve.at(future_age) / np.where(exhausted, 1.0, now)[:, None]
        if exhausted.any():
            q[exhausted] = 1.0
    q *= future_age < max_tokens[:, None]
    return q


def active_contributions(
    curve: SurvivalCurve | None,
    *,
    prompt_tokens: FloatArray,
    generated_tokens: FloatArray,
    max_tokens: FloatArray,
    offsets_steps: FloatArray,
    drift: float,
) -> FloatArray:
    """Expected workload w^_i(h) = (s_i + a_i + delta h) q_i(h) of active requests, shape (N, K).

    At h = 0 the request is alive by definition, so the first column (when offsets start at 0) equals
    the current context s_i + a_i.
    """
    q = conditional_survival(curve, generated_tokens, max_tokens, offsets_steps, drift)
    q[:, offsets_steps == 0] = 1.0
    context = prompt_tokens[:, None] + generated_tokens[:, None] + drift * offsets_steps[None, :]
    return context * q


def new_request_contributions(
    curve: SurvivalCurve | None,
    *,
    prompt_tokens: FloatArray,
    max_tokens: FloatArray,
    offsets_steps: FloatArray,
    drift: float,
    model: NewRequestModel,
) -> FloatArray:
    """Predicted workload v_j(h) of a waiting request if admitted now, shape (N, K).

    ``CONST_S`` gives v_j(h) = s_j; ``S_PLUS_H_SURVIVAL`` gives (s_j + delta h) S_c(delta h), with
    S_c = 1 when the class has no table, 0 once delta h reaches max_tokens, and v_j(0) = s_j.
    """
    if model is NewRequestModel.CONST_S:
        return np.repeat(prompt_tokens[:, None], offsets_steps.shape[0], axis=1).astype(np.float64)
    return active_contributions(
        curve,
        prompt_tokens=prompt_tokens,
        generated_tokens=np.zeros_like(prompt_tokens),
        max_tokens=max_tokens,
        offsets_steps=offsets_steps,
        drift=drift,
    )


class ClassPredictor:
    """Predicts w^_i(h) and v_j(h) for one traffic class on a fixed grid, with the ratios precomputed.

    The router is called at every decode step with every active request, and the grid (offsets, delta)
    changes only with the bundle. For a request of whole-token age a, q(h_k) = S(a + delta h_k) / S(a)
    depends only on (a, k), so ``ratios[k, a]`` is computed once per bundle for every age up to the
    table's last edge (beyond it S is flat and q = 1, the last column). A step's prediction is then one
    gather per active request instead of two survival lookups and a division per request and offset.
    Arrays are offset-major, shape (K, M), so every elementwise pass runs over the M requests.
    The values are bit-identical to ``active_contributions`` and ``new_request_contributions``, which
    are used as they are for fractional ages or a curve without a dense table.

    Args:
        curve: the class's survival table, or None (only max_tokens ends a request).
        offsets_steps: shape (K,), the horizon offsets h.
        drift: tokens generated per step (delta).
        model: how a request admitted now is predicted.
    """

    def __init__(
        self, curve: SurvivalCurve | None, *, offsets_steps: FloatArray, drift: float, model: NewRequestModel
    ) -> None:
        self._curve = curve
        self._offsets = offsets_steps
        self._drift = drift
        self._model = model
        self._growth = (drift * offsets_steps)[:, None]
        self._zero_offsets = offsets_steps == 0
        self._ratios: FloatArray | None = None
        if curve is not None and curve.dense_length is not None and drift >= 0:
            ages = np.arange(curve.dense_length, dtype=np.float64)
            q = conditional_survival(curve, ages, np.full_like(ages, np.inf), offsets_steps, drift)
            self._ratios = np.ascontiguousarray(q.T)

    def active_by_offset(
        self,
        *,
        prompt_tokens: FloatArray,
        generated_tokens: FloatArray,
        max_tokens: FloatArray,
        hint_tokens: FloatArray | None = None,
    ) -> FloatArray:
        """w^_i(h_k) of active requests, shape (K, M): ``active_contributions`` transposed.

        ``hint_tokens`` (shape (M,), NaN where a request has none) overrides the survival prediction of
        every request younger than its hint (module docstring).
        """
        ratios = self._ratios
        if ratios is None or not np.array_equal(generated_tokens, np.floor(generated_tokens)):
            by_request = active_contributions(
                self._curve,
                prompt_tokens=prompt_tokens,
                generated_tokens=generated_tokens,
                max_tokens=max_tokens,
                offsets_steps=self._offsets,
                drift=self._drift,
            )
            contributions = np.ascontiguousarray(by_request.T)
        else:
            index = np.clip(generated_tokens, 0, ratios.shape[1] - 1).astype(np.int64)
            q = np.take(ratios, index, axis=1)
            if np.isfinite(max_tokens).any():
                q *= (self._growth + generated_tokens[None, :]) < max_tokens[None, :]
            q[self._offsets == 0] = 1.0
            contributions = (self._growth + (prompt_tokens + generated_tokens)[None, :]) * q
        if hint_tokens is not None:
            self._apply_hints(contributions, prompt_tokens, generated_tokens, max_tokens, hint_tokens)
        return contributions

    def new(
        self, *, prompt_tokens: FloatArray, max_tokens: FloatArray, hint_tokens: FloatArray | None = None
    ) -> FloatArray:
        """v_j(h) of waiting requests if admitted now, shape (N, K): ``new_request_contributions``.

        A new request has age 0, so its survival ratios are the table's first column, the same for
        every request: v_j(h_k) = (s_j + delta h_k) q_k, one outer operation instead of a gather.
        ``hint_tokens`` (shape (N,), NaN where none) sets q to 1[delta h < o^_j] for hinted requests
        under ``S_PLUS_H_SURVIVAL``; ``CONST_S`` is the reference code's convention (the slot stays
        occupied by the request or its refill) and ignores hints.
        """
        if self._model is NewRequestModel.CONST_S:
            return np.repeat(prompt_tokens[:, None], self._offsets.shape[0], axis=1).astype(np.float64)
        if self._ratios is None:
            by_offset = self.active_by_offset(
                prompt_tokens=prompt_tokens,
                generated_tokens=np.zeros_like(prompt_tokens),
                max_tokens=max_tokens,
                hint_tokens=hint_tokens,
            )
            return np.ascontiguousarray(by_offset.T)
        growth = self._growth[:, 0]
        q = self._ratios[:, 0].copy()
        q[self._zero_offsets] = 1.0
        if np.isfinite(max_tokens).any():
            q = q[None, :] * (growth[None, :] < max_tokens[:, None])
            q[:, self._zero_offsets] = 1.0
        context: FloatArray = prompt_tokens[:, None] + growth[None, :]
        contributions: FloatArray = context * q
        if hint_tokens is not None:
            by_offset = np.ascontiguousarray(contributions.T)
            self._apply_hints(by_offset, prompt_tokens, np.zeros_like(prompt_tokens), max_tokens, hint_tokens)
            contributions = np.ascontiguousarray(by_offset.T)
        return contributions

    def _apply_hints(
        self,
        contributions: FloatArray,
        prompt_tokens: FloatArray,
        generated_tokens: FloatArray,
        max_tokens: FloatArray,
        hint_tokens: FloatArray,
    ) -> None:
        """Overwrite, in place, the (K, M) contributions of requests younger than their hint with
        (s_i + a_i + delta h) 1[a_i + delta h < min(o^_i, max_tokens_i)] (alive at h = 0)."""
        rows = np.flatnonzero(hint_tokens > generated_tokens)  # NaN (no hint) compares False
        if rows.size == 0:
            return
        future_age = self._growth + generated_tokens[rows][None, :]
        alive = future_age < np.minimum(hint_tokens[rows], max_tokens[rows])[None, :]
        alive[self._zero_offsets] = True
        contributions[:, rows] = (future_age + prompt_tokens[rows][None, :]) * alive


def rank_base_loads_by_offset(contributions: FloatArray, rank_index: IntArray, num_ranks: int) -> FloatArray:
    """b_g(h) from offset-major contributions of shape (K, M); returns shape (G, K) like ``rank_base_loads``.

    Each cell sums its requests in index order, as ``rank_base_loads`` does, so the two agree bitwise.
    """
    num_offsets = contributions.shape[0]
    cells = (np.arange(num_offsets)[:, None] * num_ranks + rank_index[None, :]).ravel()
    sums = np.bincount(cells, weights=contributions.ravel(), minlength=num_ranks * num_offsets)
    return np.ascontiguousarray(sums.reshape(num_offsets, num_ranks).T)


def rank_base_loads(contributions: FloatArray, rank_index: IntArray, num_ranks: int) -> FloatArray:
    """Sum active-request contributions per rank: b_g(h), shape (G, K) (spec section 2.4).

    Args:
        contributions: shape (M, K), w^_i(h) of every active request.
        rank_index: shape (M,), the rank each active request runs on, in [0, G).
        num_ranks: G.
    """
    num_offsets = contributions.shape[1]
    cells = (rank_index[:, None] * num_offsets + np.arange(num_offsets)[None, :]).ravel()
    sums = np.bincount(cells, weights=contributions.ravel(), minlength=num_ranks * num_offsets)
    return sums.reshape(num_ranks, num_offsets).astype(np.float64)
