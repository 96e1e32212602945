"""``governor sim SCENARIO``: run a named simulator scenario, governed or not, and write its summary and plots.

``--control`` says who governs the fleet, and the output says which it was:

- ``offline`` (the default): the in-process control plane (``OfflineControlPlane``: the services'
  fold and decide code on event time) receives every event and serves the policies the engines
  obey; a run takes seconds and is reproducible;
- ``none``: no control plane; every engine runs its documented safe default;
- ``live``: the local stack and the two services, the fleet paced in wall time (``--speed``).

``--compare`` also runs the same workload and seed ungoverned and on the papers' baselines
(services/sim/compare.py) and prints the deltas and what governing bought. ``--record`` writes the
main run's event stream as JSON lines, the fixture format of the replay tests; ``--list`` names the
scenarios of services/sim/scenarios.toml.
"""

from __future__ import annotations

import argparse
import json
import uuid
from dataclasses import replace
from pathlib import Path

from schemas.errors import InvalidInputError
from services.cli.live import run_governed_live
from services.cli.options import add_settings_flags, settings_from_args
from services.replay.files import write_events
from services.sdk.protocol import ListSink
from services.sim.compare import (
    CONTROL_WORDS,
    Arm,
    Comparison,
    Control,
    compare_arms,
    fleet_gpus,
    run_offline_arm,
)
from services.sim.plots import write_comparison_plots, write_plots
from services.sim.run_summary import RunSummary
from services.sim.scenario import list_scenarios, load_scenario


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``sim`` command."""
    sim = commands.add_parser(
        "sim", help="run a named simulated fleet, governed (default) or not; write summary.json and plots"
    )
    sim.add_argument("scenario", nargs="?", help="scenario name (see --list)")
    sim.add_argument("--list", action="store_true", help="list the scenarios and exit")
    sim.add_argument(
        "--control",
        choices=[c.value for c in Control],
        default=Control.OFFLINE.value,
        help="offline: the in-process control plane on event time (default); none: no control plane, "
        "engines on their safe defaults; live: the local stack and services, paced in wall time",
    )
    sim.add_argument(
        "--compare",
        action="store_true",
        help="also run the same workload and seed ungoverned and on the papers' baselines; print the deltas",
    )
    sim.add_argument("--duration-s", type=float, default=None, help="simulated seconds (default: the scenario's)")
    sim.add_argument("--rate", type=float, default=None, help="arrival rate of the first phase, requests/s")
    sim.add_argument("--speed", type=float, default=1.0, help="live control: simulated seconds per wall second")
    sim.add_argument("--out", type=Path, default=None, help="output folder (default out/sim/SCENARIO)")
    sim.add_argument("--record", action="store_true", help="also write the event stream to events.jsonl")
    add_settings_flags(sim, ["seed", "fleet_slot_s", "state_dir", "redis_url", "log_format"])
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
    settings = settings_from_args(args)
    control = Control(args.control)
    scenario = load_scenario(args.scenario, duration_s=args.duration_s, seed=settings.seed, rate_per_s=args.rate)
    out: Path = args.out or Path("out") / "sim" / scenario.name
    out.mkdir(parents=True, exist_ok=True)
    print(f"scenario {scenario.name}: {scenario.duration_s:g} simulated s, seed {scenario.seed}")
    print(f"control: {control.value} ({CONTROL_WORDS[control]})")
    if control is Control.LIVE and args.record:
        msg = "--record writes the events of an event-time run: use it with --control offline or none"
        raise InvalidInputError(msg, field="record", value=True)
    recorded = ListSink() if args.record else None
    if control is Control.LIVE:
        live_scenario = replace(scenario, deployment=f"sim-{uuid.uuid4().hex[:8]}")
        live = run_governed_live(
            live_scenario,
            settings=settings,
            out_dir=out,
            speed=args.speed,
            fleet_slot_s=settings.fleet_slot_s,
            say=print,
        )
        if live.dropped or not live.caught_up:
            print(f"warning: {live.dropped} events dropped; services caught up: {live.caught_up} ({live.backlog})")
        main = Arm(
            name="governed",
            control=control,
            summary=live.summary,
            policy_changes=live.policy_changes,
            fleet_gpus=fleet_gpus(scenario),
            planned_gpus=live.planned_gpus,
        )
    else:
        main = run_offline_arm(
            scenario,
            name="governed" if control is Control.OFFLINE else "ungoverned",
            control=control,
            record=recorded,
            fleet_slot_s=settings.fleet_slot_s,
        )
    _print_summary(main.summary)
    if main.planned_gpus is not None:
        print(f"FleetOpt: the last plan provisions {main.planned_gpus} GPUs; the fleet has {main.fleet_gpus}")
    body: dict[str, object] = {"scenario": scenario.name, "control": control.value, **main.summary.to_dict()}
    plots = write_plots(
        main.summary,
        out,
        title=f"{scenario.name} ({control.value}): {scenario.description}",
        policy_changes=main.policy_changes,
    )
    comparison = None
    if args.compare:
        comparison = Comparison.of(scenario, compare_arms(scenario, main=main, fleet_slot_s=settings.fleet_slot_s))
        body["comparison"] = comparison.to_dict()
        plots.extend(write_comparison_plots(comparison, out))
    summary_path = out / "summary.json"
    summary_path.write_text(json.dumps(body, indent=2) + "\n")
    print(f"summary: {summary_path}")
    for path in plots:
        print(f"plot: {path}")
    if recorded is not None:
        events_path = out / "events.jsonl"
        write_events(events_path, recorded.events)
        print(f"events: {events_path} ({len(recorded.events)} events)")
    if comparison is not None:
        print(comparison.table())
        print(comparison.verdict())
    return 0
