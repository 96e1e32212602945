"""``governor fleet up``: one end-to-end run on real vLLM CPU servers, governed vs plain round robin.

It starts the local stack (broker and Redis) and the stream processor and policy service as ``governor
demo`` does (services/cli/live.py), under the policy file the run writes (``policy_config``), then three
vLLM CPU servers on the tiny random model under Governor's schedulers: two as the ranks of one ``dp_group``
in the long pool running ``EbplusScheduler``, one alone in the short pool running ``SlaiScheduler``. For
each seed, two arms serve the same seeded workload: **governed**, a gateway of the run's deployment that
finds the servers from their registrations and obeys the documents the policy service decides (admission,
FleetOpt's routing and compression, the group's BF-IO bundle), and **round robin**, a gateway of a
deployment no document is written for, with the three servers as one round-robin group. The arms alternate
which goes first (the first seed governed first, the second round robin first, ...). Each arm ends with a
burst of short requests faster than the short pool's server finishes them, so admission, deciding from that
server's telemetry, marks it overloaded and the governed gateway queues then sheds (429). It prints each
seed's arms side by side, the spread over the seeds, and per policy the versions decided and applied by
the engines and the gateways (read back from the run's topics, services/fleet_run/ledger.py), and writes it
all with every request's outcome to ``fleet.json``.

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
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from pydantic import ValidationError

from schemas.policy_docs.admission import AdmissionPolicy
from services.cli.demo import DEMO_FLEET_SLOT_S
from services.cli.live import (
    SERVICES_READY_TIMEOUT_S,
    clean_up_run,
    start_service,
    stop_service,
    wait_until_consuming,
)
from services.cli.options import add_settings_flags, settings_from_args, settings_stack
from services.engines.vllm.tiny_servers import SERVED_MODEL, tiny_model_dir, word_token_ids
from services.fleet_run.client import Outcome, drive
from services.fleet_run.ledger import RunLedger, ledger_lines, read_ledger
from services.fleet_run.processes import (
    EBPLUS_SCHEDULER,
    SLAI_SCHEDULER,
    Server,
    metrics_text,
    start_gateway,
    start_server,
    stop,
    wait_gateway,
    wait_servers,
)
from services.fleet_run.report import ArmSummary, comparison_table, spread_table, summarise
from services.fleet_run.workload import PlannedRequest, burst, workload
from services.settings import Settings
from services.sim.compare import FLEET_SCOPE
from services.stack.launcher import StackState, stack_status
from services.stack.processes import free_port
from services.store.redis_store import RedisStore

SHORT_POOL = "short"
LONG_POOL = "long"
DP_GROUP = "fleet-dp"
ROUND_ROBIN_GROUP = "fleet-rr"
GATEWAY_READY_TIMEOUT_S = 180.0
GOVERNED = "governed"
ROUND_ROBIN = "round-robin"
WARMUP_SEED_OFFSET = 10_000
BURST_SEED_OFFSET = 20_000
COOL_DOWN_POLL_S = 2.0
# The run's policy file (policy_config): the two values that differ from the defaults, and why.
EBPLUS_T_UPD_COMPLETIONS = 20  # EB+ decides every T_upd = 100 completions by default; a rank finishes ~50 per seed
EBPLUS_W_MIN_SAMPLES = 20  # and wants W_min = 30 hazard samples before it moves its threshold
NATURAL_STOP_WORDS = 20  # stop ids of the long requests: they end after ~60 tokens on average (tiny_servers)
ADMISSION_SMOOTHING_UP = 1.0  # default 0.5: four 5 s decisions of a full queue before "overloaded"


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
        default=10.0,
        help="longest a request waits in a gateway's queue before 429, both runs (default 10)",
    )
    up.add_argument(
        "--queue-max-waiting",
        type=int,
        default=16,
        help="requests a pool's queue holds in the gateways; more are shed at once (default 16)",
    )
    up.add_argument(
        "--start-timeout-s", type=float, default=1800.0, help="longest the servers may take to start (default 1800)"
    )
    up.add_argument("--out", type=Path, default=Path("out/fleet"), help="output folder (default out/fleet)")
    up.add_argument(
        "--keep", action="store_true", help="keep the stack and the run's Redis keys (default: remove them)"
    )
    up.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=[0],
        help="seeds of the workload, one governed and one round-robin run each, alternating which goes first "
        "(default 0)",
    )
    up.add_argument(
        "--burst-requests",
        type=int,
        default=120,
        help="short requests of the overload burst that ends each arm; 0: no burst (default 120)",
    )
    up.add_argument("--burst-rate", type=float, default=8.0, help="arrivals per second of the burst (default 8)")
    up.add_argument(
        "--cool-down-s",
        type=float,
        default=90.0,
        help="longest wait after a burst for every engine's admission level to be ok again (default 90)",
    )
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


def governed_config(queue_deadline_s: float, max_waiting: int = 16) -> str:
    """The governed gateway's file: FleetOpt's pools and the queue; the upstreams come from registrations."""
    return (
        f'[routing]\nshort_pool = "{SHORT_POOL}"\nlong_pool = "{LONG_POOL}"\n\n'
        f"[queue]\ndeadline_s = {queue_deadline_s:g}\nmax_waiting = {max_waiting}\n\n"
        '[bfio]\nbalancer = "bfio"\n'
    )


def policy_config() -> str:
    """The policy file both services run with: the defaults but for EB+'s pace and admission's rise.

    The tiny CPU servers finish a few dozen requests per rank per seed, so EB+ with its paper's T_upd = 100
    would never decide in a run; and admission's pressure, smoothed with weight 0.5 on the way up, needs four
    5-second decisions of a full queue to pass 0.9, so a burst the loaded machine can afford (tens of seconds)
    would end before "overloaded". With weight 1.0 a full queue is "overloaded" at the next decision; the way
    down (weight 0.1, hysteresis 0.1) keeps its default.
    """
    return (
        "# written by governor fleet up (services/cli/fleet.py policy_config)\n"
        f"[ebplus]\nt_upd_completions = {EBPLUS_T_UPD_COMPLETIONS}\nw_min_samples = {EBPLUS_W_MIN_SAMPLES}\n\n"
        f"[admission]\nsmoothing_up = {ADMISSION_SMOOTHING_UP:.1f}\n"
    )


def arm_order(position: int) -> tuple[str, str]:
    """Which arm goes first for the seed at ``position`` of ``--seeds``: governed at even positions."""
    return (GOVERNED, ROUND_ROBIN) if position % 2 == 0 else (ROUND_ROBIN, GOVERNED)


def round_robin_config(servers: list[Server], queue_deadline_s: float, max_waiting: int = 16) -> str:
    """The ungoverned gateway's file: every server a rank of one round-robin group, under its own engine id."""
    entries = "".join(
        f'\n[[upstreams]]\nengine_id = "{s.engine_id}"\nurl = "{s.url}"\nmodel = "{SERVED_MODEL}"\n'
        f'pool = "{SHORT_POOL}"\ndp_group = "{ROUND_ROBIN_GROUP}"\ndp_rank = {rank}\n'
        f"max_num_seqs = {s.max_num_seqs}\nmax_model_len = 512\n"
        for rank, s in enumerate(servers)
    )
    return (
        f"[queue]\ndeadline_s = {queue_deadline_s:g}\nmax_waiting = {max_waiting}\n\n"
        f'[bfio]\nbalancer = "round_robin"\n{entries}'
    )


