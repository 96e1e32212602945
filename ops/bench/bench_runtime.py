"""Control-plane runtime: ingest throughput and event-to-estimate latency of both stream-processor
runtimes side by side, offline replay speed, and event-to-policy-visible latency.

Figures (DESIGN section 9 targets, never asserted in tests):

1. ingest, per runtime (kafka-python and faust-streaming): one stream processor folds the same
   pre-loaded backlog of simulator telemetry from ``gov.telemetry`` with estimates current in
   Redis (target >= 50k events/s and >= 0.4 of the bare consumer); the deployment's Redis keys are
   flushed between runs; ``--ingest-rounds N`` folds it N times per runtime and reports the median
   run. A bare kafka-python consumer reads the same backlog before and after (no parse, no fold),
   and each runtime's events/s is printed as a ratio to it, with the processor's
   thread CPU time per event (the machine may be shared: CPU time is what the code costs);
2. event -> estimate latency, per runtime: ``governor run stream --runtime R`` as a process, events
   published at ``--estimate-rate`` events/s; for every snapshot on ``gov.estimates``, the wall
   time from publishing the event that triggered it (same engine and event time) to receiving it;
3. offline replay: the same events folded in-process by ``OfflineControlPlane`` (target >= 100k/s);
   and the per-event budget: at 50k events/s one process has 20 us of CPU per event, and the run
   prints what its parts take of it on the same backlog (thread CPU per event, fastest of three): the
   bare consumer's client, parsing the record values (``read_record``) and the pure fold with its
   snapshots (``Folder.fold``); what the processor takes beyond their sum is its loop (the event
   guard's bookkeeping, positions, watermark), its deliveries and its commits;
4. loop latency (default runtime), each run on a broker of its own for ``--latency-seconds`` of
   publishing (the local broker's fetch latency grows with the batches a partition holds, so runs
   of one length on fresh logs compare; the p50 of each quarter of a run shows the drift):
   events published at ``--rate`` events/s; for every decision, the
   wall time from publishing the event that triggered it to the new version being readable in
   Redis (announced on pub/sub), p50 and p99 (target p50 <= 20 ms and p99 <= 100 ms at 5k events/s),
   with the stages: the publish call, publish -> snapshot on ``gov.estimates`` (fold), and
   snapshot -> policy readable (decide and write);
5. the loop's floor, after each latency run: the same publisher and rate through the same two broker
   hops and a Redis write with no work in them (``ops/bench/relay.py``, one record in
   ``--relay-every``), so the services' latency reads against what the broker, the clients and the
   machine cost by themselves.

Runs on its own local stack (the broker ``GOVERNOR_BROKER`` names, Tansu or Apache Kafka, on a free
port; the Redis at REDIS_URL or an embedded Valkey), prints the figures and writes JSON to ``--out``.

    [GOVERNOR_BROKER=kafka] PYTHONPATH=. python ops/bench/bench_runtime.py [--seconds 60] [--estimate-rate 1000]
        [--rate 1000 5000]
        [--runtimes kafka faust] [--publisher-linger-ms 5] [--service-fetch-wait-ms MS] [--service-linger-ms MS]
        [--latency-seconds 10] [--relay-every 100] [--out out/bench/runtime.json]

``--estimate-rate 0`` skips the event -> estimate runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import redis
from kafka import KafkaConsumer, TopicPartition

from decide.specs import default_registry
from fold.folder import Folder
from ops.bench.backlog import ConsumedRecordView, first_fleet_events, fleet_events, publish_backlog
from ops.bench.relay import RELAY_TOPIC, end_reader
from schemas.events import Event, encode_event
from schemas.names import ESTIMATES_TOPIC, TELEMETRY_TOPIC, Partition, RecordPosition, TopicSpec, policy_channel
from services.replay.offline import OfflineControlPlane
from services.sdk.publisher import TelemetryPublisher
from services.settings import LOCAL_BROKER_TIMEOUTS, Settings
from services.stack.launcher import create_topics, stack_down, stack_up
from services.stack.processes import free_port
from services.store.redis_store import RedisStore
from services.stream.batches import read_record
from services.stream.runtimes import RUNTIMES, Runtime, stream_processor

TARGET_EVENTS_PER_S = 50_000  # the target for one stream-processor process


def bench_ingest(
    bootstrap: str, redis_url: str, events: list[Event], deployment: str, runtime: Runtime
) -> dict[str, float]:
    """Fold the published backlog with one processor on ``runtime``; events/s from its first to its last batch."""
    store = RedisStore.from_url(redis_url, deployment, 5.0)
    store.flush_deployment()
    processor = stream_processor(
        runtime, deployment=deployment, bootstrap=bootstrap, store=store, registry=default_registry()
    )
    cpu_started = time.thread_time()
    processor.run(idle_exit_s=3.0)
    cpu_s = time.thread_time() - cpu_started
    processor.close()
    store.close()
    counters = processor.counters
    assert counters.first_batch_at_s is not None
    assert counters.last_batch_at_s is not None
    assert counters.folded == len(events), f"{runtime} folded {counters.folded} of {len(events)} events"
    wall = counters.last_batch_at_s - counters.first_batch_at_s
    return {
        "events": counters.folded,
        "wall_s": wall,
        "events_per_s": counters.folded / wall,
        "cpu_s": cpu_s,
        "cpu_us_per_event": cpu_s / counters.folded * 1e6,
        "batches": counters.batches,
        "snapshots": counters.snapshots,
    }


def _median_run(runs: list[dict[str, float]]) -> dict[str, float]:
    """The run of median CPU per event (the lower middle one of an even count): one machine's noise is wide."""
    ordered = sorted(runs, key=lambda run: run["cpu_us_per_event"])
    return ordered[(len(ordered) - 1) // 2]


def bench_bare_consumer(bootstrap: str, events: int) -> dict[str, float]:
    """Read the same backlog with a bare kafka-python consumer (no parse, no fold): the client's own limit.

    It is configured as the processor's consumer is (``max_poll_records`` 2000, group-less, from the
    earliest offset) and only counts records, so the processor's events/s over this one's is the share
    of the client's speed the control plane keeps. Timed from its first to its last non-empty poll,
    like ``bench_ingest``, with the thread's CPU time beside the wall time.
    """
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest", max_poll_records=2000
    )
    partitions = [TopicPartition(TELEMETRY_TOPIC, p) for p in sorted(consumer.partitions_for_topic(TELEMETRY_TOPIC))]
    consumer.assign(partitions)
    consumer.seek_to_beginning(*partitions)
    read = 0
    first_s = last_s = 0.0
    cpu_first_s = cpu_last_s = 0.0
    deadline = time.monotonic() + 600.0
    while read < events and time.monotonic() < deadline:
        batch = consumer.poll(timeout_ms=200)
        count = sum(len(part) for part in batch.values())
        if not count:
            continue
        if not read:
            first_s, cpu_first_s = time.perf_counter(), time.thread_time()
        read += count
        last_s, cpu_last_s = time.perf_counter(), time.thread_time()
    consumer.close()
    wall = last_s - first_s
    return {"events": read, "wall_s": wall, "cpu_s": cpu_last_s - cpu_first_s, "events_per_s": read / wall}


