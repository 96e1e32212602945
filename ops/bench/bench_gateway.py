"""Gateway overhead: latency ``governor gateway`` adds per request, requests/s it sustains, CPU per request.

Three processes on loopback: a fast stub upstream (an aiohttp server answering ``/v1/completions`` at once, or
streaming ``--chunks`` SSE events), the real ``governor gateway`` in front of it (its CLI, one process, one event
loop: one core), and this script as the client (aiohttp). The same requests go straight to the stub (``direct``)
and through the gateway (``gateway``), interleaved in rounds so drift hits both alike; the added latency at a
quantile is gateway minus direct at that quantile. Requests are sent open loop at ``--rates`` requests/s (Poisson
arrivals, seeded), so queueing in the gateway shows in its tail; requests/s is the closed-loop throughput of
``--concurrency`` clients. CPU per request is the gateway process's user + system time over a run divided by its
requests, and, steadier on a loaded machine, the same of its event-loop thread alone (the request path; the process
figure adds the background threads: the telemetry publisher and the policy client retrying their absent backends,
whose CPU per second does not depend on the requests). The gateway runs with no Kafka or Redis reachable: no policy
document, so no ``/tokenize`` call (a FleetOpt plan adds one upstream round trip per request), and its telemetry is
built and dropped. The client shares the machine, so figures are upper bounds of the gateway's own cost.

``--corpus FILE ...`` adds the compressor on real text: each file is cut into prompts of ``--prompt-sentences``
sentences, each compressed to half and to three quarters of its length; reported are how much of the target
the kept sentences fill, the share of sentences kept, the ``/tokenize`` calls per prompt and the compressor's
own CPU time per prompt (the calls excluded). Lengths are counted in words there (the stub's tokenizer).

    PYTHONPATH=. python ops/bench/bench_gateway.py [--rates 250 500 1000] [--requests 2000]
        [--concurrency 32] [--chunks 16] [--rounds 3] [--corpus FILE ...] [--out out/bench/gateway.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
from aiohttp import web

from services.gateway.compressor import compress_to_fit, plan_sentences, split_sentences
from services.stack.processes import free_port

ROOT = Path(__file__).resolve().parents[2]
BODY = {"model": "stub", "prompt": "Say hello to the gateway benchmark.", "max_tokens": 16}


def serve_stub(port: int, chunks: int) -> None:
    """Run the stub upstream until killed: an answer at once, or ``chunks`` SSE events then [DONE]."""
    answer = json.dumps({"id": "cmpl", "object": "text_completion", "choices": [{"index": 0, "text": "hi"}]})
    event = b'data: {"choices": [{"index": 0, "text": "x"}]}\n\n'

    async def complete(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if not body.get("stream"):
            return web.Response(text=answer, content_type="application/json")
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for _ in range(chunks):
            await response.write(event)
        await response.write(b"data: [DONE]\n\n")
        return response

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/v1/completions", complete)
    app.router.add_get("/health", health)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


async def wait_http(url: str, timeout_s: float = 60.0) -> None:
    """Return once ``url`` answers 200; RuntimeError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    async with aiohttp.ClientSession() as session:
        while True:
            try:
                async with session.get(url) as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            if time.monotonic() > deadline:
                msg = f"{url} did not answer within {timeout_s} s"
                raise RuntimeError(msg)
            await asyncio.sleep(0.1)


async def _one(session: aiohttp.ClientSession, url: str, stream: bool) -> tuple[float, float]:
    """(first byte, full response) seconds of one request."""
    started = time.perf_counter()
    async with session.post(url, json={**BODY, "stream": stream}) as response:
        first = None
        async for _ in response.content.iter_any():
            if first is None:
                first = time.perf_counter() - started
        if response.status != 200:
            msg = f"{url} answered {response.status}"
            raise RuntimeError(msg)
    full = time.perf_counter() - started
    return (full if first is None else first), full


async def _open_loop(url: str, rate_per_s: float, n: int, stream: bool, seed: int) -> np.ndarray:
    """Send ``n`` requests at Poisson arrivals of ``rate_per_s``; return shape (n, 2) of (first byte, full) s."""
    gaps = np.random.default_rng(seed).exponential(1.0 / rate_per_s, size=n)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        await _one(session, url, stream)
        start = time.perf_counter()
        due = start + np.cumsum(gaps)
        tasks = []
        for at in due:
            delay = at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.ensure_future(_one(session, url, stream)))
        results = await asyncio.gather(*tasks)
    return np.asarray(results, dtype=np.float64)


