"""Lookahead with true output lengths as hints (the paper's setting): H = 20 must beat H = 0.

A small closed loop in the reference simulator's step semantics (spec section 1.2): a backlog revealed
4G requests at a time, every free slot refilled after each step, the imbalance of Eq. 2 measured after
each step's completions and before its admissions, averaged over the steps that still admit. Lengths
are BurstGPT-like (spec 5.3: prompt mean 363, std 502; output median 7, log-sigma 2.1; correlation
0.37). The paper (Table 1) reports H = 20 at 1.65e4 against 2.92e4 for H = 0 (-44%) at G = 16 and
N = 100k. Two instances: G = 4, B = 16, N = 2,000 (why the decay weights matter), and the Table 1 shape,
G = 16, B = 72, 4G revealed, N = 60,000 over seeds 1-5, held to the paper's margin less 10 points
(docs/policies/bfio.md, "Fidelity with true lengths").
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from policies.bfio.decide import build_payload
from policies.bfio.params import BfioParams, WeightScheme
from policies.bfio.router import NO_CLASS, ActiveBatch, BfioRouter, WaitingBatch
from schemas.policy_docs.base import InputsDigest
from schemas.policy_docs.bfio import BfioPolicy, BfioState

FloatArray = npt.NDArray[np.float64]
RANKS, SLOTS, REQUESTS, SEEDS = 4, 16, 2_000, (1, 2, 3)
PAPER_H0, PAPER_H20 = 2.92e4, 1.65e4  # Table 1, AvgImb of BF-IO H = 0 and H = 20 (x1e4 tokens)


def _lengths(seed: int, requests: int) -> tuple[FloatArray, FloatArray]:
    """Correlated log-normal prompt and output lengths with BurstGPT's statistics (spec 5.3)."""
    z = np.random.default_rng(seed).standard_normal((2, requests))
    z_out = 0.37 * z[0] + np.sqrt(1.0 - 0.37**2) * z[1]
    sigma_p = np.sqrt(np.log1p((502.0 / 363.0) ** 2))
    prompts = np.clip(np.rint(np.exp(np.log(363.0) - sigma_p**2 / 2 + sigma_p * z[0])), 1, 14_117)
    outputs = np.clip(np.rint(np.exp(np.log(7.0) + 2.1 * z_out)), 1, 3_206)
    return prompts, outputs


def _router(params: BfioParams) -> BfioRouter:
    payload = build_payload(params, horizon_steps=params.horizon_steps)
    policy = BfioPolicy(
        scope="dp0",
        deployment="test",
        version=1,
        computed_at=0.0,
        valid_until=1e18,
        inputs=InputsDigest(snapshot_id="s"),
        payload=payload,
        state=BfioState(horizon_steps=params.horizon_steps),
    )
    return BfioRouter(clock=lambda: 0.0, policy=policy)


def _mean_imbalance(
    params: BfioParams,
    seed: int,
    *,
    ranks: int = RANKS,
    slots: int = SLOTS,
    requests: int = REQUESTS,
    hint_error_frac: float = 0.0,
) -> float:
    """Mean Imbalance(k) (Eq. 2) before admissions while the backlog lasts.

    Every request's hint is its true output length, or with ``hint_error_frac`` = e > 0 the reference
    code's o_est, round(o U[1 - e, 1 + e]) (at least 1), drawn from the seed.
    """
    prompts, outputs = _lengths(seed, requests)
    noise = np.random.default_rng([seed, 1]).uniform(1.0 - hint_error_frac, 1.0 + hint_error_frac, requests)
    hints = np.maximum(1.0, np.rint(outputs * noise))
    router = _router(params)
    rank = np.full(requests, -1, dtype=np.int64)
    generated = np.zeros(requests)
    finished = np.zeros(requests, dtype=bool)
    waiting: list[int] = []
    revealed, step = 0, 0
    imbalances: list[float] = []
    while revealed < requests or waiting:
        take = min(4 * ranks - len(waiting), requests - revealed)
        waiting += range(revealed, revealed + take)
        revealed += take
        active = np.flatnonzero((rank >= 0) & ~finished)
        free = slots - np.bincount(rank[active], minlength=ranks)
        ids = np.asarray(waiting)
        routing = router.route(
            waiting=WaitingBatch(
                request_ids=tuple(str(i) for i in ids),
                prompt_tokens=prompts[ids],
                arrival_s=np.zeros(ids.size),
                max_tokens=np.full(ids.size, np.inf),
                class_id=np.full(ids.size, NO_CLASS, dtype=np.int64),
                output_tokens_hint=hints[ids],
            ),
            active=ActiveBatch(
                rank=rank[active],
                prompt_tokens=prompts[active],
                generated_tokens=generated[active],
                max_tokens=np.full(active.size, np.inf),
                class_id=np.full(active.size, NO_CLASS, dtype=np.int64),
                output_tokens_hint=hints[active],
            ),
            free_slots=free.astype(np.int64),
            now_s=0.0,
            step_index=step,
        )
        for request_id, placed_rank in routing.assignments:
            rank[int(request_id)] = placed_rank
        placed = {int(request_id) for request_id, _ in routing.assignments}
        waiting = [i for i in waiting if i not in placed]
        active = np.flatnonzero((rank >= 0) & ~finished)
        generated[active] += 1
        finished[active] |= generated[active] >= outputs[active]
        step += 1
        alive = np.flatnonzero((rank >= 0) & ~finished)
        loads = np.bincount(rank[alive], weights=prompts[alive] + generated[alive], minlength=ranks)
        imbalances.append(ranks * float(loads.max()) - float(loads.sum()))
    return float(np.mean(imbalances))


