"""A short real run of the scaler's local connector: real vLLM CPU servers behind the real gateway, resized by plans.

``governor gateway`` runs with no upstream of its own; the scaler (``ScalerService``, wall clock, one pool
``short`` of 1 to ``--max-replicas`` replicas, step 1, ``--cooldown-s``, ``--hold-s``) follows FleetOpt plans
pushed in-process and runs the pool through ``LocalEngineConnector``, which registers each replica with the
gateway's admin API and drains it there before stopping it. Open-loop Poisson load (streaming completions,
token-id prompts) goes through the gateway the whole time; TTFT is the time to the first streamed event.

Phases (wall time): the plan asks for 1 replica; once it serves, ``--phase-s`` at ``--rate-low``; then a
plan for 2 and ``--rate-high`` while the second replica starts and ``--phase-s`` after it serves, with a
plan that dips to 1 for ``--dip-s`` (shorter than the hold: it must not shrink the pool); then a plan for 1
and ``--rate-low`` until the second replica has been drained and stopped and ``--phase-s`` more.

Printed and written to JSON: the actions, replicas against the plan over time, requests, failures, P50/P99
TTFT per phase against ``--slo-s``, replica-seconds against a static fleet of the peak, CPU time of this
process, and ``governor explain scaling``'s text of every action; with ``--plot``, a PNG. The vLLM servers
run the tiny random Llama with one thread each.

    PYTHONPATH=. python ops/bench/bench_scaler_local.py [--rate-low 0.5] [--rate-high 2] [--phase-s 60]
        [--hold-s 30] [--slo-s 2] [--out out/bench/scaler_local.json] [--plot docs/img/scaler_local.png]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import resource
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

import aiohttp
import matplotlib as mpl
import numpy as np

mpl.use("Agg")
import matplotlib.pyplot as plt

from schemas.policy_docs.fleetopt import FleetoptPolicy
from schemas.scaling import ScalerConfig
from services.engines.vllm.tiny_servers import TINY_MODEL
from services.health import ServiceMetrics
from services.scaler import ListActionSink, ScalerMetrics, ScalerService
from services.scaler.explanation import explain_action
from services.scaler.gateway_admin import GatewayAdmin
from services.scaler.local_engines import LocalEngineConnector
from services.sdk.protocol import StaticPolicySource
from services.stack.processes import free_port
from services.testing.plans import fleetopt_plan

ADMIN_TOKEN = "bench-scaler-local"


@dataclass(slots=True, kw_only=True)
class Request:
    """One request: when it was sent (s since the run began), its TTFT, HTTP status and streamed events."""

    t_s: float
    ttft_s: float | None = None
    status: int | str | None = None
    events: int = 0
    upstream: str | None = None

    @property
    def failed(self) -> bool:
        """Not answered 200 with at least one streamed event."""
        return self.status != 200 or self.events == 0


@dataclass(slots=True, kw_only=True)
class ActionRow:
    """One scaling action, its time in seconds since the run began."""

    t_s: float
    from_replicas: int
    to_replicas: int
    reason: str
    plan_version: int | None
    result: str
    detail: str | None


@dataclass(slots=True)
class Run:
    """What the run saw: requests, samples of the pool, and the phase marks."""

    t0: float
    requests: list[Request] = field(default_factory=list)
    samples: list[tuple[float, int, int, int]] = field(default_factory=list)
    phases: list[tuple[str, float]] = field(default_factory=list)
    plan_replicas: int = 0
    rate_per_s: float = 0.0
    stop: threading.Event = field(default_factory=threading.Event)

    def now(self) -> float:
        return time.monotonic() - self.t0

    def mark(self, phase: str) -> None:
        self.phases.append((phase, self.now()))
        print(f"[{self.now():7.1f} s] {phase}", flush=True)


def vllm_command() -> list[str]:
    """The replica's command: the tiny model with dummy weights, token-id prompts, one thread."""
    return [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        *("--model", str(TINY_MODEL), "--served-model-name", "tiny", "--load-format", "dummy"),
        *("--dtype", "float32", "--max-model-len", "512", "--max-num-seqs", "4", "--enforce-eager", "--seed", "0"),
        *("--skip-tokenizer-init", "--host", "127.0.0.1", "--port", "{port}"),
    ]


def start_gateway(port: int, log_path: Path) -> subprocess.Popen[bytes]:
    """``governor gateway`` on ``port`` with the admin token; no broker or Redis (it serves without them)."""
    argv = [sys.executable, "-m", "services.cli", "gateway", "--gateway-config", str(log_path.with_suffix(".toml"))]
    argv += ["--gateway-host", "127.0.0.1", "--gateway-port", str(port), "--log-format", "json"]
    argv += ["--kafka-bootstrap", "127.0.0.1:1", "--redis-url", "redis://127.0.0.1:1/0"]
    log_path.with_suffix(".toml").write_text("")
    with log_path.open("wb") as output:
        return subprocess.Popen(
            argv,
            stdout=output,
            stderr=subprocess.STDOUT,
            env={**os.environ, "GOVERNOR_GATEWAY_ADMIN_TOKEN": ADMIN_TOKEN},
        )


