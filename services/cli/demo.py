"""``governor demo``: the README's main command, a simulated fleet under live control.

It starts the local stack (broker and Redis), the stream processor and the policy service as child
processes (fleet-scope policies on 10 s slots instead of the default 60 s, so that FleetOpt replans
within a one-minute demo), waits until the stream processor consumes, then runs a simulated fleet in
live mode against them: engines publish their telemetry through the SDK publisher and obey the
policies they read through the SDK policy client. Every few simulated seconds it prints a line of
fleet load and latency, then one indented line per policy group: admission levels, each EB+
engine's mode, each SLAI engine's offset delta in effect beside its KV use and pushed rule, each
BF-IO engine's bundle with the DP rank imbalance, and the FleetOpt plan. At the end it prints the
documents stored and acknowledged per kind, and writes ``summary.json`` and the timeline plots.

With ``--compare`` (the default) it then runs the same scenario and seed offline without control
and on the papers' baselines (services/sim/compare.py), prints the table of deltas, adds the
comparison to ``summary.json`` and its plots, and ends with one line saying what governing bought.

Once the live run is over (or interrupted) the demo removes the Redis keys of its deployment and,
when it started the local stack itself, stops it; ``--keep`` keeps both for inspection
(``governor status``, ``governor explain``).
"""

from __future__ import annotations

import argparse
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from schemas.policy_docs import AdmissionPolicy, BfioPolicy, EbplusPolicy, FleetoptPolicy, SlaiPolicy
from schemas.policy_docs.base import PolicyDocument
from services.cli.live import clean_up_run, run_governed_live
from services.cli.options import add_settings_flags, settings_from_args
from services.policy.config import read_config
from services.policy.config_records import shadow_assignment
from services.sdk.policy_client import PolicyClient
from services.settings import Settings
from services.sim import ProgressSample, Scenario, load_scenario
from services.sim.compare import FLEET_SCOPE, Arm, Comparison, Control, compare_arms, fleet_gpus
from services.sim.plots import write_comparison_plots, write_plots
from services.sim.simulation import EngineSample
from services.stack.launcher import StackState, read_state, stack_status
from services.store.redis_store import RedisStore

PROGRESS_EVERY_S = 5.0
DEMO_FLEET_SLOT_S = 10.0  # FleetOpt replans per closed fleet slot: 60 s by default, too slow for a 1-minute demo


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``demo`` command."""
    demo = commands.add_parser("demo", help="run a simulated fleet under live control on the local stack")
    demo.add_argument("--scenario", default="demo", help="simulator scenario (default demo; see `governor sim --list`)")
    demo.add_argument("--duration-s", type=float, default=None, help="simulated seconds (default: the scenario's)")
    demo.add_argument("--speed", type=float, default=1.0, help="simulated seconds per wall second (default 1)")
    demo.add_argument("--out", type=Path, default=Path("out/demo"), help="output folder (default out/demo)")
    demo.add_argument(
        "--compare",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run the same workload and seed ungoverned and on the papers' baselines (offline), "
        "print the deltas and what governing bought (default on)",
    )
    demo.add_argument(
        "--config",
        type=Path,
        default=None,
        help="policy configuration (TOML, docs/operations.md) the stream processor and the policy service run with",
    )
    demo.add_argument(
        "--shadow",
        action="append",
        default=[],
        metavar="NAME=CONFIG",
        help="also decide CONFIG as shadow policy NAME, never written (compare: `governor shadow report`)",
    )
    demo.add_argument(
        "--keep",
        action="store_true",
        help="keep what the demo started (the local stack) and the Redis keys it wrote (default: remove them)",
    )
    add_settings_flags(demo, ["state_dir", "redis_url", "log_format", "seed", "stream_runtime"])
    demo.set_defaults(handler=run)


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyGroups:
    """Which engines obey which policy, from the scenario's schedulers and rank routers.

    Admission documents are decided for every engine; EB+, SLAI and BF-IO only reach the engines
    whose scheduler (or DP rank router) obeys them; FleetOpt plans the whole fleet (scope ``fleet``).
    """

    all_engines: tuple[str, ...]
    ebplus: tuple[str, ...]
    slai: tuple[str, ...]
    bfio: tuple[str, ...]

    @classmethod
    def of(cls, scenario: Scenario) -> PolicyGroups:
        """Group the scenario's engines by the policy they obey."""

        def having(scheduler: str) -> tuple[str, ...]:
            return tuple(spec.config.engine_id for spec in scenario.engines if spec.scheduler == scheduler)

        return cls(
            all_engines=tuple(spec.config.engine_id for spec in scenario.engines),
            ebplus=having("ebplus"),
            slai=having("slai"),
            bfio=having("bfio"),
        )

    def obeying(self) -> dict[str, tuple[str, ...]]:
        """Policy kind -> the engines that obey it and acknowledge what they apply."""
        return {"bfio": self.bfio, "ebplus": self.ebplus, "slai": self.slai}


