"""EB+ on vLLM's step path: the phase machine's own cost per step, with warm caches and with evicted ones.

``ops/bench/bench_vllm_adapter.py`` measures what ``EbplusScheduler`` adds to each step of a real
vLLM engine: in EB mode far more than the phase machine costs when timed in a loop. This script
times the three things an EB step does before vLLM's own ``schedule`` runs, exactly as
``EbplusScheduler.schedule_under`` does them (services/engines/vllm/scheduler.py):

- ``split``: ``split_decoding`` over the running requests (objects with vLLM ``Request``'s
  property-backed counters, so each test reads them as the engine does);
- ``split_view``: the split, then the phase machine's ``EngineView`` built from it;
- ``advance``: one step of ``policies.ebplus.phase_machine.advance`` under a live EB document;

each two ways: ``warm``, back to back (the code and its data stay in the CPU caches), and ``cold``,
with a pass over ``--evict-mib`` of memory before every call, as a model's forward pass does between
two scheduler calls of a CPU engine. The ratio cold / warm is how much a step's Python costs more
inside an engine than in a loop. p50 and p99 of ``time.perf_counter_ns`` per call over ``--calls``
calls; JSON goes to ``--out``.

    PYTHONPATH=. python ops/bench/bench_ebplus_step.py [--running 12] [--calls 2000] [--evict-mib 64]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from policies.ebplus.phase_machine import EngineView, advance
from schemas.policy_docs.ebplus import EbplusMode
from services.engines.vllm.drive import pinned_ebplus
from services.engines.vllm.scheduler import split_decoding


class _Request:
    """The counters ``is_decoding`` reads, kept as vLLM's ``Request`` keeps them (lists behind properties)."""

    def __init__(self, prompt_tokens: int, output_tokens: int, computed_tokens: int) -> None:
        self._all_token_ids = list(range(prompt_tokens + output_tokens))
        self._output_token_ids = list(range(output_tokens))
        self.num_computed_tokens = computed_tokens
        self.num_output_placeholders = 0

    @property
    def num_tokens(self) -> int:
        return len(self._all_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self._output_token_ids)


def _timed(call: Callable[[], object], calls: int, evict: Callable[[], None] | None) -> dict[str, float]:
    """p50 and p99 of one call, microseconds, with ``evict`` run (untimed) before each when given."""
    times = np.empty(calls)
    for index in range(calls):
        if evict is not None:
            evict()
        started = time.perf_counter_ns()
        call()
        times[index] = time.perf_counter_ns() - started
    return {"p50_us": float(np.percentile(times, 50) / 1000), "p99_us": float(np.percentile(times, 99) / 1000)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--running", type=int, default=12, help="running requests (bench_vllm_adapter's median)")
    parser.add_argument("--calls", type=int, default=2000, help="timed calls per part and way")
    parser.add_argument("--evict-mib", type=int, default=64, help="memory passed over before each cold call, MiB")
    parser.add_argument("--out", type=Path, default=Path("out/bench/ebplus_step.json"))
    args = parser.parse_args()

    decoding = args.running - args.running // 6
    running = [_Request(256, 8, 263) for _ in range(decoding)]
    running += [_Request(256, 0, 128) for _ in range(args.running - decoding)]
    payload = pinned_ebplus("bench", "e-0", 1, EbplusMode.EB, now_s=1000.0, valid_for_s=3600.0).payload

    def view() -> EngineView:
        decodes, prefills = split_decoding(running)
        return EngineView(
            now_s=1000.0,
            waiting_seqs=40,
            decoding_seqs=len(decodes),
            prefilling_seqs=len(prefills),
            kv_free_blocks=900,
            kv_total_blocks=1000,
            block_size_tokens=16,
            max_num_seqs=64,
        )

    engine_view = view()
    state = advance(engine_view, None, payload).state
    parts: dict[str, Callable[[], object]] = {
        "split": lambda: split_decoding(running),
        "split_view": view,
        "advance": lambda: advance(engine_view, state, payload),
    }
    scratch = np.ones(args.evict_mib * 1024 * 1024 // 8)

    def evict() -> None:
        scratch[::8] += 1.0

    rows: dict[str, dict[str, dict[str, float]]] = {}
    print(f"{'part':10s} {'warm p50':>9s} {'warm p99':>9s} {'cold p50':>9s} {'cold p99':>9s} {'cold/warm':>9s}  (us)")
    for name, call in parts.items():
        warm = _timed(call, args.calls, None)
        cold = _timed(call, args.calls, evict)
        rows[name] = {"warm": warm, "cold": cold}
        ratio = cold["p50_us"] / warm["p50_us"]
        print(
            f"{name:10s} {warm['p50_us']:9.1f} {warm['p99_us']:9.1f} {cold['p50_us']:9.1f} {cold['p99_us']:9.1f}"
            f" {ratio:9.1f}"
        )
    result = {
        "benchmark": "ebplus_step",
        "running": args.running,
        "calls": args.calls,
        "evict_mib": args.evict_mib,
        "machine": {"platform": platform.platform(), "python": platform.python_version()},
        "parts": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
