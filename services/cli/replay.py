"""``governor record`` and ``governor replay``: recorded streams for tests and what-if analysis."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

from schemas.names import TELEMETRY_TOPIC
from services.cli.options import add_settings_flags, settings_from_args
from services.policy.specs import default_registry
from services.replay.files import read_events, write_lines
from services.replay.replay import decision_lines, read_topic, replay_events, replay_offline
from services.sdk.publisher import TelemetryPublisher


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``record`` and ``replay`` commands."""
    record = commands.add_parser("record", help="write a topic's contents to a JSON-lines file (.gz to compress)")
    record.add_argument("--topic", default=TELEMETRY_TOPIC, help=f"topic to record (default {TELEMETRY_TOPIC})")
    record.add_argument("--out", type=Path, required=True, help="output file (.jsonl or .jsonl.gz)")
    record.add_argument("--idle-s", type=float, default=3.0, help="stop after this long without records")
    add_settings_flags(record, ["kafka_bootstrap", "log_format"])
    record.set_defaults(handler=run_record)
    replay = commands.add_parser("replay", help="publish a recorded event file to Kafka, or fold it offline")
    replay.add_argument("file", type=Path, help="JSON-lines event file (.jsonl or .jsonl.gz)")
    pace = replay.add_mutually_exclusive_group()
    pace.add_argument("--speed", type=float, default=1.0, help="event-time seconds per wall second (default 1)")
    pace.add_argument("--max-speed", action="store_true", help="publish as fast as possible")
    replay.add_argument("--offline", action="store_true", help="fold in-process (no Kafka/Redis); write decisions")
    replay.add_argument("--out", type=Path, default=None, help="with --offline: decision stream file (JSON lines)")
    add_settings_flags(replay, ["kafka_bootstrap", "deployment", "log_format"])
    replay.set_defaults(handler=run_replay)


def run_record(args: argparse.Namespace) -> int:
    """Record the topic from its beginning until idle."""
    settings = settings_from_args(args)
    count = write_lines(args.out, read_topic(settings.kafka_bootstrap, args.topic, idle_s=args.idle_s))
    print(f"{args.out}: {count} records of {args.topic}")
    return 0


def _progress_bar(total: int) -> Callable[[int], None]:
    started = time.monotonic()

    def show(done: int) -> None:
        if done % 500 and done != total:
            return
        width = 30
        filled = int(width * done / max(total, 1))
        rate = done / max(time.monotonic() - started, 1e-9)
        end = "\n" if done == total else ""
        print(
            f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} events {rate:,.0f}/s",
            end=end,
            file=sys.stderr,
            flush=True,
        )

    return show


def run_replay(args: argparse.Namespace) -> int:
    """Replay the file to Kafka (paced) or offline (decisions out)."""
    settings = settings_from_args(args)
    events = list(read_events(args.file))
    if args.offline:
        started = time.monotonic()
        deployment = args.deployment
        plane = replay_offline(events, default_registry(), deployment)
        wall = time.monotonic() - started
        accepted = sum(1 for d in plane.decisions if d.accepted)
        print(
            f"{args.file}: {plane.events_folded} events folded offline in {wall:.2f} s "
            f"({plane.events_folded / max(wall, 1e-9):,.0f}/s), {len(plane.snapshots)} snapshots, "
            f"{accepted} decisions"
        )
        if args.out is not None:
            write_lines(args.out, decision_lines(plane.decisions))
            print(f"decisions: {args.out}")
        return 0
    publisher = TelemetryPublisher(settings.kafka_bootstrap, block_when_full=True)
    try:
        stats = replay_events(
            events, publisher, speed=None if args.max_speed else args.speed, progress=_progress_bar(len(events))
        )
        publisher.flush(60.0)
    finally:
        publisher.close()
    dropped = publisher.stats().dropped
    print(
        f"{args.file}: {stats.events} events replayed to {settings.kafka_bootstrap} in {stats.wall_s:.1f} s "
        f"(event span {stats.event_span_s:.1f} s), {dropped} dropped"
    )
    return 0 if dropped == 0 else 1
