"""vLLM adapter cost: microseconds Governor adds to each engine step, and events per second one engine sends.

The same seeded prompts run on a real vLLM engine (the CPU build and the tiny random Llama shipped in
services/engines/vllm/tiny_model), in-process so that the scheduler's calls can be timed, five ways:

- ``stock``: vLLM's own ``Scheduler``, no plugin (Governor off);
- ``plugin``: vLLM's ``Scheduler`` with the ``GovernorStatLogger`` plugin (telemetry from the front end);
- ``governor``: ``GovernorScheduler`` (stock scheduling, exact telemetry from the engine core);
- ``ebplus-mb``: ``EbplusScheduler`` under a live EB+ document in MB mode (policy read and ack path);
- ``ebplus-eb``: the same in EB mode (theta 0.5, N 16): the engine runs exclusive prefill and decode
  batches. Its tokens/s beside ``ebplus-mb`` is what EB did to this CPU engine and tiny random model,
  not a measure of EB+ on a GPU (the paper's regime).

Governor's cost per step is measured directly, not as a difference of two noisy runs: vLLM's own
``Scheduler.schedule`` and ``update_from_output`` are wrapped with timers (in this script only), the
scheduler class the engine runs is wrapped by an outer timer, and the step's Governor time is outer
minus inner, plus the batch count of Governor's ``_update_after_schedule``, which vLLM calls from inside
its own ``schedule`` (its time less vLLM's part of it); for the plugin it is the time inside ``record``.
For ``stock`` the same subtraction measures the timers themselves (the floor). Each is taken twice:
wall time (``time.perf_counter``) and the engine thread's own CPU time (``time.thread_time_ns``,
CLOCK_THREAD_CPUTIME_ID). On a loaded machine
wall time includes the thread's waits for a core and for the GIL; its CPU time does not, so the CPU
column is Governor's own work on the step path. The publisher thread's CPU time per step
(``publisher_cpu_us_per_step``, the event building moved off the step path) is reported beside it,
read from that thread's CPU clock. p50 and p99 over the steps of a round, median over
``--rounds`` rounds with the min-max spread, after one discarded warm-up round. Events go through the
real ``TelemetryPublisher`` to the broker of a local stack started here; events/s is what the engine
handed over divided by the round's wall time.

    PYTHONPATH=. python ops/bench/bench_vllm_adapter.py [--requests 192] [--rounds 3]
        [--out out/bench/vllm_adapter.json] [--variants stock governor ebplus-mb ebplus-eb]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from schemas.policy_docs.ebplus import EbplusMode
from services.settings import Settings
from services.stack.launcher import stack_down, stack_up
from services.stack.processes import free_port

VARIANTS = ("stock", "plugin", "governor", "ebplus-mb", "ebplus-eb")
PUBLISHER_THREAD = "governor-publisher"  # the name services/sdk/publisher.py gives its sending thread


class StepClock:
    """Per-step wall and thread-CPU times: outer scheduler calls, vLLM's own inside them, the plugin's ``record``."""

    def __init__(self) -> None:
        self.outer_s = self.inner_s = 0.0
        self.outer_cpu_ns = self.inner_cpu_ns = 0
        self.hook_s = 0.0
        self.hook_cpu_ns = 0
        self.in_hook = False
        self.governor_s: list[float] = []
        self.governor_cpu_s: list[float] = []
        self.record_s: list[float] = []
        self.record_cpu_s: list[float] = []

    def close_step(self) -> None:
        self.governor_s.append(max(0.0, self.outer_s - self.inner_s + self.hook_s))
        self.governor_cpu_s.append(max(0, self.outer_cpu_ns - self.inner_cpu_ns + self.hook_cpu_ns) / 1e9)
        self.outer_s = self.inner_s = self.hook_s = 0.0
        self.outer_cpu_ns = self.inner_cpu_ns = self.hook_cpu_ns = 0

    def clear(self) -> None:
        for series in (self.governor_s, self.governor_cpu_s, self.record_s, self.record_cpu_s):
            series.clear()


def _wrap(method: Callable[..., Any], add: Callable[[float, int], None]) -> Callable[..., Any]:
    """``method`` timed: ``add(wall seconds, thread CPU nanoseconds)`` after every call."""

    def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
        started, started_cpu = time.perf_counter(), time.thread_time_ns()
        try:
            return method(self, *args, **kwargs)
        finally:
            add(time.perf_counter() - started, time.thread_time_ns() - started_cpu)

    return timed


def _outer(base: type, clock: StepClock) -> type:
    """A subclass of ``base`` whose schedule + update_from_output time per step is the outer time."""
    from vllm.v1.core.sched.scheduler import Scheduler

    def add_outer(seconds: float, cpu_ns: int) -> None:
        clock.outer_s += seconds
        clock.outer_cpu_ns += cpu_ns

    def update(self: Any, *args: Any, **kwargs: Any) -> Any:
        started, started_cpu = time.perf_counter(), time.thread_time_ns()
        result = base.update_from_output(self, *args, **kwargs)
        add_outer(time.perf_counter() - started, time.thread_time_ns() - started_cpu)
        clock.close_step()
        return result

    attributes = {"schedule": _wrap(base.schedule, add_outer), "update_from_output": update}
    if base._update_after_schedule is not Scheduler._update_after_schedule:
        attributes["_update_after_schedule"] = _hook(base._update_after_schedule, clock)
    return type(base.__name__, (base,), {"__module__": base.__module__, **attributes})


def _hook(method: Callable[..., Any], clock: StepClock) -> Callable[..., Any]:
    """A Governor override that vLLM calls inside its own timed method: its time, less vLLM's part, is Governor's.

    ``GovernorScheduler._update_after_schedule`` counts the batch, then calls vLLM's; vLLM calls it
    from inside ``Scheduler.schedule``, so the inner timer would charge the count to vLLM. The time
    of the override goes to ``hook``, and ``_vllm_hook`` takes vLLM's own part back out of it.
    """

    def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
        started, started_cpu = time.perf_counter(), time.thread_time_ns()
        clock.in_hook = True
        try:
            return method(self, *args, **kwargs)
        finally:
            clock.in_hook = False
            clock.hook_s += time.perf_counter() - started
            clock.hook_cpu_ns += time.thread_time_ns() - started_cpu

    return timed


def _vllm_hook(method: Callable[..., Any], clock: StepClock) -> Callable[..., Any]:
    """vLLM's ``_update_after_schedule``: its time inside a Governor override is vLLM's, not Governor's."""

    def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not clock.in_hook:
            return method(self, *args, **kwargs)
        started, started_cpu = time.perf_counter(), time.thread_time_ns()
        try:
            return method(self, *args, **kwargs)
        finally:
            clock.hook_s -= time.perf_counter() - started
            clock.hook_cpu_ns -= time.thread_time_ns() - started_cpu

    return timed


