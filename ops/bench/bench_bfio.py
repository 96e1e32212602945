"""BF-IO solver benchmark: router latency p50/p99 and within-budget rate per size, and the optimality gap.

Settings (B = 72 slots, H = 20 on the dyadic grid, survival-based lookahead for every active request):

- ``burst``: a production size, G = 32, 100 waiting, free slots Binomial(B, 0.02) per rank
  (about 46 admissions per call);
- ``table1-g16`` and ``table1-g32``: the paper's sizes with full refills (spec 5.3), G = 16 with the
  visible pool R = 64 and G = 32 with 128 waiting, free slots Binomial(B, N / (G B)) per rank, so about as
  many free slots as waiting requests and nearly every candidate is admitted (about 63 and 127 per call).

Prompt lengths are lognormal with BurstGPT's mean and std (363 and 502 tokens, specs/seed-003-bfio.md
section 5.3). Reports, per setting, the wall-clock latency of ``BfioRouter.route`` (predictions + solve)
without a budget; with the default 1.5 ms budget, the share of calls that fall back to JSQ-by-load
(``fallback_rate``: the greedy phase did not finish) and the share that finish within it
(``within_budget``: no fallback and the whole call, exchange phase included, within 1.5 ms); the bare
``solve_fast`` latency and the share of bare solves under 1.5 ms, the greedy phase alone (no exchange
moves), and the prediction of the active requests' base loads two ways, the direct formula
(``active_contributions``) and the router's per-bundle ratio tables (``ClassPredictor``), timed on the
same steps one after the other; then the mean/max optimality gap of
``solve_fast`` against ``solve_exact`` on small random instances. Timings depend on the machine and its
load; they belong here, never in a test. ``--clock wall`` (default) times and budgets the router on the
wall clock (time.perf_counter), what an engine sees on its core; ``--clock thread`` uses the thread's CPU
time (time.thread_time), which leaves out the time other processes hold the core: on a shared machine it
estimates what a dedicated core would see. Writes JSON to ``--out``.

Usage: python ops/bench/bench_bfio.py [--calls 500] [--settings burst table1-g16 table1-g32]
       [--clock wall|thread] [--out out/bench/bench_bfio.json]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from policies.bfio import (
    ActiveBatch,
    BfioParams,
    BfioRouter,
    ClassPredictor,
    NewRequestModel,
    SurvivalCurve,
    WaitingBatch,
    active_contributions,
    build_horizon_grid,
    build_payload,
    new_request_contributions,
    rank_base_loads,
    rank_base_loads_by_offset,
    solve_exact,
    solve_fast,
)
from schemas.policy_docs import BfioPolicy, BfioState, InputsDigest, SurvivalTableDoc

B = 72
SETTINGS = {  # name: (G, waiting N, p of Binomial(B, p) free slots per rank)
    "burst": (32, 100, 0.02),
    "table1-g16": (16, 64, 64 / (16 * B)),
    "table1-g32": (32, 128, 128 / (32 * B)),
}
PROMPT_MEAN, PROMPT_STD = 363.0, 502.0


def _lognormal_prompts(rng: np.random.Generator, size: int) -> np.ndarray:
    sigma2 = np.log(1 + (PROMPT_STD / PROMPT_MEAN) ** 2)
    return np.maximum(1.0, np.round(rng.lognormal(np.log(PROMPT_MEAN) - sigma2 / 2, np.sqrt(sigma2), size)))


def _policy(budget_s: float) -> BfioPolicy:
    edges = np.unique(np.round(np.geomspace(1, 4096, 40)))
    table = SurvivalTableDoc(
        traffic_class="chat",
        edges_tokens=edges.tolist(),
        survival_frac=np.exp(-edges / 300.0).tolist(),
        n_samples=20_000,
        n_censored=2_000,
    )
    params = BfioParams(solver_budget_s=budget_s)
    payload = build_payload(params, horizon_steps=params.horizon_steps, tables=(table,), default_class="chat")
    return BfioPolicy(
        scope="bench",
        deployment="bench",
        version=1,
        computed_at=0.0,
        valid_until=1e9,
        inputs=InputsDigest(snapshot_id="bench"),
        payload=payload,
        state=BfioState(horizon_steps=payload.horizon_steps),
    )


def _step(
    rng: np.random.Generator, cid: int, num_ranks: int, num_waiting: int, free_frac: float
) -> tuple[WaitingBatch, ActiveBatch, np.ndarray]:
    free = rng.binomial(B, free_frac, num_ranks).astype(np.int64)
    occupied = B - free
    m = int(occupied.sum())
    active = ActiveBatch(
        rank=np.repeat(np.arange(num_ranks, dtype=np.int64), occupied),
        prompt_tokens=_lognormal_prompts(rng, m),
        generated_tokens=rng.integers(0, 600, m).astype(np.float64),
        max_tokens=np.full(m, np.inf),
        class_id=np.full(m, cid, dtype=np.int64),
    )
    waiting = WaitingBatch(
        request_ids=tuple(f"r{i}" for i in range(num_waiting)),
        prompt_tokens=_lognormal_prompts(rng, num_waiting),
        arrival_s=np.zeros(num_waiting),
        max_tokens=np.full(num_waiting, np.inf),
        class_id=np.full(num_waiting, cid, dtype=np.int64),
    )
    return waiting, active, free


def _percentiles_ms(samples: list[float]) -> dict[str, float]:
    values = np.asarray(samples) * 1e3
    return {"p50_ms": float(np.percentile(values, 50)), "p99_ms": float(np.percentile(values, 99))}


CLOCKS = {"wall": time.perf_counter, "thread": time.thread_time}


def bench_router(calls: int, setting: str, seed: int, clock: Callable[[], float]) -> dict[str, dict[str, float]]:
    """Time ``BfioRouter.route`` unbounded and with the default budget, and bare ``solve_fast``, on ``clock``."""
    num_ranks, num_waiting, free_frac = SETTINGS[setting]
    budget_s = BfioParams().solver_budget_s
    results: dict[str, dict[str, float]] = {}
    for label, route_budget_s in (("route_unbounded", 10.0), ("route_default_budget", budget_s)):
        rng = np.random.default_rng(seed)
        router = BfioRouter(clock=clock, policy=_policy(route_budget_s))
        cid = router.class_id("chat")
        latencies, fallbacks, finished, admitted = [], 0, 0, []
        for step in range(calls):
            waiting, active, free = _step(rng, cid, num_ranks, num_waiting, free_frac)
            start = clock()
            routing = router.route(waiting=waiting, active=active, free_slots=free, now_s=0.0, step_index=step)
            latencies.append(clock() - start)
            fallbacks += routing.fallback_reason is not None
            finished += routing.fallback_reason is None and latencies[-1] <= route_budget_s
            admitted.append(len(routing.assignments))
        results[label] = {
            **_percentiles_ms(latencies),
            "fallback_rate": fallbacks / calls,
            "within_budget": finished / calls,
            "mean_admitted": float(np.mean(admitted)),
        }
    rng = np.random.default_rng(seed)
    grid = build_horizon_grid(20, dyadic=True, scheme=BfioParams().weight_scheme, decay_gamma=0.86)
    edges = np.unique(np.round(np.geomspace(1, 4096, 40)))
    curve = SurvivalCurve(edges_tokens=edges, survival_frac=np.exp(-edges / 300.0))
    predictor = ClassPredictor(
        curve, offsets_steps=grid.offsets_steps, drift=1.0, model=NewRequestModel.S_PLUS_H_SURVIVAL
    )
    solve_latencies, greedy_latencies = [], []
    direct_latencies, table_latencies = [], []
    for _ in range(calls):
        waiting, active, free = _step(rng, 0, num_ranks, num_waiting, free_frac)
        start = clock()
        base = rank_base_loads(
            active_contributions(
                curve,
                prompt_tokens=active.prompt_tokens,
                generated_tokens=active.generated_tokens,
                max_tokens=active.max_tokens,
                offsets_steps=grid.offsets_steps,
                drift=1.0,
            ),
            active.rank,
            num_ranks,
        )
        direct_latencies.append(clock() - start)
        start = clock()
        rank_base_loads_by_offset(
            predictor.active_by_offset(
                prompt_tokens=active.prompt_tokens,
                generated_tokens=active.generated_tokens,
                max_tokens=active.max_tokens,
            ),
            active.rank,
            num_ranks,
        )
        table_latencies.append(clock() - start)
        v = new_request_contributions(
            curve,
            prompt_tokens=waiting.prompt_tokens,
            max_tokens=waiting.max_tokens,
            offsets_steps=grid.offsets_steps,
            drift=1.0,
            model=NewRequestModel.S_PLUS_H_SURVIVAL,
        )
        start = clock()
        solve_fast(base, free, v, grid.weights)
        solve_latencies.append(clock() - start)
        start = clock()
        solve_fast(base, free, v, grid.weights, local_search_rounds=0)
        greedy_latencies.append(clock() - start)
    results["solve_fast_only"] = {
        **_percentiles_ms(solve_latencies),
        "within_budget": float(np.mean(np.asarray(solve_latencies) <= budget_s)),
    }
    results["greedy_phase_only"] = _percentiles_ms(greedy_latencies)
    results["prediction_direct"] = _percentiles_ms(direct_latencies)
    results["prediction_tables"] = _percentiles_ms(table_latencies)
    return results


def bench_gap(instances: int, seed: int) -> dict[str, float]:
    """Optimality gap of ``solve_fast`` against ``solve_exact`` on 3 ranks x 6 waiting x 3 offsets."""
    rng = np.random.default_rng(seed)
    gaps, optimal = [], 0
    for _ in range(instances):
        base = rng.integers(0, 2000, (3, 3)).astype(np.float64)
        free = rng.integers(0, 3, 3)
        v = _lognormal_prompts(rng, 6)[:, None] + np.arange(3.0)[None, :]
        weights = np.ones(3)
        _, exact_j = solve_exact(base, free, v, weights)
        fast_j = solve_fast(base, free, v, weights).objective_j_tokens
        optimal += fast_j <= exact_j + 1e-9
        gaps.append((fast_j - exact_j) / max(exact_j, 1.0))
    return {
        "instances": float(instances),
        "optimal_frac": optimal / instances,
        "mean_rel_gap": float(np.mean(gaps)),
        "max_rel_gap": float(np.max(gaps)),
    }


def main() -> None:
    """Run the benchmark, print a table and write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--settings", nargs="+", choices=sorted(SETTINGS), default=list(SETTINGS))
    parser.add_argument("--gap-instances", type=int, default=200)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall")
    parser.add_argument("--out", type=Path, default=Path("out/bench/bench_bfio.json"))
    args = parser.parse_args()
    budget_ms = BfioParams().solver_budget_s * 1e3
    print(
        f"BF-IO router, B={B}, H=20 dyadic, {args.calls} calls per row, default budget {budget_ms:g} ms, "
        f"{args.clock} clock, load average {os.getloadavg()[0]:.2f}"
    )
    print(
        f"{'setting':<11} {'measure':<21} {'p50 ms':>7} {'p99 ms':>7} {'fallback':>9} {'within budget':>14} "
        f"{'admitted':>9}"
    )
    routers: dict[str, dict[str, dict[str, float]]] = {}
    for setting in args.settings:
        routers[setting] = bench_router(args.calls, setting, args.seed, CLOCKS[args.clock])
        for label, row in routers[setting].items():
            admitted = f"{row['mean_admitted']:.1f}" if "mean_admitted" in row else "-"
            within = f"{row['within_budget']:.3f}" if "within_budget" in row and label != "route_unbounded" else "-"
            fallback = f"{row['fallback_rate']:.3f}" if label == "route_default_budget" else "-"
            print(
                f"{setting:<11} {label:<21} {row['p50_ms']:>7.3f} {row['p99_ms']:>7.3f} {fallback:>9} {within:>14} "
                f"{admitted:>9}"
            )
    gap = bench_gap(args.gap_instances, args.seed)
    print(
        f"solve_fast vs solve_exact on {int(gap['instances'])} small instances: optimal {gap['optimal_frac']:.3f}, "
        f"mean relative gap {gap['mean_rel_gap']:.4f}, max {gap['max_rel_gap']:.4f}"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    settings = {name: dict(zip(("G", "waiting", "free_frac"), SETTINGS[name], strict=True)) for name in args.settings}
    document = {
        "B": B,
        "budget_ms": budget_ms,
        "clock": args.clock,
        "load_average_1min": os.getloadavg()[0],
        "settings": settings,
        "router": routers,
        "gap": gap,
    }
    args.out.write_text(json.dumps(document, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
