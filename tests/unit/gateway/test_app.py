"""The gateway's HTTP front against stub upstreams on loopback: pass-through, streaming, cancellation, errors."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from services.gateway.telemetry import GatewayTelemetry
from services.sdk.protocol import ListSink
from services.testing.upstream import (
    StubUpstream,
    gateway_config,
    gateway_over,
    running_gateway,
    upstream_entry,
)

TIMEOUT_S = 60.0  # a safety net for awaited events (test files run side by side), never a measured time


def _run(coro: object) -> None:
    asyncio.run(asyncio.wait_for(coro, TIMEOUT_S))  # type: ignore[arg-type]


class TestPassThrough:
    def test_non_streaming_answer_comes_back_with_request_id_and_upstream(self, tmp_path: Path) -> None:
        async def scenario() -> None:
            stub = StubUpstream("e0", chunks=["four", " two"])
            async with gateway_over(tmp_path, stub) as gw:
                body = {"model": "m", "prompt": "say it", "max_tokens": 4}
                headers = {"x-request-id": "client-7"}
                async with gw.session.post(f"{gw.url}/v1/completions", json=body, headers=headers) as response:
                    assert response.status == 200
                    assert response.headers["x-request-id"] == "client-7"
                    assert response.headers["x-governor-upstream"] == "e0"
                    assert (await response.json())["choices"][0]["text"] == "four two"
                assert stub.requests == [body]
                (routed,) = gw.events("gateway.routed")
                assert (routed.request_id, routed.upstream, routed.reason) == ("client-7", "e0", "context_fit")

        _run(scenario())

    def test_an_invalid_client_request_id_is_replaced(self, tmp_path: Path) -> None:
        async def scenario() -> None:
            stub = StubUpstream("e0")
            async with gateway_over(tmp_path, stub) as gw:
                body = {"model": "m", "prompt": "x"}
                headers = {"x-request-id": "has spaces"}
                async with gw.session.post(f"{gw.url}/v1/completions", json=body, headers=headers) as response:
                    assert response.headers["x-request-id"].startswith("gw-")

        _run(scenario())

    def test_chat_goes_to_the_chat_endpoint(self, tmp_path: Path) -> None:
        async def scenario() -> None:
            stub = StubUpstream("e0")
            async with gateway_over(tmp_path, stub) as gw:
                body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
                async with gw.session.post(f"{gw.url}/v1/chat/completions", json=body) as response:
                    assert response.status == 200
                assert stub.requests == [body]

        _run(scenario())


class TestStreaming:
    def test_each_chunk_reaches_the_client_before_the_next_exists(self, tmp_path: Path) -> None:
        """Chunk 2 is released only after the client has read chunk 1: nothing is buffered."""

        async def scenario() -> None:
            stub = StubUpstream("e0", chunks=["one", "two"], gated=True)
            async with gateway_over(tmp_path, stub) as gw:
                body = {"model": "m", "prompt": "x", "stream": True}
                async with gw.session.post(f"{gw.url}/v1/completions", json=body) as response:
                    assert response.status == 200
                    assert response.content_type == "text/event-stream"
                    stub.release()
                    first = await response.content.readuntil(b"\n\n")
                    assert json.loads(first.removeprefix(b"data: "))["choices"][0]["text"] == "one"
                    stub.release()
                    second = await response.content.readuntil(b"\n\n")
                    assert json.loads(second.removeprefix(b"data: "))["choices"][0]["text"] == "two"
                    stub.finish.set()
                    assert await response.content.read() == b"data: [DONE]\n\n"

        _run(scenario())

    def test_streamed_events_count_as_generated_tokens_of_the_in_flight_load(self, tmp_path: Path) -> None:
        async def scenario() -> None:
            stub = StubUpstream("e0", chunks=["a", "b", "c"], gated=True)
            async with gateway_over(tmp_path, stub) as gw:
                body = {"model": "m", "prompt": "x", "stream": True}
                async with gw.session.post(f"{gw.url}/v1/completions", json=body) as response:
                    stub.release(3)
                    for _ in range(3):
                        await response.content.readuntil(b"\n\n")
                    upstream = gw.gateway.registry.get("e0")
                    assert upstream is not None
                    (flight,) = upstream.in_flight.values()
                    assert flight.generated_tokens == 3
                    stub.finish.set()
                    await response.read()
                assert upstream.in_flight == {}

        _run(scenario())

    def test_a_client_that_disconnects_cancels_the_upstream_request(self, tmp_path: Path) -> None:
        async def scenario() -> None:
            stub = StubUpstream("e0", chunks=["one", "two"], gated=True)
            async with gateway_over(tmp_path, stub) as gw:
                body = {"model": "m", "prompt": "x", "stream": True}
                response = await gw.session.post(f"{gw.url}/v1/completions", json=body)
                stub.release()
                await response.content.readuntil(b"\n\n")
                response.close()
                await stub.cancelled.wait()
                assert stub.cancelled.is_set()

        _run(scenario())

    def test_a_non_streaming_request_is_cancelled_too(self, tmp_path: Path) -> None:
        async def scenario() -> None:
            stub = StubUpstream("e0", chunks=["one"], gated=True)
            async with gateway_over(tmp_path, stub) as gw:
                body = {"model": "m", "prompt": "x"}
                task = asyncio.ensure_future(gw.session.post(f"{gw.url}/v1/completions", json=body))
                await stub.started.wait()
                task.cancel()
                await stub.cancelled.wait()
                assert stub.cancelled.is_set()

        _run(scenario())


class TestUpstreamErrors:
    @pytest.mark.parametrize("status", [400, 429, 500, 503])
    def test_the_upstream_status_and_body_are_passed_through(self, status: int, tmp_path: Path) -> None:
        async def scenario() -> None:
            stub = StubUpstream("e0", status=status)
            async with gateway_over(tmp_path, stub) as gw:
                body = {"model": "m", "prompt": "x"}
                async with gw.session.post(f"{gw.url}/v1/completions", json=body) as response:
                    assert response.status == status
                    assert (await response.json())["error"]["message"] == "stub refuses"
                (error,) = gw.events("gateway.upstream_error")
                assert (error.upstream, error.kind, error.status) == ("e0", "status", status)

        _run(scenario())

    def test_an_unreachable_upstream_answers_502_and_leaves_rotation(self, tmp_path: Path) -> None:
        async def scenario() -> None:
            stub = StubUpstream("e0")
            await stub.start()
            async with running_gateway(gateway_config(upstream_entry(stub), tmp_path)) as gw:
                assert gw.gateway.health is not None
                await gw.gateway.health.check_all()
                await stub.close()
                body = {"model": "m", "prompt": "x"}
                async with gw.session.post(f"{gw.url}/v1/completions", json=body) as response:
                    assert response.status == 502
                    assert (await response.json())["error"]["code"] == "upstream_unreachable"
                async with gw.session.post(f"{gw.url}/v1/completions", json=body) as response:
                    assert response.status == 503
                    assert (await response.json())["error"]["code"] == "no_upstream"
                    assert "Retry-After" in response.headers
                assert [e.kind for e in gw.events("gateway.upstream_error")] == ["unreachable"]
                assert [e.reason for e in gw.events("gateway.shed")] == ["no_upstream"]

        _run(scenario())


BAD_BODIES = [
    pytest.param(b"{not json", "invalid_json", id="malformed-json"),
    pytest.param(b"[1, 2]", "invalid_json", id="not-an-object"),
    pytest.param(json.dumps({"prompt": "x"}).encode(), "missing_model", id="missing-model"),
    pytest.param(json.dumps({"model": "", "prompt": "x"}).encode(), "missing_model", id="empty-model"),
    pytest.param(json.dumps({"model": "m", "prompt": "x", "max_tokens": -1}).encode(), "invalid_value", id="neg"),
    pytest.param(json.dumps({"model": "m", "prompt": "x", "max_tokens": 0}).encode(), "invalid_value", id="zero"),
    pytest.param(json.dumps({"model": "m", "prompt": "x", "max_tokens": 1.5}).encode(), "invalid_value", id="float"),
    pytest.param(json.dumps({"model": "m", "prompt": "x", "stream": "yes"}).encode(), "invalid_value", id="stream"),
    pytest.param(json.dumps({"model": "m"}).encode(), "invalid_value", id="no-prompt"),
    pytest.param(json.dumps({"model": "m", "prompt": "x" * 70_000}).encode(), "body_too_large", id="oversized"),
]


class TestBadInput:
    def test_an_oversized_body_without_content_length_is_refused(self, tmp_path: Path) -> None:
        """A chunked body is counted as it arrives: past the limit it is 400, and nothing is forwarded."""

        async def scenario() -> None:
            stub = StubUpstream("e0")
            async with gateway_over(tmp_path, stub, max_body_bytes=64 * 1024) as gw:

                async def chunks() -> AsyncIterator[bytes]:
                    yield b'{"model": "m", "prompt": "'
                    for _ in range(20):
                        yield b"x" * 8192
                    yield b'"}'

                async with gw.session.post(f"{gw.url}/v1/completions", data=chunks()) as response:
                    assert response.request_info.headers.get("Transfer-Encoding") == "chunked"
                    assert response.status == 400
                    assert (await response.json())["error"]["code"] == "body_too_large"
                assert stub.requests == []

        _run(scenario())

    @pytest.mark.parametrize(("raw", "code"), BAD_BODIES)
    def test_is_answered_400_and_never_forwarded(self, raw: bytes, code: str, tmp_path: Path) -> None:
        async def scenario() -> None:
            stub = StubUpstream("e0")
            async with gateway_over(tmp_path, stub) as gw:
                headers = {"Content-Type": "application/json"}
                async with gw.session.post(f"{gw.url}/v1/completions", data=raw, headers=headers) as response:
                    assert response.status == 400
                    error = (await response.json())["error"]
                    assert error["code"] == code
                assert stub.requests == []
                assert stub.tokenize_calls == 0
                assert gw.events("gateway.routed") == []

        _run(scenario())

    @pytest.mark.parametrize("header", ["x-governor-tier", "x-governor-category"])
    def test_an_invalid_tier_or_category_header_is_refused(self, header: str, tmp_path: Path) -> None:
        async def scenario() -> None:
            stub = StubUpstream("e0")
            async with gateway_over(tmp_path, stub) as gw:
                body = {"model": "m", "prompt": "x"}
                headers = {header: "not an id"}
                async with gw.session.post(f"{gw.url}/v1/completions", json=body, headers=headers) as response:
                    assert response.status == 400
                    assert header in (await response.json())["error"]["message"]
                assert stub.requests == []

        _run(scenario())

    def test_labels_with_colons_and_slashes_are_kept_in_the_events(self, tmp_path: Path) -> None:
        """Request ids, tiers, categories and pools are labels of the contract, as in the request events."""

        async def scenario() -> None:
            def entries(started: list[StubUpstream]) -> str:
                return upstream_entry(started[0], pool="team/short")

            async with gateway_over(tmp_path, StubUpstream("e0"), entries=entries) as gw:
                body = {"model": "m", "prompt": "x"}
                headers = {"x-request-id": "chat:42/a", "x-governor-tier": "org:paid", "x-governor-category": "rag/v2"}
                async with gw.session.post(f"{gw.url}/v1/completions", json=body, headers=headers) as response:
                    assert response.status == 200
                    assert response.headers["x-request-id"] == "chat:42/a"
                (routed,) = gw.events("gateway.routed")
                assert (routed.request_id, routed.tier, routed.category, routed.pool) == (
                    "chat:42/a",
                    "org:paid",
                    "rag/v2",
                    "team/short",
                )

        _run(scenario())

    def test_a_chat_request_without_messages_is_refused(self, tmp_path: Path) -> None:
        async def scenario() -> None:
            stub = StubUpstream("e0")
            async with gateway_over(tmp_path, stub) as gw:
                body = {"model": "m", "messages": []}
                async with gw.session.post(f"{gw.url}/v1/chat/completions", json=body) as response:
                    assert response.status == 400
                assert stub.requests == []

        _run(scenario())

    def test_an_unknown_model_is_404_and_never_forwarded(self, tmp_path: Path) -> None:
        async def scenario() -> None:
            stub = StubUpstream("e0")
            async with gateway_over(tmp_path, stub) as gw:
                body = {"model": "other", "prompt": "x"}
                async with gw.session.post(f"{gw.url}/v1/completions", json=body) as response:
                    assert response.status == 404
                    assert (await response.json())["error"]["code"] == "model_not_found"
                assert stub.requests == []

        _run(scenario())


class TestServiceEndpoints:
    def test_models_health_ready_and_metrics(self, tmp_path: Path) -> None:
        async def scenario() -> None:
            stub = StubUpstream("e0")
            async with gateway_over(tmp_path, stub, entries=lambda s: upstream_entry(s[0], model="tiny")) as gw:
                async with gw.session.get(f"{gw.url}/v1/models") as response:
                    assert [m["id"] for m in (await response.json())["data"]] == ["tiny"]
                async with gw.session.get(f"{gw.url}/healthz") as response:
                    assert response.status == 200
                async with gw.session.get(f"{gw.url}/readyz") as response:
                    assert response.status == 200
                async with gw.session.post(f"{gw.url}/v1/completions", data=b"{") as response:
                    assert response.status == 400
                async with gw.session.get(f"{gw.url}/metrics") as response:
                    text = await response.text()
                assert (
                    'governor_gateway_requests_total{deployment="test",outcome="bad_request",service="gateway"} 1.0'
                    in text
                )

        _run(scenario())


class TestTelemetryNeverFailsARequest:
    def test_an_event_the_contract_refuses_is_counted_not_raised(self) -> None:
        sink = ListSink()
        telemetry = GatewayTelemetry(sink, gateway_id="gw", deployment="test", clock=lambda: 1.0)
        telemetry.shed(request_id="r 1", pool=None, tier="default", reason="deadline", waited_s=0.0)
        telemetry.shed(request_id="r1", pool=None, tier="default", reason="deadline", waited_s=0.0)
        assert telemetry.invalid == 1
        assert [e.request_id for e in sink.events] == ["r1"]
