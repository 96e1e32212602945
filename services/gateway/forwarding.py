"""One request to its upstream and the answer back: streaming passed through chunk by chunk, errors kept.

- A streaming answer (``text/event-stream``) is sent to the client as soon as the upstream's headers arrive,
  and every chunk is written the moment it is read: nothing is buffered, so the first byte is not held back.
  Each SSE event counts as one generated token of the request's in-flight load: vLLM sends one event per
  engine step per request, but puts several tokens in one event when its output loop lags or speculative
  decoding accepts several, so the count is a lower bound of the tokens generated.
- A non-streaming answer is read whole and returned with the upstream's status and content type.
- An upstream error status is passed through with its body. A refused connection answers 502 and counts as
  a failed health check; a timeout answers 504.
- A client that goes away cancels the request: the server cancels the handler (``handler_cancellation``) or
  the next write fails, and the upstream connection is closed, which vLLM turns into an abort.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp
from aiohttp import web

from schemas.gateway import UpstreamErrorKind
from services.gateway.upstreams import InFlight, Upstream

UPSTREAM_HEADER = "x-governor-upstream"
_EVENT = b"data: "
_DONE = b"data: [DONE]"


@dataclass(frozen=True, slots=True, kw_only=True)
class ForwardResult:
    """How a forwarded request ended.

    Attributes:
        response: what the client got (already sent when streaming).
        outcome: ``ok``, ``upstream_error`` or ``disconnected``.
    """

    response: web.StreamResponse
    outcome: str


class SseTally:
    """Counts SSE data events across chunk boundaries (a pattern may be split between two chunks)."""

    def __init__(self) -> None:
        self.events = 0
        self._tail = b""

    def feed(self, chunk: bytes) -> int:
        """Count the data events (not ``[DONE]``) that end in ``chunk``; return how many were new."""
        window = self._tail + chunk
        new = _count_from(window, _EVENT, len(self._tail)) - _count_from(window, _DONE, len(self._tail))
        self._tail = window[-(len(_DONE) - 1) :]
        self.events += new
        return new


def _count_from(window: bytes, pattern: bytes, tail: int) -> int:
    """Occurrences of ``pattern`` in ``window`` that end past the first ``tail`` bytes (not counted before)."""
    count, start = 0, window.find(pattern)
    while start >= 0:
        if start + len(pattern) > tail:
            count += 1
        start = window.find(pattern, start + 1)
    return count


def error_response(
    status: int, code: str, message: str, request_id: str, retry_after_s: float | None = None
) -> web.Response:
    """An OpenAI-style JSON error answer."""
    headers = {"x-request-id": request_id}
    if retry_after_s is not None:
        headers["Retry-After"] = str(max(1, round(retry_after_s)))
    error_type = "invalid_request_error" if status < 500 and status != 429 else "server_error"
    body = {"error": {"message": message, "type": error_type, "code": code}, "request_id": request_id}
    return web.json_response(body, status=status, headers=headers)


async def forward(
    *,
    request: web.Request,
    session: aiohttp.ClientSession,
    upstream: Upstream,
    path: str,
    body: bytes,
    request_id: str,
    flight: InFlight,
    timeout: aiohttp.ClientTimeout,
    on_error: Callable[[UpstreamErrorKind, int | None], None],
) -> ForwardResult:
    """Send ``body`` to ``upstream`` at ``path`` and relay the answer to the client of ``request``."""
    headers = {"Content-Type": "application/json", "x-request-id": request_id}
    authorization = request.headers.get("Authorization")
    if authorization is not None:
        headers["Authorization"] = authorization
    reply_headers = {"x-request-id": request_id, UPSTREAM_HEADER: upstream.engine_id}
    try:
        async with session.post(upstream.endpoint(path), data=body, headers=headers, timeout=timeout) as answer:
            if answer.content_type == "text/event-stream" and answer.status < 400:
                return await _relay_stream(request, answer, reply_headers, flight, on_error)
            payload = await answer.read()
            if answer.status >= 400:
                on_error("status", answer.status)
            reply_headers["Content-Type"] = answer.headers.get("Content-Type", "application/json")
            response = web.Response(body=payload, status=answer.status, headers=reply_headers)
            return ForwardResult(response=response, outcome="upstream_error" if answer.status >= 400 else "ok")
    except (TimeoutError, aiohttp.ServerTimeoutError):
        on_error("timeout", None)
        return ForwardResult(
            response=error_response(504, "upstream_timeout", f"upstream {upstream.engine_id} timed out", request_id),
            outcome="upstream_error",
        )
    except aiohttp.ClientConnectorError as exc:
        on_error("unreachable", None)
        message = f"upstream {upstream.engine_id} unreachable: {exc.os_error!r}"
        return ForwardResult(
            response=error_response(502, "upstream_unreachable", message, request_id), outcome="upstream_error"
        )
    except aiohttp.ClientError as exc:
        on_error("unreachable", None)
        message = f"upstream {upstream.engine_id} failed: {exc!r}"
        return ForwardResult(
            response=error_response(502, "upstream_failed", message, request_id), outcome="upstream_error"
        )


async def _relay_stream(
    request: web.Request,
    answer: aiohttp.ClientResponse,
    reply_headers: dict[str, str],
    flight: InFlight,
    on_error: Callable[[UpstreamErrorKind, int | None], None],
) -> ForwardResult:
    response = web.StreamResponse(status=answer.status, headers=reply_headers)
    response.content_type = "text/event-stream"
    response.headers["Cache-Control"] = "no-cache"
    await response.prepare(request)
    tally = SseTally()
    try:
        async for chunk in answer.content.iter_any():
            flight.generated_tokens += tally.feed(chunk)
            await response.write(chunk)
    except ConnectionResetError:
        answer.close()
        return ForwardResult(response=response, outcome="disconnected")
    except asyncio.CancelledError:
        answer.close()
        raise
    except aiohttp.ClientPayloadError:
        on_error("stream_broken", answer.status)
        return ForwardResult(response=response, outcome="upstream_error")
    await response.write_eof()
    return ForwardResult(response=response, outcome="ok")
