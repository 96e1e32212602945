"""A rank's load as its own ``step`` telemetry reports it, reconciled with the requests the gateway sent it.

The gateway counts the requests it sent to an upstream (their prompt and streamed tokens): that is BF-IO's L_g
(specs/seed-003-bfio.md Eq. 1) while the gateway is the rank's only client. A rank that also serves other
clients (a second gateway replica, calls straight to the engine) runs requests the gateway cannot see. Its
``step`` events say how many requests it holds (running and waiting) and how much KV cache the running ones
use. The requests there beyond those the gateway had in flight at the step's time are external: they count as
that many requests of the step's mean context (KV tokens per running request) in the rank's load, and take
slots, until a newer step replaces the figure or ``REPORT_VALID_S`` passes without one (an idle engine sends
no steps).

The comparison is made at the step's event time, not on arrival: the gateway's own count at that moment is
rebuilt from the send and finish times of its requests (finished ones are kept for ``REPORT_VALID_S``). Both
ways the two views can disagree in time (a request sent before the step but not yet admitted by the engine,
one the engine finished before the gateway read its last chunk) make the gateway's count the larger, so the
lag of telemetry can hide external load but never invent it. The engine's clock and the gateway's are
assumed to agree to well within a step, as the registry's silence check already assumes.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from schemas.steps import StepReport

REPORT_VALID_S = 5.0  # how long a step's figure counts without a newer one, and how long finishes are kept


@dataclass(frozen=True, slots=True, kw_only=True)
class ExternalLoad:
    """Requests an upstream runs that the gateway did not send, and their tokens."""

    requests: int = 0
    tokens: int = 0


NO_EXTERNAL_LOAD = ExternalLoad()


@dataclass(slots=True, kw_only=True)
class ReportedLoad:
    """The send and finish times of one upstream's requests, and the external load its last step showed."""

    sent_s: dict[str, float] = field(default_factory=dict)
    finished: deque[tuple[float, float]] = field(default_factory=deque)
    external: ExternalLoad = NO_EXTERNAL_LOAD
    reported_at_s: float | None = None

    def sent(self, request_id: str, now_s: float) -> None:
        """Note that ``request_id`` left for the upstream at ``now_s``."""
        self.sent_s[request_id] = now_s

    def finished_at(self, request_id: str, now_s: float) -> None:
        """Note that ``request_id`` ended at ``now_s`` (answered, failed or cancelled)."""
        sent_s = self.sent_s.pop(request_id, None)
        if sent_s is not None:
            self.finished.append((sent_s, now_s))
        while self.finished and self.finished[0][1] < now_s - REPORT_VALID_S:
            self.finished.popleft()

    def own_requests_at(self, at_s: float) -> int:
        """How many of the gateway's requests were out at ``at_s``: sent by then and not finished before."""
        out = sum(1 for sent_s in self.sent_s.values() if sent_s <= at_s)
        return out + sum(1 for sent_s, finished_s in self.finished if sent_s <= at_s < finished_s)

    def reconcile(self, step: StepReport) -> None:
        """Take the upstream's step: what it holds beyond the gateway's requests at that time is external."""
        if self.reported_at_s is not None and step.ts < self.reported_at_s:
            return
        extra = max(0, step.num_running + step.num_waiting - self.own_requests_at(step.ts))
        kv_tokens = step.kv_blocks_used * step.block_size_tokens
        mean_context = kv_tokens / step.num_running if step.num_running else 0.0
        self.external = ExternalLoad(requests=extra, tokens=round(extra * mean_context))
        self.reported_at_s = step.ts

    def external_at(self, now_s: float) -> ExternalLoad:
        """The external load of the last step, or none once it is older than ``REPORT_VALID_S``."""
        if self.reported_at_s is None or now_s - self.reported_at_s > REPORT_VALID_S:
            return NO_EXTERNAL_LOAD
        return self.external
