"""``governor gateway`` in the live loop, on the real broker and Redis: registrations in, documents in, routes out.

The gateway is built as ``governor gateway`` builds it (services/gateway/service.py): its upstreams come from
``engine.registered`` events read off ``gov.telemetry`` by ``RegistrationFeed``, its documents from Redis
through the SDK's ``PolicyClient``. The upstreams are the in-process stub servers of the gateway's unit tests
(services/testing/upstream.py): what is checked here is the control plane's hold on the route, which
no real model output bears on. A FleetOpt plan is written the way the policy service writes one (the store's
compare-and-set, announced on the updates channel); the BF-IO bundle of a DP group is decided by the real
stream processor and policy service from the ranks' own registrations and heartbeats.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from decide.specs import default_registry
from schemas.engines import EngineRegistered, Heartbeat
from schemas.events import Event
from schemas.policy_docs.fleetopt import FleetoptPolicy
from services.gateway.app import Gateway
from services.gateway.registrations import RegistrationFeed
from services.gateway.upstreams import UpstreamRegistry
from services.policy.service import PolicyService
from services.sdk.policy_client import PolicyClient
from services.sdk.publisher import TelemetryPublisher
from services.settings import KafkaSecurity
from services.stack.launcher import StackState
from services.store.redis_store import RedisStore
from services.stream.processor import StreamProcessor
from services.testing.models import changed
from services.testing.upstream import SignalSink, StubUpstream, gateway_config, upstreams
from tests.integration.processes import running_in_thread
from tests.integration.publishing import publish_all
from tests.unit.gateway.documents import fleetopt_plan

pytestmark = pytest.mark.integration

TIMEOUT_S = 120.0  # a safety net for the whole scenario on a loaded machine, never a measured time
WAIT_S = 60.0  # the longest a step of the loop (a registration read, a document polled) is waited for
HEARTBEAT_S = 0.5


def _registration(
    deployment: str, stub: StubUpstream, *, pool: str, dp_group: str | None = None, rank: int = 0
) -> EngineRegistered:
    """What the vLLM plugin registers for ``stub`` with GOVERNOR_ENDPOINT_URL (and GOVERNOR_DP_GROUP) set."""
    return EngineRegistered(
        event_id=f"{stub.engine_id}-0",
        ts=time.time(),
        deployment=deployment,
        engine_id=stub.engine_id,
        dp_rank=rank if dp_group is not None else None,
        seq=0,
        source_epoch=1,
        model="m",
        gpu="cpu",
        pool=pool,
        max_num_seqs=4,
        max_num_batched_tokens=2048,
        max_model_len=2048,
        kv_blocks_total=100,
        block_size_tokens=16,
        scheduler="vllm",
        obeys=[],
        endpoint_url=stub.url,
        dp_group=dp_group,
    )


@dataclass
class LiveGateway:
    """A gateway serving on loopback with its registrations and documents live, and a client session."""

    gateway: Gateway
    url: str
    sink: SignalSink
    session: aiohttp.ClientSession

    async def post(self, words: int, max_tokens: int = 8) -> tuple[int, str]:
        """A completion of ``words`` stub tokens; its status and the upstream that served it."""
        body = {"model": "m", "prompt": " ".join(["w"] * words), "max_tokens": max_tokens}
        async with self.session.post(f"{self.url}/v1/completions", json=body) as response:
            await response.read()
            return response.status, response.headers.get("x-governor-upstream", "")

    async def until(self, predicate: object, what: str) -> None:
        """Wait (without blocking the gateway's loop) until ``predicate()`` holds."""
        deadline = time.monotonic() + WAIT_S
        while not predicate():  # type: ignore[operator]
            if time.monotonic() > deadline:
                msg = f"timed out after {WAIT_S:.0f} s waiting for {what}"
                raise AssertionError(msg)
            await asyncio.sleep(0.05)

    async def until_routed(self, words: int, upstream: str, what: str) -> None:
        """Send a request of ``words`` tokens until one is served by ``upstream``.

        The gateway reads a document when a request needs it (``PolicyClient.current`` starts the watch)
        and the client polls Redis, so the first requests after a write may still go by the previous one.
        """
        deadline = time.monotonic() + WAIT_S
        while await self.post(words) != (200, upstream):
            if time.monotonic() > deadline:
                msg = f"timed out after {WAIT_S:.0f} s waiting for {what}"
                raise AssertionError(msg)
            await asyncio.sleep(0.1)

    async def until_balanced(self, balancer: str, what: str) -> None:
        """Send requests until one is placed on a rank by ``balancer`` (each read starts or refreshes the watch)."""
        deadline = time.monotonic() + WAIT_S
        while True:
            assert (await self.post(5))[0] == 200
            if self.events("gateway.routed")[-1].balancer == balancer:
                return
            if time.monotonic() > deadline:
                msg = f"timed out after {WAIT_S:.0f} s waiting for {what}"
                raise AssertionError(msg)
            await asyncio.sleep(0.1)

    def events(self, event_type: str) -> list[Any]:
        """Published events of one type, in order."""
        return [e for e in self.sink.events if e.event_type == event_type]

    def applied(self, kind: str, scope: str) -> list[int]:
        """Versions of (kind, scope) the gateway acknowledged, in order."""
        return [
            e.version
            for e in self.sink.events
            if e.event_type == "policy.applied" and (e.kind, e.scope) == (kind, scope)
        ]


@contextlib.asynccontextmanager
async def live_gateway(stack: StackState, deployment: str, tmp_path: Path) -> AsyncIterator[LiveGateway]:
    """A gateway with no gateway-file upstreams, fed by the broker's registrations and Redis' documents."""
    policies = PolicyClient(stack.redis_url, deployment, poll_interval_s=0.1)
    sink = SignalSink()
    gateway = Gateway(
        config=gateway_config("", tmp_path),
        registry=UpstreamRegistry(),
        policies=policies,
        sink=sink,
        deployment=deployment,
        gateway_id="gw-live",
        max_body_bytes=64 * 1024,
        upstream_timeout_s=30.0,
        health_interval_s=3600.0,
        admin_token=None,
    )
    loop = asyncio.get_running_loop()
    feed = RegistrationFeed(
        stack.kafka_bootstrap,
        deployment=deployment,
        deliver=lambda event: loop.call_soon_threadsafe(gateway.lifecycle, event),
        security=KafkaSecurity(),
    )
    runner = web.AppRunner(gateway.application(), handler_cancellation=True, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    feed.start()
    try:
        async with aiohttp.ClientSession() as session:
            yield LiveGateway(gateway=gateway, url=f"http://{host}:{port}", sink=sink, session=session)
    finally:
        await asyncio.to_thread(feed.close)
        await runner.cleanup()
        policies.close()


@contextlib.contextmanager
def heartbeats(stack: StackState, deployment: str, engines: list[str]) -> Iterator[None]:
    """The engines' heartbeats every ``HEARTBEAT_S`` at wall-clock time, as the plugin sends them while it runs."""
    publisher = TelemetryPublisher(stack.kafka_bootstrap)
    stopped = threading.Event()

    def beat() -> None:
        seq = 1
        while not stopped.wait(HEARTBEAT_S):
            for rank, engine_id in enumerate(engines):
                event: Event = Heartbeat(
                    event_id=f"{engine_id}-{seq}",
                    ts=time.time(),
                    deployment=deployment,
                    engine_id=engine_id,
                    dp_rank=rank,
                    seq=seq,
                    source_epoch=1,
                    num_running=0,
                    num_waiting=0,
                )
                publisher.publish(event)
            seq += 1

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stopped.set()
        thread.join(timeout=10.0)
        publisher.close(10.0)


def _run(coro: object) -> None:
    asyncio.run(asyncio.wait_for(coro, TIMEOUT_S))  # type: ignore[arg-type]


def _plan(deployment: str, *, b_short_tokens: int, version: int) -> FleetoptPolicy:
    """A FleetOpt plan valid for a minute from now, for ``deployment``."""
    now = time.time()
    plan = fleetopt_plan(b_short_tokens=b_short_tokens, version=version)
    return changed(plan, deployment=deployment, computed_at=now - 1.0, valid_until=now + 60.0)


def test_registered_engines_become_upstreams_and_each_pushed_plan_moves_the_route(
    stack: StackState, deployment: str, tmp_path: Path
) -> None:
    store = RedisStore.from_url(stack.redis_url, deployment, 5.0)

    async def scenario() -> None:
        async with upstreams(StubUpstream("short-0"), StubUpstream("long-0")) as (short, long):
            publish_all(
                stack.kafka_bootstrap,
                [_registration(deployment, short, pool="short"), _registration(deployment, long, pool="long")],
            )
            async with live_gateway(stack, deployment, tmp_path) as gw:
                await gw.until(lambda: len(gw.gateway.registry.all()) == 2, "both registrations read off the log")
                registered = {u.engine_id: (u.url, u.pool, u.source) for u in gw.gateway.registry.all()}
                assert registered == {
                    "short-0": (short.url, "short", "registered"),
                    "long-0": (long.url, "long", "registered"),
                }
                seen: list[str] = []
                for version, b_short, expected in ((1, 1000, "short-0"), (2, 16, "long-0"), (3, 1000, "short-0")):
                    plan = _plan(deployment, b_short_tokens=b_short, version=version)
                    assert store.put_policy("fleetopt", "fleet", version, plan.model_dump_json())
                    await gw.until_routed(30, expected, f"30 + 8 tokens to {expected} under plan v{version}")
                    assert gw.applied("fleetopt", "fleet")[-1] == version
                    seen.append(expected)
                assert seen == ["short-0", "long-0", "short-0"]
                assert len(short.requests) + len(long.requests) == len(gw.events("gateway.routed"))

    try:
        _run(scenario())
    finally:
        store.close()


def test_a_dp_group_of_registered_ranks_is_balanced_under_the_bundle_the_policy_service_decides(
    stack: StackState, deployment: str, tmp_path: Path
) -> None:
    store = RedisStore.from_url(stack.redis_url, deployment, 5.0)
    processor = StreamProcessor(
        deployment=deployment,
        bootstrap=stack.kafka_bootstrap,
        store=RedisStore.from_url(stack.redis_url, deployment, 5.0),
        registry=default_registry(),
    )
    service = PolicyService(
        deployment=deployment,
        bootstrap=stack.kafka_bootstrap,
        store=RedisStore.from_url(stack.redis_url, deployment, 5.0),
        registry=default_registry(),
    )

    async def scenario() -> None:
        async with upstreams(StubUpstream("rank-0"), StubUpstream("rank-1")) as ranks:
            publish_all(
                stack.kafka_bootstrap,
                [
                    _registration(deployment, stub, pool="default", dp_group="dp-live", rank=g)
                    for g, stub in enumerate(ranks)
                ],
            )
            async with live_gateway(stack, deployment, tmp_path) as gw:
                await gw.until(lambda: len(gw.gateway.registry.all()) == 2, "both ranks read off the log")
                assert sorted((u.dp_group, u.dp_rank) for u in gw.gateway.registry.all()) == [
                    ("dp-live", 0),
                    ("dp-live", 1),
                ]
                assert (await gw.post(5))[0] == 200
                with (
                    heartbeats(stack, deployment, ["rank-0", "rank-1"]),
                    running_in_thread(processor),
                    running_in_thread(service),
                ):
                    await gw.until(
                        lambda: store.get_policy("bfio", "dp-live") is not None, "the group's bundle in Redis"
                    )
                    await gw.until_balanced("bfio", "a request placed under the group's bundle")
                balancers = [e.balancer for e in gw.events("gateway.routed")]
                assert balancers[0] == "jsq_load", "no bundle yet: JSQ-by-load"
                assert balancers[-1] == "bfio"
                assert gw.applied("bfio", "dp-live"), "the gateway acknowledged the bundle it placed under"
                assert store.get_policy("bfio", "rank-0") is None, "a rank gets no bundle of its own"
                routing = gw.gateway.group("dp-live").last_routing
                assert routing is not None
                # The solver's 1.5 ms budget is wall-clock time: a loaded CI machine may cut it short ("budget"),
                # which is still a decision under the bundle; what must not happen is routing without one.
                assert routing.fallback_reason not in ("no_bundle", "bundle_expired")

    try:
        _run(scenario())
    finally:
        store.close()
