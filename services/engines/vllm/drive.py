"""Drive one real vLLM engine under Governor with an open-loop workload: ``python -m services.engines.vllm.drive``.

It builds an in-process vLLM engine (by default the tiny random Llama shipped beside this module:
a ``config.json`` alone, dummy weights, no download) with one of Governor's schedulers, sends it
Poisson arrivals of random-token prompts for ``--seconds``, steps it, and every few seconds prints
what the engine does: the scheduler mode in effect, the policy version it acknowledged, requests done
and tokens per second. The engine's Governor settings come from the environment (``GOVERNOR_ENGINE_ID``,
``GOVERNOR_DEPLOYMENT``, ``GOVERNOR_KAFKA_BOOTSTRAP``, ``REDIS_URL``), as for ``vllm serve``;
docs/engines/vllm.md ("Try it here") runs it against the local stack and services.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from schemas.policy_docs.base import InputsDigest
from schemas.policy_docs.ebplus import EbplusFallback, EbplusMode, EbplusPayload, EbplusPolicy, EbplusState, KvGate
from services.settings import default_environment

TINY_MODEL_DIR = Path(__file__).resolve().parent / "tiny_model"
SCHEDULERS = {
    "governor": "services.engines.vllm.scheduler.GovernorScheduler",
    "ebplus": "services.engines.vllm.scheduler.EbplusScheduler",
    "slai": "services.engines.vllm.scheduler.SlaiScheduler",
}
PROGRESS_EVERY_S = 5.0
# The random model has no real end of sequence: stopping at any of these ids (about 1 token in 16 of its
# near-uniform output) gives natural `stop` finishes beside the `length` ones, so EB+ can fit a hazard.
STOP_TOKENS = list(range(64))
# KV cache of the tiny model: 4 KB a token (2 layers x K and V x 256 floats), so 256 MiB hold 64k tokens.
# Set explicitly: on vLLM's CPU backend the default sizes it as a share of the host's memory, which a
# shared host (or a test process already holding torch) does not have free.
KV_CACHE_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class DriveResult:
    """What one drive did.

    Attributes:
        arrived: requests sent.
        finished: requests finished.
        output_tokens: tokens generated.
        wall_s: wall time of the run, seconds.
        ttft_p50_s: median time to first token of the finished requests, seconds (None without any).
        steps_by_mode: engine steps per scheduler mode (``eb``, ``mb``, ``slai``, ``stock``).
    """

    arrived: int
    finished: int
    output_tokens: int
    wall_s: float
    ttft_p50_s: float | None
    steps_by_mode: dict[str, int]


def build_engine(
    scheduler_cls: str | type | None,
    *,
    model: Path = TINY_MODEL_DIR,
    stat_loggers: list[Any] | None = None,
    iteration_details: bool = False,
    max_num_seqs: int = 16,
    max_num_batched_tokens: int | None = None,
    seed: int = 0,
) -> Any:
    """An in-process vLLM engine on ``model`` (dummy weights) under ``scheduler_cls`` (None: vLLM's own).

    In-process, so the caller can read the scheduler (``engine.engine_core.engine_core.scheduler``).
    """
    default_environment("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.engine.llm_engine import LLMEngine

    args = EngineArgs(
        model=str(model),
        load_format="dummy",
        skip_tokenizer_init=True,
        dtype="float32",
        max_model_len=1024,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        enforce_eager=True,
        kv_cache_memory_bytes=KV_CACHE_BYTES,
        disable_log_stats=False,
        enable_logging_iteration_details=iteration_details,
        scheduler_cls=scheduler_cls,
        seed=seed,
    )
    return LLMEngine.from_engine_args(args, stat_loggers=stat_loggers)


def pinned_ebplus(
    deployment: str,
    engine_id: str,
    version: int,
    mode: EbplusMode,
    *,
    now_s: float,
    valid_for_s: float = 600.0,
    mb_token_budget_tokens: int | None = None,
) -> EbplusPolicy:
    """A hand-made EB+ document (mode EB or MB, theta 0.5, N 16, the MB step budget given) for driving an engine
    without a decision."""
    return EbplusPolicy(
        scope=engine_id,
        deployment=deployment,
        version=version,
        computed_at=now_s,
        valid_until=now_s + valid_for_s,
        inputs=InputsDigest(snapshot_id="pinned"),
        payload=EbplusPayload(
            mode=mode,
            theta=0.5,
            k=8,
            n=16,
            kv_gate=KvGate(),
            mu_l_tokens=64.0,
            mu_o_tokens=32.0,
            calib_id="pinned",
            fallback=EbplusFallback(n=16),
            mb_token_budget_tokens=mb_token_budget_tokens,
        ),
        state=EbplusState(),
    )


def drive(engine: Any, *, rate_per_s: float, seconds: float, seed: int, label: str = "vLLM") -> DriveResult:
    """Send Poisson arrivals at ``rate_per_s`` for ``seconds`` (wall time), then drain; print progress."""
    from vllm import SamplingParams

    scheduler = engine.engine_core.engine_core.scheduler
    rng = np.random.default_rng(seed)
    started = time.monotonic()
    next_arrival = started + rng.exponential(1.0 / rate_per_s)
    next_print = started + PROGRESS_EVERY_S
    arrived = finished = tokens = 0
    ttfts: list[float] = []
    modes: dict[str, int] = {}
    done_at_print, tokens_at_print = 0, 0
    while True:
        now = time.monotonic()
        while now >= next_arrival and now - started < seconds:
            prompt = rng.integers(100, 1000, size=int(rng.integers(32, 256))).tolist()
            params = SamplingParams(
                max_tokens=int(rng.integers(16, 128)), ignore_eos=True, detokenize=False, stop_token_ids=STOP_TOKENS
            )
            engine.add_request(f"{label}-{arrived}", {"prompt_token_ids": prompt}, params)
            arrived += 1
            next_arrival += rng.exponential(1.0 / rate_per_s)
        if engine.has_unfinished_requests():
            for output in engine.step():
                if output.finished:
                    finished += 1
                    tokens += len(output.outputs[0].token_ids)
                    metrics = output.metrics
                    first = getattr(metrics, "first_token_latency", None) if metrics is not None else None
                    if isinstance(first, float) and first > 0.0:
                        ttfts.append(first)
            modes[scheduler.scheduler_mode] = modes.get(scheduler.scheduler_mode, 0) + 1
        elif now - started >= seconds:
            break
        else:
            time.sleep(max(0.0, min(next_arrival - now, 0.05)))
        if now >= next_print:
            span = now - next_print + PROGRESS_EVERY_S
            versions = scheduler.link.stream.policy_versions
            told = ", ".join(f"{k} v{v}" for k, v in sorted(versions.items())) or "no policy yet"
            print(
                f"  {label:9s}  {scheduler.link.stream.engine_id} mode {scheduler.scheduler_mode} ({told})  "
                f"done {(finished - done_at_print) / span:4.1f}/s  {(tokens - tokens_at_print) / span:6.0f} tok/s  "
                f"in flight {arrived - finished}",
                flush=True,
            )
            done_at_print, tokens_at_print = finished, tokens
            next_print = now + PROGRESS_EVERY_S
    return DriveResult(
        arrived=arrived,
        finished=finished,
        output_tokens=tokens,
        wall_s=time.monotonic() - started,
        ttft_p50_s=float(np.median(ttfts)) if ttfts else None,
        steps_by_mode=modes,
    )


def main(argv: list[str] | None = None) -> int:
    """Run one engine under Governor for ``--seconds`` and print a summary line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=TINY_MODEL_DIR, help="model folder (default: the tiny Llama)")
    parser.add_argument("--scheduler", choices=sorted(SCHEDULERS), default="ebplus")
    parser.add_argument("--rate", type=float, default=4.0, help="arrivals per second (default 4)")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to send arrivals (default 60)")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)
    if args.rate <= 0.0 or args.seconds <= 0.0:
        parser.error("--rate and --seconds must be > 0")
    engine = build_engine(SCHEDULERS[args.scheduler], model=args.model, seed=args.seed)
    result = drive(engine, rate_per_s=args.rate, seconds=args.seconds, seed=args.seed)
    engine.engine_core.shutdown()
    ttft = "-" if result.ttft_p50_s is None else f"{result.ttft_p50_s * 1000:.0f} ms"
    print(
        f"  vLLM       {result.finished}/{result.arrived} requests, {result.output_tokens / result.wall_s:.0f} tok/s, "
        f"ttft p50 {ttft}, steps by mode {result.steps_by_mode}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
