"""Benchmark: FleetOpt planner latency for a full sweep (all B candidates x the gamma grid), p50/p99.

Seed 002 section 6 claims the sweep takes under 1 ms; our target is p50 <= 1 ms and p99 <= 3 ms
in exact mode on the three shipped CDFs. Runs ``plan_fleet`` at lambda = 1000 req/s, prints wall
and CPU (thread) time per workload with the load average, and writes JSON to ``--out`` (default
out/bench/bench_fleetopt.json).

Exact mode is timed in three regimes, each run a new snapshot as a live estimate would give:

* ``rate``: only the arrival rate changes (by 1e-6 per run): the splits and calibrations, which do
  not depend on it, are memoised; the Erlang-C sizing of every pool runs.
* ``cdf``: the CDF's fractions change (by 1e-9 per run) as well: splits and calibrations are
  recomputed; the per-length table, which depends only on the input share, is memoised.
* ``input``: the input share changes (by 1e-9 per run) as well: everything is rebuilt, including
  the per-length law and the running sums at the sweep's lengths (one compiled O(max_tokens) pass,
  ``policies/fleetopt/kernels.py``; the warm-up run loads or compiles it).

``points_ms`` is the one-off cost of building all ``PlanPoint`` objects (``FleetPlan.points`` is
built on first read; a decision needs only the best point and the baseline).

``--baseline-root=DIR`` times DIR's planner as well, in a child process of the same run started just
before this checkout's timings (the same repeats), and prints and records each row's p50 and p99 as a
ratio to DIR's: the before/after of a change on the same machine state.

Usage: python ops/bench/bench_fleetopt.py [--repeats 200] [--paper-repeats 2] [--out out/bench/bench_fleetopt.json]
       [--planner-root=DIR]  (time DIR's planner instead, e.g. ``git archive a24b0fc | tar -x -C DIR``)
       [--baseline-root=DIR]  (time DIR's planner too, and print the ratios to it)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
# --planner-root times another checkout's planner (e.g. an earlier commit) in the same run.
_PLANNER_ROOT = next((Path(a.split("=", 1)[1]) for a in sys.argv if a.startswith("--planner-root=")), ROOT)
sys.path.insert(0, str(_PLANNER_ROOT.resolve()))

from policies.fleetopt import FleetoptInputs, FleetoptParams, LengthCdf, PlannerMode, plan_fleet  # noqa: E402

WORKLOADS = {"azure": 1.0, "lmsys": 1.0, "agent_heavy": 0.75}  # p_c per seed 002 Table 3
LAMBDA_PER_S = 1000.0
INPUT_FRAC = 0.8


def _cdf(name: str) -> LengthCdf:
    raw = json.loads((ROOT / "services" / "sim" / "data" / f"fleetopt-{name}_cdf.json").read_text())
    points = raw["cdf"] if isinstance(raw, dict) else raw
    return LengthCdf(tokens=tuple(int(t) for t, _ in points), frac=tuple(float(f) for _, f in points))


def _snapshot(regime: str, cdf: LengthCdf, p_c: float, k: int) -> FleetoptInputs:
    """Snapshot k of a regime: every field the regime varies moves a little, so no run repeats another."""
    lam = LAMBDA_PER_S * (1.0 + 1e-6 * k) if regime != "paper" else LAMBDA_PER_S
    if regime in {"cdf", "input"}:
        shrink = 1.0 - 1e-9 * (k + 1)
        cdf = LengthCdf(tokens=cdf.tokens, frac=(*(f * shrink for f in cdf.frac[:-1]), 1.0))
    input_frac = INPUT_FRAC + 1e-9 * (k + 1) if regime == "input" else INPUT_FRAC
    return FleetoptInputs(arrival_rate_per_s=lam, cdf=cdf, p_c=p_c, input_frac=input_frac)


def _percentiles(values: list[float]) -> dict[str, float]:
    return {
        "p50": float(np.percentile(values, 50)),
        "p99": float(np.percentile(values, 99)),
        "min": min(values),
        "max": max(values),
    }


def _baseline(args: argparse.Namespace) -> dict[str, Any]:
    """Run this benchmark on ``--baseline-root``'s planner in a child process and return its JSON."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "baseline.json"
        command = [
            sys.executable,
            str(Path(__file__).resolve()),
            f"--planner-root={args.baseline_root.resolve()}",
            f"--repeats={args.repeats}",
            f"--paper-repeats={args.paper_repeats}",
            f"--out={out}",
        ]
        print(f"baseline: {args.baseline_root}")
        subprocess.run(command, check=True)
        result: dict[str, Any] = json.loads(out.read_text())
    print(f"this checkout: {args.planner_root}")
    return result


