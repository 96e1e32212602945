"""BF-IO acting on a data-parallel deployment whose ranks are separate servers (specs/seed-003-bfio.md 6.2).

The gateway holds the deployment's central waiting pool. On each assignment round it hands the pool and
every rank's in-flight requests (prompt tokens and the tokens counted from their streamed chunks: the loads
the gateway sees) to the pure ``policies.bfio.BfioRouter``, under the bundle pushed for the deployment (kind
``bfio``, scope the group name). The router itself falls back to JSQ-by-load without a valid bundle, and
never gives a rank more requests than its free slots: a rank's free slots are ``max_num_seqs`` minus its
in-flight requests and the requests its own step telemetry shows for other clients (services/gateway/
reported_load.py), zero while it is out of rotation or its admission level is ``overloaded``, and each offered
with probability ``admit_fraction`` while it is ``busy``. An assigned request takes its slot at once, so the
next round sees it.

Deviation: the paper assigns at every decode step of the ranks; the gateway cannot see their steps, so a
round runs whenever the pool or a rank changes (a request arrives or finishes: requests arriving in the
same turn of the event loop are assigned together) and at least every ``tick_s``.

Two baselines replace the central pool when the gateway file asks for them (``[bfio] balancer``), so BF-IO
can be measured against them on the same ranks: ``round_robin`` and ``vllm_score``, vLLM's own data-parallel
load balancing as its front end did it up to 0.11 (``DPLBAsyncMPClient``: the rank of least
``waiting * 4 + running``, ties to the lowest rank). Both place a request the moment it arrives and ignore the
slot limits, as vLLM's front end does: a rank's requests beyond ``max_num_seqs`` wait in its own queue.
Deviation: vLLM reads waiting and running from its coordinator's stats (every 100 ms) plus its own count of
what it sent since; the gateway counts its own in-flight requests per rank exactly, running up to
``max_num_seqs`` and waiting beyond, which gives the baseline a fresher view than vLLM has. vLLM 0.32 (the
CPU build here) has since changed the rule (the greater of its in-flight count and waiting + running, plus a
waiting penalty that grows with KV-cache use).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from policies.bfio import BfioMode, BfioRouter, Routing
from schemas.gateway import Balancer
from schemas.policy_docs.bfio import ActiveRequestDoc, BfioPolicy, RankDoc, WaitingRequestDoc
from services.gateway.admission import AdmissionGate
from services.gateway.config import DpBalancer
from services.gateway.telemetry import GatewayTelemetry
from services.gateway.upstreams import InFlight, Upstream, UpstreamRegistry
from services.sdk.protocol import PolicySource

log = structlog.get_logger(__name__)

_BALANCERS: dict[BfioMode, Balancer] = {BfioMode.BFIO: "bfio", BfioMode.JSQ_LOAD: "jsq_load", BfioMode.FCFS: "fcfs"}


@dataclass(frozen=True, slots=True, kw_only=True)
class RankAssignment:
    """Where the central pool sent one request, and which rule decided the round."""

    upstream: Upstream
    balancer: Balancer


@dataclass(slots=True, kw_only=True)
class _Pending:
    doc: WaitingRequestDoc
    flight: InFlight
    future: asyncio.Future[RankAssignment]


class RankGroup:
    """The central waiting pool of one DP deployment and its BF-IO assignment rounds."""

    def __init__(
        self,
        name: str,
        *,
        registry: UpstreamRegistry,
        policies: PolicySource,
        gate: AdmissionGate,
        telemetry: GatewayTelemetry,
        router: BfioRouter,
        tick_s: float,
        balancer: DpBalancer = "bfio",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.name = name
        self._balancer = balancer
        self._next_rank = 0
        self._registry = registry
        self._policies = policies
        self._gate = gate
        self._telemetry = telemetry
        self._router = router
        self._tick_s = tick_s
        self._clock = clock
        self._waiting: dict[str, _Pending] = {}
        self._wake = asyncio.Event()
        self._step_index = 0
        self.last_routing: Routing | None = None

    def ranks(self) -> list[Upstream]:
        """The group's ranks by ``dp_rank`` (rank index g of the router)."""
        ranks = [u for u in self._registry.all() if u.dp_group == self.name]
        return sorted(ranks, key=lambda u: (u.dp_rank or 0, u.engine_id))

    @property
    def waiting(self) -> int:
        """Requests in the central pool."""
        return len(self._waiting)

    def load_tokens(self, now_s: float) -> float:
        """Mean rank load (other clients' included) plus the waiting prompts: the group's load between targets."""
        ranks = self.ranks()
        in_flight = sum(r.load_tokens() + r.external(now_s).tokens for r in ranks)
        waiting = sum(p.doc.prompt_tokens for p in self._waiting.values())
        return (in_flight + waiting) / max(1, len(ranks))

    def takes_requests(self, now_s: float) -> bool:
        """Whether some rank is in rotation and not overloaded."""
        return any(self._open(rank, now_s) for rank in self.ranks())

    def wake(self) -> None:
        """Run an assignment round soon: the pool or a rank changed."""
        self._wake.set()

    async def submit(
        self,
        *,
        request_id: str,
        prompt_tokens: int,
        max_tokens: int | None,
        timeout_s: float,
        output_tokens_hint: int | None = None,
    ) -> RankAssignment | None:
        """Wait in the central pool until a round assigns the request a rank; None after ``timeout_s``.

        The returned rank already counts the request in flight; the caller removes it when it finishes. With a
        baseline balancer the request is placed at once (None: no rank is open).
        """
        if self._balancer != "bfio":
            return self._place_now(request_id, prompt_tokens, max_tokens, self._clock())
        loop = asyncio.get_running_loop()
        future: asyncio.Future[RankAssignment] = loop.create_future()
        self._waiting[request_id] = _Pending(
            doc=WaitingRequestDoc(
                request_id=request_id,
                prompt_tokens=prompt_tokens,
                arrival_s=self._clock(),
                max_tokens=max_tokens,
                output_tokens_hint=output_tokens_hint,
            ),
            flight=InFlight(
                request_id=request_id,
                prompt_tokens=prompt_tokens,
                max_tokens=max_tokens,
                output_tokens_hint=output_tokens_hint,
            ),
            future=future,
        )
        self._wake.set()
        delivered = False
        try:
            assignment = await asyncio.wait_for(future, timeout=timeout_s)
            delivered = True
            return assignment
        except TimeoutError:
            return None
        finally:
            self._waiting.pop(request_id, None)
            if not delivered and future.done() and not future.cancelled():
                # Assigned in the same turn the caller was cancelled: give the slot back, or it leaks.
                future.result().upstream.finish(request_id, self._clock())

    async def run(self) -> None:
        """Assignment rounds on every change and at least every ``tick_s``, until cancelled."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self._tick_s)
            self._wake.clear()
            await asyncio.sleep(0)  # let requests that arrived in the same turn join this round
            if self._waiting:
                try:
                    self.assign(self._clock())
                except Exception:
                    log.exception("bfio_round_failed", group=self.name)

    def assign(self, now_s: float) -> Routing | None:
        """One round: solve the pool against the ranks' loads and slots, and release the assigned requests."""
        ranks = self.ranks()
        if not ranks or not self._waiting:
            return None
        document = self._policies.current("bfio", self.name, now_s)
        if isinstance(document, BfioPolicy):
            self._router.reload(document)
            self._telemetry.applied(document)
        rank_docs = [_rank_doc(rank, free_slots=self._offered_slots(rank, now_s), now_s=now_s) for rank in ranks]
        pending = list(self._waiting.values())
        waiting, active, free_slots = self._router.batches([p.doc for p in pending], rank_docs)
        routing = self._router.route(
            waiting=waiting, active=active, free_slots=free_slots, now_s=now_s, step_index=self._step_index
        )
        self._step_index += 1
        self.last_routing = routing
        balancer = _BALANCERS[routing.mode]
        for request_id, g in routing.assignments:
            entry = self._waiting.pop(request_id)
            ranks[g].start(entry.flight, now_s)
            entry.future.set_result(RankAssignment(upstream=ranks[g], balancer=balancer))
        if routing.fallback_reason is not None:
            log.debug("bfio_fallback", group=self.name, reason=routing.fallback_reason)
        return routing

    def _place_now(
        self, request_id: str, prompt_tokens: int, max_tokens: int | None, now_s: float
    ) -> RankAssignment | None:
        """Round robin or vLLM's score over the open ranks, slot limits aside (the baselines)."""
        ranks = [rank for rank in self.ranks() if self._open(rank, now_s)]
        if not ranks:
            return None
        if self._balancer == "round_robin":
            rank = ranks[self._next_rank % len(ranks)]
            self._next_rank += 1
        else:
            rank = min(ranks, key=vllm_score)
        rank.start(InFlight(request_id=request_id, prompt_tokens=prompt_tokens, max_tokens=max_tokens), now_s)
        return RankAssignment(upstream=rank, balancer=self._balancer)

    def _offered_slots(self, rank: Upstream, now_s: float) -> int:
        """Free slots of ``rank`` this round: none out of rotation, less other clients' requests, as admitted."""
        if not self._registry.in_rotation(rank, now_s):
            return 0
        free = max(0, rank.free_slots() - rank.external(now_s).requests)
        return self._gate.offered_slots(rank.engine_id, free, now_s)

    def _open(self, rank: Upstream, now_s: float) -> bool:
        if not self._registry.in_rotation(rank, now_s):
            return False
        level, _ = self._gate.level(rank.engine_id, now_s)
        return level != "overloaded"


def _rank_doc(rank: Upstream, *, free_slots: int, now_s: float) -> RankDoc:
    """The router's view of a rank: the gateway's requests there, and as many of the step's mean context as the
    engine reported running for other clients."""
    active = [
        ActiveRequestDoc(
            prompt_tokens=f.prompt_tokens,
            generated_tokens=f.generated_tokens,
            max_tokens=f.max_tokens,
            output_tokens_hint=f.output_tokens_hint,
        )
        for f in rank.in_flight.values()
    ]
    external = rank.external(now_s)
    if external.requests:
        base, extra = divmod(external.tokens, external.requests)
        active += [
            ActiveRequestDoc(prompt_tokens=base + (1 if i < extra else 0), generated_tokens=0)
            for i in range(external.requests)
        ]
    return RankDoc(free_slots=free_slots, active=active)


def vllm_score(rank: Upstream) -> int:
    """vLLM's data-parallel balancing score of a rank, ``waiting * 4 + running``, from the gateway's in-flight count.

    Running is what fits under ``max_num_seqs``; the rest waits in the rank's queue.
    """
    in_flight = len(rank.in_flight)
    running = min(in_flight, rank.max_num_seqs)
    return (in_flight - running) * 4 + running
