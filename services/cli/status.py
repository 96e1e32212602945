"""``governor status``: what every engine of a deployment is told, read from Redis and Kafka.

One table of engines (their estimates' freshness), one of documents (version, age, validity, the
values that matter, the engine's acknowledgement and ack lag), one of the two services'
consumer lag and, where a scaler runs, one of the pools as its last action on ``gov.scaling`` left them
(docs/scaler.md); ``--json`` prints the same report as JSON, and ``--watch N`` refreshes it every N
seconds until Ctrl-C. The columns are described in docs/observability.md.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from services.cli.options import add_settings_flags, settings_from_args
from services.cli.table import MISSING, aligned, number, version
from services.inspection.status import PolicyStatus, StatusReport, collect_status

DEFAULT_WATCH_S = 2.0
CLEAR_SCREEN = "\033[H\033[2J"


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``status`` command."""
    status = commands.add_parser("status", help="what every engine is told: documents, acks, lag")
    status.add_argument("--json", action="store_true", help="print the report as JSON")
    status.add_argument(
        "--watch",
        type=float,
        nargs="?",
        const=DEFAULT_WATCH_S,
        default=None,
        metavar="SECONDS",
        help=f"refresh every SECONDS (default {DEFAULT_WATCH_S:g}) until Ctrl-C",
    )
    add_settings_flags(status, ["deployment", "kafka_bootstrap", "redis_url", "redis_timeout_s", "log_format"])
    status.set_defaults(handler=run)


def _validity(policy: PolicyStatus) -> str:
    if policy.valid_for_s is None:
        return MISSING
    shown = number(policy.valid_for_s)
    return f"{shown} EXPIRED" if policy.valid_for_s < 0 else shown


def _ack(policy: PolicyStatus, engine_scope: bool) -> tuple[str, str]:
    if not engine_scope:
        return f"{policy.acked_by} engines", MISSING
    return version(policy.acked_version), MISSING if policy.ack_lag is None else str(policy.ack_lag)


def render(report: StatusReport) -> str:
    """The report as aligned tables, for people."""
    newest = number(report.newest_event_ts)
    lines = [f"deployment {report.deployment}  newest event t={newest} s", ""]
    lines += aligned(
        ["ENGINE", "SCHEDULER", "LAST_EVENT_T", "BEHIND_S", "EVENTS"],
        [
            [e.engine, e.scheduler or MISSING, number(e.event_ts), number(e.behind_s), str(e.events_folded)]
            for e in report.engines
        ],
    )
    rows = []
    for engine in report.engines:
        for policy in engine.policies:
            rows.append([engine.engine, *_policy_row(policy, engine_scope=True)])
    for policy in report.fleet:
        rows.append([policy.scope, *_policy_row(policy, engine_scope=False)])
    lines += ["", *aligned(["SCOPE", "KIND", "VERSION", "AGE_S", "VALID_FOR_S", "ACKED", "ACK_LAG", "VALUES"], rows)]
    lines += [
        "",
        *aligned(
            ["SERVICE", "TOPIC", "APPLIED", "END", "LAG"],
            [[c.service, c.topic, str(c.applied_records), str(c.end_records), str(c.lag)] for c in report.consumers],
        ),
    ]
    if report.pools:
        lines += [
            "",
            *aligned(
                ["POOL", "REPLICAS", "DESIRED", "LAST_ACTION", "RESULT", "MODE", "PLAN", "AT_T", "ACTIONS", "FAILED"],
                [
                    [
                        p.pool,
                        str(p.replicas),
                        MISSING if p.desired_replicas is None else str(p.desired_replicas),
                        p.reason,
                        p.result,
                        p.mode,
                        version(p.plan_version),
                        number(p.ts),
                        str(p.actions),
                        str(p.failed),
                    ]
                    for p in report.pools
                ],
            ),
        ]
    return "\n".join(lines)


def _policy_row(policy: PolicyStatus, *, engine_scope: bool) -> list[str]:
    acked, lag = _ack(policy, engine_scope)
    return [
        policy.kind,
        version(policy.version),
        number(policy.age_s),
        _validity(policy),
        acked,
        lag,
        policy.shown or MISSING,
    ]


def run(args: argparse.Namespace) -> int:
    """Print the status once, or every ``--watch`` seconds until interrupted (a clean exit)."""
    settings = settings_from_args(args)

    def show() -> None:
        report = collect_status(
            settings.redis_url,
            settings.kafka_bootstrap,
            settings.deployment,
            redis_timeout_s=settings.redis_timeout_s,
            kafka_timeout_s=settings.kafka_timeout_s,
            redis_security=settings.redis_security(),
            kafka_security=settings.kafka_security(),
        )
        text = report.to_json() if args.json else render(report)
        if args.watch is not None and sys.stdout.isatty():
            text = CLEAR_SCREEN + text
        print(text, flush=True)

    if args.watch is None:
        show()
        return 0
    # Ctrl-C sets a flag instead of raising wherever the main thread happens to be: a
    # KeyboardInterrupt inside the Kafka client (building or closing its reader) could leave its
    # network thread running, and the process would never exit.
    interrupted = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda signum, frame: interrupted.set())
    try:
        show()
        while not interrupted.wait(args.watch):
            show()
    finally:
        signal.signal(signal.SIGINT, previous)
    return 0