async def _closed_loop(url: str, concurrency: int, n: int) -> float:
    """Requests/s of ``concurrency`` clients sending ``n`` requests back to back."""
    remaining = [n]

    async def client(session: aiohttp.ClientSession) -> None:
        while remaining[0] > 0:
            remaining[0] -= 1
            await _one(session, url, False)

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        await _one(session, url, False)
        started = time.perf_counter()
        await asyncio.gather(*(client(session) for _ in range(concurrency)))
        return n / (time.perf_counter() - started)


def cpu_s(pid: int, *, loop_only: bool = False) -> float:
    """User + system CPU seconds of process ``pid``, or of its main (event-loop) thread alone (Linux /proc)."""
    path = f"/proc/{pid}/task/{pid}/stat" if loop_only else f"/proc/{pid}/stat"
    fields = Path(path).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _quantiles_ms(values: np.ndarray) -> dict[str, float]:
    return {"p50": float(np.percentile(values, 50) * 1e3), "p99": float(np.percentile(values, 99) * 1e3)}


def spread(runs: list[float]) -> dict[str, float]:
    return {"median": float(np.median(runs)), "min": float(min(runs)), "max": float(max(runs))}


def measure_compressor(files: list[Path], prompt_sentences: int) -> dict[str, Any]:
    """The compressor on prompts cut from ``files``, at targets of 50% and 75% of each prompt's words."""
    sentences = [s for f in files for s in split_sentences(f.read_text(errors="replace"))]
    prompts = [
        " ".join(sentences[i : i + prompt_sentences])
        for i in range(0, len(sentences) - prompt_sentences + 1, prompt_sentences)
    ]
    calls = [0]

    async def count(text: str) -> int:
        calls[0] += 1
        return len(text.split())

    async def run(share: float) -> tuple[list[float], list[float], list[int], list[float]]:
        fill, kept, per_call, cpu_us = [], [], [], []
        for prompt in prompts:
            target = int(share * len(prompt.split()))
            calls[0] = 0
            started = time.process_time()
            result = await compress_to_fit(plan_sentences(prompt), count, target)
            cpu_us.append((time.process_time() - started) * 1e6)
            per_call.append(calls[0])
            if result is not None:
                fill.append(result.tokens / target)
                kept.append(result.sentences_kept / result.sentences_total)
        return fill, kept, per_call, cpu_us

    results: dict[str, Any] = {"prompts": len(prompts), "prompt_sentences": prompt_sentences}
    for share in (0.5, 0.75):
        fill, kept, per_call, cpu_us = asyncio.run(run(share))
        results[f"target_{int(share * 100)}pct"] = {
            "compressed": len(fill),
            "target_filled_mean": float(np.mean(fill)) if fill else None,
            "sentences_kept_mean": float(np.mean(kept)) if kept else None,
            "tokenize_calls_mean": float(np.mean(per_call)),
            "cpu_us_per_prompt_p50": float(np.percentile(cpu_us, 50)),
        }
        row = results[f"target_{int(share * 100)}pct"]
        print(
            f"compressor, target {share:.0%}: {row['compressed']}/{len(prompts)} compressed, "
            f"target filled {row['target_filled_mean']:.3f}, sentences kept {row['sentences_kept_mean']:.3f}, "
            f"{row['tokenize_calls_mean']:.1f} /tokenize calls, {row['cpu_us_per_prompt_p50']:.0f} us CPU"
        )
    return results