def bench_offline(events: list[Event], deployment: str) -> dict[str, float]:
    """Fold the same events in-process."""
    plane = OfflineControlPlane(deployment, default_registry())
    started = time.perf_counter()
    for event in events:
        plane.publish(event)
    wall = time.perf_counter() - started
    return {
        "events": len(events),
        "wall_s": wall,
        "events_per_s": len(events) / wall,
        "decisions": len(plane.decisions),
    }


def _fastest_cpu_us(work: Callable[[], object], events: int, rounds: int = 3) -> float:
    """The least thread CPU time of ``rounds`` runs of ``work``, in microseconds per event."""
    best = float("inf")
    for _ in range(rounds):
        started = time.thread_time()
        work()
        best = min(best, time.thread_time() - started)
    return best / events * 1e6


def bench_budget(events: list[Event], deployment: str) -> dict[str, float]:
    """CPU per event of the parse and of the pure fold (with its snapshots), on the ingest backlog.

    The records carry the bytes the publisher put on the wire; the fold is ``Folder.fold`` with the
    default registry, as the processor runs it, into a fresh ``Folder`` each round.
    """
    records = [
        ConsumedRecordView(TELEMETRY_TOPIC, 0, offset, event.engine_id.encode(), encode_event(event))
        for offset, event in enumerate(events)
    ]
    position = RecordPosition(TELEMETRY_TOPIC, 0, 0)

    def parse() -> None:
        for record in records:
            read_record(record)

    def fold() -> None:
        folder = Folder(deployment, default_registry())
        for event in events:
            folder.fold(event, position)

    return {
        "parse_us_per_event": _fastest_cpu_us(parse, len(events)),
        "fold_us_per_event": _fastest_cpu_us(fold, len(events)),
    }