def wait_healthy(url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=2.0) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    msg = f"{url} did not answer /healthz in {timeout_s:g} s"
    raise RuntimeError(msg)


async def one_request(session: aiohttp.ClientSession, url: str, run: Run, rng: np.random.Generator, out: int) -> None:
    prompt = rng.integers(100, 1000, size=int(rng.integers(16, 64))).tolist()
    body = {"model": "tiny", "prompt": prompt, "max_tokens": out, "ignore_eos": True, "stream": True}
    record = Request(t_s=run.now())
    try:
        async with session.post(f"{url}/v1/completions", json=body) as response:
            record.status = response.status
            record.upstream = response.headers.get("x-governor-upstream")
            async for line in response.content:
                if line.startswith(b"data: ") and line.strip() != b"data: [DONE]":
                    if record.events == 0:
                        record.ttft_s = run.now() - record.t_s
                    record.events += 1
    except (aiohttp.ClientError, TimeoutError) as exc:
        record.status = f"error: {type(exc).__name__}"
    run.requests.append(record)


async def load(url: str, run: Run, seed: int, out_tokens: int) -> None:
    """Open-loop Poisson arrivals at ``run.rate_per_s`` until ``run.stop``."""
    rng = np.random.default_rng(seed)
    tasks: set[asyncio.Task[None]] = set()
    timeout = aiohttp.ClientTimeout(total=300.0)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        while not run.stop.is_set():
            rate = run.rate_per_s
            await asyncio.sleep(float(rng.exponential(1.0 / rate)) if rate > 0 else 0.2)
            if rate > 0 and not run.stop.is_set():
                task = asyncio.create_task(one_request(session, url, run, rng, out_tokens))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.wait(tasks, timeout=120.0)


def sample(run: Run, service: ScalerService, admin: GatewayAdmin) -> None:
    """Once a second: the plan's count, the scaler's count, replicas active in the gateway's rotation."""
    while not run.stop.is_set():
        try:
            active = sum(1 for u in admin.upstreams() if u.state == "active")
        except Exception:
            active = -1
        run.samples.append((run.now(), run.plan_replicas, service.replicas()["short"], active))
        run.stop.wait(1.0)


def percentile(values: list[float], q: float) -> float | None:
    return None if not values else float(np.percentile(np.array(values, dtype=np.float64), q))


def phase_rows(run: Run, end_s: float, slo_s: float) -> list[dict[str, object]]:
    marks = [*run.phases, ("end", end_s)]
    rows = []
    for (name, start), (_, stop) in itertools.pairwise(marks):
        inside = [r for r in run.requests if start <= r.t_s < stop]
        ttfts = [r.ttft_s for r in inside if r.ttft_s is not None]
        failed = [r for r in inside if r.failed]
        rows.append(
            {
                "phase": name,
                "from_s": round(start, 1),
                "to_s": round(stop, 1),
                "requests": len(inside),
                "failed": len(failed),
                "ttft_p50_s": percentile(ttfts, 50),
                "ttft_p99_s": percentile(ttfts, 99),
                "ttft_over_slo_frac": None if not ttfts else sum(t > slo_s for t in ttfts) / len(ttfts),
            }
        )
    return rows


def plot(run: Run, actions: list[ActionRow], slo_s: float, path: Path) -> None:
    samples = np.array(run.samples, dtype=np.float64)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True)
    top.step(samples[:, 0], samples[:, 1], where="post", color="0.6", ls="--", label="plan (replicas)")
    top.step(samples[:, 0], samples[:, 2], where="post", label="scaler's count (set as an action begins)")
    top.step(samples[:, 0], np.maximum(samples[:, 3], 0), where="post", lw=0.8, label="serving in the gateway")
    for action in actions:
        top.axvline(action.t_s, color="k", lw=0.5, alpha=0.5)
    top.set_ylabel("replicas")
    top.legend(fontsize=8, loc="upper left")
    done = [(r.t_s, r.ttft_s) for r in run.requests if r.ttft_s is not None]
    if done:
        xs, ys = zip(*done, strict=True)
        bottom.scatter(xs, ys, s=4, label="TTFT per request")
    bottom.axhline(slo_s, color="red", ls="--", lw=1.0, label=f"SLO {slo_s:g} s")
    for index, (_, start) in enumerate(run.phases, start=1):
        bottom.axvline(start, color="0.5", lw=0.5)
        bottom.text(start, slo_s * 1.1, str(index), fontsize=7)
    bottom.set_yscale("log")
    bottom.set_ylabel("TTFT, s")
    bottom.set_xlabel("seconds since the run began (numbers: the phases, in order)")
    bottom.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)