def _interrupt(signum: int, frame: FrameType | None) -> None:
    """SIGINT and SIGTERM end the run through the ``finally`` blocks, which stop every child.

    SIGINT is set too because a command started in the background of a non-interactive shell inherits it
    ignored, and Python then raises no KeyboardInterrupt.
    """
    raise KeyboardInterrupt


@dataclass(frozen=True, slots=True, kw_only=True)
class ArmRun:
    """One arm of one seed: the measured run's and the burst's figures and outcomes (burst: None without)."""

    seed: int
    summary: ArmSummary
    outcomes: list[Outcome]
    burst: ArmSummary | None
    burst_outcomes: list[Outcome]

    def to_dict(self) -> dict[str, Any]:
        """The arm as JSON-ready fields."""
        return {
            "seed": self.seed,
            "summary": self.summary.to_dict(),
            "burst": None if self.burst is None else self.burst.to_dict(),
            "outcomes": [o.to_dict() for o in self.outcomes],
            "burst_outcomes": [o.to_dict() for o in self.burst_outcomes],
        }


def _run_arm(
    name: str,
    *,
    seed: int,
    config_text: str,
    deployment: str,
    state: StackState,
    settings: Settings,
    servers: list[Server],
    requests: list[PlannedRequest],
    warmup: list[PlannedRequest],
    overload: list[PlannedRequest],
    wait_plan_s: float,
    cool_down_s: float,
    run_deployment: str,
    out_dir: Path,
) -> ArmRun:
    """Serve ``requests``, then the ``overload`` burst, through a fresh gateway of ``deployment``.

    ``warmup`` goes through the same gateway first, unmeasured: it warms the servers the same way for both
    runs and gives FleetOpt the finished requests it plans from. Then, with ``wait_plan_s`` > 0, the run waits
    that long at most for a FleetOpt plan of ``deployment`` in Redis. The shed and compressed counts are
    each phase's (the counters' growth over it); the documents listed are all the gateway applied. After the
    burst it waits up to ``cool_down_s`` for every server's admission level in ``run_deployment`` (where the
    engines report, whichever gateway served them) to be back at ok, so the next arm starts unloaded.
    """
    label = f"{name} s{seed}"
    config = out_dir / f"gateway-{name}-s{seed}.toml"
    config.write_text(config_text)
    log = out_dir / f"gateway-{name}-s{seed}.log"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = start_gateway(
        config=config, port=port, deployment=deployment, gateway_id=f"gateway-{name}-s{seed}", state=state, log=log
    )
    prefix = f"s{seed}-{name}"
    burst_before = burst_after = ""
    burst_outcomes: list[Outcome] = []
    try:
        wait_gateway(process, url, {s.url for s in servers}, GATEWAY_READY_TIMEOUT_S, log)
        if warmup:
            print(f"{label}: gateway at {url} lists the 3 servers; warming up with {len(warmup)} requests", flush=True)
            warmed = asyncio.run(drive(url, SERVED_MODEL, warmup, 3600.0, f"{prefix}-warmup"))
            print(f"{label}: warm-up done, {sum(o.status == 200 for o in warmed)} served", flush=True)
        if wait_plan_s > 0:
            planned = _wait_for_plan(settings, deployment, wait_plan_s)
            plan = "in Redis" if planned else f"still absent after {wait_plan_s:g} s"
            print(f"{label}: FleetOpt plan {plan}", flush=True)
        before = metrics_text(url)
        print(f"{label}: sending the {len(requests)} measured requests", flush=True)
        outcomes = asyncio.run(drive(url, SERVED_MODEL, requests, 3600.0, f"{prefix}-main"))
        after = metrics_text(url)
        if overload:
            print(f"{label}: burst of {len(overload)} short requests", flush=True)
            burst_before = metrics_text(url)
            burst_outcomes = asyncio.run(drive(url, SERVED_MODEL, overload, 3600.0, f"{prefix}-burst"))
            burst_after = metrics_text(url)
    finally:
        stop(process)
    ranks = [s.engine_id for s in servers if s.dp_group is not None]
    lines = log.read_text(errors="replace").splitlines()
    summary = summarise(name, outcomes, ranks=ranks, metrics_before=before, metrics_after=after, log_lines=lines)
    print(f"{label}: {summary.served} served, {summary.refused} refused in {summary.makespan_s:.0f} s", flush=True)
    burst_summary = None
    if overload:
        burst_summary = summarise(
            f"{name} burst",
            burst_outcomes,
            ranks=ranks,
            metrics_before=burst_before,
            metrics_after=burst_after,
            log_lines=[],
        )
        refused = " ".join(f"{k}={v}" for k, v in burst_summary.refused_by_reason.items()) or "none"
        print(f"{label}: burst {burst_summary.served} served, refused: {refused}", flush=True)
        calm = _cool_down(settings, run_deployment, [s.engine_id for s in servers], cool_down_s)
        print(f"{label}: admission {'ok again' if calm else f'not yet ok after {cool_down_s:g} s'}", flush=True)
    return ArmRun(seed=seed, summary=summary, outcomes=outcomes, burst=burst_summary, burst_outcomes=burst_outcomes)