def _version(document: PolicyDocument | None) -> str:
    return "-" if document is None else f"v{document.version}"


def _admission_line(client: PolicyClient, groups: PolicyGroups, now_s: float) -> str:
    shown = []
    for engine in groups.all_engines:
        document = client.current("admission", engine, now_s)
        level = document.payload.level if isinstance(document, AdmissionPolicy) else "-"
        shown.append(f"{engine} {level}")
    return "  admission  " + "  ".join(shown)


def _ebplus_line(client: PolicyClient, groups: PolicyGroups, now_s: float) -> str:
    shown = []
    for engine in groups.ebplus:
        document = client.current("ebplus", engine, now_s)
        told = f"{document.payload.mode} {_version(document)}" if isinstance(document, EbplusPolicy) else "MB default"
        shown.append(f"{engine} {told}")
    return "  EB+        " + "  ".join(shown)


def _slai_line(client: PolicyClient, groups: PolicyGroups, engines: dict[str, EngineSample], now_s: float) -> str:
    shown = []
    for engine in groups.slai:
        sample = engines.get(engine)
        delta = "-" if sample is None or sample.slai_delta is None else f"{sample.slai_delta:g}"
        kv = "-" if sample is None or sample.kv_use_frac is None else f"{sample.kv_use_frac:.0%}"
        document = client.current("slai", engine, now_s)
        if isinstance(document, SlaiPolicy):
            p = document.payload
            rule = (
                f"fixed {p.delta_fixed:g}"
                if p.mode == "fixed"
                else f"{p.delta_lo:g}|{p.delta_hi:g} at {p.kv_threshold_frac:.0%}"
            )
            if p.delta_override is not None:
                rule = f"override {p.delta_override:g}"
        else:
            rule = "safe default"
        shown.append(f"{engine} delta {delta} at kv {kv} (rule {rule} {_version(document)})")
    return "  SLAI       " + "  ".join(shown)


def _bfio_line(client: PolicyClient, groups: PolicyGroups, sample: ProgressSample, now_s: float) -> str:
    shown = []
    for engine in groups.bfio:
        document = client.current("bfio", engine, now_s)
        told = (
            f"bundle {_version(document)} H {document.payload.horizon_steps}"
            if isinstance(document, BfioPolicy)
            else "no bundle (JSQ fallback)"
        )
        shown.append(f"{engine} {told}")
    imbalance = "-" if sample.dp_imbalance_tokens is None else f"{sample.dp_imbalance_tokens:,.0f} tok"
    idle = "-" if sample.dp_barrier_idle_frac is None else f"{sample.dp_barrier_idle_frac:.0%}"
    return "  BF-IO      " + "  ".join(shown) + f"  imbalance {imbalance}  barrier idle {idle}"


def _fleetopt_plan(document: PolicyDocument | None) -> str:
    if not isinstance(document, FleetoptPolicy):
        return "no plan yet"
    p = document.payload
    return (
        f"short {p.fleet.short.n_gpus} GPU  long {p.fleet.long.n_gpus} GPU  "
        f"B_short {p.routing.b_short_tokens}  gamma {p.routing.gamma:g}"
    )


def _progress_printer(client: PolicyClient, groups: PolicyGroups) -> Callable[[ProgressSample], None]:
    """One summary line every ``PROGRESS_EVERY_S`` simulated seconds, then one line per policy group.

    Each group line says what its engines are told now (the document in Redis, read through the
    SDK policy client) and, where the policy acts inside the engine, what the engine does with it.
    """
    last = {"printed_s": -PROGRESS_EVERY_S, "arrived": 0.0, "finished": 0.0}
    plans = {"shown": ""}

    def show(sample: ProgressSample) -> None:
        span_s = sample.now_s - last["printed_s"]
        if span_s < PROGRESS_EVERY_S:
            return
        span_s = min(span_s, sample.now_s) or 1.0
        arrived_per_s = (sample.arrived - last["arrived"]) / span_s
        finished_per_s = (sample.finished - last["finished"]) / span_s
        last.update(printed_s=sample.now_s, arrived=sample.arrived, finished=sample.finished)
        ttft = "-" if sample.ttft_p50_s is None else f"{sample.ttft_p50_s * 1000:.0f} ms"
        now_s = sample.now_s
        lines = [
            f"t={now_s:4.0f}s  in {arrived_per_s:5.1f}/s  done {finished_per_s:5.1f}/s  "
            f"in flight {sample.running_plus_waiting:4d}  ttft p50 {ttft}  kv {sample.kv_use_frac:.0%}",
            _admission_line(client, groups, now_s),
        ]
        engines = {e.engine_id: e for e in sample.engines}
        if groups.ebplus:
            lines.append(_ebplus_line(client, groups, now_s))
        if groups.slai:
            lines.append(_slai_line(client, groups, engines, now_s))
        if groups.bfio:
            lines.append(_bfio_line(client, groups, sample, now_s))
        fleetopt = client.current("fleetopt", FLEET_SCOPE, now_s)
        plan = _fleetopt_plan(fleetopt)
        changed = "  (changed)" if isinstance(fleetopt, FleetoptPolicy) and plans["shown"] not in ("", plan) else ""
        if isinstance(fleetopt, FleetoptPolicy):
            plans["shown"] = plan
        lines.append(f"  FleetOpt   {plan}  {_version(fleetopt)}{changed}")
        print("\n".join(lines), flush=True)

    return show


