"""``governor fleet up``: one end-to-end run on real vLLM CPU servers, governed vs plain round robin.

It starts the local stack (broker and Redis) and the stream processor and policy service as ``governor
demo`` does (services/cli/live.py), then three vLLM CPU servers on the tiny random model with Governor's
plugin: two as the ranks of one ``dp_group`` in the long pool, one alone in the short pool. A gateway of the
run's deployment finds them from their registrations and serves one seeded workload of text prompts under
the documents the policy service decides (admission, FleetOpt's routing and compression, the group's BF-IO
bundle). A second gateway, of a deployment no document is written for, then serves the same prompts with
the same three servers as one round-robin group: no policies. It prints both runs side by side (TTFT and
TPOT p50/p99, throughput, the DP ranks' load imbalance, shed and compressed counts, the documents each
gateway applied) and writes them with every request's outcome to ``fleet.json``.

Everything it started is stopped on exit, on Ctrl-C and on SIGTERM; the run's Redis keys are removed and the
stack is stopped when the command started it (``--keep`` keeps both).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path
from types import FrameType
from typing import Any

from services.cli.demo import DEMO_FLEET_SLOT_S
from services.cli.live import (
    SERVICES_READY_TIMEOUT_S,
    clean_up_run,
    start_service,
    stop_service,
    wait_until_consuming,
)
from services.cli.options import add_settings_flags, settings_from_args
from services.engines.vllm.tiny_servers import SERVED_MODEL, tiny_model_dir
from services.fleet_run.client import Outcome, drive
from services.fleet_run.processes import (
    Server,
    metrics_text,
    start_gateway,
    start_server,
    stop,
    wait_gateway,
    wait_servers,
)
from services.fleet_run.report import ArmSummary, comparison_table, summarise
from services.fleet_run.workload import PlannedRequest, workload
from services.settings import Settings
from services.sim.compare import FLEET_SCOPE
from services.stack.launcher import StackState, stack_status, stack_up
from services.stack.processes import free_port
from services.store.redis_store import RedisStore

SHORT_POOL = "short"
LONG_POOL = "long"
DP_GROUP = "fleet-dp"
ROUND_ROBIN_GROUP = "fleet-rr"
GATEWAY_READY_TIMEOUT_S = 180.0


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``fleet`` command group (``fleet up``)."""
    fleet = commands.add_parser(
        "fleet", help="run real vLLM CPU servers behind the gateway, governed vs round robin, and compare"
    )
    sub = fleet.add_subparsers(dest="fleet_command", metavar="COMMAND", required=True)
    up = sub.add_parser(
        "up",
        help="start the stack, the services, 3 vLLM CPU servers and the gateway; compare governed and round robin",
    )
    up.add_argument("--requests", type=int, default=24, help="requests per run (default 24)")
    up.add_argument("--rate", type=float, default=1.0, help="Poisson arrivals per second (default 1)")
    up.add_argument("--max-num-seqs", type=int, default=4, help="slots of each vLLM server (default 4)")
    up.add_argument(
        "--queue-deadline-s",
        type=float,
        default=30.0,
        help="longest a request waits in a gateway's queue before 429, both runs (default 30)",
    )
    up.add_argument(
        "--start-timeout-s", type=float, default=1800.0, help="longest the servers may take to start (default 1800)"
    )
    up.add_argument("--out", type=Path, default=Path("out/fleet"), help="output folder (default out/fleet)")
    up.add_argument(
        "--keep", action="store_true", help="keep the stack and the run's Redis keys (default: remove them)"
    )
    up.add_argument("--seed", type=int, default=0, help="seed of the workload (default 0)")
    up.add_argument(
        "--warmup-requests",
        type=int,
        default=60,
        help="requests sent through each gateway before its measured run, unmeasured (default 60: FleetOpt "
        "plans only once 50 requests have finished in its window)",
    )
    up.add_argument("--warmup-rate", type=float, default=2.0, help="arrivals per second of the warm-up (default 2)")
    up.add_argument(
        "--plan-timeout-s",
        type=float,
        default=90.0,
        help="longest the governed run waits after its warm-up for a FleetOpt plan (default 90)",
    )
    add_settings_flags(up, ["state_dir", "redis_url", "stream_runtime", "log_format"])
    up.set_defaults(handler=run_up)


def governed_config(queue_deadline_s: float) -> str:
    """The governed gateway's file: FleetOpt's pools and the queue; the upstreams come from registrations."""
    return (
        f'[routing]\nshort_pool = "{SHORT_POOL}"\nlong_pool = "{LONG_POOL}"\n\n'
        f"[queue]\ndeadline_s = {queue_deadline_s:g}\n\n"
        '[bfio]\nbalancer = "bfio"\n'
    )


