"""``governor sim SCENARIO``: run a named simulator scenario offline and write its summary and plots.

The fleet runs on event time against an in-memory sink and a static policy source (no policies:
each engine's safe defaults), so a run takes seconds and is reproducible. ``--record`` also writes
the event stream as JSON lines, the fixture format of the replay tests; ``--list`` names the
scenarios of services/sim/scenarios.toml.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from services.replay.files import write_events
from services.sdk.protocol import ListSink, StaticPolicySource
from services.sim.metrics import RunSummary
from services.sim.plots import write_plots
from services.sim.runner import run_offline
from services.sim.scenario import list_scenarios, load_scenario


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``sim`` command."""
    sim = commands.add_parser("sim", help="run a named simulated fleet offline; write summary.json and plots")
    sim.add_argument("scenario", nargs="?", help="scenario name (see --list)")
    sim.add_argument("--list", action="store_true", help="list the scenarios and exit")
    sim.add_argument("--duration-s", type=float, default=None, help="simulated seconds (default: the scenario's)")
    sim.add_argument("--seed", type=int, default=None, help="random seed (default: the scenario's)")
    sim.add_argument("--rate", type=float, default=None, help="arrival rate of the first phase, requests/s")
    sim.add_argument("--out", type=Path, default=None, help="output folder (default out/sim/SCENARIO)")
    sim.add_argument("--record", action="store_true", help="also write the event stream to events.jsonl")
    sim.set_defaults(handler=run)


def _print_summary(summary: RunSummary) -> None:
    print(
        f"requests: {summary.arrived} arrived, {summary.finished} finished, {summary.rejected} rejected, "
        f"{summary.in_flight} in flight; {summary.preemptions} preemptions"
    )
    ttft = "-" if summary.ttft_p50_s is None else f"{summary.ttft_p50_s * 1e3:.1f} ms"
    print(
        f"throughput: {summary.throughput_req_per_s:.2f} req/s, {summary.throughput_tokens_per_s:.0f} tokens/s; "
        f"TTFT p50 {ttft}; KV use mean {summary.kv_use_mean_frac:.2f} max {summary.kv_use_max_frac:.2f}"
    )
    for tier in summary.tiers:
        tbt = "-" if tier.tbt_p99_s is None else f"{tier.tbt_p99_s * 1e3:.1f} ms"
        slo = "-" if tier.slo_attainment_frac is None else f"{tier.slo_attainment_frac:.1%}"
        print(f"tier {tier.tier}: {tier.finished} finished, TBT p99 {tbt}, SLO attainment {slo}")
    if summary.avg_imbalance_tokens is not None and summary.barrier_idle_frac is not None:
        print(
            f"DP: avg imbalance {summary.avg_imbalance_tokens:.0f} tokens, barrier idle {summary.barrier_idle_frac:.1%}"
        )


def run(args: argparse.Namespace) -> int:
    """List scenarios, or run one and write ``summary.json``, the plots and optionally ``events.jsonl``."""
    if args.list or args.scenario is None:
        for name, description in list_scenarios().items():
            print(f"{name}: {description}")
        return 0
    scenario = load_scenario(args.scenario, duration_s=args.duration_s, seed=args.seed, rate_per_s=args.rate)
    out: Path = args.out or Path("out") / "sim" / scenario.name
    sink = ListSink()
    summary = run_offline(scenario, sink=sink, policy_source=StaticPolicySource())
    out.mkdir(parents=True, exist_ok=True)
    summary_path = out / "summary.json"
    summary_path.write_text(json.dumps({"scenario": scenario.name, **summary.to_dict()}, indent=2) + "\n")
    print(
        f"scenario {scenario.name}: {scenario.duration_s:g} simulated s, "
        f"seed {scenario.seed}, {len(sink.events)} events"
    )
    _print_summary(summary)
    print(f"summary: {summary_path}")
    for path in write_plots(summary, out, title=f"{scenario.name}: {scenario.description}"):
        print(f"plot: {path}")
    if args.record:
        events_path = out / "events.jsonl"
        write_events(events_path, sink.events)
        print(f"events: {events_path}")
    return 0
