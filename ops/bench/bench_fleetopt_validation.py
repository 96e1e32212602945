"""Benchmark: FleetOpt predicted vs simulated utilisation per pool (seed 002 Table 5), slot-level M/G/c.

For Azure (B = 4096), LMSYS (B = 1536) and Agent-heavy (B = 8192, p_c = 0.75) at lambda = 1000,
plans the PR fleet (gamma = 1, Table 5's fleet) and the planner's gamma* in paper mode, and
gamma* in exact mode, then simulates each non-empty pool with ``services/sim/slot_pool.py``
(``--requests`` per pool, seeded) and prints predicted utilisation (rho_ana), simulated
utilisation, the error (rho_ana - rho_sim) / rho_sim, simulated P99 wait and P99 TTFT beside the
paper's Table 5 (spec seed-002 section 4.5). Writes JSON to ``--out``.

Usage: python ops/bench/bench_fleetopt_validation.py [--requests 40000] [--seed 42] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from policies.fleetopt import (  # noqa: E402
    FleetoptInputs,
    FleetoptParams,
    LengthCdf,
    PlannerMode,
    cheapest,
    plan_fleet,
)
from services.sim.slot_pool import pool_requests, simulate_slot_pool  # noqa: E402

WORKLOADS = {"azure": (4096, 1.0), "lmsys": (1536, 1.0), "agent_heavy": (8192, 0.75)}  # seed 002 Tables 2-3
# Seed 002 Table 5 (PR fleet, gamma = 1): n, rho_ana, rho_hat (DES), error.
TABLE5 = {
    ("azure", "short"): (43, 0.848, 0.865, -0.021),
    ("azure", "long"): (131, 0.845, 0.847, -0.001),
    ("lmsys", "short"): (7, 0.771, 0.792, -0.027),
    ("lmsys", "long"): (74, 0.845, 0.853, -0.010),
    ("agent_heavy", "short"): (229, 0.848, 0.868, -0.022),
    ("agent_heavy", "long"): (2037, 0.850, 0.850, -0.001),
}


def _cdf(name: str) -> LengthCdf:
    raw = json.loads((ROOT / "services" / "sim" / "data" / f"fleetopt-{name}_cdf.json").read_text())
    points = raw["cdf"] if isinstance(raw, dict) else raw
    return LengthCdf(tokens=tuple(int(t) for t, _ in points), frac=tuple(float(f) for _, f in points))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "bench" / "bench_fleetopt_validation.json")
    parser.add_argument("--requests", type=int, default=40_000, help="simulated requests per pool")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    rows = []
    print(
        f"{'workload':<12}{'fleet':<30}{'pool':<6}{'n':>6}{'rho_ana':>9}{'rho_sim':>9}{'error':>8}"
        f"{'W99 ms':>9}{'TTFT99 ms':>11}{'pred ms':>9}   paper: {'n':>5}{'rho_ana':>8}{'rho_hat':>8}{'error':>7}"
    )
    for name, (b_tokens, p_c) in WORKLOADS.items():
        inputs = FleetoptInputs(arrival_rate_per_s=1000.0, cdf=_cdf(name), p_c=p_c)
        for mode in (PlannerMode.PAPER, PlannerMode.EXACT):
            params = FleetoptParams(mode=mode, b_short_candidates_tokens=(b_tokens,))
            plan = plan_fleet(inputs, params)
            # The cheapest two-pool point at Table 3's B (exact mode may prefer the homogeneous fleet).
            two_pool = cheapest(plan.points)
            fleets = [("PR gamma=1.0", plan.points[0])] if mode is PlannerMode.PAPER else []
            flag = "" if two_pool.slo_met else " (SLO miss)"
            fleets.append((f"gamma*={two_pool.split.gamma:.1f}{flag}", two_pool))
            for label, point in fleets:
                for pool_name, sizing, slots in (
                    ("short", point.short, point.short_slots),
                    ("long", point.long, point.long_slots),
                ):
                    if sizing.n_gpus == 0:
                        continue
                    rng = np.random.default_rng(args.seed)
                    requests = pool_requests(
                        inputs,
                        params,
                        b_short_tokens=b_tokens,
                        gamma_b_tokens=point.split.gamma_b_tokens,
                        long_pool=pool_name == "long",
                        size=args.requests,
                        rng=rng,
                    )
                    sim = simulate_slot_pool(
                        arrival_rate_per_s=sizing.arrival_rate_per_s,
                        c_slots=sizing.n_gpus * slots,
                        requests=requests,
                        rng=rng,
                    )
                    error = (sizing.util_frac - sim.util_frac) / sim.util_frac
                    paper = TABLE5.get((name, pool_name)) if label.startswith("PR") else None
                    row = {
                        "workload": name,
                        "mode": mode.value,
                        "fleet": label,
                        "slo_met_pred": point.slo_met,
                        "pool": pool_name,
                        "n_gpus": sizing.n_gpus,
                        "c_slots": sizing.n_gpus * slots,
                        "arrival_rate_per_s": sizing.arrival_rate_per_s,
                        "util_pred_frac": sizing.util_frac,
                        "util_sim_frac": sim.util_frac,
                        "util_error_frac": error,
                        "sim_wait_prob_frac": sim.wait_prob_frac,
                        "sim_p99_wait_s": sim.p99_wait_s,
                        "sim_p99_ttft_s": sim.p99_ttft_s,
                        "pred_p99_ttft_s": sizing.p99_ttft_s,
                        "paper_table5": None
                        if paper is None
                        else {"n": paper[0], "rho_ana": paper[1], "rho_hat": paper[2], "error": paper[3]},
                    }
                    rows.append(row)
                    paper_cols = (
                        "" if paper is None else f"{paper[0]:>5}{paper[1]:>8.3f}{paper[2]:>8.3f}{paper[3]:>+7.1%}"
                    )
                    print(
                        f"{name:<12}{mode.value + ' ' + label:<30}{pool_name:<6}{sizing.n_gpus:>6}"
                        f"{sizing.util_frac:>9.3f}{sim.util_frac:>9.3f}{error:>+8.1%}{sim.p99_wait_s * 1e3:>9.1f}"
                        f"{sim.p99_ttft_s * 1e3:>11.1f}{sizing.p99_ttft_s * 1e3:>9.1f}   {paper_cols}"
                    )
    worst = max(abs(r["util_error_frac"]) for r in rows)  # type: ignore[arg-type]
    print(f"worst |error| {worst:.1%} over {len(rows)} pools ({args.requests} requests each, seed {args.seed})")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "benchmark": "fleetopt_validation_slot_des",
                "lambda_per_s": 1000.0,
                "requests_per_pool": args.requests,
                "seed": args.seed,
                "rows": rows,
            },
            indent=2,
        )
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
