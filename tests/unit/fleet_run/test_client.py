"""The fleet run's client against an in-process stand-in gateway: request ids, streams and refusals."""

from __future__ import annotations

import asyncio
import json

from aiohttp import web
from aiohttp.test_utils import TestServer

from services.fleet_run.client import Outcome, drive
from services.fleet_run.workload import PlannedRequest


def _request(index: int, stop_token_ids: tuple[int, ...] = ()) -> PlannedRequest:
    return PlannedRequest(
        index=index,
        at_s=0.01 * index,
        prompt="The river.",
        max_tokens=3,
        category=None,
        stop_token_ids=stop_token_ids,
    )


async def _run(requests: list[PlannedRequest]) -> tuple[list[Outcome], list[str], list[dict[str, object]]]:
    seen: list[str] = []
    bodies: list[dict[str, object]] = []

    async def completions(request: web.Request) -> web.StreamResponse:
        request_id = request.headers["x-request-id"]
        seen.append(request_id)
        bodies.append(await request.json())
        if request_id.endswith("-1"):
            body = {"error": {"message": "queue full", "type": "server_error", "code": "queue_full"}}
            return web.json_response(body, status=429, headers={"Retry-After": "10"})
        if request_id.endswith("-2"):
            return web.Response(status=502, text="bad gateway")
        response = web.StreamResponse(headers={"x-governor-upstream": "short-0"})
        await response.prepare(request)
        for token in ("a", "b", "c"):
            await response.write(b"data: " + json.dumps({"choices": [{"text": token}]}).encode() + b"\n\n")
        usage = {"choices": [], "usage": {"completion_tokens": 3}}
        await response.write(b"data: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]\n\n")
        return response

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    async with TestServer(app) as server:
        url = str(server.make_url("")).rstrip("/")
        outcomes = await drive(url, "tiny", requests, timeout_s=30.0, request_id_prefix="s0-governed-burst")
    return list(outcomes), seen, bodies


def test_refusals_carry_the_gateway_s_reason_and_retry_after_and_requests_their_phase_id() -> None:
    outcomes, seen, _ = asyncio.run(_run([_request(i) for i in range(3)]))
    assert sorted(seen) == ["s0-governed-burst-0", "s0-governed-burst-1", "s0-governed-burst-2"]
    served, full, failed = outcomes
    assert (served.status, served.upstream, served.tokens, served.shed_reason) == (200, "short-0", 3, None)
    assert served.ttft_s is not None
    assert (full.status, full.shed_reason, full.retry_after_s, full.ttft_s) == (429, "queue_full", 10, None)
    assert (failed.status, failed.shed_reason, failed.retry_after_s) == (502, None, None)


def test_stop_token_ids_are_sent_only_with_the_requests_that_have_them() -> None:
    _, _, bodies = asyncio.run(_run([_request(0, (35, 36)), _request(3)]))
    assert sorted(str(b.get("stop_token_ids")) for b in bodies) == ["None", "[35, 36]"]
    assert all(b["ignore_eos"] is True and b["stream"] is True for b in bodies)
