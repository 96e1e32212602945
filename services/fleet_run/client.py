"""Sending the workload through a gateway, open loop, and recording what each request got.

Each request streams (``/v1/completions`` with ``stream_options.include_usage``) so the client sees its first
token; the gateway names the upstream that served it in ``x-governor-upstream``. A refusal (429 after the
gateway's queue deadline, or any other status) is recorded with its status, the error code of its JSON body
(the gateway's shed reason: ``deadline``, ``queue_full``) and its ``Retry-After``, and no latencies, so the
report counts it instead of the run failing. Each request carries ``x-request-id`` ``<prefix>-<index>``, so the
gateway's events of a phase (``gateway.queued``) can be told apart from the others'.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import asdict, dataclass
from typing import Any

import aiohttp

from services.fleet_run.workload import PlannedRequest

UPSTREAM_HEADER = "x-governor-upstream"  # services/gateway/forwarding.py
CATEGORY_HEADER = "x-governor-category"  # services/gateway/inbound.py
REQUEST_ID_HEADER = "x-request-id"  # services/gateway/inbound.py: kept when it is a valid label


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """What one request got, times in seconds from the run's start (sent) or from its sending (the rest).

    ``ttft_s``, ``e2e_s`` and ``tokens`` are None unless ``status`` is 200; ``shed_reason`` (the error code of
    the refusal's JSON body) and ``retry_after_s`` (its ``Retry-After`` header) are None unless it was refused.
    """

    index: int
    sent_s: float
    status: int
    upstream: str | None
    prompt_words: int
    max_tokens: int
    ttft_s: float | None
    e2e_s: float | None
    tokens: int | None
    shed_reason: str | None = None
    retry_after_s: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The outcome as JSON-ready fields."""
        return asdict(self)

    @classmethod
    def from_dict(cls, fields: dict[str, Any]) -> Outcome:
        """An outcome written by ``to_dict``."""
        return cls(**fields)


async def read_completion_stream(response: aiohttp.ClientResponse, started: float) -> tuple[float | None, int]:
    """Read a streamed completion to its end: the seconds from ``started`` to its first chunk with text, and the
    completion tokens its usage chunk gives (0 without one)."""
    first: float | None = None
    tokens = 0
    async for line in response.content:
        if not line.startswith(b"data: {"):
            continue
        event = json.loads(line[6:])
        if first is None and event.get("choices"):
            first = time.perf_counter() - started
        if event.get("usage"):
            tokens = int(event["usage"]["completion_tokens"])
    return first, tokens


def _error_code(body: bytes) -> str | None:
    """The ``error.code`` of an OpenAI-style JSON error body, None when it has none."""
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError):
        return None
    code = error.get("code") if isinstance(error, dict) else None
    return None if code is None else str(code)


def _retry_after_s(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None


async def _send(
    session: aiohttp.ClientSession, url: str, model: str, request: PlannedRequest, *, sent_s: float, request_id: str
) -> Outcome:
    body = {
        "model": model,
        "prompt": request.prompt,
        "max_tokens": request.max_tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if request.stop_token_ids:
        body["stop_token_ids"] = list(request.stop_token_ids)
    headers = {REQUEST_ID_HEADER: request_id}
    if request.category is not None:
        headers[CATEGORY_HEADER] = request.category
    started = time.perf_counter()
    async with session.post(f"{url}/v1/completions", json=body, headers=headers) as response:
        upstream = response.headers.get(UPSTREAM_HEADER)
        if response.status != 200:
            answer = await response.read()
            return Outcome(
                index=request.index,
                sent_s=sent_s,
                status=response.status,
                upstream=upstream,
                prompt_words=request.prompt_words,
                max_tokens=request.max_tokens,
                ttft_s=None,
                e2e_s=None,
                tokens=None,
                shed_reason=_error_code(answer),
                retry_after_s=_retry_after_s(response.headers.get("Retry-After")),
            )
        first, tokens = await read_completion_stream(response, started)
    end = time.perf_counter() - started
    return Outcome(
        index=request.index,
        sent_s=sent_s,
        status=200,
        upstream=upstream,
        prompt_words=request.prompt_words,
        max_tokens=request.max_tokens,
        ttft_s=end if first is None else first,
        e2e_s=end,
        tokens=tokens,
    )


async def drive(
    url: str, model: str, requests: list[PlannedRequest], timeout_s: float, request_id_prefix: str = "req"
) -> list[Outcome]:
    """Send ``requests`` to the gateway at ``url`` on their schedule; the outcomes in request order.

    Request ``i`` goes with ``x-request-id`` ``<request_id_prefix>-<i>`` (a label: letters, digits, ``-``).
    """
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as session:
        started = time.perf_counter()
        tasks = []
        for request in requests:
            delay = started + request.at_s - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            sent_s = time.perf_counter() - started
            tasks.append(
                asyncio.ensure_future(
                    _send(
                        session, url, model, request, sent_s=sent_s, request_id=f"{request_id_prefix}-{request.index}"
                    )
                )
            )
        return list(await asyncio.gather(*tasks))