def _start_service(
    name: str,
    bootstrap: str,
    redis_url: str,
    deployment: str,
    extra: tuple[str, ...] = (),
    *,
    kafka_env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
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
        *extra,
    ]
    env = {**os.environ, **(kafka_env or {})}
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)


def _telemetry_ends(bootstrap: str) -> dict[str, int]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    partitions = [TopicPartition(TELEMETRY_TOPIC, p) for p in consumer.partitions_for_topic(TELEMETRY_TOPIC) or ()]
    ends = {Partition(tp.topic, tp.partition).field: offset for tp, offset in consumer.end_offsets(partitions).items()}
    consumer.close()
    return ends


def _wait_caught_up(store: RedisStore, ends: dict[str, int], timeout_s: float) -> None:
    """Wait until the stream processor has applied every telemetry record there was at the start."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        applied = store.applied_offsets("stream")
        if all(applied.get(tp, -1) >= end - 1 for tp, end in ends.items() if end > 0):
            return
        time.sleep(0.25)
    msg = f"the stream processor did not catch up with the backlog in {timeout_s:.0f} s"
    raise RuntimeError(msg)


def bench_estimate_latency(
    bootstrap: str, redis_url: str, events: list[Event], deployment: str, runtime: Runtime, *, rate: float
) -> dict[str, object]:
    """Publish at ``rate`` events/s to ``governor run stream --runtime``; time each snapshot's arrival."""
    store = RedisStore.from_url(redis_url, deployment, 5.0)
    service = _start_service("stream", bootstrap, redis_url, deployment, ("--runtime", runtime))
    ends = _telemetry_ends(bootstrap)
    if all(end == 0 for end in ends.values()):
        time.sleep(10.0)  # nothing to catch up with: give the member time to join its group
    _wait_caught_up(store, ends, 300.0)
    reader = KafkaConsumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=10, enable_auto_commit=False)
    partitions = [TopicPartition(ESTIMATES_TOPIC, p) for p in reader.partitions_for_topic(ESTIMATES_TOPIC) or ()]
    reader.assign(partitions)
    reader.seek_to_end(*partitions)
    for tp in partitions:
        reader.position(tp)
    published: dict[tuple[str, float], float] = {}
    latencies: list[float] = []
    done = threading.Event()

    def listen() -> None:
        while not done.is_set():
            for records in reader.poll(timeout_ms=50).values():
                seen = time.perf_counter()
                for record in records:
                    snapshot = json.loads(record.value)
                    sent = published.get((snapshot["scope"], snapshot["ts"]))
                    if snapshot["deployment"] == deployment and sent is not None:
                        latencies.append(seen - sent)

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    publisher = TelemetryPublisher(bootstrap)
    started = time.perf_counter()
    for i, event in enumerate(events):
        wait = started + i / rate - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        published[(event.engine_id, event.ts)] = time.perf_counter()
        publisher.publish(event)
    publisher.flush(60.0)
    time.sleep(3.0)
    done.set()
    listener.join()
    reader.close()
    publisher.close()
    service.terminate()
    service.wait(timeout=30)
    store.close()
    values = np.asarray(latencies) * 1000.0
    return {
        "runtime": runtime,
        "rate_events_per_s": rate,
        "events": len(events),
        "snapshots_timed": len(latencies),
        "p50_ms": float(np.percentile(values, 50)) if len(values) else None,
        "p99_ms": float(np.percentile(values, 99)) if len(values) else None,
    }


