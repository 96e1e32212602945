"""``Gateway``: the OpenAI-compatible HTTP front of ``governor gateway`` and the routing of each request.

A request to ``/v1/completions`` or ``/v1/chat/completions`` is checked at the edge (services/gateway/inbound.py:
a bad one gets 400 and goes nowhere), then routed in three steps, each from a policy document read through the
SDK's cached ``PolicySource`` (never waiting on Redis; no valid document means the documented safe default):

1. pool, by FleetOpt's routing half (services/gateway/fleet_routing.py): L_total = prompt tokens counted by
   an upstream's own ``/tokenize`` + max_tokens; a borderline request of a safe category is compressed
   (services/gateway/compressor.py) to fit the short pool. Without a plan: context fit;
2. target in the pool, by admission (services/gateway/admission.py): the least-loaded upstream or DP group
   that takes the request; when none does, the request waits in the pool's queue (services/gateway/pool_queue.py)
   and is shed with 429 and ``Retry-After`` at its deadline or when the queue is full;
3. rank, for a DP group, by BF-IO from the group's central pool (services/gateway/ranks.py).

It is then forwarded (services/gateway/forwarding.py). Every step is counted (services/gateway/metrics.py),
published (services/gateway/telemetry.py) and logged when it sheds or fails. ``/healthz``, ``/readyz``,
``/metrics``, ``/v1/models`` and the admin API (services/gateway/admin.py) complete the front.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import structlog
from aiohttp import web
from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from policies.bfio import BfioRouter
from schemas.engines import EngineRegistered, Heartbeat
from schemas.gateway import Balancer, RouteReason, ShedReason, UpstreamErrorKind
from schemas.policy_docs.fleetopt import FleetoptPolicy
from services.gateway.admin import AdminApi
from services.gateway.admission import AdmissionGate
from services.gateway.compressor import Compression, compress_to_fit, plan_sentences
from services.gateway.config import GatewayConfig
from services.gateway.fleet_routing import PoolChoice, choose_pool
from services.gateway.forwarding import error_response, forward
from services.gateway.health_checks import HealthChecker
from services.gateway.inbound import ApiKind, BadRequestError, InboundRequest, RequestIds, parse_inbound
from services.gateway.metrics import GatewayMetrics
from services.gateway.pool_queue import PoolQueue
from services.gateway.ranks import RankAssignment, RankGroup
from services.gateway.registrations import FeedEvent
from services.gateway.telemetry import GatewayTelemetry
from services.gateway.token_count import TokenCounter, TokenCountError
from services.gateway.upstreams import InFlight, Upstream, UpstreamRegistry
from services.sdk.protocol import PolicySource, TelemetrySink

log = structlog.get_logger(__name__)

Target = Upstream | RankGroup
ANY_POOL = "any"
TOKENIZE_TIMEOUT_S = 5.0
HEALTH_TIMEOUT_S = 2.0


class Gateway:
    """Routes OpenAI requests to upstream engines under the admission, FleetOpt and BF-IO documents."""

    def __init__(
        self,
        *,
        config: GatewayConfig,
        registry: UpstreamRegistry,
        policies: PolicySource,
        sink: TelemetrySink,
        deployment: str,
        gateway_id: str,
        max_body_bytes: int,
        upstream_timeout_s: float,
        health_interval_s: float,
        admin_token: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Build the gateway; nothing connects until the application starts.

        Args:
            config: the gateway file (static upstreams are already in ``registry``).
            registry: the upstreams.
            policies: where documents are read (the SDK's ``PolicyClient`` in service).
            sink: where routing events and acks go (the SDK's ``TelemetryPublisher`` in service).
            deployment: the deployment the gateway serves.
            gateway_id: its engine id on ``gov.telemetry``.
            max_body_bytes: larger bodies are refused with 400.
            upstream_timeout_s: longest a request may take upstream.
            health_interval_s: period of the upstream health checks.
            admin_token: bearer token of the admin API (services/gateway/admin.py); None: unauthenticated.
            clock: event time, Unix seconds (documents' ``valid_until`` is compared with it).
        """
        self._config = config
        self.registry = registry
        self._policies = policies
        self._clock = clock
        self._max_body_bytes = max_body_bytes
        self._upstream_timeout = aiohttp.ClientTimeout(total=upstream_timeout_s)
        self._health_interval_s = health_interval_s
        self.metrics = GatewayMetrics(deployment)
        self.telemetry = GatewayTelemetry(sink, gateway_id=gateway_id, deployment=deployment, clock=clock)
        self._gate = AdmissionGate(policies, self.telemetry, seed=config.queue.seed)
        self._queues: dict[str, PoolQueue[Target]] = {}
        self._groups: dict[str, RankGroup] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._session: aiohttp.ClientSession | None = None
        self._counter: TokenCounter | None = None
        self.health: HealthChecker | None = None
        self._ids = RequestIds()
        self._admin = AdminApi(registry, token=admin_token, on_added=self._added, on_change=self._capacity_changed)

    def application(self) -> web.Application:
        """The aiohttp application; its start opens the client session and the background loops."""
        app = web.Application(client_max_size=self._max_body_bytes)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        self._admin.add_routes(app)
        app.on_startup.append(self._start)
        app.on_cleanup.append(self._stop)
        return app

    def group(self, name: str) -> RankGroup:
        """The central pool of DP group ``name``, built (and its router's kernels loaded) on first use."""
        group = self._groups.get(name)
        if group is None:
            group = RankGroup(
                name,
                registry=self.registry,
                policies=self._policies,
                gate=self._gate,
                telemetry=self.telemetry,
                router=BfioRouter(clock=time.perf_counter),
                tick_s=self._config.bfio.tick_s,
                balancer=self._config.bfio.balancer,
                clock=self._clock,
            )
            self._groups[name] = group
            if self._session is not None:
                self._tasks.append(asyncio.get_running_loop().create_task(group.run()))
        return group

    def registered(self, event: EngineRegistered) -> None:
        """Take an engine's registration: an endpoint joins rotation (and its DP group, if any)."""
        upstream = self.registry.register(event)
        if upstream is not None:
            log.info("upstream_registered", upstream=upstream.engine_id, url=upstream.url, pool=upstream.pool)
            self._capacity_changed()

    def heartbeat(self, event: Heartbeat) -> None:
        """Take an engine's heartbeat: it stays in rotation."""
        self.registry.heartbeat(event)

    def lifecycle(self, event: FeedEvent) -> None:
        """Take a registration, heartbeat or step read from the log (services/gateway/registrations.py)."""
        if isinstance(event, EngineRegistered):
            self.registered(event)
        elif isinstance(event, Heartbeat):
            self.heartbeat(event)
        else:
            self.registry.step(event)

    async def _start(self, app: web.Application) -> None:
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=300))
        self._counter = TokenCounter(self._session, timeout_s=TOKENIZE_TIMEOUT_S)
        self.health = HealthChecker(
            self.registry,
            self._session,
            interval_s=self._health_interval_s,
            timeout_s=HEALTH_TIMEOUT_S,
            on_change=self._capacity_changed,
        )
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self.health.run()))
        self._tasks.extend(loop.create_task(group.run()) for group in self._groups.values())
        for name in sorted({u.dp_group for u in self.registry.all() if u.dp_group is not None}):
            self.group(name)

    async def _stop(self, app: web.Application) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        if self._session is not None:
            await self._session.close()

    def _added(self, upstream: Upstream) -> None:
        """Health-check an upstream added through the admin API at once: it joins rotation when it passes."""
        if self.health is not None:
            self._tasks.append(asyncio.get_running_loop().create_task(self.health.check(upstream)))
        self._capacity_changed()

    def _capacity_changed(self) -> None:
        """Rotation changed (health, registration, admin): recount it, and wake what waits for capacity."""
        self._slot_freed()
        now_s = self._clock()
        self.metrics.upstreams_in_rotation.set(sum(self.registry.in_rotation(u, now_s) for u in self.registry.all()))

    def _slot_freed(self) -> None:
        """A request finished: what waits for capacity (pool queues, DP groups' central pools) may go on."""
        for queue in self._queues.values():
            queue.notify()
        for group in self._groups.values():
            group.wake()

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _readyz(self, request: web.Request) -> web.Response:
        now_s = self._clock()
        ready = sum(self.registry.in_rotation(u, now_s) for u in self.registry.all())
        body = {"status": "ready" if ready else "no upstream in rotation", "upstreams_in_rotation": ready}
        return web.json_response(body, status=200 if ready else 503)

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _models(self, request: web.Request) -> web.Response:
        data = [{"id": name, "object": "model", "owned_by": "governor"} for name in self.registry.models()]
        return web.json_response({"object": "list", "data": data})

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, "completions", "/v1/completions")

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, "chat", "/v1/chat/completions")

    async def _handle(self, request: web.Request, kind: ApiKind, path: str) -> web.StreamResponse:
        arrived = time.perf_counter()
        request_id = self._ids.of(request.headers)
        try:
            raw = await self._read_body(request)
            inbound = parse_inbound(raw, kind, request.headers, request_id)
        except BadRequestError as exc:
            self.metrics.answered("bad_request")
            log.info("request_refused", request_id=request_id, field=exc.field, code=exc.error_code)
            return error_response(400, exc.error_code, str(exc), request_id)
        if not self.registry.serves(inbound.model):
            self.metrics.answered("bad_request")
            return error_response(404, "model_not_found", f"no upstream serves model {inbound.model!r}", request_id)
        candidates = self.registry.serving(inbound.model, self._clock())
        if not candidates:
            return self._shed(inbound, None, "no_upstream", 0.0, 503)
        return await self._route(request, inbound=inbound, raw=raw, candidates=candidates, path=path, arrived=arrived)

    async def _read_body(self, request: web.Request) -> bytes:
        limit = self._max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            msg = f"the body is {request.content_length} bytes, more than {limit}"
            raise BadRequestError(msg, field="body", error_code="body_too_large")
        try:
            return await request.read()  # bounded by the application's client_max_size, which is this limit
        except web.HTTPRequestEntityTooLarge as exc:
            msg = f"the body is more than {limit} bytes"
            raise BadRequestError(msg, field="body", error_code="body_too_large") from exc

    async def _route(
        self,
        request: web.Request,
        *,
        inbound: InboundRequest,
        raw: bytes,
        candidates: list[Upstream],
        path: str,
        arrived: float,
    ) -> web.StreamResponse:
        now_s = self._clock()
        routing = self._policies.current("fleetopt", self._config.routing.fleet_scope, now_s)
        plan = routing if isinstance(routing, FleetoptPolicy) else None
        windows = {u.max_model_len for u in candidates}
        needs_count = plan is not None or len(windows) > 1 or any(u.dp_group is not None for u in candidates)
        l_out = inbound.max_tokens if inbound.max_tokens is not None else self._config.routing.default_max_tokens
        prompt_tokens: int | None = None
        if needs_count:
            prompt_tokens = await self._count(inbound, candidates)
        choice = PoolChoice(pool=None, reason="context_fit")
        body = raw
        if plan is not None and prompt_tokens is not None:
            self.telemetry.applied(plan)
            r = self._config.routing
            choice = choose_pool(
                l_total_tokens=prompt_tokens + l_out,
                l_out_tokens=l_out,
                category=inbound.category,
                routing=plan.payload.routing,
                short_pool=r.short_pool,
                long_pool=r.long_pool,
            )
            if choice.compress_to_tokens is not None:
                compressed = await self._compress(inbound, candidates, choice.compress_to_tokens, prompt_tokens)
                if compressed is None:
                    choice = PoolChoice(pool=r.long_pool, reason="fleetopt_long")
                else:
                    body, prompt_tokens = compressed
        l_total = None if prompt_tokens is None else prompt_tokens + l_out
        pool_candidates = [u for u in candidates if choice.pool is None or u.pool == choice.pool]
        reason: RouteReason = choice.reason
        if not pool_candidates:
            pool_candidates, reason = candidates, "context_fit"
        if l_total is not None:
            pool_candidates = [u for u in pool_candidates if u.max_model_len >= l_total]
        if not pool_candidates:
            return self._shed(inbound, choice.pool, "context_too_long", 0.0, 400)
        return await self._dispatch(
            request,
            inbound=inbound,
            body=body,
            candidates=pool_candidates,
            path=path,
            arrived=arrived,
            reason=reason,
            prompt_tokens=prompt_tokens,
            l_total=l_total,
        )

    async def _count(self, inbound: InboundRequest, candidates: list[Upstream]) -> int | None:
        """Prompt tokens by the least-loaded candidate's tokenizer; None (no FleetOpt, no context fit) on failure."""
        if self._counter is None:
            return None
        counter_upstream = min(candidates, key=lambda u: (u.load_tokens(), len(u.in_flight)))
        try:
            return await self._counter.count(counter_upstream.url, inbound.kind, inbound.body)
        except TokenCountError as exc:
            log.warning("prompt_not_counted", request_id=inbound.request_id, error=str(exc), routing="context_fit")
            return None

    async def _compress(
        self, inbound: InboundRequest, candidates: list[Upstream], target_tokens: int, prompt_tokens: int
    ) -> tuple[bytes, int] | None:
        """Cut the prompt text to ``target_tokens`` by the upstream's count: (new body, its tokens), or None."""
        counter = self._counter
        located = _prompt_text(inbound)
        if counter is None or located is None or inbound.category is None:
            return None
        text, rebuild = located
        url = min(candidates, key=lambda u: len(u.in_flight)).url

        async def count(candidate: str) -> int:
            return await counter.count(url, inbound.kind, rebuild(candidate))

        try:
            result: Compression | None = await compress_to_fit(plan_sentences(text), count, target_tokens)
        except TokenCountError as exc:
            log.warning("compression_failed", request_id=inbound.request_id, error=str(exc))
            return None
        if result is None:
            return None
        self.metrics.compressed.inc()
        self.telemetry.compressed(
            request_id=inbound.request_id,
            category=inbound.category,
            original_prompt_tokens=prompt_tokens,
            compressed_prompt_tokens=result.tokens,
            target_tokens=target_tokens,
            sentences_total=result.sentences_total,
            sentences_kept=result.sentences_kept,
        )
        return json.dumps(rebuild(result.text)).encode(), result.tokens

    async def _dispatch(
        self,
        request: web.Request,
        *,
        inbound: InboundRequest,
        body: bytes,
        candidates: list[Upstream],
        path: str,
        arrived: float,
        reason: RouteReason,
        prompt_tokens: int | None,
        l_total: int | None,
    ) -> web.StreamResponse:
        targets = self._targets(candidates)
        pool = candidates[0].pool if len({u.pool for u in candidates}) == 1 else ANY_POOL
        queue = self._queue(pool)
        priority = 0 if inbound.tier in self._config.queue.paying_tiers else 1
        waited_from = time.perf_counter()
        target: Target | ShedReason | None = None if queue.must_wait(priority) else self._pick(targets)
        if target is None:

            def queued(depth: int) -> None:
                self.metrics.queue_depth(pool, depth)
                self.telemetry.queued(request_id=inbound.request_id, pool=pool, tier=inbound.tier, queue_depth=depth)

            target = await queue.wait_for(priority, lambda: self._pick(targets), queued)
            self.metrics.queue_depth(pool, queue.depth)
        if isinstance(target, str):
            return self._shed(inbound, pool, target, time.perf_counter() - waited_from, 429)
        balancer: Balancer = "least_load"
        tokens = prompt_tokens or 0
        if isinstance(target, RankGroup):
            remaining_s = self._config.queue.deadline_s - (time.perf_counter() - waited_from)
            assignment: RankAssignment | None = await target.submit(
                request_id=inbound.request_id,
                prompt_tokens=tokens,
                max_tokens=inbound.max_tokens,
                timeout_s=max(0.0, remaining_s),
                output_tokens_hint=inbound.output_tokens_hint,
            )
            if assignment is None:
                return self._shed(inbound, pool, "deadline", time.perf_counter() - waited_from, 429)
            upstream, balancer = assignment.upstream, assignment.balancer
        else:
            upstream = target
            upstream.start(
                InFlight(request_id=inbound.request_id, prompt_tokens=tokens, max_tokens=inbound.max_tokens),
                self._clock(),
            )
        return await self._send(
            request,
            inbound=inbound,
            body=body,
            upstream=upstream,
            path=path,
            arrived=arrived,
            reason=reason,
            balancer=balancer,
            prompt_tokens=prompt_tokens,
            l_total=l_total,
            waited_from=waited_from,
        )

    async def _send(
        self,
        request: web.Request,
        *,
        inbound: InboundRequest,
        body: bytes,
        upstream: Upstream,
        path: str,
        arrived: float,
        reason: RouteReason,
        balancer: Balancer,
        prompt_tokens: int | None,
        l_total: int | None,
        waited_from: float,
    ) -> web.StreamResponse:
        flight = upstream.in_flight[inbound.request_id]
        started = time.perf_counter()
        self.metrics.overhead.observe(started - arrived)
        self.metrics.routed(upstream.pool, reason)
        self.telemetry.routed(
            request_id=inbound.request_id,
            model=inbound.model,
            pool=upstream.pool,
            upstream=upstream.engine_id,
            reason=reason,
            balancer=balancer,
            prompt_tokens=prompt_tokens,
            max_tokens=inbound.max_tokens,
            l_total_tokens=l_total,
            tier=inbound.tier,
            category=inbound.category,
            queued_s=started - waited_from,
            dp_rank=upstream.dp_rank,
        )
        session = self._session
        if session is None:
            msg = "the gateway's application has not started"
            raise RuntimeError(msg)

        def failed(kind: UpstreamErrorKind, status: int | None) -> None:
            self.metrics.upstream_error(kind)
            self.telemetry.upstream_error(
                request_id=inbound.request_id, upstream=upstream.engine_id, kind=kind, status=status
            )
            log.warning("upstream_failed", request_id=inbound.request_id, upstream=upstream.engine_id, kind=kind)
            if kind == "unreachable" and self.registry.check_failed(upstream):
                log.warning("upstream_ejected", upstream=upstream.engine_id, failures=upstream.consecutive_failures)

        outcome = "disconnected"
        try:
            result = await forward(
                request=request,
                session=session,
                upstream=upstream,
                path=path,
                body=body,
                request_id=inbound.request_id,
                flight=flight,
                timeout=self._upstream_timeout,
                on_error=failed,
            )
            outcome = result.outcome
            return result.response
        finally:
            upstream.finish(inbound.request_id, self._clock())
            self.metrics.answered(outcome)
            if outcome == "disconnected":
                log.info("client_disconnected", request_id=inbound.request_id, upstream=upstream.engine_id)
            self._slot_freed()

    def _targets(self, candidates: list[Upstream]) -> list[Target]:
        targets: list[Target] = [u for u in candidates if u.dp_group is None]
        for name in sorted({u.dp_group for u in candidates if u.dp_group is not None}):
            targets.append(self.group(name))
        return targets

    def _queue(self, pool: str) -> PoolQueue[Target]:
        queue = self._queues.get(pool)
        if queue is None:
            options = self._config.queue
            queue = PoolQueue(
                max_waiting=options.max_waiting, deadline_s=options.deadline_s, recheck_s=options.recheck_s
            )
            self._queues[pool] = queue
        return queue

    def _pick(self, targets: list[Target]) -> Target | None:
        """The least-loaded target that takes the request now (admission), or None."""
        now_s = self._clock()
        best: Target | None = None
        best_load = (float("inf"), 0)
        for target in targets:
            if isinstance(target, RankGroup):
                takes, load = target.takes_requests(now_s), (target.load_tokens(now_s), target.waiting)
            else:
                takes = self._gate.admits(target.engine_id, now_s)
                external = target.external(now_s)
                load = (float(target.load_tokens() + external.tokens), len(target.in_flight) + external.requests)
            if takes and load < best_load:
                best, best_load = target, load
        return best

    def _shed(
        self, inbound: InboundRequest, pool: str | None, reason: ShedReason, waited_s: float, status: int
    ) -> web.Response:
        self.metrics.shed(reason)
        self.metrics.answered("shed")
        self.telemetry.shed(
            request_id=inbound.request_id, pool=pool, tier=inbound.tier, reason=reason, waited_s=waited_s
        )
        log.warning("request_shed", request_id=inbound.request_id, pool=pool, tier=inbound.tier, reason=reason)
        retry_after = self._config.queue.deadline_s if status in (429, 503) else None
        message = {
            "queue_full": "every upstream of the pool is overloaded and its queue is full",
            "deadline": "every upstream of the pool stayed overloaded until the request's queueing deadline",
            "no_upstream": f"no upstream of model {inbound.model!r} is in rotation",
            "context_too_long": "the prompt and max_tokens exceed every upstream's context window",
        }[reason]
        return error_response(status, reason, message, inbound.request_id, retry_after_s=retry_after)


def _prompt_text(inbound: InboundRequest) -> tuple[str, Callable[[str], dict[str, Any]]] | None:
    """The compressible text of a request and how to rebuild the body around a new text; None if none.

    Completions: a string prompt. Chat: the last user message whose content is a string (system messages and
    earlier turns stay as they are).
    """
    body = inbound.body
    if inbound.kind == "completions":
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            return None
        return prompt, lambda text: {**body, "prompt": text}
    messages: list[Any] = body["messages"]
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.get("role") == "user" and isinstance(message.get("content"), str):

            def rebuild(text: str, index: int = index) -> dict[str, Any]:
                replaced = [*messages]
                replaced[index] = {**messages[index], "content": text}
                return {**body, "messages": replaced}

            return message["content"], rebuild
    return None
