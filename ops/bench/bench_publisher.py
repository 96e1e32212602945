"""The engine publisher's cost: CPU per event on each of its threads, and the rate one process sustains.

An engine's telemetry leaves through ``TelemetryPublisher`` (services/sdk/publisher.py): the
engine's own thread only queues an event; the publisher's thread encodes it and hands it to
kafka-python's producer, whose I/O thread sends the batches. On a GPU host those threads share the
GIL with the engine's step loop, so their CPU per event is what the engine pays for its telemetry.
This publishes ``--events`` events of the demo fleet's mix as fast as the publisher takes them
(``block_when_full``, nothing dropped), waits until the broker has acknowledged all of them, and
reports each thread's CPU time per event (``/proc/self/task/<tid>/stat``) and the rate.

    [GOVERNOR_BROKER=kafka] PYTHONPATH=. python ops/bench/bench_publisher.py [--events 30000] [--rounds 2]
        [--out out/bench/publisher.json]

Runs on its own local stack (the broker ``GOVERNOR_BROKER`` names, on a free port).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
import uuid
from pathlib import Path

from ops.bench.backlog import fleet_events
from services.sdk.publisher import TelemetryPublisher
from services.settings import Settings
from services.stack.launcher import stack_down, stack_up
from services.stack.processes import free_port

CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def thread_cpu_s() -> dict[int, float]:
    """CPU seconds (user and system) of each live thread of this process, by native thread id."""
    used: dict[int, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            stat = Path(f"/proc/self/task/{tid}/stat").read_text()
        except FileNotFoundError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        used[int(tid)] = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS_PER_S
    return used


def thread_names() -> dict[int, str]:
    """Python's name for each live thread, by native id (kafka-python names its I/O thread)."""
    return {thread.native_id: thread.name for thread in threading.enumerate() if thread.native_id is not None}


def one_round(bootstrap: str, events: int) -> dict[str, object]:
    """Publish ``events`` events and wait for the broker; CPU per event by thread, and the rate."""
    stream = fleet_events(f"bench-publisher-{uuid.uuid4().hex[:6]}", 60.0)[:events]
    publisher = TelemetryPublisher(bootstrap, block_when_full=True)
    try:
        names = thread_names()
        before = thread_cpu_s()
        started = time.perf_counter()
        for event in stream:
            publisher.publish(event)
        if not publisher.flush(120.0):
            msg = "the broker did not acknowledge every event within 120 s"
            raise RuntimeError(msg)
        wall_s = time.perf_counter() - started
        after = thread_cpu_s()
        names |= thread_names()
    finally:
        publisher.close()
    stats = publisher.stats()
    per_thread = {
        names.get(tid, f"thread-{tid}"): round((cpu - before.get(tid, 0.0)) / len(stream) * 1e6, 1)
        for tid, cpu in after.items()
        if cpu - before.get(tid, 0.0) > 0
    }
    return {
        "events": len(stream),
        "delivered": stats.delivered,
        "dropped": stats.dropped,
        "wall_s": round(wall_s, 3),
        "events_per_s": round(len(stream) / wall_s),
        "cpu_us_per_event_by_thread": per_thread,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=30_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("out/bench/publisher.json"))
    args = parser.parse_args()
    settings = Settings.load({})
    state_dir = Path(tempfile.mkdtemp(prefix="governor-bench-"))
    state = stack_up(state_dir, settings.redis_url, free_port(), broker=settings.broker)
    try:
        rounds = []
        for index in range(args.rounds):
            result = one_round(state.kafka_bootstrap, args.events)
            rounds.append(result)
            threads = ", ".join(f"{name} {us} us" for name, us in result["cpu_us_per_event_by_thread"].items())  # type: ignore[attr-defined]
            print(
                f"round {index + 1}: {result['events']:,} events, {result['events_per_s']:,} events/s, "
                f"{result['dropped']} dropped; CPU per event: {threads}"
            )
    finally:
        stack_down(state_dir)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report = {"broker": settings.broker, "load_average": list(os.getloadavg()), "rounds": rounds}
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