def main() -> None:
    """Start the stub and the gateway, measure, print and write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", type=float, nargs="+", default=[250.0, 500.0, 1000.0])
    parser.add_argument("--requests", type=int, default=2000, help="requests per rate, route and mode")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--chunks", type=int, default=16, help="SSE events per streamed answer")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--corpus", type=Path, nargs="*", default=[], help="text files for the compressor figures")
    parser.add_argument("--prompt-sentences", type=int, default=40)
    parser.add_argument("--out", type=Path, default=Path("out/bench/gateway.json"))
    parser.add_argument("--serve-stub", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_stub is not None:
        serve_stub(args.serve_stub, args.chunks)
        return
    stub_port, gateway_port = free_port(), free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    stub = subprocess.Popen(
        [sys.executable, __file__, "--serve-stub", str(stub_port), "--chunks", str(args.chunks)], env=env
    )
    with tempfile.TemporaryDirectory() as folder:
        config = Path(folder) / "gateway.toml"
        config.write_text(
            f'[[upstreams]]\nengine_id = "stub-0"\nurl = "http://127.0.0.1:{stub_port}"\nmodel = "stub"\n'
        )
        gateway = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "services.cli",
                "gateway",
                *("--gateway-port", str(gateway_port), "--gateway-config", str(config)),
                *("--kafka-bootstrap", "127.0.0.1:1", "--redis-url", "redis://127.0.0.1:1/0", "--log-level", "error"),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            results = asyncio.run(_measure(args, stub_port, gateway_port, gateway.pid))
        finally:
            gateway.send_signal(signal.SIGTERM)
            gateway.wait(timeout=30)
            stub.kill()
            stub.wait()
    if args.corpus:
        results["compressor"] = measure_compressor(args.corpus, args.prompt_sentences)
    results["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version(), "aiohttp": aiohttp.__version__}
    results["command"] = " ".join(["python", "ops/bench/bench_gateway.py", *sys.argv[1:]])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")


async def _measure(args: argparse.Namespace, stub_port: int, gateway_port: int, gateway_pid: int) -> dict[str, Any]:
    direct = f"http://127.0.0.1:{stub_port}/v1/completions"
    through = f"http://127.0.0.1:{gateway_port}/v1/completions"
    await wait_http(f"http://127.0.0.1:{stub_port}/health")
    await wait_http(f"http://127.0.0.1:{gateway_port}/readyz")
    rates: list[dict[str, Any]] = []
    for rate in args.rates:
        row: dict[str, Any] = {"rate_per_s": rate}
        for mode, stream in (("plain", False), ("stream", True)):
            added: dict[str, list[float]] = {}
            cpu_per_request: list[float] = []
            loop_cpu_per_request: list[float] = []
            for index in range(args.rounds):
                seed = args.seed + index
                base = await _open_loop(direct, rate, args.requests, stream, seed)
                cpu_before, loop_before = cpu_s(gateway_pid), cpu_s(gateway_pid, loop_only=True)
                routed = await _open_loop(through, rate, args.requests, stream, seed)
                cpu_per_request.append((cpu_s(gateway_pid) - cpu_before) / (args.requests + 1) * 1e6)
                loop_cpu = cpu_s(gateway_pid, loop_only=True) - loop_before
                loop_cpu_per_request.append(loop_cpu / (args.requests + 1) * 1e6)
                for column, name in ((0, "first_byte"), (1, "full")):
                    base_q, routed_q = _quantiles_ms(base[:, column]), _quantiles_ms(routed[:, column])
                    for q in ("p50", "p99"):
                        added.setdefault(f"{name}_added_{q}_ms", []).append(routed_q[q] - base_q[q])
                        added.setdefault(f"{name}_direct_{q}_ms", []).append(base_q[q])
            row[mode] = {key: spread(values) for key, values in added.items()}
            row[mode]["gateway_cpu_us_per_request"] = spread(cpu_per_request)
            row[mode]["gateway_loop_cpu_us_per_request"] = spread(loop_cpu_per_request)
            added_p50 = row[mode]["full_added_p50_ms"]["median"]
            added_p99 = row[mode]["full_added_p99_ms"]["median"]
            print(
                f"rate {rate:6.0f}/s {mode:6s}: added full p50 {added_p50:6.3f} ms, p99 {added_p99:6.3f} ms; "
                f"first byte p50 {row[mode]['first_byte_added_p50_ms']['median']:6.3f} ms; "
                f"gateway CPU {row[mode]['gateway_cpu_us_per_request']['median']:6.0f} us/request "
                f"(event loop {row[mode]['gateway_loop_cpu_us_per_request']['median']:6.0f})"
            )
        rates.append(row)
    throughput = {
        "direct": [await _closed_loop(direct, args.concurrency, args.requests) for _ in range(args.rounds)],
        "gateway": [await _closed_loop(through, args.concurrency, args.requests) for _ in range(args.rounds)],
    }
    print(
        f"closed loop, {args.concurrency} clients: direct {np.median(throughput['direct']):7.0f} req/s, "
        f"through the gateway {np.median(throughput['gateway']):7.0f} req/s"
    )
    return {
        "requests_per_rate": args.requests,
        "rounds": args.rounds,
        "chunks": args.chunks,
        "rates": rates,
        "closed_loop_requests_per_s": {k: spread(v) for k, v in throughput.items()},
        "concurrency": args.concurrency,
    }


if __name__ == "__main__":
    main()
