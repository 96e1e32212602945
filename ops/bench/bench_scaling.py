"""Horizontal scale of the stream processor: 1, 2 and 4 members of one consumer group on 8 partitions.

The fleet-8 scenario's telemetry (eight engines, ``engine-0`` ... ``engine-7``) is published once to
``gov.telemetry`` on a private stack; the records per partition show the engine rule's spread
(services/engine_partitions.py) beside where Kafka's murmur2 hash would have put the same engines.
Then, for each member count, the deployment's Redis keys are flushed and that many stream
processors start together as processes in one fresh consumer group, fold the whole backlog and
exit when idle. Each member reports what it folded, its thread CPU time, the partitions it got and
how many assignments it went through (one means no rebalance disturbed the run); the figures are:

- per member: events folded / (its last batch - its first batch);
- total: all events / (the last member's last batch - the first member's first batch);
- the speed-up of the total over one member.

The members, the broker and Redis share this machine's cores (``cpu_count`` in the output), so
the total cannot grow past what those cores give; the CPU time per event says what each member's
work costs whatever the sharing.

    PYTHONPATH=. python ops/bench/bench_scaling.py [--seconds 60] [--members 1 2 4] [--out out/bench/bench_scaling.json]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from kafka import KafkaConsumer, TopicPartition
from kafka.partitioner import murmur2

from decide.specs import default_registry
from ops.bench.backlog import fleet_events, publish_backlog
from schemas.names import TELEMETRY_TOPIC, Partition
from services.settings import Settings
from services.stack.launcher import stack_down, stack_up
from services.stack.processes import free_port
from services.store.redis_store import RedisStore
from services.stream.processor import StreamProcessor

IDLE_EXIT_S = 5.0
MEMBER_TIMEOUT_S = 900.0


def _records_per_partition(bootstrap: str) -> list[int]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    partitions = [TopicPartition(TELEMETRY_TOPIC, p) for p in sorted(consumer.partitions_for_topic(TELEMETRY_TOPIC))]
    ends = consumer.end_offsets(partitions)
    consumer.close()
    return [int(ends[tp]) for tp in partitions]


def _hashed_spread(engines: list[str], partitions: int) -> list[int]:
    """Engines per partition under Kafka's default partitioner (murmur2 of the id), for comparison."""
    counts = collections.Counter((murmur2(e.encode()) & 0x7FFFFFFF) % partitions for e in engines)
    return [counts[p] for p in range(partitions)]


class _Member(StreamProcessor):
    """A stream processor that also records its assignments."""

    assignments: list[list[int]]

    def position(self, partitions: list[Partition]) -> dict[Partition, int]:
        self.assignments.append(sorted(partition for _, partition in partitions))
        return super().position(partitions)


def member(bootstrap: str, redis_url: str, deployment: str, group_id: str) -> int:
    """Run one member until idle; print its figures as one JSON line (the parent reads it)."""
    store = RedisStore.from_url(redis_url, deployment, 5.0)
    processor = _Member(
        deployment=deployment, bootstrap=bootstrap, store=store, registry=default_registry(), group_id=group_id
    )
    processor.assignments = []
    cpu_started = time.thread_time()
    counters = processor.run(idle_exit_s=IDLE_EXIT_S)
    cpu_s = time.thread_time() - cpu_started
    processor.close()
    store.close()
    figures = {
        "folded": counters.folded,
        "first_batch_at_s": counters.first_batch_at_s,
        "last_batch_at_s": counters.last_batch_at_s,
        "cpu_s": cpu_s,
        "assignments": processor.assignments,
    }
    print(json.dumps(figures))
    return 0


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberFigures:
    """What one member folded, how fast, at what CPU cost, on which partitions, after how many assignments."""

    events: int
    wall_s: float
    events_per_s: float
    cpu_us_per_event: float
    partitions: list[int]
    assignments: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ScalingRun:
    """One member count: the total and each member's figures."""

    members: int
    events: int
    wall_s: float
    events_per_s: float
    per_member: list[MemberFigures]