def _run(
    variant: str, *, requests: int, seed: int, bootstrap: str, redis_url: str, clock: StepClock
) -> dict[str, float]:
    from vllm import SamplingParams
    from vllm.v1.core.sched.scheduler import Scheduler

    from services.engines.vllm.drive import build_engine, pinned_ebplus
    from services.engines.vllm.scheduler import EbplusScheduler, GovernorScheduler
    from services.engines.vllm.stat_logger import GovernorStatLogger
    from services.store.redis_store import RedisStore

    deployment = f"bench-vllm-{uuid.uuid4().hex[:8]}"
    engine_id = f"vllm-{variant}"
    environment = {
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        "GOVERNOR_ENGINE_ID": engine_id,
        "GOVERNOR_DEPLOYMENT": deployment,
        "GOVERNOR_KAFKA_BOOTSTRAP": bootstrap,
        "REDIS_URL": redis_url,
    }
    os.environ.update(environment)
    base = {
        "stock": Scheduler,
        "plugin": Scheduler,
        "governor": GovernorScheduler,
        "ebplus-mb": EbplusScheduler,
        "ebplus-eb": EbplusScheduler,
    }
    loggers: list[Any] | None = None
    if variant == "plugin":

        class TimedPlugin(GovernorStatLogger):
            def record(self, *args: Any, **kwargs: Any) -> None:
                started, started_cpu = time.perf_counter(), time.thread_time_ns()
                super().record(*args, **kwargs)
                clock.record_s.append(time.perf_counter() - started)
                clock.record_cpu_s.append((time.thread_time_ns() - started_cpu) / 1e9)

        loggers = [TimedPlugin]
    if variant.startswith("ebplus-"):
        store = RedisStore.from_url(redis_url, deployment, 5.0)
        mode = EbplusMode(variant.removeprefix("ebplus-").upper())
        document = pinned_ebplus(deployment, engine_id, 1, mode, now_s=time.time(), valid_for_s=3600.0)
        store.put_policy("ebplus", engine_id, 1, document.model_dump_json())
        store.close()
    engine = build_engine(_outer(base[variant], clock), stat_loggers=loggers, iteration_details=variant == "plugin")
    rng = np.random.default_rng(seed)
    for index in range(requests):
        prompt = rng.integers(100, 1000, size=int(rng.integers(32, 256))).tolist()
        params = SamplingParams(max_tokens=int(rng.integers(16, 96)), ignore_eos=True, detokenize=False)
        engine.add_request(f"b-{index}", {"prompt_token_ids": prompt}, params)
    clock.clear()
    publisher_cpu_s = _publisher_cpu_s()
    started = time.perf_counter()
    output_tokens = 0
    while engine.has_unfinished_requests():
        for output in engine.step():
            if output.finished:
                output_tokens += len(output.outputs[0].token_ids)
    wall_s = time.perf_counter() - started
    publisher_cpu_s = _publisher_cpu_s() - publisher_cpu_s
    link = getattr(engine.engine_core.engine_core.scheduler, "link", None)
    if variant == "plugin":
        manager = engine.logger_manager
        link = next(
            logger.link
            for adapter in (manager.stat_loggers if manager is not None else [])
            for logger in getattr(adapter, "per_engine_stat_loggers", {}).values()
            if isinstance(logger, GovernorStatLogger)
        )
    published = 0
    if link is not None:
        link.publisher.flush(60.0)
        published = link.publisher.stats().published
    engine.engine_core.shutdown()
    per_step = clock.record_s if variant == "plugin" else clock.governor_s
    per_step_cpu = clock.record_cpu_s if variant == "plugin" else clock.governor_cpu_s
    steps = len(clock.governor_s)
    return {
        "steps": steps,
        "wall_s": wall_s,
        "governor_p50_us": float(np.percentile(per_step, 50) * 1e6),
        "governor_p99_us": float(np.percentile(per_step, 99) * 1e6),
        "governor_cpu_p50_us": float(np.percentile(per_step_cpu, 50) * 1e6),
        "governor_cpu_p99_us": float(np.percentile(per_step_cpu, 99) * 1e6),
        "publisher_cpu_us_per_step": publisher_cpu_s * 1e6 / max(1, steps),
        "events": published,
        "events_per_s": published / wall_s,
        "output_tokens_per_s": output_tokens / wall_s,
    }


