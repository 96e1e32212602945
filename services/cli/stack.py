"""``governor stack up | status | down``: the local broker (Tansu, or Apache Kafka: ``--broker kafka``) and Redis."""

from __future__ import annotations

import argparse

from services.cli.options import add_settings_flags, settings_from_args
from services.stack.launcher import stack_down, stack_status, stack_up


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``stack`` command group."""
    stack = commands.add_parser("stack", help="start, inspect or stop the local broker and Redis")
    sub = stack.add_subparsers(dest="stack_command", metavar="COMMAND", required=True)
    up = sub.add_parser("up", help="start the broker and Redis (idempotent) and create the topics")
    up.add_argument("--port", type=int, default=None, help="broker port (default 19092, or a free one)")
    add_settings_flags(up, ["state_dir", "redis_url", "broker", "log_format"])
    up.set_defaults(handler=run_up)
    status = sub.add_parser("status", help="show both endpoints and the topics' end offsets")
    add_settings_flags(status, ["state_dir", "log_format"])
    status.set_defaults(handler=run_status)
    down = sub.add_parser("down", help="stop what `stack up` started")
    add_settings_flags(down, ["state_dir", "log_format"])
    down.set_defaults(handler=run_down)


def run_up(args: argparse.Namespace) -> int:
    """Start the stack and print its endpoints."""
    settings = settings_from_args(args)
    state = stack_up(
        settings.state_dir,
        settings.redis_url,
        args.port,
        settings.kafka_timeout_s,
        settings.redis_security(),
        broker=settings.broker,
    )
    print(f"kafka  {state.kafka_bootstrap}  ({state.broker})")
    print(f"redis  {state.redis_url}")
    print(f"export GOVERNOR_KAFKA_BOOTSTRAP={state.kafka_bootstrap} REDIS_URL={state.redis_url}")
    return 0


def run_status(args: argparse.Namespace) -> int:
    """Print both endpoints, whether they answer, and every topic's end offsets; exit 1 if down."""
    settings = settings_from_args(args)
    status = stack_status(settings.state_dir, redis_security=settings.redis_security())
    if status.state is None:
        print(f"no stack recorded in {settings.state_dir}; run `governor stack up`")
        return 1
    print(f"kafka  {status.state.kafka_bootstrap}  {'up' if status.kafka_ok else 'DOWN'}  ({status.state.broker})")
    print(f"redis  {status.state.redis_url}  {'up' if status.redis_ok else 'DOWN'}")
    for topic, offsets in status.topic_offsets.items():
        print(f"topic  {topic:24s} end offsets {offsets}")
    return 0 if status.kafka_ok and status.redis_ok else 1


def run_down(args: argparse.Namespace) -> int:
    """Stop what `up` started."""
    settings = settings_from_args(args)
    state = stack_down(settings.state_dir)
    print("stack stopped" if state is not None else f"no stack recorded in {settings.state_dir}")
    return 0
