"""Where the gateway's CPU goes per request: the real ``governor gateway`` process under cProfile.

The stub upstream of ops/bench/bench_gateway.py runs in its own process; the gateway (``governor gateway``'s own
entry point, in a process of its own, with no Kafka or Redis reachable: the set-up of the overhead benchmark)
carries a cProfile profiler timed by the process's CPU time (``time.process_time``, so waiting on a loaded machine
does not count), switched on by SIGUSR1 once the gateway serves and off by SIGUSR2, so start-up is left out; this
script is the client: ``--concurrency`` clients send ``--requests`` requests back to back, plain and then
streaming. The CPU per request of the gateway's event-loop thread is also read from ``/proc`` around the same
requests, once without the profiler (the steady figure) and once with it. The functions with the most own and
cumulative CPU per request are printed and written to JSON.

    PYTHONPATH=. python ops/bench/bench_gateway_profile.py [--requests 3000] [--concurrency 16]
        [--out out/bench/gateway_profile.json]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from ops.bench.bench_gateway import cpu_s, wait_http
from services.cli.main import main as governor_main
from services.stack.processes import free_port

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "ops" / "bench" / "bench_gateway.py"
BODY = {"model": "stub", "prompt": "Say hello to the gateway benchmark.", "max_tokens": 16}


async def _drive(url: str, n: int, concurrency: int, stream: bool) -> None:
    remaining = [n]

    async def client(session: aiohttp.ClientSession) -> None:
        while remaining[0] > 0:
            remaining[0] -= 1
            async with session.post(url, json={**BODY, "stream": stream}) as response:
                await response.read()
                if response.status != 200:
                    msg = f"{url} answered {response.status}"
                    raise RuntimeError(msg)

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        await asyncio.gather(*(client(session) for _ in range(concurrency)))


def _rows(stats: pstats.Stats, key: str, top: int, requests: int, under: str = "") -> list[dict[str, Any]]:
    """The ``top`` functions by ``key`` (``tottime`` or ``cumtime``) in files under ``under``, per request.

    cProfile counts a coroutine's every resumption as a call, so ``calls_per_request`` of a coroutine counts
    its awaits too.
    """
    entries = {k: v for k, v in stats.stats.items() if k[0].startswith(under)}  # type: ignore[attr-defined]
    index = 2 if key == "tottime" else 3
    ranked = sorted(entries.items(), key=lambda item: item[1][index], reverse=True)[:top]
    rows = []
    for (file, line, name), (_, calls, tottime, cumtime, _) in ranked:
        short = file.split("site-packages/")[-1].removeprefix(str(ROOT) + "/")
        rows.append(
            {
                "function": f"{short}:{line}({name})",
                "calls_per_request": calls / requests,
                "own_us_per_request": tottime / requests * 1e6,
                "cumulative_us_per_request": cumtime / requests * 1e6,
            }
        )
    return rows


def serve_profiled(profile: Path, argv: list[str]) -> int:
    """Run ``governor`` with ``argv``; SIGUSR1 starts the CPU-time profiler, SIGUSR2 stops it into ``profile``."""
    profiler = cProfile.Profile(time.process_time)

    def start(signum: int, frame: object) -> None:
        profiler.enable()

    def stop(signum: int, frame: object) -> None:
        profiler.disable()
        profiler.dump_stats(str(profile))

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    return governor_main(argv)


async def _load(url: str, n: int, concurrency: int, pid: int) -> dict[str, float]:
    """CPU microseconds of process ``pid`` per request, plain and streaming, over ``n`` requests each."""
    cpu: dict[str, float] = {}
    for mode, stream in (("plain", False), ("stream", True)):
        before = cpu_s(pid, loop_only=True)
        await _drive(url, n, concurrency, stream)
        cpu[mode] = (cpu_s(pid, loop_only=True) - before) / n * 1e6
    return cpu


def main() -> None:
    """Run the stub, the profiled gateway and the clients; print and write the profile."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=3000, help="requests per mode (plain, streaming)")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--chunks", type=int, default=16)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--out", type=Path, default=Path("out/bench/gateway_profile.json"))
    parser.add_argument("--serve-gateway", type=Path, default=None, help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args()
    if args.serve_gateway is not None:
        sys.exit(serve_profiled(args.serve_gateway, rest))
    stub_port, gateway_port = free_port(), free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    stub = subprocess.Popen([sys.executable, str(BENCH), "--serve-stub", str(stub_port), "--chunks", str(args.chunks)])
    with tempfile.TemporaryDirectory() as folder:
        config = Path(folder) / "gateway.toml"
        config.write_text(
            f'[[upstreams]]\nengine_id = "stub-0"\nurl = "http://127.0.0.1:{stub_port}"\nmodel = "stub"\n'
        )
        profile = Path(folder) / "gateway.prof"
        gateway = subprocess.Popen(
            [
                *(sys.executable, __file__, "--serve-gateway", str(profile), "gateway"),
                *("--gateway-port", str(gateway_port), "--gateway-config", str(config)),
                *("--kafka-bootstrap", "127.0.0.1:1", "--redis-url", "redis://127.0.0.1:1/0", "--log-level", "error"),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            url = f"http://127.0.0.1:{gateway_port}"
            asyncio.run(wait_http(f"http://127.0.0.1:{stub_port}/health", 120.0))
            asyncio.run(wait_http(f"{url}/readyz", 120.0))
            completions = f"{url}/v1/completions"
            asyncio.run(_drive(completions, args.requests // 10, args.concurrency, stream=False))  # warm-up
            cpu = asyncio.run(_load(completions, args.requests, args.concurrency, gateway.pid))
            gateway.send_signal(signal.SIGUSR1)
            cpu_profiled = asyncio.run(_load(completions, args.requests, args.concurrency, gateway.pid))
            gateway.send_signal(signal.SIGUSR2)
            deadline = time.monotonic() + 60.0
            while not profile.exists() and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(1.0)  # the dump is written by the gateway's main thread
        finally:
            gateway.send_signal(signal.SIGTERM)
            gateway.wait(timeout=120)
            stub.kill()
            stub.wait()
        stats = pstats.Stats(str(profile))
    requests = 2 * args.requests
    results = {
        "requests_per_mode": args.requests,
        "concurrency": args.concurrency,
        "chunks": args.chunks,
        "gateway_cpu_us_per_request": cpu,
        "gateway_cpu_us_per_request_profiled": cpu_profiled,
        "top_own_time": _rows(stats, "tottime", args.top, requests),
        "top_cumulative_time": _rows(stats, "cumtime", args.top, requests),
        "gateway_code_by_cumulative_time": _rows(stats, "cumtime", args.top, requests, str(ROOT / "services")),
        "command": " ".join(["python", "ops/bench/bench_gateway_profile.py", *sys.argv[1:]]),
    }
    print(f"gateway CPU per request: {json.dumps({k: round(v) for k, v in cpu.items()})} us")
    print(f"gateway CPU per request, profiled: {json.dumps({k: round(v) for k, v in cpu_profiled.items()})} us")
    for title, key in (
        ("own time", "top_own_time"),
        ("cumulative time", "top_cumulative_time"),
        ("cumulative time, Governor's code", "gateway_code_by_cumulative_time"),
    ):
        print(f"top {args.top} by {title}, us per request (plain and streaming together):")
        for row in results[key]:
            print(
                f"  {row['own_us_per_request']:8.1f} own {row['cumulative_us_per_request']:8.1f} cum "
                f"{row['calls_per_request']:6.2f} calls  {row['function']}"
            )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
