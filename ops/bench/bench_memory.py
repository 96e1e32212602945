"""Memory stays bounded: RSS of each service after 100k and after 1M events of the same fleet.

A base window of simulator telemetry (``fleet-8``) is tiled in event time until it holds
``--events`` events: every copy shifts event times by the window's span and renames event ids and
request ids, so the fleet looks like the same eight engines running on. The stream is produced to a
local broker, then ``governor run stream`` and ``governor run policy`` run as processes; their RSS
(VmRSS from /proc) is sampled when the stream processor has applied ``--first`` events and again
when it has applied them all (and the policy service has gone idle). Target:
RSS after 1M within 10% of RSS after 100k, per service.

Runs on its own local stack (a broker on a free port, the Redis at REDIS_URL), prints the figures
and writes JSON to ``--out``.

    PYTHONPATH=. python ops/bench/bench_memory.py [--events 1000000] [--first 100000]
        [--out out/bench/memory.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path

from kafka import KafkaProducer

from schemas.events import encode_event
from schemas.names import TELEMETRY_TOPIC
from services.sdk.protocol import ListSink, StaticPolicySource
from services.settings import Settings
from services.sim import load_scenario, run_offline
from services.stack.launcher import stack_down, stack_up
from services.stack.processes import free_port
from services.store.redis_store import RedisStore

ROOT = Path(__file__).resolve().parents[2]
BASE_WINDOW_S = 120.0


def _base(deployment: str) -> list[dict[str, object]]:
    scenario = replace(load_scenario("fleet-8", duration_s=BASE_WINDOW_S), deployment=deployment)
    sink = ListSink()
    run_offline(scenario, sink=sink, policy_source=StaticPolicySource())
    return [json.loads(encode_event(event)) for event in sink.events]


def _tiled(base: list[dict[str, object]], total: int) -> list[tuple[bytes, bytes]]:
    """``total`` (key, value) records: copies of ``base`` shifted in event time, ids and seqs renumbered."""
    span = float(base[-1]["ts"]) - float(base[0]["ts"]) + 1.0  # type: ignore[arg-type]
    seq: dict[str, int] = {}
    records: list[tuple[bytes, bytes]] = []
    copy = 0
    while len(records) < total:
        for event in base:
            if len(records) == total:
                break
            engine = str(event["engine_id"])
            seq[engine] = seq.get(engine, 0) + 1
            tiled = dict(event)
            tiled["ts"] = float(event["ts"]) + copy * span  # type: ignore[arg-type]
            tiled["event_id"] = f"{event['event_id']}-c{copy}"
            tiled["seq"] = seq[engine]
            if "request_id" in tiled:
                tiled["request_id"] = f"{event['request_id']}-c{copy}"
            records.append((engine.encode(), json.dumps(tiled, separators=(",", ":")).encode()))
        copy += 1
    return records


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    msg = f"no VmRSS for process {pid}"
    raise RuntimeError(msg)


def _service(name: str, deployment: str, bootstrap: str, redis_url: str, log: Path) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "services.cli", "run", name, "--deployment", deployment]
    argv += ["--kafka-bootstrap", bootstrap, "--redis-url", redis_url, "--metrics-port", "0"]
    with log.open("ab") as out:
        return subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)


def _applied(store: RedisStore, consumer: str) -> int:
    return sum(offset + 1 for offset in store.applied_offsets(consumer).values())


def _wait_applied(store: RedisStore, target: int, timeout_s: float) -> float:
    started = time.monotonic()
    while _applied(store, "stream") < target:
        if time.monotonic() - started > timeout_s:
            msg = f"the stream processor applied {_applied(store, 'stream')} of {target} events in {timeout_s:.0f} s"
            raise RuntimeError(msg)
        time.sleep(0.5)
    return time.monotonic() - started


def _wait_policy_idle(store: RedisStore, quiet_s: float, timeout_s: float) -> None:
    started = time.monotonic()
    last, since = -1, time.monotonic()
    while time.monotonic() - started < timeout_s:
        applied = _applied(store, "policy")
        if applied != last:
            last, since = applied, time.monotonic()
        elif time.monotonic() - since > quiet_s:
            return
        time.sleep(0.5)


def main() -> int:
    """Produce the tiled stream, run both services, sample their RSS at the two marks."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--first", type=int, default=100_000)
    parser.add_argument("--timeout-s", type=float, default=1800.0)
    parser.add_argument("--out", type=Path, default=Path("out/bench/memory.json"))
    args = parser.parse_args()
    settings = Settings.load()
    deployment = f"bench-mem-{uuid.uuid4().hex[:8]}"
    print(f"building {args.events:,} events from a {BASE_WINDOW_S:.0f} s fleet-8 window ...", flush=True)
    records = _tiled(_base(deployment), args.events)
    with tempfile.TemporaryDirectory() as tmp:
        state = stack_up(Path(tmp), settings.redis_url, free_port())
        store = RedisStore.from_url(state.redis_url, deployment, 5.0)
        processes: list[subprocess.Popen[bytes]] = []
        try:
            producer = KafkaProducer(bootstrap_servers=state.kafka_bootstrap, linger_ms=20, batch_size=256_000)
            for done, (key, value) in enumerate(records, start=1):
                producer.send(TELEMETRY_TOPIC, key=key, value=value)
                if done % 200_000 == 0:
                    print(f"  produced {done:,}", flush=True)
            producer.flush()
            producer.close()
            stream = _service("stream", deployment, state.kafka_bootstrap, state.redis_url, Path(tmp) / "stream.log")
            policy = _service("policy", deployment, state.kafka_bootstrap, state.redis_url, Path(tmp) / "policy.log")
            processes = [stream, policy]
            first_s = _wait_applied(store, args.first, args.timeout_s)
            at_first = {"stream": _rss_mb(stream.pid), "policy": _rss_mb(policy.pid)}
            print(f"  {args.first:,} applied after {first_s:.0f} s: RSS {at_first}", flush=True)
            all_s = _wait_applied(store, args.events, args.timeout_s)
            _wait_policy_idle(store, quiet_s=10.0, timeout_s=args.timeout_s)
            at_all = {"stream": _rss_mb(stream.pid), "policy": _rss_mb(policy.pid)}
            print(f"  {args.events:,} applied after {all_s:.0f} s more: RSS {at_all}", flush=True)
        finally:
            for process in processes:
                process.terminate()
                process.wait(timeout=30)
            store.flush_deployment()
            store.close()
            stack_down(Path(tmp))
    growth = {name: at_all[name] / at_first[name] - 1.0 for name in at_first}
    result = {
        "events": args.events,
        "first": args.first,
        "rss_mb_at_first": at_first,
        "rss_mb_at_all": at_all,
        "growth_frac": growth,
        "target_growth_frac": 0.10,
        "load_average": os.getloadavg(),
    }
    print()
    print(f"{'service':<8} {'RSS @' + format(args.first, ','):>14} {'RSS @' + format(args.events, ','):>16} growth")
    for name, first_mb in at_first.items():
        print(f"{name:<8} {first_mb:>11.0f} MB {at_all[name]:>13.0f} MB {100 * growth[name]:+6.1f}%")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