def _documents_and_acks(
    state: StackState, deployment: str, groups: PolicyGroups, settings: Settings
) -> tuple[dict[str, int], dict[str, int]]:
    """Count stored documents per kind (over the engines each policy is for) and acks per obeyed kind."""
    store = RedisStore.from_url(state.redis_url, deployment, settings.redis_timeout_s, settings.redis_security())
    try:
        scopes = {"admission": groups.all_engines, **groups.obeying(), "fleetopt": (FLEET_SCOPE,)}
        documents = {
            kind: sum(1 for scope in scopes[kind] if store.get_policy(kind, scope) is not None)
            for kind in sorted(scopes)
        }
        acks = {
            kind: sum(1 for engine in engines if store.get_ack(kind, engine) is not None)
            for kind, engines in sorted(groups.obeying().items())
        }
    finally:
        store.close()
    return documents, acks


def _clean_up(settings: Settings, deployment: str, *, stop_stack: bool) -> str:
    """Remove the demo deployment's Redis keys, and stop the stack when the demo started it; say what was done.

    Its records stay on the topics of a stack that was already running (a log is not edited); a
    stack the demo started keeps its topics in memory, so stopping it removes them too.
    """
    state = read_state(settings.state_dir)
    if state is None:
        return "cleanup: no stack recorded; nothing to remove"
    return clean_up_run(settings, state.redis_url, deployment, stop_stack=stop_stack, starter="the demo")


def run(args: argparse.Namespace) -> int:
    """Run the demo; exit 0 when every event reached the services and they consumed it all.

    Unless ``--keep`` is given, it removes the Redis keys it wrote and stops the stack if it started
    it, also when interrupted.
    """
    settings = settings_from_args(args)
    if args.config is not None:
        read_config(args.config)
    for shadow in args.shadow:
        read_config(shadow_assignment(shadow)[1])
    status = stack_status(settings.state_dir, redis_security=settings.redis_security())
    stop_stack = not (status.kafka_ok and status.redis_ok)
    scenario = load_scenario(args.scenario, duration_s=args.duration_s, seed=settings.seed)
    run_id = uuid.uuid4().hex[:8]
    deployment = f"demo-{run_id}"
    governed = replace(scenario, deployment=deployment)
    groups = PolicyGroups.of(governed)
    out_dir: Path = args.out / run_id
    out_dir.mkdir(parents=True, exist_ok=True)

    try:
        live = run_governed_live(
            governed,
            settings=settings,
            out_dir=out_dir,
            speed=args.speed,
            fleet_slot_s=DEMO_FLEET_SLOT_S,
            say=print,
            progress=lambda client: _progress_printer(client, groups),
            config=args.config,
            shadows=tuple(args.shadow),
        )
        documents, acks = _documents_and_acks(live.state, deployment, groups, settings)
    finally:
        if args.keep:
            print(f"kept: the stack and the Redis keys of {deployment} (--keep)")
        else:
            print(_clean_up(settings, deployment, stop_stack=stop_stack))
    summary_body: dict[str, object] = dict(live.summary.to_dict())
    plots = write_plots(
        live.summary, out_dir, title=f"governor demo {run_id} (governed live)", policy_changes=live.policy_changes
    )
    if not live.caught_up:
        print(f"warning: the services had not consumed everything when they were stopped: {live.backlog}")
    print(
        f"done in {live.elapsed_s:.0f} s: {live.delivered} events delivered, {live.dropped} dropped; "
        f"services exited {live.service_codes}"
    )
    print(f"documents per kind {documents}; acks per kind {acks}")
    comparison = None
    if args.compare:
        governed_arm = Arm(
            name="governed",
            control=Control.LIVE,
            summary=live.summary,
            policy_changes=live.policy_changes,
            fleet_gpus=fleet_gpus(scenario),
            planned_gpus=live.planned_gpus,
        )
        comparison = Comparison.of(scenario, compare_arms(scenario, main=governed_arm, fleet_slot_s=DEMO_FLEET_SLOT_S))
        summary_body["comparison"] = comparison.to_dict()
        plots.extend(write_comparison_plots(comparison, out_dir))
    summary_path = out_dir / "summary.json"
    summary_path.write_text(json.dumps(summary_body, indent=2, sort_keys=True) + "\n")
    print(f"summary: {summary_path}")
    for path in plots:
        print(f"plot:    {path}")
    if comparison is not None:
        print(comparison.table())
        print(comparison.verdict())
    return 0 if live.dropped == 0 and live.caught_up else 1