def _publisher_cpu_s() -> float:
    """CPU seconds the live ``governor-publisher`` threads have used so far (0 when none runs).

    The engine of the round opens its publisher before the round starts, and the previous round's has
    been closed, so the difference over a round is the CPU of this round's publisher.
    """
    return sum(
        time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
        for thread in threading.enumerate()
        if thread.name == PUBLISHER_THREAD and thread.ident is not None
    )


def _median(rounds: list[dict[str, float]], key: str) -> dict[str, float]:
    values = [result[key] for result in rounds]
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=192, help="requests per variant and round")
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds (after one warm-up)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--out", type=Path, default=Path("out/bench/vllm_adapter.json"))
    parser.add_argument(
        "--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS), help="variants to run (stock is the floor)"
    )
    args = parser.parse_args()
    from vllm.v1.core.sched.scheduler import Scheduler

    clock = StepClock()

    def add_inner(seconds: float, cpu_ns: int) -> None:
        clock.inner_s += seconds
        clock.inner_cpu_ns += cpu_ns

    Scheduler.schedule = _wrap(Scheduler.schedule, add_inner)  # type: ignore[method-assign]
    Scheduler.update_from_output = _wrap(Scheduler.update_from_output, add_inner)  # type: ignore[method-assign]
    Scheduler._update_after_schedule = _vllm_hook(Scheduler._update_after_schedule, clock)  # type: ignore[method-assign]
    state_dir = Path(tempfile.mkdtemp(prefix="governor-bench-vllm-"))
    state = stack_up(state_dir, Settings.load({}).redis_url, free_port())
    rounds: dict[str, list[dict[str, float]]] = {variant: [] for variant in args.variants}
    try:
        for round_index in range(-1, args.rounds):  # round -1: the warm-up, not recorded
            for variant in args.variants if round_index >= 0 else ("stock",):
                result = _run(
                    variant,
                    requests=args.requests,
                    seed=args.seed,
                    bootstrap=state.kafka_bootstrap,
                    redis_url=state.redis_url,
                    clock=clock,
                )
                if round_index < 0:
                    continue
                rounds[variant].append(result)
                print(f"round {round_index + 1} {variant:10s} {result}", flush=True)
    finally:
        stack_down(state_dir)
    keys = (
        "governor_p50_us",
        "governor_p99_us",
        "governor_cpu_p50_us",
        "governor_cpu_p99_us",
        "publisher_cpu_us_per_step",
        "events_per_s",
        "output_tokens_per_s",
        "steps",
    )
    summary = {variant: {key: _median(results, key) for key in keys} for variant, results in rounds.items()}
    columns = ("steps", "wall p50 us", "wall p99 us", "cpu p50 us", "cpu p99 us", "pub cpu us", "events/s", "tok/s")
    print(f"{'variant':10s} " + " ".join(f"{column:>11s}" for column in columns))
    for variant, figures in summary.items():
        print(f"{variant:10s} " + " ".join(f"{figures[key]['median']:11.1f}" for key in (keys[-1], *keys[:-1])))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"summary": summary, "rounds": rounds}, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
