"""``governor gateway`` in front of a real vLLM server (CPU build, the tiny random Llama, a tokenizer built here).

The model directory and the server come from services/engines/vllm/tiny_servers.py: text prompts work and
``/tokenize`` answers with the served model's own count. One server, started once for
the module with one thread, is declared twice in the gateway file (pools ``short`` and ``long``), so the route
FleetOpt chooses shows in ``x-governor-upstream`` while every count comes from vLLM.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import urllib.request
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from services.sdk.protocol import StaticPolicySource
from services.stack.processes import free_port
from services.testing.upstream import RunningGateway, gateway_config, running_gateway
from tests.unit.gateway.documents import fleetopt_plan

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    pytest.importorskip("vllm", reason="vLLM is not installed: bash ops/install.sh --dev --vllm")
    pytest.importorskip("tokenizers", reason="the tokenizers package comes with vLLM")

from services.engines.vllm.tiny_servers import (
    TEXT,
    start_vllm,
    stop_vllm,
    tiny_model_dir,
    vllm_command,
    wait_healthy,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

START_S = 900.0  # a vLLM CPU server's start on a loaded two-core machine; a safety net, never asserted
TIMEOUT_S = 120.0
LABEL = re.compile(r'(\w+)="([^"]*)"')


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5.0) as response:
        body: bytes = response.read()
        return body


@pytest.fixture(scope="module")
def vllm_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A vLLM OpenAI server on the tiny model with dummy weights, one thread, serving model name ``tiny``."""
    model = tiny_model_dir(tmp_path_factory.mktemp("tiny-model"))
    port = free_port()
    log = tmp_path_factory.mktemp("vllm-log") / "vllm.log"
    process = start_vllm(vllm_command(model, port), log)
    url = f"http://127.0.0.1:{port}"
    try:
        try:
            wait_healthy(process, url, log, START_S)
        except RuntimeError as exc:
            pytest.fail(str(exc))
        yield url
    finally:
        stop_vllm(process)


def _entries(url: str) -> str:
    return "".join(
        f'[[upstreams]]\nengine_id = "{pool}-0"\nurl = "{url}"\nmodel = "tiny"\npool = "{pool}"\nmax_model_len = 512\n'
        for pool in ("short", "long")
    )


async def _tokens(gw: RunningGateway, url: str, prompt: str) -> int:
    async with gw.session.post(f"{url}/tokenize", json={"model": "tiny", "prompt": prompt}) as response:
        count: int = (await response.json())["count"]
        return count


def _metric(url: str, name: str, **labels: str) -> float:
    """Sum of a vLLM Prometheus series over the samples whose labels include ``labels``."""
    total = 0.0
    for line in _get(f"{url}/metrics").decode().splitlines():
        sample, _, value = line.rpartition(" ")
        series, _, label_text = sample.partition("{")
        if series == name and labels.items() <= dict(LABEL.findall(label_text)).items():
            total += float(value)
    return total


def _run(coro: Any) -> None:
    asyncio.run(asyncio.wait_for(coro, TIMEOUT_S))


