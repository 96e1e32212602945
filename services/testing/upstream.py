"""In-process stand-ins for vLLM servers and a gateway on loopback, for the gateway's tests and benchmark.

``StubUpstream`` answers vLLM's ``/health``, ``/v1/models``, ``/tokenize`` (its "tokenizer" counts whitespace-separated
words, so a test knows every count exactly), ``/v1/completions`` and ``/v1/chat/completions``. It records
every request body it gets, how many it serves at once, and whether a request was cancelled by its client;
a streaming answer sends one SSE event per entry of ``chunks``, each after the test releases it when
``gated`` (so a test can see that the gateway passes chunk 1 on before chunk 2 exists).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from schemas.events import Event
from services.gateway import Gateway, GatewayConfig, UpstreamRegistry, read_gateway_config
from services.sdk.protocol import ListSink, PolicySource, StaticPolicySource


def words(text: str) -> int:
    """The stub tokenizer: one token per whitespace-separated word."""
    return len(text.split())


@dataclass
class StubUpstream:
    """A vLLM-like server; see the module docstring."""

    engine_id: str
    model: str = "m"
    chunks: list[str] = field(default_factory=lambda: ["Hello", " world"])
    gated: bool = False
    status: int = 200
    healthy: bool = True
    requests: list[dict[str, Any]] = field(default_factory=list)
    tokenize_calls: int = 0
    running: int = 0
    max_running: int = 0
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    started: asyncio.Event = field(default_factory=asyncio.Event)
    finish: asyncio.Event = field(default_factory=asyncio.Event)
    url: str = ""
    _gate: asyncio.Queue[None] = field(default_factory=asyncio.Queue)
    _runner: web.AppRunner | None = None

    def release(self, count: int = 1) -> None:
        """Let ``count`` more gated chunks go."""
        for _ in range(count):
            self._gate.put_nowait(None)

    async def start(self) -> str:
        """Listen on a free loopback port; return the base URL."""
        app = web.Application()
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/tokenize", self._tokenize)
        app.router.add_post("/v1/completions", self._complete)
        app.router.add_post("/v1/chat/completions", self._complete)
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        return self.url

    async def close(self) -> None:
        """Stop listening."""
        if self._runner is not None:
            await self._runner.cleanup()

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(status=200 if self.healthy else 503)

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": self.model, "max_model_len": 4096}]})

    async def _tokenize(self, request: web.Request) -> web.Response:
        self.tokenize_calls += 1
        body = await request.json()
        if "messages" in body:
            count = sum(words(m["content"]) for m in body["messages"]) + 2 * len(body["messages"])
        else:
            count = words(body["prompt"])
        return web.json_response({"count": count, "max_model_len": 4096, "tokens": []})

    async def _complete(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        if self.status != 200:
            return web.json_response({"error": {"message": "stub refuses", "code": self.status}}, status=self.status)
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        self.started.set()
        try:
            if not body.get("stream"):
                if self.gated:
                    await self.finish.wait()
                return web.json_response({"id": "cmpl-1", "choices": [{"text": "".join(self.chunks)}]})
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            for text in self.chunks:
                if self.gated:
                    await self._gate.get()
                event = {"choices": [{"text": text}]}
                await response.write(f"data: {json.dumps(event)}\n\n".encode())
            if self.gated:
                await self.finish.wait()
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
            return response
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        finally:
            self.running -= 1


@contextlib.asynccontextmanager
async def upstreams(*stubs: StubUpstream) -> AsyncIterator[list[StubUpstream]]:
    """Start every stub; close them all on exit."""
    for stub in stubs:
        await stub.start()
    try:
        yield list(stubs)
    finally:
        for stub in stubs:
            await stub.close()


class SignalSink(ListSink):
    """A ``ListSink`` that also signals each event type's arrival, so a test awaits an event instead of sleeping."""

    def __init__(self) -> None:
        super().__init__()
        self._seen: dict[str, asyncio.Event] = {}

    def seen(self, event_type: str) -> asyncio.Event:
        """Set once an event of ``event_type`` was published."""
        return self._seen.setdefault(event_type, asyncio.Event())

    def publish(self, event: Event) -> None:
        """Keep ``event`` and signal its type."""
        super().publish(event)
        self.seen(event.event_type).set()


@dataclass
class RunningGateway:
    """A gateway listening on loopback, with what it published and a client session."""

    gateway: Gateway
    url: str
    sink: SignalSink
    session: aiohttp.ClientSession

    def events(self, event_type: str) -> list[Any]:
        """Published events of one type, in order."""
        return [e for e in self.sink.events if e.event_type == event_type]


def gateway_config(text: str, tmp_path: Path) -> GatewayConfig:
    """A gateway file from TOML text, written and read back as the service reads it."""
    path = tmp_path / "gateway.toml"
    path.write_text(text)
    return read_gateway_config(path)


def upstream_entry(stub: StubUpstream, *, pool: str = "default", model: str = "m", extra: str = "") -> str:
    """The gateway file's ``[[upstreams]]`` table of ``stub``."""
    return (
        f'[[upstreams]]\nengine_id = "{stub.engine_id}"\nurl = "{stub.url}"\nmodel = "{model}"\n'
        f'pool = "{pool}"\n{extra}\n'
    )


@contextlib.asynccontextmanager
async def running_gateway(
    config: GatewayConfig,
    policies: PolicySource | None = None,
    *,
    clock: Callable[[], float] = lambda: 1000.0,
    max_body_bytes: int = 64 * 1024,
    health_interval_s: float = 3600.0,
    admin_token: str | None = None,
) -> AsyncIterator[RunningGateway]:
    """Serve a gateway of ``config`` on a free loopback port, as ``governor gateway`` does."""
    registry = UpstreamRegistry(failures_to_eject=1)
    registry.add_static(config.upstreams)
    sink = SignalSink()
    gateway = Gateway(
        config=config,
        registry=registry,
        policies=policies or StaticPolicySource(),
        sink=sink,
        deployment="test",
        gateway_id="gw-test",
        max_body_bytes=max_body_bytes,
        upstream_timeout_s=30.0,
        health_interval_s=health_interval_s,
        admin_token=admin_token,
        clock=clock,
    )
    runner = web.AppRunner(gateway.application(), handler_cancellation=True, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        async with aiohttp.ClientSession() as session:
            yield RunningGateway(gateway=gateway, url=f"http://{host}:{port}", sink=sink, session=session)
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def gateway_over(
    tmp_path: Path,
    *stubs: StubUpstream,
    policies: PolicySource | None = None,
    entries: Callable[[list[StubUpstream]], str] | None = None,
    clock: Callable[[], float] = lambda: 1000.0,
    max_body_bytes: int = 64 * 1024,
    admin_token: str | None = None,
) -> AsyncIterator[RunningGateway]:
    """Start ``stubs`` and a gateway over them (one ``[[upstreams]]`` each, or the file ``entries`` writes)."""
    async with upstreams(*stubs):
        text = entries(list(stubs)) if entries is not None else "".join(upstream_entry(s) for s in stubs)
        config = gateway_config(text, tmp_path)
        async with running_gateway(
            config, policies, clock=clock, max_body_bytes=max_body_bytes, admin_token=admin_token
        ) as gw:
            yield gw
