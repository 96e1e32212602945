"""Balancing data-parallel ranks through the gateway on real vLLM CPU servers: BF-IO vs its baselines.

``--ranks`` vLLM servers (the tiny random Llama of services/engines/vllm/tiny_servers.py, one thread each,
``--max-num-seqs`` slots) are declared as the ranks of one DP group in an in-process gateway. The same seeded
workload goes through it once per balancer and seed:

- ``bfio``: the gateway's central pool under a pushed BF-IO bundle (default parameters; policies/bfio);
- ``jsq_load``: the same central pool without a bundle, so the router falls back to JSQ-by-load;
- ``vllm_score``: vLLM's own DP balancing, ``waiting * 4 + running``, placed at once (services/gateway/ranks.py);
- ``round_robin``: placed at once in turn.

The workload: Poisson arrivals at ``--rate`` requests/s; prompts of 8 to 120 words drawn from the tokenizer's
vocabulary; outputs of a known length (``ignore_eos``), 70% short (8 to 32 tokens) and 30% long (128 to 320),
so rank loads differ as in the paper's setting. Measured per run, from the client: TTFT and TPOT p50/p99,
end-to-end p50/p99 and output tokens per second over the run; and, every ``--sample-s``, each rank's load as
the gateway counts it (prompt + streamed tokens of its in-flight requests, BF-IO's L_g) and its in-flight
requests, from which the imbalance (max minus mean over mean of the loads, when some rank is loaded) and the
largest spread of in-flight requests across ranks. Balancers run in a rotated order per seed so the machine's
drift spreads over all. Figures are printed and written to JSON with the spread over seeds.

    PYTHONPATH=. python ops/bench/bench_gateway_ranks.py [--ranks 3] [--requests 48] [--seeds 0 1 2]
        [--rate 4] [--out out/bench/gateway_ranks.json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

from ops.bench.bench_gateway import spread
from policies.bfio.decide import build_payload
from policies.bfio.params import BfioParams
from schemas.policy_docs.base import InputsDigest
from schemas.policy_docs.bfio import BfioPolicy, BfioState
from services.engines.vllm.tiny_servers import (
    SERVED_MODEL,
    WORDS,
    start_vllm,
    stop_vllm,
    tiny_model_dir,
    vllm_command,
    wait_healthy,
)
from services.fleet_run.client import read_completion_stream
from services.gateway import Gateway
from services.sdk.protocol import StaticPolicySource
from services.stack.processes import free_port
from services.testing.upstream import gateway_config, running_gateway

BALANCERS = ("bfio", "jsq_load", "vllm_score", "round_robin")
GROUP = "dp"


def bundle(now_s: float) -> BfioPolicy:
    """A BF-IO bundle for the group with the default parameters, valid for an hour from ``now_s``."""
    params = BfioParams()
    payload = build_payload(params, horizon_steps=params.horizon_steps)
    return BfioPolicy(
        scope=GROUP,
        deployment="bench",
        version=1,
        computed_at=now_s,
        valid_until=now_s + 3600.0,
        inputs=InputsDigest(snapshot_id="bench"),
        payload=payload,
        state=BfioState(horizon_steps=payload.horizon_steps),
    )


def workload(seed: int, n: int, rate_per_s: float) -> list[tuple[float, str, int]]:
    """(arrival offset s, prompt, max_tokens) of ``n`` requests, seeded."""
    rng = np.random.default_rng(seed)
    vocabulary = WORDS.split()
    arrivals = np.cumsum(rng.exponential(1.0 / rate_per_s, size=n))
    requests = []
    for at in arrivals:
        prompt = " ".join(rng.choice(vocabulary, size=int(rng.integers(8, 121))))
        long = rng.random() < 0.3
        max_tokens = int(rng.integers(128, 321)) if long else int(rng.integers(8, 33))
        requests.append((float(at), prompt, max_tokens))
    return requests


async def _one(session: aiohttp.ClientSession, url: str, prompt: str, max_tokens: int) -> dict[str, float]:
    body = {
        "model": SERVED_MODEL,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    started = time.perf_counter()
    async with session.post(f"{url}/v1/completions", json=body) as response:
        if response.status != 200:
            msg = f"gateway answered {response.status}: {await response.text()}"
            raise RuntimeError(msg)
        first, tokens = await read_completion_stream(response, started)
    end = time.perf_counter() - started
    ttft = end if first is None else first
    return {"ttft_s": ttft, "tpot_s": (end - ttft) / max(1, tokens - 1), "e2e_s": end, "tokens": float(tokens)}


async def _sample(gateway: Gateway, every_s: float, samples: list[tuple[list[int], list[int]]]) -> None:
    group = gateway.group(GROUP)
    while True:
        ranks = group.ranks()
        samples.append(([r.load_tokens() for r in ranks], [len(r.in_flight) for r in ranks]))
        await asyncio.sleep(every_s)


async def run_once(
    balancer: str, urls: list[str], requests: list[tuple[float, str, int]], args: argparse.Namespace, folder: Path
) -> dict[str, Any]:
    """One balancer over one workload: the client's latencies and the sampled rank loads."""
    entries = "".join(
        f'[[upstreams]]\nengine_id = "rank-{g}"\nurl = "{url}"\nmodel = "{SERVED_MODEL}"\npool = "default"\n'
        f'dp_group = "{GROUP}"\ndp_rank = {g}\nmax_num_seqs = {args.max_num_seqs}\nmax_model_len = 512\n'
        for g, url in enumerate(urls)
    )
    mode = "bfio" if balancer in ("bfio", "jsq_load") else balancer
    # Requests wait in the central pool as long as the run lasts: every balancer serves every request.
    queue = "[queue]\nmax_waiting = 100000\ndeadline_s = 3600.0\n"
    config = gateway_config(f'{queue}[bfio]\nbalancer = "{mode}"\n\n{entries}', folder)
    policies = StaticPolicySource([bundle(time.time())] if balancer == "bfio" else [])
    samples: list[tuple[list[int], list[int]]] = []
    async with running_gateway(config, policies, clock=time.time) as gw:
        sampler = asyncio.ensure_future(_sample(gw.gateway, args.sample_s, samples))
        started = time.perf_counter()
        tasks = []
        for at, prompt, max_tokens in requests:
            delay = started + at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.ensure_future(_one(gw.session, gw.url, prompt, max_tokens)))
        results = await asyncio.gather(*tasks)
        makespan_s = time.perf_counter() - started
        sampler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampler
        balancers = sorted({e.balancer for e in gw.events("gateway.routed")})
        per_rank = np.bincount([e.dp_rank for e in gw.events("gateway.routed")], minlength=len(urls))
    loads = np.asarray([s[0] for s in samples], dtype=np.float64)
    counts = np.asarray([s[1] for s in samples], dtype=np.float64)
    busy = loads.mean(axis=1) > 0
    imbalance = (loads[busy].max(axis=1) - loads[busy].mean(axis=1)) / loads[busy].mean(axis=1)
    column = {k: np.asarray([r[k] for r in results]) for k in ("ttft_s", "tpot_s", "e2e_s", "tokens")}
    return {
        "balancer": balancer,
        "balancers_seen": balancers,
        "requests_per_rank": per_rank.tolist(),
        "ttft_p50_ms": float(np.percentile(column["ttft_s"], 50) * 1e3),
        "ttft_p99_ms": float(np.percentile(column["ttft_s"], 99) * 1e3),
        "tpot_p50_ms": float(np.percentile(column["tpot_s"], 50) * 1e3),
        "tpot_p99_ms": float(np.percentile(column["tpot_s"], 99) * 1e3),
        "e2e_p50_ms": float(np.percentile(column["e2e_s"], 50) * 1e3),
        "e2e_p99_ms": float(np.percentile(column["e2e_s"], 99) * 1e3),
        "output_tokens_per_s": float(column["tokens"].sum() / makespan_s),
        "load_imbalance_mean": float(imbalance.mean()) if imbalance.size else 0.0,
        "load_imbalance_p90": float(np.percentile(imbalance, 90)) if imbalance.size else 0.0,
        "in_flight_spread_max": int((counts.max(axis=1) - counts.min(axis=1)).max()) if counts.size else 0,
        "samples": len(samples),
        "makespan_s": makespan_s,
    }