class TestGatewayOnVllm:
    def test_completions_and_chat_pass_through_streaming_and_not(self, vllm_url: str, tmp_path: Path) -> None:
        async def scenario() -> None:
            config = gateway_config(_entries(vllm_url), tmp_path)
            async with running_gateway(config) as gw:
                body = {"model": "tiny", "prompt": "the river and the valley", "max_tokens": 8, "ignore_eos": True}
                async with gw.session.post(f"{gw.url}/v1/completions", json=body) as response:
                    assert response.status == 200
                    answer = await response.json()
                assert answer["usage"]["completion_tokens"] == 8
                async with gw.session.post(f"{gw.url}/v1/completions", json={**body, "stream": True}) as response:
                    assert response.content_type == "text/event-stream"
                    events = [line async for line in response.content if line.startswith(b"data: ")]
                assert events[-1] == b"data: [DONE]\n"
                chunks = [json.loads(line.removeprefix(b"data: ")) for line in events[:-1]]
                assert len(chunks) >= 2  # vLLM may put several tokens in one event when its output loop lags
                assert chunks[-1]["choices"][0]["finish_reason"] == "length"
                chat = {"model": "tiny", "messages": [{"role": "user", "content": "the river"}], "max_tokens": 4}
                async with gw.session.post(f"{gw.url}/v1/chat/completions", json=chat) as response:
                    assert response.status == 200
                    assert (await response.json())["object"] == "chat.completion"

        _run(scenario())

    def test_routes_follow_the_plan_by_vllms_own_token_count(self, vllm_url: str, tmp_path: Path) -> None:
        async def scenario() -> None:
            policies = StaticPolicySource([fleetopt_plan(b_short_tokens=60, gamma=2.5)])
            config = gateway_config(_entries(vllm_url), tmp_path)
            async with running_gateway(config, policies, clock=lambda: 1000.0) as gw:
                short_prompt = "the river and the valley"
                body = {"model": "tiny", "prompt": short_prompt, "max_tokens": 8}
                async with gw.session.post(f"{gw.url}/v1/completions", json=body) as response:
                    assert response.headers["x-governor-upstream"] == "short-0"
                routed = gw.events("gateway.routed")[-1]
                assert routed.prompt_tokens == await _tokens(gw, vllm_url, short_prompt)
                headers = {"x-governor-category": "prose"}
                body = {"model": "tiny", "prompt": TEXT, "max_tokens": 8}
                assert 60 < await _tokens(gw, vllm_url, TEXT) + 8 <= 150
                async with gw.session.post(f"{gw.url}/v1/completions", json=body, headers=headers) as response:
                    assert response.headers["x-governor-upstream"] == "short-0"
                    usage = (await response.json())["usage"]
                assert usage["prompt_tokens"] <= 52
                (compressed,) = gw.events("gateway.compressed")
                assert compressed.compressed_prompt_tokens == usage["prompt_tokens"]
                async with gw.session.post(f"{gw.url}/v1/completions", json=body) as response:
                    assert response.headers["x-governor-upstream"] == "long-0"
                    assert (await response.json())["usage"]["prompt_tokens"] == compressed.original_prompt_tokens

        _run(scenario())

    def test_a_client_that_disconnects_aborts_the_vllm_request(self, vllm_url: str, tmp_path: Path) -> None:
        async def scenario() -> None:
            config = gateway_config(_entries(vllm_url), tmp_path)
            async with running_gateway(config) as gw:
                generated_before = _metric(vllm_url, "vllm:generation_tokens_total")
                body = {"model": "tiny", "prompt": "the river", "max_tokens": 480, "ignore_eos": True, "stream": True}
                response = await gw.session.post(f"{gw.url}/v1/completions", json=body)
                await response.content.readuntil(b"\n\n")
                response.close()
                deadline = time.monotonic() + 120.0
                while _metric(vllm_url, "vllm:num_requests_running") + _metric(vllm_url, "vllm:num_requests_waiting"):
                    assert time.monotonic() < deadline, "vLLM kept the request"
                    await asyncio.sleep(0.2)
                # Run to its end, the request would have generated exactly 480 tokens (ignore_eos).
                assert _metric(vllm_url, "vllm:generation_tokens_total") - generated_before < 480

        _run(scenario())

    def test_bad_input_never_reaches_vllm(self, vllm_url: str, tmp_path: Path) -> None:
        async def scenario() -> None:
            config = gateway_config(_entries(vllm_url), tmp_path)
            async with running_gateway(config) as gw:
                before = _metric(vllm_url, "vllm:prompt_tokens_total")
                assert before > 0
                for raw in (b"{", b'{"prompt": "x"}', b'{"model": "tiny", "prompt": "x", "max_tokens": -3}'):
                    async with gw.session.post(f"{gw.url}/v1/completions", data=raw) as response:
                        assert response.status == 400
                assert _metric(vllm_url, "vllm:prompt_tokens_total") == before

        _run(scenario())

    def test_an_added_vllm_server_is_drained_without_cutting_its_stream(self, vllm_url: str, tmp_path: Path) -> None:
        """The scaler's local connector: add by URL, drain mid-stream, the stream ends whole, then remove."""

        async def scenario() -> None:
            token = "admin-token-for-the-test"
            auth = {"Authorization": f"Bearer {token}"}
            admin = "/admin/upstreams"
            async with running_gateway(gateway_config("", tmp_path), admin_token=token) as gw:
                async with gw.session.post(
                    f"{gw.url}{admin}", json={"url": vllm_url, "pool": "short"}, headers=auth
                ) as response:
                    assert response.status == 200
                upstream = gw.gateway.registry.by_url(vllm_url)
                assert upstream is not None
                deadline = time.monotonic() + 60.0
                while upstream.model is None:
                    assert time.monotonic() < deadline, "the added server never passed its check"
                    await asyncio.sleep(0.1)
                assert (upstream.model, upstream.max_model_len) == ("tiny", 512)
                body = {
                    "model": "tiny",
                    "prompt": "the river",
                    "max_tokens": 48,
                    "ignore_eos": True,
                    "stream": True,
                    "stream_options": {"include_usage": True},
                }
                stream = await gw.session.post(f"{gw.url}/v1/completions", json=body)
                assert stream.headers["x-governor-upstream"] == upstream.engine_id
                await stream.content.readuntil(b"\n\n")
                async with gw.session.post(f"{gw.url}{admin}/drain", json={"url": vllm_url}, headers=auth) as response:
                    assert response.status == 202
                    assert (await response.json())["state"] == "draining"
                async with gw.session.get(f"{gw.url}{admin}", headers=auth) as response:
                    listed = await response.json()
                assert listed == [
                    {"url": vllm_url, "pool": "short", "dp_rank": None, "state": "draining", "in_flight": 1}
                ]
                async with gw.session.post(f"{gw.url}/v1/completions", json={**body, "stream": False}) as response:
                    assert response.status == 503
                async with gw.session.delete(f"{gw.url}{admin}", params={"url": vllm_url}, headers=auth) as response:
                    assert response.status == 409
                events = [line async for line in stream.content if line.startswith(b"data: ")]
                stream.close()
                assert events[-1] == b"data: [DONE]\n"
                assert json.loads(events[-2].removeprefix(b"data: "))["usage"]["completion_tokens"] == 48
                async with gw.session.delete(f"{gw.url}{admin}", params={"url": vllm_url}, headers=auth) as response:
                    assert response.status == 200
                async with gw.session.get(f"{gw.url}{admin}", headers=auth) as response:
                    assert await response.json() == []

        _run(scenario())