def round_robin_config(servers: list[Server], queue_deadline_s: float) -> str:
    """The ungoverned gateway's file: every server a rank of one round-robin group, under its own engine id."""
    entries = "".join(
        f'\n[[upstreams]]\nengine_id = "{s.engine_id}"\nurl = "{s.url}"\nmodel = "{SERVED_MODEL}"\n'
        f'pool = "{SHORT_POOL}"\ndp_group = "{ROUND_ROBIN_GROUP}"\ndp_rank = {rank}\n'
        f"max_num_seqs = {s.max_num_seqs}\nmax_model_len = 512\n"
        for rank, s in enumerate(servers)
    )
    return f'[queue]\ndeadline_s = {queue_deadline_s:g}\n\n[bfio]\nbalancer = "round_robin"\n{entries}'


def _interrupt(signum: int, frame: FrameType | None) -> None:
    """SIGINT and SIGTERM end the run through the ``finally`` blocks, which stop every child.

    SIGINT is set too because a command started in the background of a non-interactive shell inherits it
    ignored, and Python then raises no KeyboardInterrupt.
    """
    raise KeyboardInterrupt


def _run_arm(
    name: str,
    *,
    config_text: str,
    deployment: str,
    state: StackState,
    settings: Settings,
    servers: list[Server],
    requests: list[PlannedRequest],
    warmup: list[PlannedRequest],
    wait_plan_s: float,
    out_dir: Path,
) -> tuple[ArmSummary, list[Outcome]]:
    """Serve ``requests`` through a fresh gateway of ``deployment``; its figures and the outcomes.

    ``warmup`` goes through the same gateway first, unmeasured: it warms the servers the same way for both
    runs and gives FleetOpt the finished requests it plans from. Then, with ``wait_plan_s`` > 0, the run waits
    that long at most for a FleetOpt plan of ``deployment`` in Redis. The shed and compressed counts are
    the measured run's (the counters' growth over it); the documents listed are all the gateway applied.
    """
    config = out_dir / f"gateway-{name}.toml"
    config.write_text(config_text)
    log = out_dir / f"gateway-{name}.log"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = start_gateway(
        config=config, port=port, deployment=deployment, gateway_id=f"gateway-{name}", state=state, log=log
    )
    try:
        wait_gateway(process, url, {s.url for s in servers}, GATEWAY_READY_TIMEOUT_S, log)
        if warmup:
            print(f"{name}: gateway at {url} lists the 3 servers; warming up with {len(warmup)} requests", flush=True)
            warmed = asyncio.run(drive(url, SERVED_MODEL, warmup, timeout_s=3600.0))
            print(f"{name}: warm-up done, {sum(o.status == 200 for o in warmed)} served", flush=True)
        if wait_plan_s > 0:
            planned = _wait_for_plan(settings, deployment, wait_plan_s)
            plan = "in Redis" if planned else f"still absent after {wait_plan_s:g} s"
            print(f"{name}: FleetOpt plan {plan}", flush=True)
        before = metrics_text(url)
        print(f"{name}: sending the {len(requests)} measured requests", flush=True)
        outcomes = asyncio.run(drive(url, SERVED_MODEL, requests, timeout_s=3600.0))
        after = metrics_text(url)
    finally:
        stop(process)
    ranks = [s.engine_id for s in servers if s.dp_group is not None]
    summary = summarise(
        name,
        outcomes,
        ranks=ranks,
        metrics_before=before,
        metrics_after=after,
        log_lines=log.read_text(errors="replace").splitlines(),
    )
    print(
        f"{name}: {summary.served} served, {summary.refused} refused in {summary.makespan_s:.0f} s",
        flush=True,
    )
    return summary, outcomes


def _wait_for_plan(settings: Settings, deployment: str, timeout_s: float) -> bool:
    """Wait until Redis holds a FleetOpt plan (scope ``fleet``) of ``deployment``; whether it does."""
    store = RedisStore.from_url(settings.redis_url, deployment, settings.redis_timeout_s, settings.redis_security())
    deadline = time.monotonic() + timeout_s
    try:
        while store.get_policy("fleetopt", FLEET_SCOPE) is None:
            if time.monotonic() > deadline:
                return False
            time.sleep(1.0)
        return True
    finally:
        store.close()


