"""Idle control plane: CPU the stream processor and the policy service take with no traffic, per broker.

For each broker (Tansu, Apache Kafka) a local stack is started in a fresh state folder (what
``governor stack up`` runs, its broker and an embedded Valkey on free ports), and both services run
as processes (``governor run stream`` and ``governor run policy``, the settings ``governor run``
takes by default; ``GOVERNOR_BROKER`` names the broker, ``--stream-runtime`` the stream processor's
runtime, kafka or faust). After ``--warmup`` seconds (both join their
groups) each one's CPU time (utime + stime of /proc/<pid>/stat, all its threads) is read at the
start and the end of ``--seconds`` without a single record: the figure is that CPU time over the
wall time, in % of one core. The load average of the machine is given with each figure (it is
shared: a busy machine makes each poll cost more).

Then traffic starts, in ``--wake-bursts`` bursts, each ``BURST_S`` seconds of the ``fleet-8``
scenario's telemetry (enough event time for the default policies' triggers to take snapshots),
published after ``--wake-gap-s`` quiet seconds, so that every burst meets idle services: per
burst, its first snapshot on ``gov.estimates`` and its first policy version announced in Redis,
each timed from publishing the event that triggered it (the stream processor woke and folded; the
policy service woke and decided).

    PYTHONPATH=. python ops/bench/bench_idle.py [--seconds 60] [--warmup 20] [--rounds 1]
        [--brokers tansu kafka] [--stream-runtime kafka|faust] [--wake-bursts 8] [--wake-gap-s 3]
        [--out out/bench/bench_idle.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import redis
from kafka import KafkaConsumer, TopicPartition

from ops.bench.backlog import fleet_events
from schemas.names import ESTIMATES_TOPIC, policy_channel
from services.sdk.publisher import TelemetryPublisher
from services.stack.launcher import BrokerKind, stack_down, stack_up
from services.stack.processes import free_port
from services.store.redis_store import RedisStore

SERVICES = ("stream", "policy")
BURST_S = 10.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system, every thread) ``pid`` has used so far, from /proc/<pid>/stat."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime and stime: fields 14 and 15 of stat


def _start_service(
    name: str, bootstrap: str, redis_url: str, deployment: str, *, broker: BrokerKind, runtime: str
) -> subprocess.Popen[bytes]:
    """``governor run {name}`` as a process with the settings ``governor run`` takes by default on ``broker``."""
    argv = [
        sys.executable,
        "-m",
        "services.cli",
        "run",
        name,
        "--deployment",
        deployment,
        "--kafka-bootstrap",
        bootstrap,
        "--redis-url",
        redis_url,
        "--metrics-port",
        "0",
        "--log-level",
        "warning",
    ]
    env = {**os.environ, "GOVERNOR_BROKER": broker, "GOVERNOR_STREAM_RUNTIME": runtime}
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)


def _idle_cpu(pids: dict[str, int], seconds: float) -> dict[str, object]:
    """Each process's CPU over ``seconds`` of wall time, % of one core, with the load average before and after."""
    load_before = os.getloadavg()
    started = {name: _cpu_s(pid) for name, pid in pids.items()}
    wall_started = time.monotonic()
    time.sleep(seconds)
    wall_s = time.monotonic() - wall_started
    used = {name: _cpu_s(pid) - started[name] for name, pid in pids.items()}
    return {
        "wall_s": wall_s,
        "cpu_s": used,
        "cpu_pct": {name: 100.0 * cpu_s / wall_s for name, cpu_s in used.items()},
        "load_before": load_before[0],
        "load_after": os.getloadavg()[0],
    }


