"""Run a stream processor or policy service that dies at a chosen step of its outbox order.

``python -m tests.integration.crash_driver SERVICE --deployment D --kafka-bootstrap B --redis-url R
[--die-at POINT --after N --how kill|raise] [--idle-exit-s S]`` runs the service (as ``governor run``
would, closing it on the way out) with a checkpoint that, the N-th time the batch reaches POINT,
either sends the process SIGKILL (nothing after that point happens) or raises (the error unwinds
through the service's ``close``, as any unexpected error would). Without ``--die-at`` it runs until
idle, like the service itself.
"""

from __future__ import annotations

import argparse
import os
import signal

from decide.specs import default_registry
from services.policy.service import PolicyService
from services.store.redis_store import RedisStore
from services.stream.processor import StreamProcessor

REDIS_TIMEOUT_S = 2.0


class InjectedCrashError(RuntimeError):
    """The error a ``raise`` checkpoint throws in the middle of a batch."""


class DieAt:
    """A checkpoint that dies the ``after``-th time a batch reaches ``point``."""

    def __init__(self, point: str | None, after: int, how: str) -> None:
        self._point = point
        self._left = after
        self._how = how

    def __call__(self, point: str) -> None:
        if point != self._point:
            return
        self._left -= 1
        if self._left > 0:
            return
        if self._how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        msg = f"injected crash at {point}"
        raise InjectedCrashError(msg)


def main() -> int:
    """Parse the arguments, run the service, close it whatever happens."""
    parser = argparse.ArgumentParser()
    parser.add_argument("service", choices=["stream", "policy"])
    parser.add_argument("--deployment", required=True)
    parser.add_argument("--kafka-bootstrap", required=True)
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--die-at", default=None)
    parser.add_argument("--after", type=int, default=1)
    parser.add_argument("--how", choices=["kill", "raise"], default="kill")
    parser.add_argument("--idle-exit-s", type=float, default=5.0)
    args = parser.parse_args()
    checkpoint = DieAt(args.die_at, args.after, args.how)
    store = RedisStore.from_url(args.redis_url, args.deployment, REDIS_TIMEOUT_S)
    service: StreamProcessor | PolicyService
    if args.service == "stream":
        service = StreamProcessor(
            deployment=args.deployment,
            bootstrap=args.kafka_bootstrap,
            store=store,
            registry=default_registry(),
            checkpoint=checkpoint,
        )
    else:
        service = PolicyService(
            deployment=args.deployment,
            bootstrap=args.kafka_bootstrap,
            store=store,
            registry=default_registry(),
            checkpoint=checkpoint,
        )
    try:
        service.run(idle_exit_s=args.idle_exit_s)
    finally:
        service.close()
        store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
