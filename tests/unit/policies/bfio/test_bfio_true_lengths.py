"""Lookahead with true output lengths as hints (the paper's setting): H = 20 must beat H = 0.

A small closed loop in the reference simulator's step semantics (spec section 1.2): a backlog revealed
4G requests at a time, every free slot refilled after each step, the imbalance of Eq. 2 measured after
each step's completions and before its admissions, averaged over the steps that still admit. Lengths
are BurstGPT-like (spec 5.3: prompt mean 363, std 502; output median 7, log-sigma 2.1; correlation
0.37). The paper (Table 1) reports H = 20 at 1.65e4 against 2.92e4 for H = 0 (-44%) at G = 16 and
N = 100k; this instance is G = 4, B = 16, N = 2,000, so only the direction and a margin are asserted
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


def _lengths(seed: int) -> tuple[FloatArray, FloatArray]:
    """Correlated log-normal prompt and output lengths with BurstGPT's statistics (spec 5.3)."""
    z = np.random.default_rng(seed).standard_normal((2, REQUESTS))
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


def _mean_imbalance(params: BfioParams, seed: int) -> float:
    """Mean Imbalance(k) (Eq. 2) before admissions while the backlog lasts, every hint the true length."""
    prompts, outputs = _lengths(seed)
    router = _router(params)
    rank = np.full(REQUESTS, -1, dtype=np.int64)
    generated = np.zeros(REQUESTS)
    finished = np.zeros(REQUESTS, dtype=bool)
    waiting: list[int] = []
    revealed, step = 0, 0
    imbalances: list[float] = []
    while revealed < REQUESTS or waiting:
        take = min(4 * RANKS - len(waiting), REQUESTS - revealed)
        waiting += range(revealed, revealed + take)
        revealed += take
        active = np.flatnonzero((rank >= 0) & ~finished)
        free = SLOTS - np.bincount(rank[active], minlength=RANKS)
        ids = np.asarray(waiting)
        routing = router.route(
            waiting=WaitingBatch(
                request_ids=tuple(str(i) for i in ids),
                prompt_tokens=prompts[ids],
                arrival_s=np.zeros(ids.size),
                max_tokens=np.full(ids.size, np.inf),
                class_id=np.full(ids.size, NO_CLASS, dtype=np.int64),
                output_tokens_hint=outputs[ids],
            ),
            active=ActiveBatch(
                rank=rank[active],
                prompt_tokens=prompts[active],
                generated_tokens=generated[active],
                max_tokens=np.full(active.size, np.inf),
                class_id=np.full(active.size, NO_CLASS, dtype=np.int64),
                output_tokens_hint=outputs[active],
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
        loads = np.bincount(rank[alive], weights=prompts[alive] + generated[alive], minlength=RANKS)
        imbalances.append(RANKS * float(loads.max()) - float(loads.sum()))
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
