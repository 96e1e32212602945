"""BF-IO closed-loop benchmark: the paper's Table 1 setting in the simulator, and central-pool validity per load.

specs/seed-003-bfio.md section 5.3: G = 16 ranks, B = 72 slots, step model C + t_l max_g L_g with the
reference constants, BurstGPT-like lengths, a visible pool R = 4G, started full. Each router runs in
offline loop mode (the bundle is decided by the registered ``bfio`` policy from the run's telemetry):
FCFS index fill, JSQ by token load, BF-IO H = 0 and BF-IO H = 20 (uniform weights, the paper's J;
and the reference code's decay 0.86), each over several seeds, with the imbalance measured before
admission as the reference code does. A last BF-IO row runs the router on the wall clock: its time
is charged to every step and its 1.5 ms budget can run out, so its fallback rate is the real one on
this machine. Prints our figures (mean +- std over seeds) beside the paper's Table 1, then the
share of pushed central-pool assignments still valid when the router used
them, at several arrival rates. Writes JSON and a PNG under ``--out``.

Usage: PYTHONPATH=. python ops/bench/bench_bfio_loop.py [--duration-s 20] [--rate 3000] [--seeds 1 2 3 4 5]
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
import numpy as np

from policies.bfio import BfioParams, WeightScheme
from services.sim.bfio_loop import CentralPool, DpLoopResult, dp_workload, run_dp_loop
from services.sim.workload import PoissonArrivals

G, B, R = 16, 72, 64
PAPER = {  # Table 1 (seed 003): AvgImb x1e4 tokens, throughput x1e4 tok/s, TPOT x1e-2 s
    "fcfs": (27.9, 8.00, 1.42),
    "jsq-load": (28.2, 7.99, 1.42),
    "bfio_h0": (2.92, 9.03, 1.26),
    "bfio_h20": (1.65, 9.13, 1.25),
}


def _run(
    name: str,
    rate: float,
    duration_s: float,
    seed: int,
    central: CentralPool | None = None,
    *,
    wall_clock: bool = False,
    weight_scheme: WeightScheme = WeightScheme.UNIFORM,
) -> DpLoopResult:
    horizon = 0 if name == "bfio_h0" else 20
    return run_dp_loop(
        router="bfio" if name.startswith("bfio") else name,  # type: ignore[arg-type]
        workload=dp_workload(PoissonArrivals(rate_per_s=rate), backlog_requests=G * B + R),
        duration_s=duration_s,
        seed=seed,
        ranks=G,
        slots_per_rank=B,
        params=BfioParams(horizon_steps=horizon, weight_scheme=weight_scheme, self_check=False),
        visible_pool=R,
        central_pool=central,
        bundle_interval_s=0.25,
        decision_clock=time.perf_counter if wall_clock else None,
    )


def _row(results: list[DpLoopResult]) -> dict[str, float]:
    """Mean and standard deviation over seeds of each reported figure."""
    figures = {
        "avg_imbalance_tokens": [r.avg_imbalance_tokens for r in results],
        "avg_imbalance_post_admission_tokens": [r.avg_imbalance_post_admission_tokens for r in results],
        "throughput_tokens_per_s": [r.throughput_tokens_per_s for r in results],
        "tpot_s": [r.tpot_s for r in results],
        "fallback_rate": [r.fallback_rate for r in results],
        "decision_mean_s": [r.decision_mean_s for r in results],
    }
    row: dict[str, float] = {}
    for key, values in figures.items():
        row[key] = float(np.mean(values))
        row[f"{key}_std"] = float(np.std(values))
    return row


def main() -> None:
    """Run the benchmark and write its JSON and plot."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration-s", type=float, default=20.0)
    parser.add_argument("--rate", type=float, default=3000.0)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--loads", type=float, nargs="+", default=[2000.0, 4000.0, 8000.0])
    parser.add_argument("--pool-duration-s", type=float, default=5.0)
    parser.add_argument("--out", type=Path, default=Path("out/bench/bench_bfio_loop.json"))
    args = parser.parse_args()
    table: dict[str, dict[str, float]] = {}
    seeds = args.seeds
    print(f"Table 1 setting: G={G} B={B} R={R}, {args.duration_s:g} s at {args.rate:g} req/s, seeds {seeds}")
    print("imbalance before admission (the reference point); mean +- std over seeds")
    header = f"{'router':18} {'AvgImb e4':>14} {'post e4':>8} {'paper':>6} {'Thr e4':>7} {'paper':>6}"
    print(f"{header} {'TPOT e-2':>9} {'paper':>6} {'fallback':>9} {'router ms':>9}")
    variants = [(name, name, False, WeightScheme.UNIFORM) for name in PAPER]
    variants += [
        ("bfio_h20_decay", "bfio_h20", False, WeightScheme.DECAY),
        ("bfio_h20_charged", "bfio_h20", True, WeightScheme.UNIFORM),
    ]
    for label, name, wall_clock, scheme in variants:
        start = time.perf_counter()
        runs = [
            _run(name, args.rate, args.duration_s, seed, wall_clock=wall_clock, weight_scheme=scheme) for seed in seeds
        ]
        row = _row(runs)
        row["wall_s"] = time.perf_counter() - start
        table[label] = row
        imb, thr, tpot = PAPER.get(name, (float("nan"),) * 3)
        print(
            f"{label:18} {row['avg_imbalance_tokens'] / 1e4:7.2f}+-{row['avg_imbalance_tokens_std'] / 1e4:5.2f} "
            f"{row['avg_imbalance_post_admission_tokens'] / 1e4:8.2f} {imb:6.2f} "
            f"{row['throughput_tokens_per_s'] / 1e4:7.2f} {thr:6.2f} {row['tpot_s'] * 100:9.3f} {tpot:6.2f} "
            f"{row['fallback_rate']:9.3f} {row['decision_mean_s'] * 1e3:9.3f}"
        )
    validity: dict[str, dict[str, float | int | None]] = {}
    print(f"\ncentral pool (period 0.1 s, loop latency 0.05 s), {args.pool_duration_s:g} s per load")
    print(f"{'req/s':>7} {'planned':>8} {'used':>6} {'rejected':>9} {'superseded':>11} {'valid when used':>16}")
    for rate in args.loads:
        result = _run("bfio_h20", rate, args.pool_duration_s, seeds[0], CentralPool())
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
    axes[0].bar(
        names,
        [table[n]["avg_imbalance_tokens"] / 1e4 for n in names],
        yerr=[table[n]["avg_imbalance_tokens_std"] / 1e4 for n in names],
        label="ours (mean +- std over seeds)",
    )
    names = list(PAPER)
    axes[0].scatter(names, [PAPER[n][0] for n in names], color="black", zorder=3, label="paper")
    axes[0].set_ylabel("AvgImbalance (1e4 tokens)")
    axes[0].legend()
    axes[1].bar(names, [table[n]["throughput_tokens_per_s"] / 1e4 for n in names], label="ours")
    axes[1].tick_params(axis="x", rotation=30)
    axes[0].tick_params(axis="x", rotation=30)
    axes[1].scatter(names, [PAPER[n][1] for n in names], color="black", zorder=3, label="paper")
    axes[1].set_ylabel("throughput (1e4 tok/s)")
    fig.tight_layout()
    fig.savefig(args.out.with_suffix(".png"))
    print(f"\nwrote {args.out} and {args.out.with_suffix('.png')}")


main()