def _print_ratios(rows: list[dict[str, Any]], baseline_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each row's wall and CPU p50 and p99 divided by the baseline's row of the same workload and regime."""
    before = {(r["workload"], r["regime"]): r for r in baseline_rows}
    print(f"{'workload':<12}{'regime':<7}{'wall p50 x':>11}{'wall p99 x':>11}{'cpu p50 x':>10}{'cpu p99 x':>10}")
    ratios = []
    for row in rows:
        old = before.get((row["workload"], row["regime"]))
        if old is None:
            continue
        ratio = {
            "workload": row["workload"],
            "regime": row["regime"],
            **{
                f"{kind}_{q}": row[f"{kind}_ms"][q] / old[f"{kind}_ms"][q]
                for kind in ("wall", "cpu")
                for q in ("p50", "p99")
            },
        }
        ratios.append(ratio)
        print(
            f"{row['workload']:<12}{row['regime']:<7}{ratio['wall_p50']:>11.3f}{ratio['wall_p99']:>11.3f}"
            f"{ratio['cpu_p50']:>10.3f}{ratio['cpu_p99']:>10.3f}"
        )
    return ratios


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "bench" / "bench_fleetopt.json")
    parser.add_argument("--repeats", type=int, default=200, help="timed full sweeps per workload and exact regime")
    parser.add_argument("--paper-repeats", type=int, default=2, help="timed full sweeps in paper mode (slow)")
    parser.add_argument(
        "--planner-root", type=Path, default=ROOT, help="checkout whose policies/ to time (give as --planner-root=DIR)"
    )
    parser.add_argument("--baseline-root", type=Path, help="checkout whose planner to time too, for the ratios")
    args = parser.parse_args()
    baseline = _baseline(args) if args.baseline_root else None
    load_before = os.getloadavg()
    print(
        f"load average before: {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f} on {os.cpu_count()} CPUs"
    )
    print(
        f"{'workload':<12}{'mode':<7}{'regime':<7}{'points':>7}{'wall p50':>10}{'wall p99':>10}"
        f"{'cpu p50':>9}{'cpu p99':>9}{'pts ms':>8}{'B*':>7}{'gamma*':>8}{'GPUs':>7}{'homo':>7}"
    )
    rows: list[dict[str, Any]] = []
    cases = [(PlannerMode.EXACT, regime, args.repeats) for regime in ("rate", "cdf", "input")]
    if args.paper_repeats > 0:
        cases.append((PlannerMode.PAPER, "paper", args.paper_repeats))
    for mode, regime, repeats in cases:
        params = FleetoptParams(mode=mode)
        for name, p_c in WORKLOADS.items():
            cdf = _cdf(name)
            plan = plan_fleet(_snapshot(regime, cdf, p_c, -1), params)  # warm-up: imports, the memoised table
            walls, cpus = [], []
            for k in range(repeats):
                inputs = _snapshot(regime, cdf, p_c, k)
                wall0, cpu0 = time.perf_counter(), time.thread_time()
                plan = plan_fleet(inputs, params)
                cpus.append((time.thread_time() - cpu0) * 1000.0)
                walls.append((time.perf_counter() - wall0) * 1000.0)
            start = time.perf_counter()
            n_points = len(tuple(plan.points))
            points_ms = (time.perf_counter() - start) * 1000.0
            wall, cpu = _percentiles(walls), _percentiles(cpus)
            row = {
                "workload": name,
                "mode": mode.value,
                "regime": regime,
                "points": n_points,
                "repeats": repeats,
                "wall_ms": wall,
                "cpu_ms": cpu,
                "points_ms": points_ms,
                "b_short_tokens": plan.best.short_ctx_tokens,
                "gamma": plan.best.split.gamma,
                "total_gpus": plan.best.total_gpus,
                "homogeneous_gpus": plan.homogeneous.total_gpus,
                "slo_met": plan.best.slo_met,
            }
            rows.append(row)
            print(
                f"{name:<12}{mode.value:<7}{regime:<7}{n_points:>7}{wall['p50']:>10.3f}{wall['p99']:>10.3f}"
                f"{cpu['p50']:>9.3f}{cpu['p99']:>9.3f}{points_ms:>8.2f}{row['b_short_tokens']:>7}"
                f"{row['gamma']:>8.1f}{row['total_gpus']:>7}{row['homogeneous_gpus']:>7}"
            )
    load_after = os.getloadavg()
    print(f"load average after: {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")
    ratios = _print_ratios(rows, baseline["rows"]) if baseline else None
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "benchmark": "fleetopt_planner_full_sweep",
                "command": "python ops/bench/bench_fleetopt.py " + " ".join(sys.argv[1:]),
                "planner_root": str(args.planner_root),
                "lambda_per_s": LAMBDA_PER_S,
                "machine": {
                    "cpus": os.cpu_count(),
                    "platform": platform.platform(),
                    "python": platform.python_version(),
                },
                "load_average_before": load_before,
                "load_average_after": load_after,
                "targets_ms": {"exact_p50": 1.0, "exact_p99": 3.0},
                "rows": rows,
                "baseline": baseline,
                "ratio_to_baseline": ratios,
            },
            indent=2,
        )
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
