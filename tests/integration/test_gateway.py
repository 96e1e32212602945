"""``governor gateway`` in front of a real vLLM server (CPU build, the tiny random Llama, a tokenizer built here).

The model directory is services/engines/vllm/tiny_model's config with a word-level tokenizer written by the
test (``tokenizers``; vocabulary: ASCII punctuation and a few hundred English words, the rest ``<unk>``), so
text prompts work and ``/tokenize`` answers with the served model's own count. One server, started once for
the module with one thread, is declared twice in the gateway file (pools ``short`` and ``long``), so the route
FleetOpt chooses shows in ``x-governor-upstream`` while every count comes from vLLM.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from services.sdk.protocol import StaticPolicySource
from services.stack.processes import free_port
from tests.unit.gateway.documents import fleetopt_plan
from tests.unit.gateway.upstream_stub import RunningGateway, gateway_config, running_gateway

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    pytest.importorskip("vllm", reason="vLLM is not installed: bash ops/install.sh --dev --vllm")
    tokenizers = pytest.importorskip("tokenizers", reason="the tokenizers package comes with vLLM")

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TINY_MODEL = Path(__file__).resolve().parents[2] / "services" / "engines" / "vllm" / "tiny_model"
START_S = 900.0  # a vLLM CPU server's start on a loaded two-core machine; a safety net, never asserted
TIMEOUT_S = 120.0
LABEL = re.compile(r'(\w+)="([^"]*)"')
WORDS = (
    "the a of to in is it that for on with as was be by at this are from or have not but what all were when we "
    "there can your which their said if do will each about how up out them then she many some so these would "
    "other into has more her two like him see time could no make than first been its who now people my made over "
    "did down only way find use may water long little very after words called just where most know get through "
    "back much go good new write our me man too any day same right look think also around another came come work "
    "three word must because does part even place well such here take why things help put years different away "
    "again off went old number great tell men say small every found still between name should home big give air "
    "line set own under read last never us left end along while might next sound below saw something thought "
    "both few those always looked show large often together asked house world going want school important until "
    "form food keep children feet land side without boy once animals life enough took sometimes four head above "
    "kind began almost live page got earth need far hand high year mother light parts country father let night "
    "river valley dam farmers crops flood spring council market town rain festival library choir tourists"
)
TEXT = (
    "The river flooded the valley in spring. Farmers in the valley lost their crops to the river. "
    "A festival was held in the town last year. Engineers said a dam on the river would help the valley. "
    "The dam would keep the spring flood away from valley farms. Some people liked the market. "
    "The council talked about the river dam for many months. Tourists came to the market in the town. "
    "Rain records show the river floods the valley often. A choir sang at the new library. "
    "Some said the dam costs too much for the valley. Should the council build the dam on the river?"
)


def _model_dir(folder: Path) -> Path:
    """The tiny model's config plus a word-level tokenizer and a plain chat template."""
    shutil.copy(TINY_MODEL / "config.json", folder / "config.json")
    specials = ["<unk>", "<s>", "</s>"]
    punctuation = [chr(c) for c in range(33, 127) if not chr(c).isalnum()]
    tokens = list(dict.fromkeys([*specials, *punctuation, *WORDS.split()]))
    model = tokenizers.models.WordLevel(vocab={t: i for i, t in enumerate(tokens)}, unk_token="<unk>")
    tokenizer = tokenizers.Tokenizer(model)
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tokenizer.save(str(folder / "tokenizer.json"))
    template = (
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant:{% endif %}"
    )
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "model_max_length": 1024,
        "chat_template": template,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5.0) as response:
        body: bytes = response.read()
        return body


@pytest.fixture(scope="module")
def vllm_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A vLLM OpenAI server on the tiny model with dummy weights, one thread, serving model name ``tiny``."""
    model = _model_dir(tmp_path_factory.mktemp("tiny-model"))
    port = free_port()
    log = tmp_path_factory.mktemp("vllm-log") / "vllm.log"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        *("--model", str(model), "--served-model-name", "tiny", "--load-format", "dummy", "--dtype", "float32"),
        *("--max-model-len", "512", "--max-num-seqs", "4", "--enforce-eager", "--seed", "0"),
        *("--host", "127.0.0.1", "--port", str(port)),
    ]
    with log.open("w") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_S
    try:
        while True:
            if process.poll() is not None:
                pytest.fail(f"vLLM exited with {process.returncode}: {log.read_text()[-3000:]}")
            try:
                _get(f"{url}/health")
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"vLLM did not start in {START_S} s: {log.read_text()[-3000:]}")
                time.sleep(1.0)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


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
