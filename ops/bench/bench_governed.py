"""What governing buys, over several seeds: a scenario's baseline, ungoverned and governed arms side by side.

Each seed runs the three arms of services/sim/compare.py on the same workload (the papers' baselines,
the scenario's engines without control, and the same engines under the in-process control plane) and
every row of the comparison is reported as mean and sample standard deviation over the seeds, with
the governed arm's paired difference to the ungoverned one (mean and standard deviation of the
per-seed differences: the seeds share nothing but the scenario, the arms of one seed share the
workload). A tier is flagged when its paired SLO-attainment difference is below zero by more than two
standard errors. Prints a Markdown table (docs/results.md) and writes JSON.

    PYTHONPATH=. .venv/bin/python ops/bench/bench_governed.py --scenario demo --seeds 1 2 3 4 5 \\
        --fleet-slot-s 10 --out out/bench/bench_governed.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

from services.sim.compare import Comparison, Control, compare_arms, run_offline_arm
from services.sim.scenario import load_scenario


def _mean_sd(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def _cell(values: list[float], unit: str) -> str:
    if not values:
        return "-"
    mean, sd = _mean_sd(values)
    if unit == "frac":
        return f"{mean:.1%} ± {sd * 100:.1f}"
    if unit == "s":
        return f"{mean * 1e3:.0f} ± {sd * 1e3:.0f} ms" if mean < 1.0 else f"{mean:.2f} ± {sd:.2f} s"
    return f"{mean:,.1f} ± {sd:,.1f}"


def _diff_cell(diffs: list[float], unit: str) -> str:
    if not diffs:
        return "-"
    mean, sd = _mean_sd(diffs)
    if unit == "frac":
        return f"{mean * 100:+.1f} ± {sd * 100:.1f} pp"
    if unit == "s":
        return f"{mean * 1e3:+.0f} ± {sd * 1e3:.0f} ms"
    return f"{mean:+,.1f} ± {sd:,.1f}"


def main() -> None:
    """Run every seed, print the Markdown table and write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", default="demo", help="scenario name (default demo)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5], help="seeds (default 1..5)")
    parser.add_argument("--duration-s", type=float, default=None, help="simulated seconds (default: the scenario's)")
    parser.add_argument("--fleet-slot-s", type=float, default=10.0, help="FleetOpt slot, seconds (default 10)")
    parser.add_argument("--out", type=Path, default=Path("out/bench/bench_governed.json"), help="JSON output")
    args = parser.parse_args()
    started = time.perf_counter()
    comparisons: list[Comparison] = []
    for seed in args.seeds:
        scenario = load_scenario(args.scenario, duration_s=args.duration_s, seed=seed)
        governed = run_offline_arm(scenario, name="governed", control=Control.OFFLINE, fleet_slot_s=args.fleet_slot_s)
        comparison = Comparison.of(scenario, compare_arms(scenario, main=governed, fleet_slot_s=args.fleet_slot_s))
        comparisons.append(comparison)
        print(comparison.verdict(), flush=True)
    arms = [arm.name for arm in comparisons[0].arms]
    governed_index, ungoverned_index = arms.index("governed"), arms.index("ungoverned")
    rows: list[dict[str, object]] = []
    flagged = []
    lines = []
    for r, row in enumerate(comparisons[0].rows):
        per_arm = {
            name: [v for c in comparisons if (v := c.rows[r].values[i]) is not None and math.isfinite(v)]
            for i, name in enumerate(arms)
        }
        diffs = [
            g - u
            for c in comparisons
            if (g := c.rows[r].values[governed_index]) is not None
            and (u := c.rows[r].values[ungoverned_index]) is not None
        ]
        rows.append({"metric": row.metric, "unit": row.unit, "better": row.better, "values": per_arm, "diffs": diffs})
        cells = " | ".join(_cell(per_arm[name], row.unit) for name in arms)
        lines.append(f"| {row.metric} | {cells} | {_diff_cell(diffs, row.unit)} |")
        if row.metric.startswith("SLO attainment ") and len(diffs) > 1:
            mean, sd = _mean_sd(diffs)
            if mean < 0.0 and -mean > 2.0 * sd / math.sqrt(len(diffs)):
                flagged.append(row.metric.removeprefix("SLO attainment "))
    print()
    print(f"| metric | {' | '.join(arms)} | governed - ungoverned (paired) |")
    print(f"|---|{'---|' * len(arms)}---|")
    print("\n".join(lines))
    print()
    print(f"tiers worse off under control beyond two standard errors: {', '.join(flagged) if flagged else 'none'}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "scenario": args.scenario,
                "seeds": args.seeds,
                "duration_s": args.duration_s,
                "fleet_slot_s": args.fleet_slot_s,
                "arms": arms,
                "rows": rows,
                "worse_tiers": flagged,
                "verdicts": [c.verdict() for c in comparisons],
                "wall_s": time.perf_counter() - started,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"json: {args.out}")


if __name__ == "__main__":
    main()
