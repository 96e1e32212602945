"""The bounded, tier-aware waiting queue of one pool: where requests wait when no candidate takes them.

A request waits when every candidate upstream of its pool refuses it (overloaded, or a busy draw failed)
or when requests of its priority or higher already wait. Paying tiers come first, then arrival order; only
the head of the queue may take capacity, so a later request never overtakes an earlier one of its tier.
Waiters re-try when capacity may have appeared (a request finished, an upstream came back: ``notify``) and
every ``recheck_s`` (admission documents change without telling the gateway). A request still waiting at
its deadline, or one arriving at a full queue, gets the shed reason instead of a target.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from schemas.gateway import ShedReason

T = TypeVar("T")


@dataclass(frozen=True, slots=True, kw_only=True)
class Waiter:
    """One queued request: its priority (0 paying, 1 the others) and arrival number."""

    priority: int
    seq: int


class PoolQueue(Generic[T]):
    """Waiters of one pool, served paying tier first, then in arrival order."""

    def __init__(
        self, *, max_waiting: int, deadline_s: float, recheck_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._max_waiting = max_waiting
        self._deadline_s = deadline_s
        self._recheck_s = recheck_s
        self._clock = clock
        self._waiters: list[Waiter] = []
        self._seq = itertools.count()
        self._changed = asyncio.Event()

    @property
    def depth(self) -> int:
        """Requests waiting now."""
        return len(self._waiters)

    def notify(self) -> None:
        """Wake every waiter: capacity may have appeared."""
        self._changed.set()
        self._changed = asyncio.Event()

    def must_wait(self, priority: int) -> bool:
        """True when a request of ``priority`` or a higher one already waits (a newcomer queues behind it)."""
        return any(w.priority <= priority for w in self._waiters)

    async def wait_for(
        self, priority: int, take: Callable[[], T | None], on_queued: Callable[[int], None]
    ) -> T | ShedReason:
        """Queue, then return what ``take`` gives once this request is at the head, or the shed reason.

        Args:
            priority: 0 for a paying tier, 1 otherwise.
            take: the routing decision, tried at the head of the queue; None while nothing takes the request.
            on_queued: called with the queue depth once the request is queued (its ``gateway.queued`` event).
        """
        if len(self._waiters) >= self._max_waiting:
            return "queue_full"
        waiter = Waiter(priority=priority, seq=next(self._seq))
        self._waiters.append(waiter)
        self._waiters.sort(key=lambda w: (w.priority, w.seq))
        on_queued(len(self._waiters))
        deadline = self._clock() + self._deadline_s
        try:
            while True:
                if self._waiters[0] is waiter:
                    target = take()
                    if target is not None:
                        return target
                remaining = deadline - self._clock()
                if remaining <= 0.0:
                    return "deadline"
                changed = self._changed
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), timeout=min(remaining, self._recheck_s))
        finally:
            self._waiters.remove(waiter)
            self.notify()
