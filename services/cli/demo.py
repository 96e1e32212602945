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
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from kafka import KafkaConsumer, TopicPartition

from schemas.names import ESTIMATES_TOPIC, TELEMETRY_TOPIC
from schemas.policy_docs import AdmissionPolicy, BfioPolicy, EbplusPolicy, FleetoptPolicy, SlaiPolicy
from schemas.policy_docs.base import PolicyDocument
from services.cli.options import add_settings_flags, settings_from_args
from services.sdk.policy_client import PolicyClient
from services.sdk.publisher import TelemetryPublisher
from services.settings import child_environment
from services.sim import ProgressSample, Scenario, load_scenario, run_live, write_plots
from services.sim.simulation import EngineSample
from services.stack.launcher import StackState, stack_up
from services.store.redis_store import RedisStore

PROGRESS_EVERY_S = 5.0
DEMO_FLEET_SLOT_S = 10.0  # FleetOpt replans per closed fleet slot: 60 s by default, too slow for a 1-minute demo
SERVICES_READY_TIMEOUT_S = 60.0
VLLM_ENGINE_ID = "vllm-0"
FLEET_SCOPE = "fleet"


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``demo`` command."""
    demo = commands.add_parser("demo", help="run a simulated fleet under live control on the local stack")
    demo.add_argument("--scenario", default="demo", help="simulator scenario (default demo; see `governor sim --list`)")
    demo.add_argument("--duration-s", type=float, default=None, help="simulated seconds (default: the scenario's)")
    demo.add_argument("--speed", type=float, default=1.0, help="simulated seconds per wall second (default 1)")
    demo.add_argument("--out", type=Path, default=Path("out/demo"), help="output folder (default out/demo)")
    demo.add_argument(
        "--engine",
        choices=["sim", "vllm"],
        default="sim",
        help="vllm: also run one real vLLM engine (the EB+ scheduler, a tiny random model) under live control; "
        "needs `bash ops/install.sh --vllm` (docs/engines/vllm.md)",
    )
    add_settings_flags(demo, ["state_dir", "redis_url", "log_format", "seed"])
    demo.set_defaults(handler=run)


def _start_service(service: str, state: StackState, deployment: str, log_path: Path) -> subprocess.Popen[bytes]:
    argv = [
        sys.executable,
        "-m",
        "services.cli",
        "run",
        service,
        "--deployment",
        deployment,
        "--kafka-bootstrap",
        state.kafka_bootstrap,
        "--redis-url",
        state.redis_url,
        "--metrics-port",
        "0",
        "--fleet-slot-s",
        f"{DEMO_FLEET_SLOT_S:g}",
    ]
    with log_path.open("ab") as log:
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)


def _start_vllm(state: StackState, deployment: str, seconds: float, seed: int) -> subprocess.Popen[bytes]:
    """One real vLLM engine under Governor (services/engines/vllm/drive.py), printing its own progress lines."""
    environment = child_environment(
        {
            "GOVERNOR_ENGINE_ID": VLLM_ENGINE_ID,
            "GOVERNOR_DEPLOYMENT": deployment,
            "GOVERNOR_KAFKA_BOOTSTRAP": state.kafka_bootstrap,
            "REDIS_URL": state.redis_url,
        }
    )
    argv = [sys.executable, "-m", "services.engines.vllm.drive", "--seconds", f"{seconds:g}", "--seed", str(seed)]
    return subprocess.Popen(argv, env=environment)


def _stop(process: subprocess.Popen[bytes]) -> int:
    process.terminate()
    try:
        return process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait(timeout=10)


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


def _wait_for_services(state: StackState, deployment: str, timeout_s: float) -> bool:
    """Wait until the stream processor and the policy service have consumed everything produced so far."""
    store = RedisStore.from_url(state.redis_url, deployment, 2.0)
    consumer = KafkaConsumer(bootstrap_servers=state.kafka_bootstrap)
    policy_group = KafkaConsumer(
        bootstrap_servers=state.kafka_bootstrap, group_id=f"governor-policy-{deployment}", enable_auto_commit=False
    )
    telemetry = [TopicPartition(TELEMETRY_TOPIC, p) for p in consumer.partitions_for_topic(TELEMETRY_TOPIC) or ()]
    estimates = [TopicPartition(ESTIMATES_TOPIC, p) for p in consumer.partitions_for_topic(ESTIMATES_TOPIC) or ()]
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            ends = consumer.end_offsets(telemetry + estimates)
            applied = store.applied_offsets("stream")
            stream_done = all(
                applied.get(f"{tp.topic}:{tp.partition}", -1) >= ends[tp] - 1 for tp in telemetry if ends[tp] > 0
            )
            policy_done = all((policy_group.committed(tp) or 0) >= ends[tp] for tp in estimates if ends[tp] > 0)
            if stream_done and policy_done:
                return True
            time.sleep(0.25)
        return False
    finally:
        consumer.close()
        policy_group.close()
        store.close()


def _wait_until_consuming(log_path: Path, process: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """Wait until the service logs ``partitions_assigned`` with partitions (its JSON log), or it exits.

    The fleet starts only then, so that the first policies reach the engines within seconds of
    event time instead of after the services' start-up (imports and the group join take ~15 s here).
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        for line in log_path.read_text(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and record.get("event") == "partitions_assigned" and record.get("partitions"):
                return True
        time.sleep(0.25)
    return False


def _documents_and_acks(
    state: StackState, deployment: str, groups: PolicyGroups, timeout_s: float
) -> tuple[dict[str, int], dict[str, int]]:
    """Count stored documents per kind (over the engines each policy is for) and acks per obeyed kind."""
    store = RedisStore.from_url(state.redis_url, deployment, timeout_s)
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


def run(args: argparse.Namespace) -> int:
    """Run the demo; exit 0 when every event reached the services and they consumed it all."""
    settings = settings_from_args(args)
    scenario = load_scenario(args.scenario, duration_s=args.duration_s, seed=args.seed)
    run_id = uuid.uuid4().hex[:8]
    deployment = f"demo-{run_id}"
    scenario = replace(scenario, deployment=deployment)
    groups = PolicyGroups.of(scenario)
    out_dir: Path = args.out / run_id
    out_dir.mkdir(parents=True, exist_ok=True)
    state = stack_up(settings.state_dir, settings.redis_url, None, settings.kafka_timeout_s)
    print(f"stack: kafka {state.kafka_bootstrap}, redis {state.redis_url}; deployment {deployment}")
    logs = {name: out_dir / f"{name}.log" for name in ("stream", "policy")}
    services = {name: _start_service(name, state, deployment, log) for name, log in logs.items()}
    print(
        f"services: stream processor pid {services['stream'].pid}, policy service pid {services['policy'].pid} "
        f"(logs in {out_dir}); fleet slot {DEMO_FLEET_SLOT_S:g} s"
    )
    try:
        if not _wait_until_consuming(logs["stream"], services["stream"], SERVICES_READY_TIMEOUT_S):
            print("warning: the stream processor has not joined its group yet; starting the fleet anyway")
        if args.engine == "vllm":
            services["vllm"] = _start_vllm(state, deployment, scenario.duration_s / args.speed, settings.seed)
            print(f"vLLM: engine {VLLM_ENGINE_ID} (EB+ scheduler, tiny random Llama) pid {services['vllm'].pid}")
        publisher = TelemetryPublisher(state.kafka_bootstrap)
        client = PolicyClient(state.redis_url, deployment, poll_interval_s=0.25)
        print(f"fleet: {args.scenario}: {scenario.description} ({scenario.duration_s:.0f} s at speed {args.speed:g})")
        started = time.monotonic()
        try:
            summary = run_live(
                scenario,
                sink=publisher,
                policy_source=client,
                speed=args.speed,
                progress=_progress_printer(client, groups),
            )
        finally:
            publisher.close()
            client.close()
        if "vllm" in services:
            services["vllm"].wait(timeout=SERVICES_READY_TIMEOUT_S + 120.0)
        caught_up = _wait_for_services(state, deployment, timeout_s=60.0)
    finally:
        codes = {name: _stop(process) for name, process in services.items()}
    documents, acks = _documents_and_acks(state, deployment, groups, settings.redis_timeout_s)
    summary_path = out_dir / "summary.json"
    summary_path.write_text(json.dumps(summary.to_dict(), indent=2, sort_keys=True) + "\n")
    plots = write_plots(summary, out_dir, title=f"governor demo {run_id}")
    stats = publisher.stats()
    if not caught_up:
        print("warning: the services had not consumed everything when they were stopped")
    print(
        f"done in {time.monotonic() - started:.0f} s: {stats.delivered} events delivered, {stats.dropped} dropped; "
        f"services exited {codes}"
    )
    print(f"documents per kind {documents}; acks per kind {acks}")
    print(f"summary: {summary_path}")
    for path in plots:
        print(f"plot:    {path}")
    return 0 if stats.dropped == 0 and caught_up else 1
