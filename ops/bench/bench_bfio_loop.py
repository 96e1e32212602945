"""BF-IO closed-loop benchmark: the paper's Table 1 setting in the simulator, and central-pool validity per load.

specs/seed-003-bfio.md section 5.3: G = 16 ranks, B = 72 slots, step model C + t_l max_g L_g with the
reference constants, BurstGPT-like lengths, a visible pool R = 4G, started full. Each router runs in
offline loop mode (the bundle is decided by the registered ``bfio`` policy from the run's telemetry):
FCFS index fill, JSQ by token load, BF-IO H = 0 and BF-IO H = 20. Prints our figures beside the
paper's Table 1, then the share of pushed central-pool assignments still valid when the router used
them, at several arrival rates. Writes JSON and a PNG under ``--out``.

Usage: PYTHONPATH=. python ops/bench/bench_bfio_loop.py [--duration-s 20] [--rate 3000]
       [--out out/bench/bench_bfio_loop.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import matplotlib as mpl

mpl.use("Agg")
import matplotlib.pyplot as plt

from policies.bfio import BfioParams
from services.sim.bfio_loop import CentralPool, DpLoopResult, dp_workload, run_dp_loop
from services.sim.workload import PoissonArrivals

G, B, R = 16, 72, 64
PAPER = {  # Table 1 (seed 003): AvgImb x1e4 tokens, throughput x1e4 tok/s, TPOT x1e-2 s
    "fcfs": (27.9, 8.00, 1.42),
    "jsq-load": (28.2, 7.99, 1.42),
    "bfio_h0": (2.92, 9.03, 1.26),
    "bfio_h20": (1.65, 9.13, 1.25),
}


def _run(name: str, rate: float, duration_s: float, seed: int, central: CentralPool | None = None) -> DpLoopResult:
    params = BfioParams(horizon_steps=0) if name == "bfio_h0" else BfioParams(horizon_steps=20)
    return run_dp_loop(
        router="bfio" if name.startswith("bfio") else name,  # type: ignore[arg-type]
        workload=dp_workload(PoissonArrivals(rate_per_s=rate), backlog_requests=G * B + R),
        duration_s=duration_s,
        seed=seed,
        ranks=G,
        slots_per_rank=B,
        params=params,
        visible_pool=R,
        central_pool=central,
        bundle_interval_s=0.25,
    )


def main() -> None:
    """Run the benchmark and write its JSON and plot."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration-s", type=float, default=20.0)
    parser.add_argument("--rate", type=float, default=3000.0)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--loads", type=float, nargs="+", default=[2000.0, 4000.0, 8000.0])
    parser.add_argument("--pool-duration-s", type=float, default=5.0)
    parser.add_argument("--out", type=Path, default=Path("out/bench/bench_bfio_loop.json"))
    args = parser.parse_args()
    table: dict[str, dict[str, float]] = {}
    print(f"Table 1 setting: G={G} B={B} R={R}, {args.duration_s:g} s at {args.rate:g} req/s, seed {args.seed}")
    header = f"{'router':10} {'AvgImb e4':>10} {'paper':>6} {'Thr e4':>7} {'paper':>6} {'TPOT e-2':>9} {'paper':>6}"
    print(f"{header} {'idle':>6}")
    for name, (imb, thr, tpot) in PAPER.items():
        start = time.perf_counter()
        result = _run(name, args.rate, args.duration_s, args.seed)
        table[name] = {
            "avg_imbalance_tokens": result.avg_imbalance_tokens,
            "throughput_tokens_per_s": result.throughput_tokens_per_s,
            "tpot_s": result.tpot_s,
            "barrier_idle_frac": result.barrier_idle_frac,
            "steps": result.steps,
            "wall_s": time.perf_counter() - start,
        }
        print(
            f"{name:10} {result.avg_imbalance_tokens / 1e4:10.2f} {imb:6.2f} "
            f"{result.throughput_tokens_per_s / 1e4:7.2f} {thr:6.2f} {result.tpot_s * 100:9.3f} {tpot:6.2f} "
            f"{result.barrier_idle_frac:6.3f}"
        )
    validity: dict[str, dict[str, float | int | None]] = {}
    print(f"\ncentral pool (period 0.1 s, loop latency 0.05 s), {args.pool_duration_s:g} s per load")
    print(f"{'req/s':>7} {'planned':>8} {'used':>6} {'rejected':>9} {'superseded':>11} {'valid when used':>16}")
    for rate in args.loads:
        result = _run("bfio_h20", rate, args.pool_duration_s, args.seed, CentralPool())
        stats = result.planner_stats
        if stats is None:
            continue
        frac = stats.valid_when_used_frac
        validity[f"{rate:g}"] = {
            "planned": stats.planned,
            "used": stats.used,
            "rejected": stats.rejected,
            "superseded": stats.superseded,
            "valid_when_used_frac": frac,
        }
        shown = "-" if frac is None else f"{frac:.3f}"
        print(f"{rate:7g} {stats.planned:8d} {stats.used:6d} {stats.rejected:9d} {stats.superseded:11d} {shown:>16}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"table1": table, "paper": PAPER, "central_pool": validity}, indent=2))
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    names = list(table)
    axes[0].bar(names, [table[n]["avg_imbalance_tokens"] / 1e4 for n in names], label="ours")
    axes[0].scatter(names, [PAPER[n][0] for n in names], color="black", zorder=3, label="paper")
    axes[0].set_ylabel("AvgImbalance (1e4 tokens)")
    axes[0].legend()
    axes[1].bar(names, [table[n]["throughput_tokens_per_s"] / 1e4 for n in names], label="ours")
    axes[1].scatter(names, [PAPER[n][1] for n in names], color="black", zorder=3, label="paper")
    axes[1].set_ylabel("throughput (1e4 tok/s)")
    fig.tight_layout()
    fig.savefig(args.out.with_suffix(".png"))
    print(f"\nwrote {args.out} and {args.out.with_suffix('.png')}")


main()
