"""Simulator speed: simulated engine-seconds per wall-second, offline, for the 8-engine fleet scenario.

Target: >= 100x real time. Events go to an in-memory ``ListSink`` (every schema event is
built and validated, as in the offline loop mode). Prints the figures and writes JSON to ``--out``.

    PYTHONPATH=. .venv/bin/python ops/bench/bench_sim.py [--scenario fleet-8] [--duration-s 120]
        [--out out/bench/sim.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from services.sdk.protocol import ListSink, StaticPolicySource
from services.sim.runner import run_offline
from services.sim.scenario import load_scenario

TARGET_SPEEDUP = 100.0


def main() -> int:
    """Run the scenario once, time it, print and write the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="fleet-8")
    parser.add_argument("--duration-s", type=float, default=None, help="simulated seconds (default: the scenario's)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--out", type=Path, default=Path("out/bench/sim.json"))
    args = parser.parse_args()
    scenario = load_scenario(args.scenario, duration_s=args.duration_s, seed=args.seed)
    sink = ListSink()
    started = time.perf_counter()
    summary = run_offline(scenario, sink=sink, policy_source=StaticPolicySource())
    wall_s = time.perf_counter() - started
    engine_seconds = scenario.duration_s * len(scenario.engines)
    figures = {
        "scenario": scenario.name,
        "engines": len(scenario.engines),
        "simulated_s": scenario.duration_s,
        "wall_s": round(wall_s, 3),
        "engine_s_per_wall_s": round(engine_seconds / wall_s, 1),
        "fleet_speedup_x": round(scenario.duration_s / wall_s, 1),
        "events": len(sink.events),
        "events_per_wall_s": round(len(sink.events) / wall_s),
        "steps": summary.steps,
        "requests_finished": summary.finished,
        "target_engine_s_per_wall_s": TARGET_SPEEDUP,
        "meets_target": engine_seconds / wall_s >= TARGET_SPEEDUP,
    }
    for key, value in figures.items():
        print(f"{key}: {value}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=2) + "\n")
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
