"""``governor record`` and ``governor replay``: recorded streams for tests and what-if analysis."""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from tqdm import tqdm

from decide.specs import default_registry
from schemas.errors import BackendUnavailableError, InvalidInputError
from schemas.events import Event
from schemas.names import TELEMETRY_TOPIC
from services.backends import kafka_answers
from services.cli.options import add_settings_flags, settings_from_args
from services.replay.files import read_events, write_lines
from services.replay.replay import as_deployment, decision_lines, read_topic, replay_events, replay_offline
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
    replay.add_argument(
        "--as-deployment",
        default=None,
        metavar="NAME",
        help="relabel every event to deployment NAME (replay a recording into another deployment)",
    )
    add_settings_flags(replay, ["kafka_bootstrap", "deployment", "log_format"])
    replay.set_defaults(handler=run_replay)


def run_record(args: argparse.Namespace) -> int:
    """Record the topic from its beginning until idle."""
    settings = settings_from_args(args)
    records = read_topic(
        settings.kafka_bootstrap, args.topic, idle_s=args.idle_s, to_end=False, security=settings.kafka_security()
    )
    first = next(records, None)  # the broker and the topic are checked before the file is created
    count = write_lines(args.out, records if first is None else itertools.chain([first], records))
    print(f"{args.out}: {count} records of {args.topic}")
    return 0


def _events(args: argparse.Namespace) -> Iterator[Event]:
    """The file's events, streamed (never all in memory), relabelled by ``--as-deployment``.

    Raises:
        InvalidInputError: the file is missing, unreadable, has a bad line, or holds no events.
    """
    events = read_events(args.file)
    first = next(events, None)
    if first is None:
        msg = f"{args.file}: no events (the file is empty)"
        raise InvalidInputError(msg, source=str(args.file))
    stream = itertools.chain([first], events)
    return as_deployment(stream, args.as_deployment) if args.as_deployment is not None else stream


def run_replay(args: argparse.Namespace) -> int:
    """Replay the file to Kafka (paced; a progress bar on a terminal) or offline (decisions out)."""
    settings = settings_from_args(args)
    events = _events(args)
    if args.offline:
        started = time.monotonic()
        deployment = args.as_deployment or args.deployment
        plane = replay_offline(events, default_registry(), deployment)
        wall = time.monotonic() - started
        accepted = sum(1 for d in plane.decisions if d.accepted)
        print(
            f"{args.file}: {plane.events_folded} events folded offline in {wall:.2f} s "
            f"({plane.events_folded / max(wall, 1e-9):,.0f}/s), {len(plane.snapshots)} snapshots, "
            f"{accepted} decisions"
        )
        if plane.refused:
            codes = ", ".join(f"{code} {count}" for code, count in sorted(plane.refused.items()))
            print(f"refused by the engines' guards, as the stream processor dead-letters them: {codes}")
        if args.out is not None:
            write_lines(args.out, decision_lines(plane.decisions))
            print(f"decisions: {args.out}")
        return 0
    if not kafka_answers(settings.kafka_bootstrap):
        msg = f"kafka at {settings.kafka_bootstrap} did not answer; nothing was replayed"
        raise BackendUnavailableError(msg, backend="kafka")
    publisher = TelemetryPublisher(settings.kafka_bootstrap, block_when_full=True, security=settings.kafka_security())
    bar = tqdm(unit=" events", file=sys.stderr, mininterval=0.5) if sys.stderr.isatty() else None
    try:
        stats = replay_events(
            events,
            publisher,
            speed=None if args.max_speed else args.speed,
            progress=None if bar is None else (lambda done: bar.update(1)),
        )
        publisher.flush(60.0)
    finally:
        if bar is not None:
            bar.close()
        publisher.close()
    dropped = publisher.stats().dropped
    print(
        f"{args.file}: {stats.events} events replayed to {settings.kafka_bootstrap} in {stats.wall_s:.1f} s "
        f"(event span {stats.event_span_s:.1f} s), {dropped} dropped"
    )
    return 0 if dropped == 0 else 1