def wait_for(predicate: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            msg = f"timed out after {timeout_s:g} s waiting for {what}"
            raise RuntimeError(msg)
        time.sleep(0.5)


def main() -> None:
    """Run the phases and write the report."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-replicas", type=int, default=2)
    parser.add_argument("--rate-low", type=float, default=0.5, help="requests/s in the low phases")
    parser.add_argument("--rate-high", type=float, default=2.0, help="requests/s in the high phase")
    parser.add_argument("--out-tokens", type=int, default=16, help="max_tokens of each request")
    parser.add_argument("--phase-s", type=float, default=60.0, help="seconds of each phase once the pool settled")
    parser.add_argument("--dip-s", type=float, default=15.0, help="a plan dip shorter than the hold")
    parser.add_argument("--hold-s", type=float, default=30.0, help="the scaler's scale-down hold")
    parser.add_argument("--cooldown-s", type=float, default=10.0, help="the scaler's cool-down")
    parser.add_argument("--slo-s", type=float, default=2.0, help="P99 TTFT target, seconds")
    parser.add_argument("--start-timeout-s", type=float, default=900.0, help="a replica's start bound")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--workdir", type=Path, default=Path("out/bench/scaler_local"))
    parser.add_argument("--out", type=Path, default=Path("out/bench/scaler_local.json"))
    parser.add_argument("--plot", type=Path, default=None)
    parser.add_argument("--replot", type=Path, default=None, help="only draw --plot from this run's JSON")
    args = parser.parse_args()
    if args.replot is not None and args.plot is not None:
        replot(args.replot, args.plot)
        return
    args.workdir.mkdir(parents=True, exist_ok=True)
    gateway_port = free_port()
    gateway_url = f"http://127.0.0.1:{gateway_port}"
    gateway = start_gateway(gateway_port, args.workdir / "gateway.log")
    config = ScalerConfig.model_validate(
        {
            "mode": "act",
            "interval_s": 1.0,
            "pools": {
                "short": {
                    "min_replicas": 1,
                    "max_replicas": args.max_replicas,
                    "max_step_replicas": 1,
                    "cooldown_s": args.cooldown_s,
                    "scale_down_hold_s": args.hold_s,
                    "connector": "local",
                    "local": {
                        "command": vllm_command(),
                        "first_port": free_port(),
                        "model": "tiny",
                        "env": {"OMP_NUM_THREADS": "1", "VLLM_CPU_KVCACHE_SPACE": "1"},
                        "log_dir": str(args.workdir / "engines"),
                        "start_timeout_s": args.start_timeout_s,
                        "drain_timeout_s": 60.0,
                        "stop_timeout_s": 30.0,
                    },
                }
            },
        }
    )
    local = config.pools["short"].local
    if local is None:
        msg = "the pool needs its local table"
        raise RuntimeError(msg)
    admin = GatewayAdmin(gateway_url, token=ADMIN_TOKEN)
    connector = LocalEngineConnector("short", local, gateway=admin)
    plans = StaticPolicySource()
    sink = ListActionSink()
    service = ScalerService(
        config=config,
        deployment="bench",
        scaler_id="bench-local",
        plans=plans,
        connectors={"short": connector},
        sink=sink,
        metrics=ScalerMetrics(ServiceMetrics("scaler", "bench")),
    )
    run = Run(t0=time.monotonic())
    wall0 = time.time()
    version = 0
    plans_by_version: dict[int, FleetoptPolicy] = {}

    def push(replicas: int) -> None:
        nonlocal version
        version += 1
        run.plan_replicas = replicas
        plan = fleetopt_plan(short_gpus=replicas, long_gpus=0, version=version, computed_at=time.time())
        plans_by_version[version] = plan
        plans.put(plan)

    cpu0 = time.process_time()
    threads: list[threading.Thread] = []
    try:
        wait_healthy(gateway_url, 120.0)
        scaler = threading.Thread(target=service.run, daemon=True)
        sampler = threading.Thread(target=sample, args=(run, service, admin), daemon=True)
        loader = threading.Thread(target=lambda: asyncio.run(load(gateway_url, run, args.seed, args.out_tokens)))
        threads = [scaler, sampler, loader]
        run.mark("plan 1, cold start")
        push(1)
        scaler.start()
        sampler.start()
        wait_for(lambda: connector_count(admin) >= 1, args.start_timeout_s, "the first replica in rotation")
        run.mark("low load, 1 replica")
        run.rate_per_s = args.rate_low
        loader.start()
        time.sleep(args.phase_s)
        run.mark("plan 2, high load, starting")
        push(2)
        run.rate_per_s = args.rate_high
        wait_for(lambda: connector_count(admin) >= 2, args.start_timeout_s, "the second replica in rotation")
        run.mark("high load, 2 replicas")
        time.sleep(args.phase_s / 2)
        run.mark("plan dips to 1 (held)")
        push(1)
        time.sleep(args.dip_s)
        push(2)
        run.mark("plan back to 2")
        time.sleep(args.phase_s / 2)
        run.mark("plan 1, low load, hold then drain")
        push(1)
        run.rate_per_s = args.rate_low
        wait_for(lambda: service.replicas()["short"] == 1 and connector_count(admin) == 1, 600.0, "the drain")
        run.mark("low load, 1 replica again")
        time.sleep(args.phase_s)
    finally:
        end_s = run.now()
        run.stop.set()
        service.stop()
        for thread in threads:
            if thread.is_alive():
                thread.join(timeout=180.0)
        service.close()
        gateway.terminate()
        gateway.wait(timeout=30.0)
    cpu_s = time.process_time() - cpu0
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    actions = [
        ActionRow(
            t_s=round(a.ts - wall0, 1),
            from_replicas=a.from_replicas,
            to_replicas=a.to_replicas,
            reason=a.reason,
            plan_version=a.plan_version,
            result=a.result,
            detail=a.detail,
        )
        for a in sink.actions
    ]
    directions = [1 if a.to_replicas > a.from_replicas else -1 for a in actions]
    reversals = sum(1 for x, y in itertools.pairwise(directions) if x != y)
    samples = np.array(run.samples, dtype=np.float64)
    dt = np.diff(samples[:, 0], append=samples[-1, 0])
    replica_s = float(np.sum(samples[:, 2] * dt))
    phases = phase_rows(run, end_s, args.slo_s)
    report = {
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "duration_s": round(end_s, 1),
        "actions": [asdict(a) for a in actions],
        "reversals": reversals,
        "forced_stops": connector.forced_stops,
        "replica_seconds": round(replica_s, 1),
        "static_peak_replica_seconds": round(args.max_replicas * float(samples[-1, 0] - samples[0, 0]), 1),
        "requests": len(run.requests),
        "failed": sum(1 for r in run.requests if r.failed),
        "phases": phases,
        "cpu_s_this_process": round(cpu_s, 1),
        "cpu_s_children": round(children.ru_utime + children.ru_stime, 1),
        "samples": run.samples,
        "request_log": [asdict(r) for r in run.requests],
        "explanations": [explain_action(a, plans_by_version.get(a.plan_version or 0)) for a in sink.actions],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    if args.plot is not None:
        plot(run, actions, args.slo_s, args.plot)
    print(f"duration {end_s:.0f} s, requests {report['requests']}, failed {report['failed']}")
    for action in actions:
        print(
            f"action t={action.t_s} s {action.from_replicas} -> {action.to_replicas} {action.reason} "
            f"{action.result} {action.detail or ''}"
        )
    print(f"reversals {reversals}, forced stops {connector.forced_stops}")
    for lines in report["explanations"]:
        print("\n".join(lines))
    print(f"replica-seconds {report['replica_seconds']} vs static peak {report['static_peak_replica_seconds']}")
    for row in phases:
        print(
            f"{row['phase']:34s} {row['from_s']:7.1f}-{row['to_s']:7.1f} s requests={row['requests']:4d} "
            f"failed={row['failed']} ttft_p50={fmt(row['ttft_p50_s'])} ttft_p99={fmt(row['ttft_p99_s'])} "
            f"over_slo={fmt(row['ttft_over_slo_frac'])}"
        )


def replot(report_path: Path, plot_path: Path) -> None:
    """Draw the plot of an earlier run from its JSON."""
    report = json.loads(report_path.read_text())
    run = Run(t0=0.0)
    run.samples = [tuple(row) for row in report["samples"]]
    run.requests = [Request(**row) for row in report["request_log"]]
    run.phases = [(row["phase"], row["from_s"]) for row in report["phases"]]
    actions = [ActionRow(**row) for row in report["actions"]]
    plot(run, actions, float(report["settings"]["slo_s"]), plot_path)


def fmt(value: object) -> str:
    return f"{value:.3f}" if isinstance(value, float) else "-"


def connector_count(admin: GatewayAdmin) -> int:
    """Replicas active in the gateway's rotation that have passed its health check (model known)."""
    return sum(1 for u in admin.upstreams() if u.state == "active")


if __name__ == "__main__":
    main()
