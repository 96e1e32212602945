"""vLLM adapter cost: microseconds Governor adds to each engine step, and events per second one engine sends.

The same prompts (seeded) run on a real vLLM engine (the CPU build and the tiny random Llama of
tests/integration/vllm_model) four ways, in-process so that the scheduler's calls can be timed:

- ``stock``: vLLM's own ``Scheduler``, no plugin (Governor off);
- ``plugin``: vLLM's ``Scheduler`` with the ``GovernorStatLogger`` plugin (telemetry from the front end);
- ``governor``: ``GovernorScheduler`` (stock scheduling, exact telemetry from the engine core);
- ``ebplus-mb``: ``EbplusScheduler`` under a live EB+ document in MB mode (policy read and ack path);
- ``ebplus-eb``: the same in EB mode (theta 0.5, N 16): the engine runs exclusive prefill and decode
  batches. Its tokens/s beside ``ebplus-mb`` is what EB did to this CPU engine and tiny random model,
  not a measure of EB+ on a GPU (the paper's regime); its step cost is the phase machine's.

For each, the wall time of the scheduler's ``schedule`` + ``update_from_output`` per step (where the
schedulers' Governor work happens) and of the plugin's ``record`` (where the plugin's happens), p50
and p99 in microseconds; Governor's added cost is the difference to ``stock`` at the same percentile.
Events are published through the real ``TelemetryPublisher`` to a broker of a local stack started
here; events/s is what the engine handed over divided by the run's wall time.

    PYTHONPATH=. python ops/bench/bench_vllm_adapter.py [--requests 256] [--out out/bench/vllm_adapter.json]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from services.settings import Settings
from services.stack.launcher import stack_down, stack_up
from services.stack.processes import free_port

VARIANTS = ("stock", "plugin", "governor", "ebplus-mb", "ebplus-eb")


def _timed(base: type, sink: list[float]) -> type:
    """A subclass of scheduler ``base`` recording schedule + update_from_output wall time per step, seconds."""

    class Timed(base):  # type: ignore[misc, valid-type]
        _started = 0.0
        _spent = 0.0

        def schedule(self, *args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            output = super().schedule(*args, **kwargs)
            self._spent = time.perf_counter() - started
            return output

        def update_from_output(self, *args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            result = super().update_from_output(*args, **kwargs)
            sink.append(self._spent + time.perf_counter() - started)
            return result

    Timed.__module__ = base.__module__
    Timed.__qualname__ = base.__qualname__
    return Timed


def _run(variant: str, requests: int, seed: int, bootstrap: str, redis_url: str) -> dict[str, float]:
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
    step_s: list[float] = []
    record_s: list[float] = []
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
                started = time.perf_counter()
                super().record(*args, **kwargs)
                record_s.append(time.perf_counter() - started)

        loggers = [TimedPlugin]
    if variant.startswith("ebplus-"):
        store = RedisStore.from_url(redis_url, deployment, 5.0)
        mode = variant.removeprefix("ebplus-").upper()
        document = pinned_ebplus(deployment, engine_id, 1, mode, now_s=time.time(), valid_for_s=3600.0)
        store.put_policy("ebplus", engine_id, 1, document.model_dump_json())
        store.close()
    engine = build_engine(_timed(base[variant], step_s), stat_loggers=loggers, iteration_details=variant == "plugin")
    rng = np.random.default_rng(seed)
    for index in range(requests):
        prompt = rng.integers(100, 1000, size=int(rng.integers(32, 256))).tolist()
        params = SamplingParams(max_tokens=int(rng.integers(16, 96)), ignore_eos=True, detokenize=False)
        engine.add_request(f"b-{index}", {"prompt_token_ids": prompt}, params)
    started = time.perf_counter()
    output_tokens = 0
    while engine.has_unfinished_requests():
        for output in engine.step():
            if output.finished:
                output_tokens += len(output.outputs[0].token_ids)
    wall_s = time.perf_counter() - started
    scheduler = engine.engine_core.engine_core.scheduler
    link = getattr(scheduler, "link", None)
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
        stats = link.publisher.stats()
        published = stats.published
    engine.engine_core.shutdown()
    governor_s = [a + b for a, b in zip(step_s, record_s, strict=False)] if record_s else step_s
    return {
        "steps": len(step_s),
        "wall_s": wall_s,
        "step_p50_us": float(np.percentile(governor_s, 50) * 1e6),
        "step_p99_us": float(np.percentile(governor_s, 99) * 1e6),
        "events": published,
        "events_per_s": published / wall_s,
        "output_tokens_per_s": output_tokens / wall_s,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=256, help="requests per variant")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--out", type=Path, default=Path("out/bench/vllm_adapter.json"))
    args = parser.parse_args()
    state_dir = Path(tempfile.mkdtemp(prefix="governor-bench-vllm-"))
    state = stack_up(state_dir, Settings.load({}).redis_url, free_port())
    results: dict[str, dict[str, float]] = {}
    try:
        for variant in VARIANTS:
            results[variant] = _run(variant, args.requests, args.seed, state.kafka_bootstrap, state.redis_url)
            print(f"{variant:10s} {results[variant]}", flush=True)
    finally:
        stack_down(state_dir)
    stock = results["stock"]
    for variant in VARIANTS[1:]:
        result = results[variant]
        result["added_p50_us"] = result["step_p50_us"] - stock["step_p50_us"]
        result["added_p99_us"] = result["step_p99_us"] - stock["step_p99_us"]
    print(
        f"{'variant':10s} {'steps':>6s} {'p50 us':>8s} {'p99 us':>8s} {'+p50 us':>8s} {'+p99 us':>8s} {'events/s':>9s}"
    )
    for variant, result in results.items():
        added = f"{result.get('added_p50_us', 0.0):8.0f} {result.get('added_p99_us', 0.0):8.0f}"
        print(
            f"{variant:10s} {result['steps']:6.0f} {result['step_p50_us']:8.0f} {result['step_p99_us']:8.0f} "
            f"{added} {result['events_per_s']:9.0f} {result['output_tokens_per_s']:7.0f}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
