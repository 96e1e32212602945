"""BF-IO like for like with the authors' simulator: their sim, their policy or our router.

The reference code (github.com/Echoscd/Load-Balancing-Release, not part of this repository) is imported
from a checkout given by ``--reference``. Its ``SchedulerSim`` runs the workload; its own BF-IO
(``strategy_balance_future``, ``HORIZON_MAX`` = H, and ``strategy_balance_future_h0``) or Governor's
``BfioRouter`` decides each step's admissions. Both therefore see the same requests, the same window
(the simulator reveals 4G requests at a time), the same step semantics and the same measurement: the
simulator's ``avg_gpu_imbalance``, Eq. 2 after each step's completions and before its admissions,
averaged over the steps up to the last admission. Output estimates are the true lengths (o_est = o,
the paper's setting); our router receives them as ``output_tokens_hint``, on a frozen clock (no
budget fallback), with a bundle valid from the first step.

Workloads: ``burst`` draws N requests with replacement from the reference's ``burst_data_8000.json``
(BurstGPT); ``ours`` draws them from ``BurstGptLikeLengths`` (our Table 1 lengths); ``synthetic`` is the
reference generator's default (prompt 3200 +- 2600, output 1200 +- 700). G = 16, B = 72, the reference
step model.

Variants: ``ref_h0``, ``ref_h20`` (the reference's policy), ``ours_h0``, ``ours_h20`` (our defaults, decay
weights), ``ours_h20_uniform`` (the paper's pure sum over h), ``ours_h20_full`` (decay on every offset,
no dyadic grid), ``ours_h20_ref`` (decay and ``const_s``), and ``*_noguard`` (our starvation guard off,
aging deadline 600 s; the reference has none).

Usage: PYTHONPATH=. python ops/bench/bench_bfio_reference.py --reference /tmp/Load-Balancing-Release
       --workload burst --requests 40000 --seeds 1 2 3 4 --variants ref_h0 ref_h20 ours_h0 ours_h20
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from policies.bfio import BfioParams, NewRequestModel, WeightScheme
from policies.bfio.decide import build_payload
from policies.bfio.router import NO_CLASS, ActiveBatch, BfioRouter, WaitingBatch
from schemas.policy_docs.base import InputsDigest
from schemas.policy_docs.bfio import BfioPolicy, BfioState
from services.sim.bfio_loop import BurstGptLikeLengths

IntArray = npt.NDArray[np.int64]
G, B = 16, 72
NO_GUARD_S = 600.0  # the largest aging deadline the bundle allows: the guard never fires in these runs
OURS: dict[str, tuple[BfioParams, int]] = {
    "ours_h0": (BfioParams(), 0),
    "ours_h20": (BfioParams(), 20),
    "ours_h20_uniform": (BfioParams(weight_scheme=WeightScheme.UNIFORM), 20),
    "ours_h20_full": (BfioParams(dyadic_grid=False), 20),
    "ours_h20_ref": (BfioParams(new_request_model=NewRequestModel.CONST_S), 20),
}


def workload(reference: Path, name: str, requests: int, seed: int) -> tuple[IntArray, IntArray]:
    """Prompt and output lengths of ``requests`` requests for one seed."""
    rng = np.random.default_rng(seed)
    if name == "burst":
        rows = json.loads((reference / "burst_data_8000.json").read_text())["data"]
        index = rng.integers(0, len(rows), requests)
        prompts = np.array([rows[i]["input_length"] for i in index], dtype=np.int64)
        outputs = np.array([rows[i]["output_length"] for i in index], dtype=np.int64)
        return prompts, outputs
    if name == "ours":
        return BurstGptLikeLengths().sample(rng, requests)
    generate: Callable[..., tuple[IntArray, IntArray, IntArray]] = importlib.import_module("simlib").generate_requests
    prompts, outputs, _ = generate(requests, rng=rng)
    return prompts.astype(np.int64), outputs.astype(np.int64)


def our_policy(params: BfioParams, horizon_steps: int) -> Callable[[Any], None]:
    """A ``policy_fn`` for the reference simulator that admits with ``BfioRouter``, true lengths as hints."""
    payload = build_payload(params, horizon_steps=horizon_steps)
    policy = BfioPolicy(
        scope="dp0",
        deployment="reference-sim",
        version=1,
        computed_at=0.0,
        valid_until=1e18,
        inputs=InputsDigest(snapshot_id="reference-sim"),
        payload=payload,
        state=BfioState(horizon_steps=horizon_steps),
    )
    router = BfioRouter(clock=lambda: 0.0, policy=policy)

    def admit(sim: Any) -> None:
        if not sim.wait_q:
            return
        waiting = np.fromiter(sim.wait_q, dtype=np.int64)
        active = np.concatenate([np.asarray(a, dtype=np.int64) for a in sim.gpu_active])
        rank = np.concatenate([np.full(len(a), g, dtype=np.int64) for g, a in enumerate(sim.gpu_active)])
        routing = router.route(
            waiting=WaitingBatch(
                request_ids=tuple(str(i) for i in waiting),
                prompt_tokens=sim.s_arr[waiting].astype(np.float64),
                arrival_s=np.zeros(waiting.size),
                max_tokens=np.full(waiting.size, np.inf),
                class_id=np.full(waiting.size, NO_CLASS, dtype=np.int64),
                output_tokens_hint=sim.o_est_arr[waiting].astype(np.float64),
            ),
            active=ActiveBatch(
                rank=rank,
                prompt_tokens=sim.s_arr[active].astype(np.float64),
                generated_tokens=sim.gen_arr[active].astype(np.float64),
                max_tokens=np.full(active.size, np.inf),
                class_id=np.full(active.size, NO_CLASS, dtype=np.int64),
                output_tokens_hint=sim.o_est_arr[active].astype(np.float64),
            ),
            free_slots=sim._gpu_capacity_left().astype(np.int64),
            now_s=float(sim.clock),
            step_index=int(sim.step_idx),
        )
        placed = {int(request_id) for request_id, _ in routing.assignments}
        for request_id, placed_rank in routing.assignments:
            sim._assign_to_gpu(int(request_id), int(placed_rank))
        sim.wait_q = type(sim.wait_q)(i for i in sim.wait_q if i not in placed)

    return admit


def run(variant: str, prompts: IntArray, outputs: IntArray) -> float:
    """The simulator's mean imbalance (tokens) for one variant."""
    simlib = importlib.import_module("simlib")
    strategy = importlib.import_module("simlib.strategies.strategy_balance_future")
    policy_fn: Callable[[Any], None]
    if variant == "ref_h0":
        policy_fn = importlib.import_module("simlib.strategies.strategy_balance_future_h0").policy_balance_future_h0
    elif variant.startswith("ref_h"):
        strategy.__dict__["HORIZON_MAX"] = int(variant.removeprefix("ref_h"))  # as its scripts set H
        policy_fn = strategy.policy_balance_future
    else:
        params, horizon = OURS[variant.removesuffix("_noguard")]
        if variant.endswith("_noguard"):
            params = dataclasses.replace(params, aging_deadline_s=NO_GUARD_S)
        policy_fn = our_policy(params, horizon)
    sim = simlib.SchedulerSim(
        n_worker=G,
        batch_size=B,
        C=(B * 0.6e-3 + 35e-3) / 16,
        t_length=1.5 * 2 * 576 * 61e-6 / 2**20,
        s_list=prompts,
        o_list=outputs,
        o_est_list=outputs,
        policy_fn=policy_fn,
        eff_name="ratio",
        record_history=False,
    )
    return float(sim.run()["avg_gpu_imbalance"])


def main() -> None:
    """Run every variant on every seed and print the imbalance, mean and spread."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", type=Path, required=True, help="a checkout of Load-Balancing-Release")
    parser.add_argument("--workload", choices=["burst", "ours", "synthetic"], default="burst")
    parser.add_argument("--requests", type=int, default=40_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4])
    parser.add_argument("--variants", nargs="+", default=["ref_h0", "ref_h20", "ours_h0", "ours_h20"])
    args = parser.parse_args()
    sys.path.insert(0, str(args.reference))
    for variant in args.variants:
        values = []
        for seed in args.seeds:
            prompts, outputs = workload(args.reference, args.workload, args.requests, seed)
            values.append(run(variant, prompts, outputs))
        print(
            f"{args.workload} N={args.requests} {variant:24} {np.mean(values):9.0f} +- {np.std(values):7.0f}"
            f"  {[round(v) for v in values]}",
            flush=True,
        )


if __name__ == "__main__":
    main()