def _percentiles(seconds: list[float]) -> dict[str, float | None]:
    values = np.asarray(seconds) * 1000.0
    return {
        "p50_ms": float(np.percentile(values, 50)) if len(values) else None,
        "p99_ms": float(np.percentile(values, 99)) if len(values) else None,
    }


def _quarter_medians(seconds: list[float]) -> list[float]:
    """Median latency (ms) of each quarter of a run, in the order the latencies were seen.

    The local broker's fetch latency grows with the record batches a partition holds (measured: a
    bare reader's lag at 1k events/s went from about 10 to over 100 ms in 45 s while the producer's
    acknowledgements stayed at 6-8 ms), so a run's figures depend on its length; the quarters show
    that drift.
    """
    return [float(np.median(part)) * 1000.0 for part in np.array_split(np.asarray(seconds), 4) if len(part)]


def _ms(value: object) -> str:
    """A latency figure for the console: ``12.3 ms``, or ``-`` where a run timed nothing."""
    return f"{value:.1f} ms" if isinstance(value, float) else "-"


def _quarters_text(figures: dict[str, object]) -> str:
    quarters = figures["p50_ms_by_quarter"]
    assert isinstance(quarters, list)
    return " / ".join(f"{q:.0f}" for q in quarters) + " ms"


@contextlib.contextmanager
def _fresh_stack(redis_url: str) -> Iterator[str]:
    """A broker of its own for one latency run (a fresh log, see ``_quarter_medians``); yields its bootstrap."""
    state_dir = Path(tempfile.mkdtemp(prefix="governor-bench-latency-"))
    state = stack_up(state_dir, redis_url, free_port(), broker=Settings.load({}).broker)
    try:
        yield state.kafka_bootstrap
    finally:
        stack_down(state_dir)


def _estimates_reader(bootstrap: str) -> KafkaConsumer:
    """A group-less reader of ``gov.estimates`` positioned at its end."""
    reader = KafkaConsumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=10, enable_auto_commit=False)
    partitions = [TopicPartition(ESTIMATES_TOPIC, p) for p in reader.partitions_for_topic(ESTIMATES_TOPIC) or ()]
    reader.assign(partitions)
    reader.seek_to_end(*partitions)
    for tp in partitions:
        reader.position(tp)
    return reader


def _publish_paced(
    bootstrap: str,
    events: list[Event],
    rate: float,
    *,
    linger_ms: int,
    published: dict[tuple[str, float], float],
    listeners: tuple[Callable[[], None], ...],
    done: threading.Event,
) -> list[float]:
    """Publish ``events`` at ``rate`` events/s while ``listeners`` run; return each publish call's duration.

    Each event's publish time goes into ``published`` under its engine and event time, where the
    listeners look it up. They run on threads from before the first event until 5 s after the flush,
    when ``done`` is set and they are joined.
    """
    threads = [threading.Thread(target=target, daemon=True) for target in listeners]
    for thread in threads:
        thread.start()
    publisher = TelemetryPublisher(bootstrap, linger_ms=linger_ms)
    calls: list[float] = []
    started = time.perf_counter()
    for i, event in enumerate(events):
        wait = started + i / rate - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        sent = time.perf_counter()
        published[(event.engine_id, event.ts)] = sent
        publisher.publish(event)
        calls.append(time.perf_counter() - sent)
    publisher.flush(60.0)
    publisher.close()
    time.sleep(5.0)
    done.set()
    for thread in threads:
        thread.join()
    return calls