def bench_members(bootstrap: str, redis_url: str, deployment: str, members: int, events: int) -> ScalingRun:
    """Fold the backlog with ``members`` processes in one fresh group; their figures and the total."""
    store = RedisStore.from_url(redis_url, deployment, 5.0)
    store.flush_deployment()
    store.close()
    group_id = f"bench-scaling-{members}-{uuid.uuid4().hex[:6]}"
    argv = [sys.executable, __file__, "member", bootstrap, redis_url, deployment, group_id]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    processes = [
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env) for _ in range(members)
    ]
    reports = []
    for process in processes:
        out, _ = process.communicate(timeout=MEMBER_TIMEOUT_S)
        assert process.returncode == 0, f"a member exited with {process.returncode}"
        reports.append(json.loads(out.decode().strip().splitlines()[-1]))
    folded = sum(int(r["folded"]) for r in reports)
    assert folded == events, f"{members} members folded {folded} of {events} events"
    per_member = []
    for report in reports:
        wall = report["last_batch_at_s"] - report["first_batch_at_s"] if report["folded"] else 0.0
        per_member.append(
            MemberFigures(
                events=report["folded"],
                wall_s=wall,
                events_per_s=report["folded"] / wall if wall > 0 else 0.0,
                cpu_us_per_event=report["cpu_s"] / report["folded"] * 1e6 if report["folded"] else 0.0,
                partitions=report["assignments"][-1] if report["assignments"] else [],
                assignments=len(report["assignments"]),
            )
        )
    active = [r for r in reports if r["folded"]]
    wall = max(r["last_batch_at_s"] for r in active) - min(r["first_batch_at_s"] for r in active)
    return ScalingRun(members=members, events=folded, wall_s=wall, events_per_s=folded / wall, per_member=per_member)


def main() -> int:
    """Publish the backlog on a private stack, fold it with each member count; print and write the figures."""
    if len(sys.argv) == 6 and sys.argv[1] == "member":
        return member(*sys.argv[2:6])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="simulated seconds of fleet-8 telemetry")
    parser.add_argument("--members", type=int, nargs="*", default=[1, 2, 4], help="member counts to run")
    parser.add_argument("--out", type=Path, default=Path("out/bench/bench_scaling.json"))
    args = parser.parse_args()
    load_at_start = list(os.getloadavg())
    state_dir = Path(tempfile.mkdtemp(prefix="governor-bench-"))
    state = stack_up(state_dir, Settings.load({}).redis_url, free_port())
    runs = []
    try:
        deployment = f"bench-scaling-{uuid.uuid4().hex[:6]}"
        events = fleet_events(deployment, args.seconds)
        engines = sorted({e.engine_id for e in events})
        publish_backlog(state.kafka_bootstrap, events)
        records = _records_per_partition(state.kafka_bootstrap)
        hashed = _hashed_spread(engines, len(records))
        print(f"telemetry: {len(events)} events of {len(engines)} engines over {args.seconds:.0f} simulated seconds")
        print(f"records per partition (engine rule): {records}; engines per partition under murmur2: {hashed}")
        for count in args.members:
            run = bench_members(state.kafka_bootstrap, state.redis_url, deployment, count, len(events))
            runs.append(run)
            one = runs[0].events_per_s if runs[0].members == 1 else None
            speedup = f", {run.events_per_s / one:.2f}x one member" if one else ""
            print(f"{count} member(s): {run.events_per_s:,.0f} events/s in total{speedup}")
            for m in run.per_member:
                print(
                    f"  partitions {m.partitions}: {m.events} events, {m.events_per_s:,.0f} events/s, "
                    f"{m.cpu_us_per_event:.1f} us thread CPU per event, {m.assignments} assignment(s)"
                )
    finally:
        stack_down(state_dir)
    report = {
        "cpu_count": os.cpu_count(),
        "load_average_at_start": load_at_start,
        "load_average_at_end": list(os.getloadavg()),
        "events": len(events),
        "engines": engines,
        "records_per_partition": records,
        "engines_per_partition_murmur2": hashed,
        "runs": [asdict(run) for run in runs],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
