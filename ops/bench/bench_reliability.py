"""Reliability in one run: bad input, crashes and a rising event rate against both services.

1. Bad input and crashes: a synthetic fleet's telemetry is produced with bad records of every
   kind mixed in (tombstones, bytes that are not UTF-8, values that are not JSON, JSON of the wrong
   schema, oversized values, repeated event ids, events far in the future, events of engines that
   never registered). ``governor run stream`` and ``governor run policy`` run as processes and are
   killed with SIGKILL ``--kills`` times each at seeded random moments, restarted each time, then
   left to run until idle. Printed: events folded vs produced, dead letters by code vs bad records
   sent by kind, the decisions made vs those an uninterrupted offline replay of the same records
   makes, whether the estimates equal that replay's, and the crashes survived.
2. Sustained rate: telemetry is published at each of ``--rates`` events/s for ``--step-s``
   seconds while both services run; after each step the processor's lag (records produced minus
   records applied) and each service's RSS are read. Printed: the highest rate whose lag stayed
   under one second of events, and the RSS at it.
3. Soak: simulator telemetry published at ``--soak-rate`` events/s for ``--soak-s`` seconds (5
   minutes at 3,000 events/s by default) to both services as ``governor run`` processes, read every
   second (ops/bench/bench_soak.py, ``run_soak``). Printed: events published and folded per minute,
   the lag, each stretch of 30 s or more in which records waited and nothing was folded (a stall)
   with what ``/healthz`` answered meanwhile, and the CPU seconds of the processor and the broker.

Runs on its own local stacks (``--broker``, a broker on a free port, the Redis at REDIS_URL), so
every record on their topics is the bench's; ``--parts`` picks the parts to run. Prints the
figures and writes JSON to ``--out``.

    PYTHONPATH=. python ops/bench/bench_reliability.py [--parts crashes rates soak] [--broker tansu|kafka]
        [--requests 3000] [--kills 5] [--rates 1000 2000 4000 8000] [--step-s 20]
        [--soak-s 300] [--soak-rate 3000] [--out out/bench/reliability.json]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from kafka import KafkaProducer

from decide.specs import default_registry
from ops.bench.bench_soak import SoakPlan, run_soak
from schemas.errors import InvalidInputError
from schemas.events import MAX_EVENT_BYTES, Event, encode_event, parse_event
from schemas.names import DEADLETTER_TOPIC, DECISIONS_TOPIC, TELEMETRY_TOPIC, estimate_key
from services.replay.replay import read_topic, replay_offline
from services.settings import Settings
from services.stack.launcher import StackState, stack_down, stack_up
from services.stack.processes import free_port
from services.store.redis_store import RedisStore
from services.testing.streams import synthetic_stream

ROOT = Path(__file__).resolve().parents[2]
PARTS = ("crashes", "rates", "soak")
BAD_KINDS = ("tombstone", "not_utf8", "not_json", "wrong_schema", "oversized", "duplicate", "far_future", "stray")


def _bad_record(kind: str, event: Event, serial: int) -> tuple[bytes, bytes | None]:
    """One bad record of ``kind`` derived from the valid ``event``."""
    key = event.engine_id.encode()
    raw = json.loads(encode_event(event))
    if kind == "tombstone":
        return key, None
    if kind == "not_utf8":
        return key, b"\xff\xfe" + bytes(range(128, 160))
    if kind == "not_json":
        return key, b'{"event_type": "request.arrived", "ts": '
    if kind == "wrong_schema":
        return key, json.dumps(raw | {"seq": "seven"}).encode()
    if kind == "oversized":
        return key, json.dumps(raw | {"padding": "x" * (MAX_EVENT_BYTES + 1)}).encode()
    if kind == "duplicate":
        return key, encode_event(event)
    if kind == "far_future":
        return key, json.dumps(raw | {"ts": event.ts + 700.0, "event_id": f"future-{serial}"}).encode()
    stray = f"never-registered-{serial % 7}"
    return stray.encode(), json.dumps(raw | {"engine_id": stray, "event_id": f"stray-{serial}"}).encode()


def _mixed_stream(
    events: list[Event], every: int, seed: int
) -> tuple[list[tuple[bytes, bytes | None]], dict[str, int]]:
    """The valid events with a bad record of a seeded random kind after every ``every``-th one."""
    rng = random.Random(seed)
    records: list[tuple[bytes, bytes | None]] = []
    sent: collections.Counter[str] = collections.Counter()
    for i, event in enumerate(events):
        records.append((event.engine_id.encode(), encode_event(event)))
        if i % every == every - 1 and i > 50:
            kind = rng.choice(BAD_KINDS)
            records.append(_bad_record(kind, event, i))
            sent[kind] += 1
    return records, dict(sent)


def _service(
    name: str, deployment: str, state: StackState, log: Path, idle_exit_s: float | None
) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "services.cli", "run", name, "--deployment", deployment]
    argv += ["--kafka-bootstrap", state.kafka_bootstrap, "--redis-url", state.redis_url, "--metrics-port", "0"]
    if idle_exit_s is not None:
        argv += ["--idle-exit-s", str(idle_exit_s)]
    with log.open("ab") as out:
        return subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)


def _produce(state: StackState, records: list[tuple[bytes, bytes | None]]) -> None:
    producer = KafkaProducer(
        bootstrap_servers=state.kafka_bootstrap, linger_ms=20, max_request_size=4 * MAX_EVENT_BYTES
    )
    for key, value in records:
        producer.send(TELEMETRY_TOPIC, key=key, value=value)
    producer.flush()
    producer.close()


def _applied(store: RedisStore, consumer: str) -> int:
    return sum(offset + 1 for offset in store.applied_offsets(consumer).values())


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


def _crashes(deployment: str, state: StackState, tmp: Path, kills: int, seed: int) -> int:
    """Kill each service ``kills`` times at seeded random moments, restarting it each time; return the kills."""
    rng = random.Random(seed)
    running = {name: _service(name, deployment, state, tmp / f"{name}.log", None) for name in ("stream", "policy")}
    done = 0
    for round_ in range(kills):
        for name in ("stream", "policy"):
            time.sleep(rng.uniform(0.5, 4.0))
            running[name].kill()
            running[name].wait(timeout=30)
            running[name] = _service(name, deployment, state, tmp / f"{name}.log", None)
            done += 1
        print(f"  kill round {round_ + 1}/{kills}", flush=True)
    for process in running.values():
        process.terminate()
        process.wait(timeout=60)
    return done


def _run_until_idle(deployment: str, state: StackState, tmp: Path) -> None:
    stream = _service("stream", deployment, state, tmp / "stream.log", 8.0)
    stream.wait(timeout=1800)
    policy = _service("policy", deployment, state, tmp / "policy.log", 8.0)
    policy.wait(timeout=1800)


def _bad_input_and_crashes(state: StackState, tmp: Path, args: argparse.Namespace) -> dict[str, object]:
    deployment = f"bench-rel-{uuid.uuid4().hex[:8]}"
    events = synthetic_stream(engines=4, requests=args.requests, deployment=deployment, seed=args.seed)
    records, sent = _mixed_stream(events, every=40, seed=args.seed)
    _produce(state, records)
    print(f"produced {len(records):,} records ({len(events):,} valid events, bad by kind {sent})", flush=True)
    kills = _crashes(deployment, state, tmp, args.kills, args.seed)
    _run_until_idle(deployment, state, tmp)
    parseable = []
    for _key, value in records:
        try:
            parseable.append(parse_event(value))
        except InvalidInputError:  # a bad record the offline replay cannot read either
            continue
    offline = replay_offline(parseable, default_registry())
    expected = {
        (d.kind, d.scope, d.version, json.dumps(d.document["payload"], sort_keys=True))
        for d in offline.decisions
        if d.accepted
    }
    made = set()
    for value in read_topic(state.kafka_bootstrap, DECISIONS_TOPIC):
        record = json.loads(value)
        ours = record["deployment"] == deployment and record.get("origin", "policy") == "policy"
        if ours and not record.get("shadow"):
            made.add(
                (
                    record["kind"],
                    record["scope"],
                    record["version"],
                    json.dumps(record["document"]["payload"], sort_keys=True),
                )
            )
    letters: collections.Counter[str] = collections.Counter()
    for value in read_topic(state.kafka_bootstrap, DEADLETTER_TOPIC):
        letters[json.loads(value).get("code", "contract")] += 1
    store = RedisStore.from_url(state.redis_url, deployment, 5.0)
    engines = sorted({e.engine_id for e in events})
    stored = {e: store._client.get(estimate_key(deployment, e, "summary")) for e in engines}
    estimates_equal = all(
        value is not None and json.loads(value) == json.loads(offline.folder.summary_json(e))
        for e, value in stored.items()
    )
    applied = _applied(store, "stream")
    store.flush_deployment()
    store.close()
    return {
        "records_produced": len(records),
        "valid_events": len(events),
        "records_applied": applied,
        "bad_sent_by_kind": sent,
        "dead_letters_by_code": dict(letters),
        "decisions_expected": len(expected),
        "decisions_made": len(made & expected),
        "decisions_unexpected": len(made - expected),
        "estimates_equal_uninterrupted": estimates_equal,
        "kills_survived": kills,
    }


def _sustained(state: StackState, tmp: Path, args: argparse.Namespace, earlier: int) -> list[dict[str, object]]:
    """Step the publish rate up; ``earlier``: records already on the telemetry topic (part 1's), also applied here."""
    deployment = f"bench-rate-{uuid.uuid4().hex[:8]}"
    store = RedisStore.from_url(state.redis_url, deployment, 5.0)
    stream = _service("stream", deployment, state, tmp / "rate-stream.log", None)
    policy = _service("policy", deployment, state, tmp / "rate-policy.log", None)
    producer = KafkaProducer(bootstrap_servers=state.kafka_bootstrap, linger_ms=20)
    steps = []
    warm_up = synthetic_stream(engines=8, requests=50, deployment=deployment, seed=99)
    for event in warm_up:
        producer.send(TELEMETRY_TOPIC, key=event.engine_id.encode(), value=encode_event(event))
    producer.flush()
    produced = earlier + len(warm_up)
    deadline = time.monotonic() + 120.0
    while _applied(store, "stream") < produced and time.monotonic() < deadline:
        time.sleep(0.5)
    base = 1
    try:
        for rate in args.rates:
            events = synthetic_stream(
                engines=8, requests=int(rate * args.step_s / 3) + 100, deployment=deployment, seed=base
            )
            start_ts = events[0].ts
            span = events[-1].ts - start_ts
            started = time.monotonic()
            sent = 0
            for event in events:
                due = started + (event.ts - start_ts) * (args.step_s / span)
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                raw = json.loads(encode_event(event))
                raw["ts"] = event.ts + base * 100_000.0
                raw["event_id"] = f"{event.event_id}-r{base}"
                producer.send(TELEMETRY_TOPIC, key=event.engine_id.encode(), value=json.dumps(raw).encode())
                sent += 1
            producer.flush()
            produced += sent
            achieved = sent / (time.monotonic() - started)
            time.sleep(1.0)
            lag = produced - _applied(store, "stream")
            step = {
                "rate_per_s": rate,
                "achieved_per_s": round(achieved),
                "lag_records": lag,
                "bounded": lag <= achieved,
                "rss_mb": {"stream": _rss_mb(stream.pid), "policy": _rss_mb(policy.pid)},
            }
            steps.append(step)
            print(f"  rate {rate:>6}/s: sent {achieved:,.0f}/s, lag {lag:,} records, RSS {step['rss_mb']}", flush=True)
            base += 1
            if not step["bounded"]:
                break
    finally:
        producer.close()
        for process in (stream, policy):
            process.terminate()
            process.wait(timeout=60)
        store.flush_deployment()
        store.close()
    return steps


def main() -> int:
    """Run the chosen parts on fresh local stacks; print and write the figures."""
    settings = Settings.load()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS), help="the parts to run")
    parser.add_argument("--broker", choices=("tansu", "kafka"), default=settings.broker, help="(GOVERNOR_BROKER)")
    parser.add_argument("--requests", type=int, default=3000, help="requests of the fleet in part 1")
    parser.add_argument("--kills", type=int, default=5, help="SIGKILLs of each service in part 1")
    parser.add_argument("--rates", type=int, nargs="+", default=[1000, 2000, 4000, 8000])
    parser.add_argument("--step-s", type=float, default=20.0)
    parser.add_argument("--soak-s", type=float, default=300.0, help="how long part 3 publishes")
    parser.add_argument("--soak-rate", type=float, default=3000.0, help="part 3's publish rate, events/s")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=Path("out/bench/reliability.json"))
    args = parser.parse_args()
    result: dict[str, object] = {"broker": args.broker}
    if "crashes" in args.parts or "rates" in args.parts:
        result |= _crashes_and_rates(settings, args)
    if "soak" in args.parts:
        print("part 3: soak", flush=True)
        result["soak"] = run_soak(SoakPlan(broker=args.broker, seconds=args.soak_s, rate_per_s=args.soak_rate))
    result["load_average"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")
    return 0


def _crashes_and_rates(settings: Settings, args: argparse.Namespace) -> dict[str, object]:
    """Parts 1 and 2 (those of ``args.parts``) on one fresh local stack; print their figures."""
    result: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        state = stack_up(tmp / "stack", settings.redis_url, free_port(), broker=args.broker)
        try:
            earlier = 0
            if "crashes" in args.parts:
                print("part 1: bad input and crashes", flush=True)
                part1 = _bad_input_and_crashes(state, tmp, args)
                _print_part1(part1)
                result["bad_input_and_crashes"] = part1
                earlier = int(part1["records_produced"])  # type: ignore[call-overload]
            if "rates" in args.parts:
                print("part 2: sustained rate", flush=True)
                part2 = _sustained(state, tmp, args, earlier=earlier)
                bounded = [s for s in part2 if s["bounded"]]
                best = max(bounded, key=lambda s: int(s["rate_per_s"])) if bounded else None  # type: ignore[call-overload]
                if best is None:
                    print("sustained rate: no step kept its lag under one second of events")
                else:
                    print(f"highest rate with bounded lag: {best['rate_per_s']}/s, RSS {best['rss_mb']}")
                result["sustained"] = part2
        finally:
            stack_down(tmp / "stack")
    return result


def _print_part1(part1: dict[str, object]) -> None:
    print(f"events applied vs produced:   {part1['records_applied']:,} of {part1['records_produced']:,} records")
    print(f"bad records sent by kind:     {part1['bad_sent_by_kind']}")
    print(f"dead letters by code:         {part1['dead_letters_by_code']}")
    print(
        f"decisions made vs expected:   {part1['decisions_made']} of {part1['decisions_expected']}"
        f" ({part1['decisions_unexpected']} not in the uninterrupted replay)"
    )
    print(f"estimates equal uninterrupted: {part1['estimates_equal_uninterrupted']}")
    print(f"crashes survived:             {part1['kills_survived']}")


if __name__ == "__main__":
    raise SystemExit(main())
