"""Where the paid tier misses, per engine and seed: ungoverned, governed without and with EB+'s MB step budget.

The evidence behind docs/results.md ("The paid-tier shortfall after the EB guard"): each seed runs one
scenario's workload three times, with no control plane (``ungoverned``), under the in-process control
plane with EB+'s TBT guard on EB only (``governed-before``: ``EbplusParams(mb_step_budget=False)``) and
under the default control plane (``governed-after``: the guard also bounds MB steps). For each arm it
reports the tier's SLO attainment, and per engine its finished requests of the tier, how many met the
SLO (the summary's per-request rule), its steps longer than the tier's TBT SLO, its longest step, and
the EB+ documents it obeyed (mode and MB budget). Prints a table per seed and the per-arm aggregates,
writes JSON.

    PYTHONPATH=. .venv/bin/python ops/bench/bench_paid_tier.py --scenario demo --seeds 1 2 3 4 5 \\
        --out out/bench/bench_paid_tier.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from decide.specs import default_registry
from policies.ebplus import EbplusParams
from schemas.events import Event
from schemas.policy_docs import EbplusPolicy
from schemas.policy_docs.base import PolicyDocument
from services.replay.offline import OfflineControlPlane
from services.sdk.protocol import PolicySource, StaticPolicySource, TelemetrySink
from services.sim.runner import build_simulation
from services.sim.scenario import Scenario, load_scenario

ARMS = ("ungoverned", "governed-before", "governed-after")


@dataclass(slots=True)
class _Source:
    """A policy source in front of another that keeps the EB+ documents engines read (mode, MB budget)."""

    inner: PolicySource
    ebplus: set[tuple[str, int, str, int | None]] = field(default_factory=set)

    def current(self, kind: str, scope: str, now_s: float) -> PolicyDocument | None:
        document = self.inner.current(kind, scope, now_s)
        if isinstance(document, EbplusPolicy):
            payload = document.payload
            self.ebplus.add((scope, document.version, payload.mode, payload.mb_token_budget_tokens))
        return document


class _Discard:
    def publish(self, event: Event) -> None:
        del event


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineFigures:
    """One engine in one arm: the tier's requests it finished and met, and its long steps."""

    finished: int
    met: int
    steps_over_slo: int
    longest_step_s: float
    ebplus_documents: list[str]


@dataclass(frozen=True, slots=True, kw_only=True)
class ArmResult:
    """One arm of one seed: the tier's attainment over the fleet and the per-engine figures."""

    attainment: float | None
    finished_all_tiers: int
    engines: dict[str, EngineFigures]

    @property
    def misses(self) -> int:
        """Requests of the tier that missed its SLO, over every engine."""
        return sum(e.finished - e.met for e in self.engines.values())


def run_arm(scenario: Scenario, arm: str, *, tier: str, fleet_slot_s: float) -> ArmResult:
    """Run one arm of ``scenario`` and return its tier attainment and per-engine figures."""
    sink: TelemetrySink = _Discard()
    inner: PolicySource = StaticPolicySource()
    if arm != "ungoverned":
        params = EbplusParams(mb_step_budget=arm == "governed-after")
        plane = OfflineControlPlane(scenario.deployment, default_registry(params, fleet_slot_s=fleet_slot_s))
        sink, inner = plane, plane
    source = _Source(inner)
    simulation, metrics = build_simulation(scenario, sink=sink, policy_source=source)
    simulation.run(scenario.duration_s)
    summary = metrics.summarize(scenario.duration_s)
    tier_summary = next((t for t in summary.tiers if t.tier == tier), None)
    slo_s = None if tier_summary is None else tier_summary.tbt_slo_s
    engines = {}
    for engine_id, (finished, met) in sorted(metrics.slo_met_by_engine(tier).items()):
        steps = [s[2] for s in metrics.step_samples if s[0] == engine_id]
        documents = sorted({(mode, budget) for scope, _, mode, budget in source.ebplus if scope == engine_id})
        engines[engine_id] = EngineFigures(
            finished=finished,
            met=met,
            steps_over_slo=sum(1 for d in steps if slo_s is not None and d > slo_s),
            longest_step_s=max(steps, default=0.0),
            ebplus_documents=[f"{mode} budget={budget}" for mode, budget in documents],
        )
    return ArmResult(
        attainment=None if tier_summary is None else tier_summary.slo_attainment_frac,
        finished_all_tiers=summary.finished,
        engines=engines,
    )


def _mean_sd(values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):.1f} ± {sd:.1f}"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.2%}"


def main() -> None:
    """Run every seed and arm, print the per-engine tables and the aggregates, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", default="demo", help="scenario name (default demo)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5], help="seeds (default 1..5)")
    parser.add_argument("--tier", default="paid", help="the tier to follow (default paid)")
    parser.add_argument("--fleet-slot-s", type=float, default=10.0, help="FleetOpt slot, seconds (default 10)")
    parser.add_argument("--out", type=Path, default=Path("out/bench/bench_paid_tier.json"), help="JSON output")
    args = parser.parse_args()
    started = time.perf_counter()
    results: dict[int, dict[str, ArmResult]] = {}
    for seed in args.seeds:
        scenario = load_scenario(args.scenario, seed=seed)
        results[seed] = {arm: run_arm(scenario, arm, tier=args.tier, fleet_slot_s=args.fleet_slot_s) for arm in ARMS}
        for arm, result in results[seed].items():
            print(f"seed {seed} {arm}: {args.tier} attainment {_percent(result.attainment)}", flush=True)
            for engine_id, e in result.engines.items():
                print(
                    f"  {engine_id:10s} {e.met:4d}/{e.finished:<4d} met, {e.steps_over_slo:4d} steps over the SLO, "
                    f"longest {e.longest_step_s * 1e3:5.0f} ms, EB+ {', '.join(e.ebplus_documents) or '-'}"
                )
    print()
    for arm in ARMS:
        runs = [results[s][arm] for s in args.seeds]
        missing = sorted({k for run in runs for k, e in run.engines.items() if e.finished > e.met})
        print(
            f"{arm}: {args.tier} attainment {_mean_sd([(r.attainment or 0.0) * 100 for r in runs])} %, "
            f"misses per seed {_mean_sd([float(r.misses) for r in runs])}, on engines {', '.join(missing) or 'none'}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "scenario": args.scenario,
        "seeds": args.seeds,
        "tier": args.tier,
        "results": {seed: {arm: asdict(r) for arm, r in arms.items()} for seed, arms in results.items()},
        "wall_s": time.perf_counter() - started,
    }
    args.out.write_text(json.dumps(document, indent=2) + "\n")
    print(f"json: {args.out}")


if __name__ == "__main__":
    main()