async def measure(args: argparse.Namespace, urls: list[str], folder: Path) -> dict[str, Any]:
    """Every balancer over every seed's workload, in an order rotated per seed."""
    runs: list[dict[str, Any]] = []
    for index, seed in enumerate(args.seeds):
        requests = workload(seed, args.requests, args.rate)
        order = args.balancers[index % len(args.balancers) :] + args.balancers[: index % len(args.balancers)]
        for balancer in order:
            row = {"seed": seed, **await run_once(balancer, urls, requests, args, folder)}
            runs.append(row)
            print(
                f"seed {seed} {balancer:11s}: TTFT p50 {row['ttft_p50_ms']:7.0f} p99 {row['ttft_p99_ms']:7.0f} ms, "
                f"TPOT p50 {row['tpot_p50_ms']:5.1f} p99 {row['tpot_p99_ms']:6.1f} ms, "
                f"{row['output_tokens_per_s']:6.1f} tok/s, imbalance {row['load_imbalance_mean']:.2f}, "
                f"in-flight spread {row['in_flight_spread_max']}, per rank {row['requests_per_rank']}",
                flush=True,
            )
    keys = [k for k in runs[0] if isinstance(runs[0][k], float) and k != "makespan_s"]
    summary = {b: {k: spread([r[k] for r in runs if r["balancer"] == b]) for k in keys} for b in args.balancers}
    for balancer, row in summary.items():
        print(
            f"{balancer:11s} over seeds (median [min, max]): "
            + ", ".join(f"{k} {v['median']:.1f} [{v['min']:.1f}, {v['max']:.1f}]" for k, v in row.items())
        )
    return {"runs": runs, "summary": summary}