def settled(document: AdmissionPolicy | None, *, since_s: float, now_s: float) -> bool:
    """Whether an engine's admission document shows it unloaded after ``since_s`` (the burst's end).

    An expired document (past ``valid_until``: the gateway falls back to ok) settles; otherwise the level must
    be ok in a decision computed after ``since_s``. The second condition matters: decisions reach Redis
    seconds after the telemetry they read, so right after a burst the document may still be an ok decided
    before the queue grew, and the overloaded one lands while the next arm has started.
    """
    if document is None or document.valid_until <= now_s:
        return True
    return document.payload.level == "ok" and document.computed_at >= since_s


def _cool_down(settings: Settings, deployment: str, engines: list[str], timeout_s: float) -> bool:
    """Wait until every engine's admission document is ``settled`` since now; whether that came in time."""
    store = RedisStore.from_url(settings.redis_url, deployment, settings.redis_timeout_s, settings.redis_security())
    since_s = time.time()
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            documents = [_admission_document(store.get_policy("admission", engine)) for engine in engines]
            if all(settled(d, since_s=since_s, now_s=time.time()) for d in documents):
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(COOL_DOWN_POLL_S)
    finally:
        store.close()


def _admission_document(raw: str | None) -> AdmissionPolicy | None:
    if raw is None:
        return None
    try:
        return AdmissionPolicy.model_validate_json(raw)
    except ValidationError:
        return None


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
    """Run both arms for every seed; exit 0 when every request was served or refused with a status."""
    settings = settings_from_args(args)
    seeds: list[int] = args.seeds
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
    runs: dict[str, list[ArmRun]] = {GOVERNED: [], ROUND_ROBIN: []}
    ledger: RunLedger | None = None
    started = time.monotonic()
    try:
        state = settings_stack(settings)
        settings = settings.model_copy(update={"redis_url": state.redis_url})
        print(f"stack: kafka {state.kafka_bootstrap}, redis {state.redis_url}; deployment {deployment}", flush=True)
        policy_file = out_dir / "policy.toml"
        policy_file.write_text(policy_config())
        for name in ("stream", "policy"):
            services[name] = start_service(
                name,
                state,
                deployment,
                DEMO_FLEET_SLOT_S,
                out_dir / f"{name}.log",
                config=policy_file,
                shadows=(),
                stream_runtime=settings.stream_runtime,
            )
        print(f"services: stream processor and policy service started with {policy_file}", flush=True)
        model = tiny_model_dir(_model_folder(out_dir))
        layout = [
            ("rank-0", LONG_POOL, DP_GROUP, 0, EBPLUS_SCHEDULER),
            ("rank-1", LONG_POOL, DP_GROUP, 1, EBPLUS_SCHEDULER),
            ("short-0", SHORT_POOL, None, None, SLAI_SCHEDULER),
        ]
        for index, (name, pool, group, rank, scheduler) in enumerate(layout):
            servers.append(
                start_server(
                    model=model,
                    engine_id=f"{deployment}-{name}",
                    pool=pool,
                    port=free_port(),
                    dp_group=group,
                    dp_rank=rank,
                    max_num_seqs=args.max_num_seqs,
                    seed=index,
                    state=state,
                    deployment=deployment,
                    log=out_dir / f"{name}.log",
                    scheduler_cls=scheduler,
                )
            )
        print(
            f"vLLM: starting {len(servers)} CPU servers (two ranks of {DP_GROUP} in pool {LONG_POOL} under EB+, one "
            f"in pool {SHORT_POOL} under SLAI); this takes minutes on a loaded machine",
            flush=True,
        )
        for name, process in services.items():
            if not wait_until_consuming(out_dir / f"{name}.log", process, SERVICES_READY_TIMEOUT_S):
                print(f"warning: the {name} service has not joined its group yet", flush=True)
        wait_servers(servers, args.start_timeout_s, lambda line: print(line, flush=True))
        print(f"vLLM: all servers up {time.monotonic() - started:.0f} s after the start", flush=True)
        for position, seed in enumerate(seeds):
            stops = word_token_ids(NATURAL_STOP_WORDS)
            requests = workload(seed, args.requests, args.rate, stops)
            warmup = (
                []
                if args.warmup_requests <= 0
                else workload(WARMUP_SEED_OFFSET + seed, args.warmup_requests, args.warmup_rate, stops)
            )
            overload = (
                []
                if args.burst_requests <= 0
                else burst(BURST_SEED_OFFSET + seed, args.burst_requests, args.burst_rate)
            )
            for arm in arm_order(position):
                governed = arm == GOVERNED
                runs[arm].append(
                    _run_arm(
                        arm,
                        seed=seed,
                        config_text=(
                            governed_config(args.queue_deadline_s, args.queue_max_waiting)
                            if governed
                            else round_robin_config(servers, args.queue_deadline_s, args.queue_max_waiting)
                        ),
                        deployment=deployment if governed else f"{deployment}-ungoverned",
                        state=state,
                        settings=settings,
                        servers=servers,
                        requests=requests,
                        warmup=warmup,
                        overload=overload,
                        wait_plan_s=args.plan_timeout_s if governed else 0.0,
                        cool_down_s=args.cool_down_s,
                        run_deployment=deployment,
                        out_dir=out_dir,
                    )
                )
        print("reading the run's decisions and acknowledgements back from the broker", flush=True)
        ledger = read_ledger(state.kafka_bootstrap, deployment, settings.kafka_security())
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
    strip = f"{deployment}-"
    for governed_run, plain_run in zip(runs[GOVERNED], runs[ROUND_ROBIN], strict=True):
        first = arm_order(seeds.index(governed_run.seed))[0]
        print(f"\nseed {governed_run.seed} ({first} first), measured run:")
        print(comparison_table(governed_run.summary, plain_run.summary).replace(strip, ""))
        if governed_run.burst is not None and plain_run.burst is not None:
            print(f"seed {governed_run.seed}, burst:")
            print(comparison_table(governed_run.burst, plain_run.burst, documents=False).replace(strip, ""))
    names = [GOVERNED, ROUND_ROBIN]
    print(f"\nmeasured runs over seeds {' '.join(map(str, seeds))}: median [min, max]")
    print(spread_table([[r.summary for r in runs[n]] for n in names], names))
    bursts = [[r.burst for r in runs[n] if r.burst is not None] for n in names]
    if all(bursts):
        print("\nbursts: median [min, max]")
        print(spread_table(bursts, names))
    burst_queued = (
        {f"seed {r.seed}": ledger.queued.get(f"s{r.seed}-{GOVERNED}-burst", 0) for r in runs[GOVERNED]}
        if ledger is not None
        else {}
    )
    if ledger is not None:
        print(
            "\nrequests the governed gateway queued in the bursts: "
            + ", ".join(f"{k} {v}" for k, v in burst_queued.items())
        )
        print("what each policy did in the run (gov.policy.decisions; policy.applied on gov.telemetry):")
        print("\n".join(ledger_lines(ledger, strip=strip)))
    result: dict[str, Any] = {
        "command": "governor fleet up " + _flags(args),
        "deployment": deployment,
        "load_average": os.getloadavg(),
        "wall_s": time.monotonic() - started,
        "policy_config": policy_config(),
        "arms": {name: [r.to_dict() for r in runs[name]] for name in names},
        "ledger": None if ledger is None else ledger.to_dict(),
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
        f"--queue-deadline-s {args.queue_deadline_s:g} --queue-max-waiting {args.queue_max_waiting} "
        f"--seeds {' '.join(map(str, args.seeds))} --warmup-requests {args.warmup_requests} "
        f"--warmup-rate {args.warmup_rate:g} --burst-requests {args.burst_requests} --burst-rate {args.burst_rate:g} "
        f"--cool-down-s {args.cool_down_s:g}"
    )