def bench_latency(
    bootstrap: str,
    redis_url: str,
    events: list[Event],
    deployment: str,
    rate: float,
    *,
    publisher_linger_ms: int,
    kafka_env: dict[str, str],
) -> dict[str, object]:
    """Publish at ``rate`` events/s with both services running as processes; time each decision's visibility.

    Stages of each timed decision, from outside the services: ``publish`` is the publisher's call
    (the event handed to the client), ``fold`` from that call to the triggering snapshot being
    readable on ``gov.estimates`` (broker, poll, parse, fold, summary, produce), ``decide_write``
    from the snapshot to the new version being announced in Redis (poll, decide, write, announce).
    Latency is also given per policy kind: a fleet-scope decision waits, by design, until the
    processor's event-time watermark passes its slot (fold/fleet.py), so its latency is
    the slowest partition's event time, not processing.
    """
    services = [
        _start_service(name, bootstrap, redis_url, deployment, kafka_env=kafka_env) for name in ("stream", "policy")
    ]
    time.sleep(10.0)  # both consumers join their groups
    store = RedisStore.from_url(redis_url, deployment, 5.0)
    published: dict[tuple[str, float], float] = {}
    snapshot_seen: dict[tuple[str, float], float] = {}
    latencies: list[float] = []
    folds: list[float] = []
    decides: list[float] = []
    by_kind: dict[str, list[float]] = {}
    client = redis.Redis.from_url(redis_url)
    pubsub = client.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(policy_channel(deployment))
    reader = _estimates_reader(bootstrap)
    done = threading.Event()

    def listen_estimates() -> None:
        while not done.is_set():
            for records in reader.poll(timeout_ms=50).values():
                seen = time.perf_counter()
                for record in records:
                    snapshot = json.loads(record.value)
                    if snapshot["deployment"] == deployment:
                        snapshot_seen.setdefault((snapshot["scope"], snapshot["ts"]), seen)

    def listen() -> None:
        while not done.is_set():
            message = pubsub.get_message(timeout=0.05)
            if message is None:
                continue
            seen = time.perf_counter()
            note = json.loads(message["data"])
            document = json.loads(store.get_policy(note["kind"], note["scope"]) or "{}")
            key = (note["scope"], document.get("computed_at"))
            if key in published:
                latencies.append(seen - published[key])
                by_kind.setdefault(note["kind"], []).append(seen - published[key])
                snapshot_at = snapshot_seen.get(key)
                if snapshot_at is not None:
                    folds.append(snapshot_at - published[key])
                    decides.append(seen - snapshot_at)

    publish_calls = _publish_paced(
        bootstrap,
        events,
        rate,
        linger_ms=publisher_linger_ms,
        published=published,
        listeners=(listen, listen_estimates),
        done=done,
    )
    reader.close()
    for service in services:
        service.terminate()
        service.wait(timeout=30)
    pubsub.close()
    client.close()
    store.close()
    return {
        "rate_events_per_s": rate,
        "publisher_linger_ms": publisher_linger_ms,
        "service_kafka_settings": kafka_env,
        "events": len(events),
        "decisions_timed": len(latencies),
        **_percentiles(latencies),
        "p50_ms_by_quarter": _quarter_medians(latencies),
        "stages": {
            "publish": _percentiles(publish_calls),
            "fold": _percentiles(folds),
            "decide_write": _percentiles(decides),
        },
        "by_kind": {
            kind: {"decisions": len(values), **_percentiles(values)} for kind, values in sorted(by_kind.items())
        },
    }