@pytest.mark.slow
def test_true_length_hints_make_h20_beat_h0_and_the_decay_weights_are_why() -> None:
    """Mean over seeds 1-3: the default objective at H = 20 at least 20% below H = 0 (measured -36%), and
    below the paper's uniform weights at H = 20 (measured -27%), which lose to H = 0 on some seeds: the
    prediction leaves out the refills of freed slots, so the far offsets must weigh less."""
    h0 = np.mean([_mean_imbalance(BfioParams(horizon_steps=0), seed) for seed in SEEDS])
    h20 = np.mean([_mean_imbalance(BfioParams(horizon_steps=20), seed) for seed in SEEDS])
    uniform = BfioParams(horizon_steps=20, weight_scheme=WeightScheme.UNIFORM)
    h20_uniform = np.mean([_mean_imbalance(uniform, seed) for seed in SEEDS])
    assert h20 <= 0.8 * h0
    assert h20 < h20_uniform


@pytest.mark.slow
def test_at_the_table_1_shape_true_lengths_give_h20_the_papers_margin_less_10_points() -> None:
    """G = 16, B = 72, 4G = 64 revealed at a time (the shape behind Table 1, spec 5.3), N = 60,000, seeds 1-5.

    The paper's H = 20 is 1 - 1.65 / 2.92 = 43.5% below its H = 0; the target is at least that less 10
    points, 33.5%, over five seeds with their spread. Measured: H = 0 17,486 / 17,470 / 17,369 / 16,875 /
    17,819, H = 20 10,979 / 10,748 / 11,077 / 10,595 / 10,774 tokens, gains 37.2 / 38.5 / 36.2 / 37.2 /
    39.5% (mean 37.7%, sd 1.2 points). Asserted: the mean gain less two standard errors is at least 33.5%.
    At N = 4,000 the run is mostly the fill from empty and H = 20 is above H = 0 (+12% on seed 1), so N is
    large enough for the steady backlog the paper's N = 100k measures.
    """
    table_1 = {"ranks": 16, "slots": 72, "requests": 60_000}
    gains = np.array(
        [
            1.0
            - _mean_imbalance(BfioParams(horizon_steps=20), seed, **table_1)
            / _mean_imbalance(BfioParams(horizon_steps=0), seed, **table_1)
            for seed in (1, 2, 3, 4, 5)
        ]
    )
    required = (1.0 - PAPER_H20 / PAPER_H0) - 0.10
    standard_error = gains.std(ddof=1) / np.sqrt(gains.size)
    assert gains.mean() - 2.0 * standard_error >= required


@pytest.mark.slow
def test_noisy_hints_lose_the_gain_as_the_error_grows() -> None:
    """Table 1 shape, N = 30,000, seeds 1-3, hints round(o U[1 - e, 1 + e]) (the reference's o_est).

    Measured gains of H = 20 over H = 0 (seeds 1 / 2 / 3): true lengths 23.9 / 27.7 / 31.4%, e = 10%
    10.5 / 8.9 / 13.9%, e = 20% 9.1 / 5.8 / 7.7%, e = 50% 1.6 / 4.5 / 0.6%. The reference loses about 80%
    of its gain at 10% error (spec 5.3); here 60%. Asserted on the mean of the three seeds: the gain falls
    with every step of the error, a 10% error keeps at most half of it, and no error makes H = 20 worse
    than H = 0.
    """
    shape = {"ranks": 16, "slots": 72, "requests": 30_000}
    seeds = (1, 2, 3)
    h0 = np.array([_mean_imbalance(BfioParams(horizon_steps=0), seed, **shape) for seed in seeds])
    gains = [
        float(
            np.mean(
                1.0
                - np.array(
                    [
                        _mean_imbalance(BfioParams(horizon_steps=20), seed, hint_error_frac=error, **shape)
                        for seed in seeds
                    ]
                )
                / h0
            )
        )
        for error in (0.0, 0.1, 0.2, 0.5)
    ]
    assert gains == sorted(gains, reverse=True)
    assert len(set(gains)) == len(gains)
    assert gains[1] <= 0.5 * gains[0]
    assert gains[-1] >= 0.0