def main() -> None:
    """Start the ranks, run every balancer and seed, print and write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=3)
    parser.add_argument("--max-num-seqs", type=int, default=4)
    parser.add_argument("--requests", type=int, default=48, help="requests per run")
    parser.add_argument("--rate", type=float, default=4.0, help="arrivals per second")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--balancers", nargs="+", default=list(BALANCERS), choices=BALANCERS)
    parser.add_argument("--sample-s", type=float, default=0.1)
    parser.add_argument("--start-timeout-s", type=float, default=1200.0)
    parser.add_argument("--out", type=Path, default=Path("out/bench/gateway_ranks.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        model = tiny_model_dir(folder)
        ports = [free_port() for _ in range(args.ranks)]
        processes = [
            start_vllm(vllm_command(model, port, max_num_seqs=args.max_num_seqs, seed=g), folder / f"rank-{g}.log")
            for g, port in enumerate(ports)
        ]
        urls = [f"http://127.0.0.1:{port}" for port in ports]
        try:
            started = time.monotonic()
            for g, (process, url) in enumerate(zip(processes, urls, strict=True)):
                wait_healthy(process, url, folder / f"rank-{g}.log", args.start_timeout_s)
            print(f"{args.ranks} vLLM ranks up in {time.monotonic() - started:.0f} s", flush=True)
            results = asyncio.run(measure(args, urls, folder))
        finally:
            for process in processes:
                stop_vllm(process)
    results["settings"] = {k: v for k, v in vars(args).items() if k != "out"}
    results["machine"] = {"python": platform.python_version(), "aiohttp": aiohttp.__version__}
    results["command"] = " ".join(["python", "ops/bench/bench_gateway_ranks.py", *sys.argv[1:]])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