def _wake(bootstrap: str, redis_url: str, deployment: str, bursts: int, gap_s: float) -> dict[str, object]:
    """Publish ``bursts`` bursts, each after ``gap_s`` quiet; time each burst's first snapshot and first decision.

    A snapshot is matched to the event that triggered it (same engine and event time), a decision to
    the snapshot it was computed at (``computed_at``), as bench_runtime.py's latency runs do, so the
    time to publish the events before the triggering one is not counted.
    """
    events = fleet_events(deployment, (bursts + 1) * BURST_S)
    reader = KafkaConsumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=10, enable_auto_commit=False)
    partitions = [TopicPartition(ESTIMATES_TOPIC, p) for p in reader.partitions_for_topic(ESTIMATES_TOPIC) or ()]
    reader.assign(partitions)
    reader.seek_to_end(*partitions)
    for tp in partitions:
        reader.position(tp)
    store = RedisStore.from_url(redis_url, deployment, 5.0)
    client = redis.Redis.from_url(redis_url)
    pubsub = client.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(policy_channel(deployment))
    published: dict[tuple[str, float], tuple[int, float]] = {}
    snapshots: dict[int, list[float]] = {}
    decisions: dict[int, list[float]] = {}
    done = threading.Event()

    def listen_snapshots() -> None:
        while not done.is_set():
            for records in reader.poll(timeout_ms=20).values():
                seen = time.perf_counter()
                for record in records:
                    snapshot = json.loads(record.value)
                    sent = published.get((snapshot["scope"], snapshot["ts"]))
                    if sent is not None:
                        snapshots.setdefault(sent[0], []).append(1000.0 * (seen - sent[1]))

    def listen_decisions() -> None:
        while not done.is_set():
            message = pubsub.get_message(timeout=0.02)
            if message is None:
                continue
            seen = time.perf_counter()
            note = json.loads(message["data"])
            document = json.loads(store.get_policy(note["kind"], note["scope"]) or "{}")
            sent = published.get((note["scope"], document.get("computed_at")))
            if sent is not None:
                decisions.setdefault(sent[0], []).append(1000.0 * (seen - sent[1]))

    threads = [threading.Thread(target=target, daemon=True) for target in (listen_snapshots, listen_decisions)]
    for thread in threads:
        thread.start()
    publisher = TelemetryPublisher(bootstrap, linger_ms=0)
    for burst in range(bursts):
        time.sleep(gap_s)
        for event in events:
            if burst * BURST_S <= event.ts < (burst + 1) * BURST_S:
                published[(event.engine_id, event.ts)] = (burst, time.perf_counter())
                publisher.publish(event)
        publisher.flush(10.0)
    time.sleep(gap_s)
    done.set()
    for thread in threads:
        thread.join()
    publisher.close()
    reader.close()
    pubsub.close()
    client.close()
    store.close()
    return {
        "bursts": bursts,
        "gap_s": gap_s,
        "to_snapshot_ms": [times[0] for _, times in sorted(snapshots.items())],
        "to_decision_ms": [times[0] for _, times in sorted(decisions.items())],
    }


def _run(broker: BrokerKind, args: argparse.Namespace, run: int) -> dict[str, object]:
    """One broker: a fresh stack, both services idle for ``args.seconds``, then the wake bursts."""
    deployment = f"bench-idle-{run}"
    with tempfile.TemporaryDirectory(prefix=f"bench-idle-{broker}-") as folder:
        state_dir = Path(folder)
        state = stack_up(state_dir, f"redis://127.0.0.1:{free_port()}/0", free_port(), broker=broker)
        services: list[subprocess.Popen[bytes]] = []
        try:
            services = [
                _start_service(
                    name,
                    state.kafka_bootstrap,
                    state.redis_url,
                    deployment,
                    broker=broker,
                    runtime=args.stream_runtime,
                )
                for name in SERVICES
            ]
            time.sleep(args.warmup)
            for name, service in zip(SERVICES, services, strict=True):
                if service.poll() is not None:
                    msg = f"governor run {name} exited with {service.returncode} during the warm-up"
                    raise RuntimeError(msg)
            idle = _idle_cpu({name: s.pid for name, s in zip(SERVICES, services, strict=True)}, args.seconds)
            wake = _wake(state.kafka_bootstrap, state.redis_url, deployment, args.wake_bursts, args.wake_gap_s)
        finally:
            for service in services:
                service.terminate()
                service.wait(timeout=30)
            stack_down(state_dir)
    return {"broker": broker, "stream_runtime": args.stream_runtime, "idle": idle, "wake": wake}


def _median(values: object) -> str:
    """The median of a list of ms figures for the console, ``-`` when there is none."""
    assert isinstance(values, list)
    return f"{statistics.median(values):.0f} ms" if values else "-"


def main() -> int:
    """Measure each broker ``--rounds`` times, print the figures and write them all as JSON."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--warmup", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--brokers", nargs="+", choices=("tansu", "kafka"), default=["tansu", "kafka"])
    parser.add_argument("--stream-runtime", choices=("kafka", "faust"), default="kafka")
    parser.add_argument("--wake-bursts", type=int, default=8)
    parser.add_argument("--wake-gap-s", type=float, default=3.0)
    parser.add_argument("--out", type=Path, default=Path("out/bench/bench_idle.json"))
    args = parser.parse_args()
    runs = []
    for run in range(args.rounds):
        for broker in args.brokers:
            figures = _run(broker, args, run)
            runs.append(figures)
            idle = figures["idle"]
            wake = figures["wake"]
            assert isinstance(idle, dict)
            assert isinstance(wake, dict)
            cpu = " ".join(f"{name}={pct:.2f}%" for name, pct in idle["cpu_pct"].items())
            print(
                f"{broker:5} ({args.stream_runtime} runtime) idle {cpu} of a core over {idle['wall_s']:.0f} s "
                f"(load {idle['load_before']:.1f}->{idle['load_after']:.1f}); after {args.wake_gap_s:.0f} s quiet: "
                f"snapshot {_median(wake['to_snapshot_ms'])}, decision {_median(wake['to_decision_ms'])} (medians)"
            )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"seconds": args.seconds, "runs": runs}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
