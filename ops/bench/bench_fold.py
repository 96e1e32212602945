"""The pure fold's speed, and the share of it spent building estimate summaries.

The same telemetry is folded by ``Folder`` (fold/folder.py), without Kafka, Redis or
decisions, three ways: with the default registry (the real fold), with an empty registry (no
snapshot is ever taken) and with a registry whose one policy snapshots every ``--dense`` finished
requests of an engine. A snapshot is the engine's summary, its content hash and the
``EstimateSnapshot``; its cost is the dense fold's time over the bare fold's, per snapshot, and its
share of the real fold is that cost times the real fold's snapshots over the real fold's time. The
telemetry is fleet-8 plus the data-parallel ``dp-jsq`` scenario (so the BF-IO parts of the summary
are built too), simulated without control from fixed seeds.

Each engine's state is also serialised as a commit writes it (``Folder.state_json``, fastest of 10):
a commit pays that for every engine folded since the last one (``GOVERNOR_STREAM_COMMIT_INTERVAL_S``).

Most of a snapshot is the estimators' own work (Kaplan-Meier, the hazard fit, the sketches). The
wrap, what the typed summary changed, is also timed alone on each engine's final summary (the
fastest of 30 rounds of 200, so that a busy machine disturbs it little): validating the
``EngineSummary`` from its fields, hashing it and building the ``EstimateSnapshot``.

    PYTHONPATH=. python ops/bench/bench_fold.py [--seconds 60] [--repeat 3] [--dense 10] [--out out/bench/fold.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from dataclasses import replace
from pathlib import Path

from decide.registry import PolicyRegistry
from decide.specs import default_registry
from decide.wiring import admission_spec
from fold.folder import Folder
from fold.snapshot_id import snapshot_id
from fold.triggers import EveryEvents
from schemas.estimates import EngineSummary
from schemas.events import Event
from schemas.names import RecordPosition
from schemas.records import EstimateSnapshot
from schemas.snapshot_trigger import SnapshotTrigger
from services.sdk.protocol import ListSink, StaticPolicySource
from services.sim import load_scenario, run_offline

DEPLOYMENT = "bench-fold"
SCENARIOS = ("fleet-8", "dp-jsq")


def _events(seconds: float) -> list[Event]:
    events: list[Event] = []
    for name in SCENARIOS:
        sink = ListSink()
        scenario = replace(load_scenario(name, duration_s=seconds, seed=1), deployment=DEPLOYMENT)
        run_offline(scenario, sink=sink, policy_source=StaticPolicySource())
        events.extend(sink.events)
    return events


def _fold(events: list[Event], registry: PolicyRegistry) -> tuple[float, int, Folder, float]:
    """Fold every event into a fresh ``Folder``; return wall time, snapshots, the folder and thread CPU time."""
    folder = Folder(DEPLOYMENT, registry)
    position = RecordPosition("bench", 0, 0)
    snapshots = 0
    cpu_started = time.thread_time()
    started = time.perf_counter()
    for event in events:
        snapshots += len(folder.fold(event, position))
    return time.perf_counter() - started, snapshots, folder, time.thread_time() - cpu_started


def _wrap_us(folder: Folder) -> dict[str, float]:
    """Per engine: microseconds to validate its final summary, hash it and build its snapshot."""
    figures = {}
    for engine_id, estimates in sorted(folder.engines.items()):
        fields = estimates.summary().model_dump()
        best = math.inf
        for _ in range(30):
            started = time.perf_counter()
            for _ in range(200):
                summary = EngineSummary.model_validate(fields)
                EstimateSnapshot(
                    deployment=DEPLOYMENT,
                    scope=engine_id,
                    snapshot_id=snapshot_id(engine_id, 1, summary),
                    version=1,
                    ts=1.0,
                    trigger=SnapshotTrigger(kind="admission", cause="bench"),
                    estimates=summary,
                )
            best = min(best, (time.perf_counter() - started) / 200)
        figures[engine_id] = best * 1e6
    return figures


def _state_ms(folder: Folder) -> dict[str, tuple[float, int]]:
    """Per engine: milliseconds to serialise its whole state for a commit (fastest of 10), and its bytes.

    A commit writes this for every engine that folded an event since the last one, so its cost per
    commit grows with the engines a processor owns, not with their events.
    """
    figures = {}
    for engine_id in sorted(folder.engines):
        best = math.inf
        for _ in range(10):
            started = time.perf_counter()
            state = folder.state_json(engine_id)
            best = min(best, time.perf_counter() - started)
        figures[engine_id] = (best * 1e3, len(state))
    return figures


def _first(result: tuple[float, int, Folder, float]) -> float:
    return result[0]


def _dense_registry(every_finished: int) -> PolicyRegistry:
    """One engine-scope policy that snapshots every ``every_finished`` finished requests of each engine."""
    trigger = EveryEvents(event_type="request.finished", n=every_finished)
    return PolicyRegistry([replace(admission_spec(), trigger=trigger)])


def main() -> int:
    """Fold three ways, print the figures and write them as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="simulated seconds of each scenario")
    parser.add_argument("--repeat", type=int, default=3, help="folds of each kind; the fastest counts")
    parser.add_argument("--dense", type=int, default=10, help="finished requests between the dense fold's snapshots")
    parser.add_argument("--out", type=Path, default=Path("out/bench/fold.json"))
    args = parser.parse_args()
    events = _events(args.seconds)
    real_s, real_snapshots, folder, real_cpu_s = min(
        (_fold(events, default_registry()) for _ in range(args.repeat)), key=_first
    )
    bare_s, _, _, bare_cpu_s = min((_fold(events, PolicyRegistry()) for _ in range(args.repeat)), key=_first)
    dense_s, dense_snapshots, _, _ = min(
        (_fold(events, _dense_registry(args.dense)) for _ in range(args.repeat)), key=_first
    )
    wrap_us = _wrap_us(folder)
    state_ms = _state_ms(folder)
    snapshot_s = (dense_s - bare_s) / dense_snapshots
    figures = {
        "events": len(events),
        "fold_events_per_s": len(events) / real_s,
        "fold_cpu_us_per_event": real_cpu_s / len(events) * 1e6,
        "fold_snapshots": real_snapshots,
        "bare_fold_cpu_us_per_event": bare_cpu_s / len(events) * 1e6,
        "load_average": list(os.getloadavg()),
        "bare_fold_events_per_s": len(events) / bare_s,
        "dense_snapshots": dense_snapshots,
        "snapshot_us": snapshot_s * 1e6,
        "snapshot_share_of_fold": snapshot_s * real_snapshots / real_s,
        "summary_wrap_us": wrap_us,
        "state_ms_and_bytes": state_ms,
    }
    print(f"telemetry: {len(events)} events of {', '.join(SCENARIOS)}, {args.seconds:.0f} simulated seconds each")
    print(
        f"fold:      {figures['fold_events_per_s']:,.0f} events/s, {figures['fold_cpu_us_per_event']:.2f} us thread "
        f"CPU per event, {real_snapshots} snapshots (default registry)"
    )
    print(
        f"bare fold: {figures['bare_fold_events_per_s']:,.0f} events/s, "
        f"{figures['bare_fold_cpu_us_per_event']:.2f} us thread CPU per event, no snapshots"
    )
    print(f"snapshot:  {figures['snapshot_us']:,.0f} us each ({dense_snapshots} in the dense fold)")
    print(f"share:     {figures['snapshot_share_of_fold']:.1%} of the real fold's time")
    print(
        f"wrap:      {min(wrap_us.values()):,.0f} to {max(wrap_us.values()):,.0f} us per snapshot "
        f"over {len(wrap_us)} engines"
    )
    print(
        f"state:     {min(ms for ms, _ in state_ms.values()):.2f} to {max(ms for ms, _ in state_ms.values()):.2f} ms "
        f"and {min(n for _, n in state_ms.values()):,} to {max(n for _, n in state_ms.values()):,} bytes of JSON "
        f"per engine per commit, over {len(state_ms)} engines"
    )
    print(f"load average: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
