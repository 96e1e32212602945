"""``governor demo``: the README's main command, a simulated fleet under live control.

It starts the local stack (broker and Redis), the stream processor and the policy service as child
processes, then runs a simulated fleet in live mode against them: engines publish their telemetry
through the SDK publisher and obey the policies they read through the SDK policy client. While it
runs it prints one progress line every few simulated seconds (load, latency, KV use and the policy
versions each engine has applied); at the end it prints a summary and writes ``summary.json`` and
the timeline plots.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from kafka import KafkaConsumer, TopicPartition

from schemas.names import ESTIMATES_TOPIC, TELEMETRY_TOPIC
from services.cli.options import add_settings_flags, settings_from_args
from services.sdk.policy_client import PolicyClient
from services.sdk.publisher import TelemetryPublisher
from services.sim import ProgressSample, load_scenario, run_live, write_plots
from services.stack.launcher import StackState, stack_up
from services.store.redis_store import RedisStore

PROGRESS_EVERY_S = 5.0


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``demo`` command."""
    demo = commands.add_parser("demo", help="run a simulated fleet under live control on the local stack")
    demo.add_argument("--scenario", default="demo", help="simulator scenario (default demo; see `governor sim --list`)")
    demo.add_argument("--duration-s", type=float, default=None, help="simulated seconds (default: the scenario's)")
    demo.add_argument("--speed", type=float, default=1.0, help="simulated seconds per wall second (default 1)")
    demo.add_argument("--out", type=Path, default=Path("out/demo"), help="output folder (default out/demo)")
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
    ]
    with log_path.open("ab") as log:
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)


def _stop(process: subprocess.Popen[bytes]) -> int:
    process.terminate()
    try:
        return process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait(timeout=10)


def _policy_view(client: PolicyClient, engines: list[str], now_s: float) -> str:
    """What the engines are told right now: admission level and EB+ mode per engine, with versions."""
    parts = []
    for kind, field in (("admission", "level"), ("ebplus", "mode")):
        shown = []
        for engine in engines:
            document = client.current(kind, engine, now_s)
            value = getattr(getattr(document, "payload", None), field, None)
            shown.append("-" if document is None else f"{value}@v{document.version}")
        parts.append(f"{kind} [{' '.join(shown)}]")
    return "  ".join(parts)


def _progress_printer(client: PolicyClient, engines: list[str]) -> Callable[[ProgressSample], None]:
    last = {"printed_s": -PROGRESS_EVERY_S}

    def show(sample: ProgressSample) -> None:
        if sample.now_s - last["printed_s"] < PROGRESS_EVERY_S:
            return
        last["printed_s"] = sample.now_s
        ttft = "-" if sample.ttft_p50_s is None else f"{sample.ttft_p50_s * 1000:.0f}ms"
        print(
            f"t={sample.now_s:4.0f}s arrived {sample.arrived:5d} finished {sample.finished:5d} "
            f"in-flight {sample.running_plus_waiting:4d} {sample.finished_per_s:5.1f} req/s ttft p50 {ttft:>5} "
            f"kv {sample.kv_use_frac:4.0%} | {_policy_view(client, engines, sample.now_s)}",
            flush=True,
        )

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


def run(args: argparse.Namespace) -> int:
    """Run the demo; exit 0 when decisions reached the engines and were acknowledged."""
    settings = settings_from_args(args)
    scenario = load_scenario(args.scenario, duration_s=args.duration_s, seed=args.seed)
    run_id = uuid.uuid4().hex[:8]
    deployment = f"demo-{run_id}"
    scenario = replace(scenario, deployment=deployment)
    out_dir: Path = args.out / run_id
    out_dir.mkdir(parents=True, exist_ok=True)
    state = stack_up(settings.state_dir, settings.redis_url, None, settings.kafka_timeout_s)
    print(f"stack: kafka {state.kafka_bootstrap}, redis {state.redis_url}; deployment {deployment}")
    services = {name: _start_service(name, state, deployment, out_dir / f"{name}.log") for name in ("stream", "policy")}
    print(
        f"services: stream processor pid {services['stream'].pid}, policy service pid {services['policy'].pid} "
        f"(logs in {out_dir})"
    )
    engines = [spec.config.engine_id for spec in scenario.engines]
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
            progress=_progress_printer(client, engines),
        )
    finally:
        publisher.close()
        client.close()
    caught_up = _wait_for_services(state, deployment, timeout_s=60.0)
    codes = {name: _stop(process) for name, process in services.items()}
    store = RedisStore.from_url(state.redis_url, deployment, settings.redis_timeout_s)
    kinds = ("admission", "ebplus")
    decided = {kind: sum(1 for e in engines if store.get_policy(kind, e) is not None) for kind in kinds}
    acks = sum(1 for kind in kinds for e in engines if store.get_ack(kind, e) is not None)
    store.close()
    summary_path = out_dir / "summary.json"
    summary_path.write_text(json.dumps(summary.to_dict(), indent=2, sort_keys=True) + "\n")
    plots = write_plots(summary, out_dir, title=f"governor demo {run_id}")
    stats = publisher.stats()
    if not caught_up:
        print("warning: the services had not consumed everything when they were stopped")
    print(
        f"done in {time.monotonic() - started:.0f} s: {stats.delivered} events delivered, {stats.dropped} dropped; "
        f"services exited {codes}; documents per kind {decided}; acks stored {acks}"
    )
    print(f"summary: {summary_path}")
    for path in plots:
        print(f"plot:    {path}")
    return 0 if stats.dropped == 0 and caught_up else 1