def bench_relay_latency(
    bootstrap: str,
    redis_url: str,
    events: list[Event],
    rate: float,
    *,
    every: int,
    publisher_linger_ms: int,
    kafka_env: dict[str, str],
) -> dict[str, object]:
    """The loop's floor: the same publisher, rate and two hops as ``bench_latency``, with no work in them.

    ``ops/bench/relay.py`` runs as two processes: one forwards every ``every``-th telemetry record to
    ``RELAY_TOPIC``, the other writes each forwarded record to Redis and announces it. Stages as in
    ``bench_latency``: ``hop1`` from the publish call to the record readable on the relay topic,
    ``hop2`` from there to the announcement.
    """
    create_topics(bootstrap, 10.0, (TopicSpec(name=RELAY_TOPIC, partitions=1),))
    channel = f"bench.relay.{uuid.uuid4().hex[:6]}"
    timings = [
        "--fetch-wait-ms",
        kafka_env.get("GOVERNOR_KAFKA_FETCH_MAX_WAIT_MS", str(LOCAL_BROKER_TIMEOUTS.fetch_max_wait_ms)),
    ]
    linger = ["--linger-ms", kafka_env.get("GOVERNOR_KAFKA_LINGER_MS", str(LOCAL_BROKER_TIMEOUTS.linger_ms))]
    hops = [
        subprocess.Popen(
            [sys.executable, "-m", "ops.bench.relay", hop, "--bootstrap", bootstrap, *extra, *timings],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for hop, extra in (
            ("hop1", ("--every", str(every), *linger)),
            ("hop2", ("--redis-url", redis_url, "--channel", channel)),
        )
    ]
    time.sleep(5.0)  # both readers positioned at their topics' ends
    client = redis.Redis.from_url(redis_url)
    pubsub = client.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(channel)
    reader = end_reader(bootstrap, RELAY_TOPIC, 10)
    published: dict[tuple[str, float], float] = {}
    hop1_seen: dict[tuple[str, float], float] = {}
    latencies: list[float] = []
    hop1s: list[float] = []
    hop2s: list[float] = []
    done = threading.Event()

    def listen_relay() -> None:
        while not done.is_set():
            for records in reader.poll(timeout_ms=50).values():
                seen = time.perf_counter()
                for record in records:
                    event = json.loads(record.value)
                    hop1_seen.setdefault((event["engine_id"], event["ts"]), seen)

    def listen() -> None:
        while not done.is_set():
            message = pubsub.get_message(timeout=0.05)
            if message is None:
                continue
            seen = time.perf_counter()
            note = json.loads(message["data"])
            client.get(f"{channel}:last")
            key = (note["engine_id"], note["ts"])
            if key in published:
                latencies.append(seen - published[key])
                relayed_at = hop1_seen.get(key)
                if relayed_at is not None:
                    hop1s.append(relayed_at - published[key])
                    hop2s.append(seen - relayed_at)

    _publish_paced(
        bootstrap,
        events,
        rate,
        linger_ms=publisher_linger_ms,
        published=published,
        listeners=(listen, listen_relay),
        done=done,
    )
    reader.close()
    for hop in hops:
        hop.terminate()
        hop.wait(timeout=30)
    pubsub.close()
    client.close()
    return {
        "rate_events_per_s": rate,
        "every": every,
        "relayed_timed": len(latencies),
        **_percentiles(latencies),
        "p50_ms_by_quarter": _quarter_medians(latencies),
        "stages": {"hop1": _percentiles(hop1s), "hop2": _percentiles(hop2s)},
    }


def main() -> int:
    """Run the benchmarks on a private stack; print and write the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="simulated seconds of fleet-8 telemetry")
    parser.add_argument(
        "--estimate-rate", type=float, default=1000.0, help="publish rate of the event -> estimate runs, events/s"
    )
    parser.add_argument(
        "--rate", type=float, nargs="*", default=[1000.0, 5000.0], help="publish rates of the policy latency runs"
    )
    parser.add_argument("--runtimes", nargs="*", choices=RUNTIMES, default=list(RUNTIMES), help="ingest runtimes")
    parser.add_argument(
        "--ingest-rounds",
        type=int,
        default=1,
        help="ingest runs per runtime on the same backlog, alternating runtimes; the median run's figures are reported",
    )
    parser.add_argument(
        "--publisher-linger-ms", type=int, default=5, help="the latency runs' publisher batching delay (the SDK's: 5)"
    )
    parser.add_argument(
        "--service-fetch-wait-ms", type=int, help="the services' GOVERNOR_KAFKA_FETCH_MAX_WAIT_MS in the latency runs"
    )
    parser.add_argument(
        "--service-linger-ms", type=int, help="the services' GOVERNOR_KAFKA_LINGER_MS in the latency runs"
    )
    parser.add_argument(
        "--latency-seconds",
        type=float,
        default=10.0,
        help="wall seconds of publishing in each latency run, each on a broker of its own",
    )
    parser.add_argument(
        "--relay-every",
        type=int,
        default=100,
        help="after each latency run, the no-work floor relaying one telemetry record in this many (0: skip)",
    )
    parser.add_argument("--out", type=Path, default=Path("out/bench/runtime.json"))
    args = parser.parse_args()
    state_dir = Path(tempfile.mkdtemp(prefix="governor-bench-"))
    settings = Settings.load({})
    state = stack_up(state_dir, settings.redis_url, free_port(), broker=settings.broker)
    print(f"broker: {settings.broker} (GOVERNOR_BROKER)")
    try:
        run = uuid.uuid4().hex[:6]
        deployment = f"bench-ingest-{run}"
        events = fleet_events(deployment, args.seconds)
        print(f"telemetry: {len(events)} events of fleet-8 over {args.seconds:.0f} simulated seconds")
        publish_backlog(state.kafka_bootstrap, events)
        bare = [bench_bare_consumer(state.kafka_bootstrap, len(events))]
        rounds: dict[str, list[dict[str, float]]] = {runtime: [] for runtime in args.runtimes}
        for _ in range(args.ingest_rounds):
            for runtime in args.runtimes:
                rounds[runtime].append(
                    bench_ingest(state.kafka_bootstrap, state.redis_url, events, deployment, runtime)
                )
        ingest: dict[str, dict[str, Any]] = {
            runtime: _median_run(runs) | {"rounds_cpu_us_per_event": [run["cpu_us_per_event"] for run in runs]}
            for runtime, runs in rounds.items()
        }
        bare.append(bench_bare_consumer(state.kafka_bootstrap, len(events)))
        bare_rate = float(np.mean([b["events_per_s"] for b in bare]))
        bare_cpu_us = float(np.mean([b["cpu_s"] / b["events"] * 1e6 for b in bare]))
        print(
            f"bare kafka-python consumer: {bare_rate:,.0f} events/s (runs before and after: "
            f"{', '.join(format(b['events_per_s'], ',.0f') for b in bare)}), "
            f"{bare_cpu_us:.1f} us thread CPU per event"
        )
        for runtime, figures in ingest.items():
            figures["ratio_to_bare_consumer"] = figures["events_per_s"] / bare_rate
            runs = figures["rounds_cpu_us_per_event"]
            listed = ", ".join(format(us, ".1f") for us in runs)
            spread = f"(the median of {len(runs)}: {listed}) " if len(runs) > 1 else ""
            print(
                f"ingest ({runtime}): {figures['events_per_s']:,.0f} events/s through one stream processor, "
                f"{figures['ratio_to_bare_consumer']:.2f} of the bare consumer, "
                f"{figures['cpu_us_per_event']:.1f} us thread CPU per event {spread}"
                f"(target {TARGET_EVENTS_PER_S:,} and 0.4)"
            )
        estimate: dict[str, dict[str, object]] = {}
        for runtime in args.runtimes if args.estimate_rate > 0 else ():
            fresh = f"bench-estimate-{run}-{runtime}"
            estimate[runtime] = bench_estimate_latency(
                state.kafka_bootstrap,
                state.redis_url,
                fleet_events(fresh, args.seconds),
                fresh,
                runtime,
                rate=args.estimate_rate,
            )
            print(
                f"event -> estimate ({runtime}): p50 {estimate[runtime]['p50_ms']:.1f} ms, "
                f"p99 {estimate[runtime]['p99_ms']:.1f} ms over {estimate[runtime]['snapshots_timed']} snapshots "
                f"at {args.estimate_rate:,.0f} events/s"
            )
        offline = bench_offline(events, deployment)
        print(f"offline:  {offline['events_per_s']:,.0f} events/s folded in-process (target 100,000)")
        budget = bench_budget(events, deployment)
        budget["client_us_per_event"] = bare_cpu_us
        budget["parts_us_per_event"] = sum(budget[f"{part}_us_per_event"] for part in ("client", "parse", "fold"))
        print(
            f"budget:   {1e6 / TARGET_EVENTS_PER_S:.1f} us per event at {TARGET_EVENTS_PER_S:,} events/s; "
            f"client {budget['client_us_per_event']:.1f} + parse {budget['parse_us_per_event']:.1f} "
            f"+ fold {budget['fold_us_per_event']:.1f} = {budget['parts_us_per_event']:.1f} us"
            + "".join(
                f"; the processor ({runtime}) {figures['cpu_us_per_event']:.1f} us in all"
                for runtime, figures in ingest.items()
            )
        )
        latency = []
        kafka_env = {
            name: str(value)
            for name, value in (
                ("GOVERNOR_KAFKA_FETCH_MAX_WAIT_MS", args.service_fetch_wait_ms),
                ("GOVERNOR_KAFKA_LINGER_MS", args.service_linger_ms),
            )
            if value is not None
        }
        redis_url = state.redis_url
        for rate in args.rate:
            fresh = f"bench-latency-{run}-{rate:.0f}"
            count = int(rate * args.latency_seconds)
            with _fresh_stack(redis_url) as bootstrap:
                figures = bench_latency(
                    bootstrap,
                    redis_url,
                    first_fleet_events(fresh, count),
                    fresh,
                    rate,
                    publisher_linger_ms=args.publisher_linger_ms,
                    kafka_env=kafka_env,
                )
            latency.append(figures)
            print(
                f"latency:  p50 {_ms(figures['p50_ms'])}, p99 {_ms(figures['p99_ms'])} event-to-policy-visible "
                f"over {figures['decisions_timed']} decisions at {rate:,.0f} events/s (target p50 20 ms, p99 100 ms); "
                f"p50 by quarter of the run {_quarters_text(figures)}"
            )
            stages = figures["stages"]
            assert isinstance(stages, dict)
            for stage, cut in stages.items():
                print(f"  {stage:<13} p50 {cut['p50_ms'] or 0.0:.2f} ms, p99 {cut['p99_ms'] or 0.0:.2f} ms")
            kinds = figures["by_kind"]
            assert isinstance(kinds, dict)
            for kind, cut in kinds.items():
                print(
                    f"  {kind:<13} p50 {cut['p50_ms'] or 0.0:.2f} ms, p99 {cut['p99_ms'] or 0.0:.2f} ms "
                    f"over {cut['decisions']} decisions"
                )
            if args.relay_every > 0:
                with _fresh_stack(redis_url) as bootstrap:
                    floor = bench_relay_latency(
                        bootstrap,
                        redis_url,
                        first_fleet_events(f"{fresh}-relay", count),
                        rate,
                        every=args.relay_every,
                        publisher_linger_ms=args.publisher_linger_ms,
                        kafka_env=kafka_env,
                    )
                figures["relay"] = floor
                print(
                    f"  floor: the same two hops with no work (ops/bench/relay.py, 1 record in {args.relay_every}): "
                    f"p50 {_ms(floor['p50_ms'])}, p99 {_ms(floor['p99_ms'])} over {floor['relayed_timed']} "
                    f"records; p50 by quarter {_quarters_text(floor)}"
                )
                relay_stages = floor["stages"]
                assert isinstance(relay_stages, dict)
                for stage, cut in relay_stages.items():
                    print(f"  {stage:<13} p50 {cut['p50_ms'] or 0.0:.2f} ms, p99 {cut['p99_ms'] or 0.0:.2f} ms")
    finally:
        stack_down(state_dir)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "broker": settings.broker,
        "load_average": list(os.getloadavg()),
        "bare_consumer": bare,
        "ingest": ingest,
        "event_to_estimate": estimate,
        "offline": offline,
        "budget": budget,
        "latency": latency,
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
