"""What the per-engine event guard costs the fold: checks per event and the state it adds to each commit.

The guard (fold/event_guard.py) checks every event before it is folded (duplicate id,
``seq``, epoch, event-time bounds) and keeps the last ``dedup_window`` event ids in the engine's
state, which the stream processor serialises at every commit. This script folds the telemetry of
fleet-8 and dp-jsq (simulated without control from fixed seeds, as ops/bench/bench_fold.py does)
and reports, in thread CPU time so that a shared machine's load disturbs it little:

- the guard alone (``Folder.admit`` on every event) against the whole fold (``Folder.fold``);
- one engine's state serialised (``Folder.state_json``) with and without the guard, and its size.

    PYTHONPATH=. python ops/bench/bench_guard.py [--seconds 30] [--repeat 3] [--out out/bench/guard.json]
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

from decide.specs import default_registry
from fold.folder import Folder
from schemas.events import Event
from schemas.names import RecordPosition
from services.sdk.protocol import ListSink, StaticPolicySource
from services.sim import load_scenario, run_offline

DEPLOYMENT = "bench-guard"
SCENARIOS = ("fleet-8", "dp-jsq")
STATE_ROUNDS = 50


def _events(seconds: float) -> list[Event]:
    events: list[Event] = []
    for name in SCENARIOS:
        sink = ListSink()
        scenario = replace(load_scenario(name, duration_s=seconds, seed=1), deployment=DEPLOYMENT)
        run_offline(scenario, sink=sink, policy_source=StaticPolicySource())
        events.extend(sink.events)
    return events


def _admit_only(events: list[Event]) -> float:
    folder = Folder(DEPLOYMENT, default_registry())
    position = RecordPosition("bench", 0, 0)
    started = time.thread_time()
    for event in events:
        folder.admit(event, position)
    return time.thread_time() - started


def _fold(events: list[Event]) -> tuple[float, Folder]:
    folder = Folder(DEPLOYMENT, default_registry())
    position = RecordPosition("bench", 0, 0)
    started = time.thread_time()
    for event in events:
        folder.fold(event, position)
    return time.thread_time() - started, folder


def _state_s(folder: Folder, engine: str) -> float:
    started = time.thread_time()
    for _ in range(STATE_ROUNDS):
        folder.state_json(engine)
    return (time.thread_time() - started) / STATE_ROUNDS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="simulated seconds of each scenario")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; the fastest is reported")
    parser.add_argument("--out", type=Path, default=Path("out/bench/guard.json"))
    args = parser.parse_args()
    events = _events(args.seconds)
    admit_s = min(_admit_only(events) for _ in range(args.repeat))
    folds = [_fold(events) for _ in range(args.repeat)]
    fold_s = min(seconds for seconds, _ in folds)
    folder = folds[0][1]
    engine = max(folder.engines, key=lambda e: folder.engines[e].events_folded)
    with_guard_s = min(_state_s(folder, engine) for _ in range(args.repeat))
    with_guard_bytes = len(folder.state_json(engine))
    guard_bytes = len(json.dumps(folder.engines[engine].guard.to_dict(), separators=(",", ":")))
    result = {
        "events": len(events),
        "engines": len(folder.engines),
        "guard_us_per_event": 1e6 * admit_s / len(events),
        "fold_us_per_event": 1e6 * fold_s / len(events),
        "guard_share_of_fold": admit_s / fold_s,
        "state_ms_with_guard": 1e3 * with_guard_s,
        "state_bytes_with_guard": with_guard_bytes,
        "guard_bytes": guard_bytes,
    }
    print(f"{len(events):,} events, {len(folder.engines)} engines, fastest of {args.repeat} (thread CPU time)")
    print(
        f"guard {result['guard_us_per_event']:.2f} us/event, whole fold {result['fold_us_per_event']:.1f} us/event "
        f"({100 * result['guard_share_of_fold']:.1f} %)"
    )
    print(
        f"state of {engine}: {with_guard_bytes:,} bytes, {guard_bytes:,} of them the guard; "
        f"serialised in {result['state_ms_with_guard']:.2f} ms"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