def run_up(args: argparse.Namespace) -> int:
    """Run both arms; exit 0 when both served every request or refused it with a status."""
    settings = settings_from_args(args)
    requests = workload(args.seed, args.requests, args.rate)
    warmup = [] if args.warmup_requests <= 0 else workload(args.seed + 1, args.warmup_requests, args.warmup_rate)
    previous = {signum: signal.signal(signum, _interrupt) for signum in (signal.SIGINT, signal.SIGTERM)}
    run_id = uuid.uuid4().hex[:8]
    deployment = f"fleet-{run_id}"
    out_dir: Path = args.out / run_id
    out_dir.mkdir(parents=True, exist_ok=True)
    status = stack_status(settings.state_dir, redis_security=settings.redis_security())
    stop_stack = not (status.kafka_ok and status.redis_ok)
    services: dict[str, subprocess.Popen[bytes]] = {}
    servers: list[Server] = []
    state: StackState | None = None
    started = time.monotonic()
    try:
        state = stack_up(
            settings.state_dir, settings.redis_url, None, settings.kafka_timeout_s, settings.redis_security()
        )
        settings = settings.model_copy(update={"redis_url": state.redis_url})
        print(f"stack: kafka {state.kafka_bootstrap}, redis {state.redis_url}; deployment {deployment}", flush=True)
        for name in ("stream", "policy"):
            services[name] = start_service(
                name,
                state,
                deployment,
                DEMO_FLEET_SLOT_S,
                out_dir / f"{name}.log",
                config=None,
                shadows=(),
                stream_runtime=settings.stream_runtime,
            )
        print(f"services: stream processor and policy service started (logs in {out_dir})", flush=True)
        model = tiny_model_dir(_model_folder(out_dir))
        layout = [
            ("rank-0", LONG_POOL, DP_GROUP, 0),
            ("rank-1", LONG_POOL, DP_GROUP, 1),
            ("short-0", SHORT_POOL, None, None),
        ]
        for seed, (name, pool, group, rank) in enumerate(layout):
            servers.append(
                start_server(
                    model=model,
                    engine_id=f"{deployment}-{name}",
                    pool=pool,
                    port=free_port(),
                    dp_group=group,
                    dp_rank=rank,
                    max_num_seqs=args.max_num_seqs,
                    seed=seed,
                    state=state,
                    deployment=deployment,
                    log=out_dir / f"{name}.log",
                )
            )
        print(
            f"vLLM: starting {len(servers)} CPU servers (two ranks of {DP_GROUP} in pool {LONG_POOL}, one in pool "
            f"{SHORT_POOL}); this takes minutes on a loaded machine",
            flush=True,
        )
        for name, process in services.items():
            if not wait_until_consuming(out_dir / f"{name}.log", process, SERVICES_READY_TIMEOUT_S):
                print(f"warning: the {name} service has not joined its group yet", flush=True)
        wait_servers(servers, args.start_timeout_s, lambda line: print(line, flush=True))
        print(f"vLLM: all servers up {time.monotonic() - started:.0f} s after the start", flush=True)
        governed, governed_outcomes = _run_arm(
            "governed",
            config_text=governed_config(args.queue_deadline_s),
            deployment=deployment,
            state=state,
            settings=settings,
            servers=servers,
            requests=requests,
            warmup=warmup,
            wait_plan_s=args.plan_timeout_s,
            out_dir=out_dir,
        )
        ungoverned, ungoverned_outcomes = _run_arm(
            "round-robin",
            config_text=round_robin_config(servers, args.queue_deadline_s),
            deployment=f"{deployment}-ungoverned",
            state=state,
            settings=settings,
            servers=servers,
            requests=requests,
            warmup=warmup,
            wait_plan_s=0.0,
            out_dir=out_dir,
        )
    finally:
        for server in servers:
            stop(server.process)
        for process in services.values():
            stop_service(process)
        if state is not None and not args.keep:
            print(
                clean_up_run(settings, settings.redis_url, deployment, stop_stack=stop_stack, starter="this run"),
                flush=True,
            )
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    print(comparison_table(governed, ungoverned))
    result: dict[str, Any] = {
        "command": "governor fleet up " + _flags(args),
        "deployment": deployment,
        "load_average": os.getloadavg(),
        "wall_s": time.monotonic() - started,
        "governed": governed.to_dict(),
        "round_robin": ungoverned.to_dict(),
        "outcomes": {
            "governed": [o.to_dict() for o in governed_outcomes],
            "round_robin": [o.to_dict() for o in ungoverned_outcomes],
        },
    }
    path = out_dir / "fleet.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"load average at the end {os.getloadavg()}; wrote {path}")
    return 0


def _model_folder(out_dir: Path) -> Path:
    folder = out_dir / "model"
    folder.mkdir(exist_ok=True)
    return folder


def _flags(args: argparse.Namespace) -> str:
    """The options this run was given, as a command line."""
    return (
        f"--requests {args.requests} --rate {args.rate:g} --max-num-seqs {args.max_num_seqs} "
        f"--queue-deadline-s {args.queue_deadline_s:g} --seed {args.seed} --warmup-requests {args.warmup_requests} "
        f"--warmup-rate {args.warmup_rate:g}"
    )
