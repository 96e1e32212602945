"""EB+ closed-loop benchmark: EB+, EB with fixed k and mixed batching in the simulator, beside Table 3.

One simulated Qwen3-8B engine per run (calibrations of specs/seed-001-ebplus.md section 6.4) on the
H200 and the RTX PRO 6000, under three workloads:

- ``light``: Poisson arrivals well below capacity (the paper's c = 32 row; Table 3 lengths mu_L = 512,
  mu_O = 256, geometric outputs);
- ``saturated``: 6,000 requests queued at t = 0 (the c = 2048 row);
- ``shift``: the paper's distribution shift mu_L 1024 -> 512 -> 128 with mu_O 128 -> 512 -> 1024,
  one phase per ``--phase-s`` seconds, arrivals slightly above mixed batching's capacity.

Schedulers: ``mb`` (vLLM v1 mixed batching), ``eb-k`` (EB(k) with theta = 0.7 and N = max_num_seqs
fixed, no control plane), ``ebplus`` (the closed loop: telemetry -> OfflineControlPlane with the default
registry -> EB+ document every 100 completions -> the engine's phase machine), and ``ebplus-floor``
(EB+ with theta_min = 0.7, the reference code's non-stationary floor; spec section 8 P1).

Throughput is computed tokens (prompt + output) per simulated second; TTFT and TPOT (mean token gap of
a request) percentiles are over finished requests. Prints a table with the paper's numbers beside
ours and writes JSON and a PNG under ``--out``.

Usage (from the repository root):
    PYTHONPATH=. /work/venv/bin/python ops/bench/bench_ebplus_loop.py [--out out/bench/ebplus_loop.json] [--phase-s 60]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import matplotlib as mpl

mpl.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from policies.ebplus import EbplusParams
from policies.ebplus.calibration import QWEN3_8B_H200, QWEN3_8B_RTX_PRO_6000, calibration_profile
from schemas.events import Event
from services.policy.specs import default_registry
from services.replay.offline import OfflineControlPlane
from services.sdk.protocol import StaticPolicySource
from services.sim.engine import EngineConfig, SimEngine
from services.sim.metrics import MetricsRecorder
from services.sim.routing import LeastLoadedRouter
from services.sim.schedulers import EbplusScheduler, FixedEbScheduler, MixedChunkedScheduler, Scheduler
from services.sim.simulation import Simulation
from services.sim.telemetry import EngineTelemetry
from services.sim.timing import EbTiming
from services.sim.workload import BatchArrivals, GeometricLengths, PoissonArrivals, Workload, WorkloadPhase

ENGINE_ID = "engine-0"
MAX_NUM_SEQS = 1024
TOKEN_BUDGET_TOKENS = 16_384
# KV capacity C (spec section 6.4, derived): ~0.70 M tokens on H200, ~0.44 M on RTX PRO 6000; blocks of 16.
KV_BLOCKS = {QWEN3_8B_H200: 44_000, QWEN3_8B_RTX_PRO_6000: 27_500}
GPU_LABEL = {QWEN3_8B_H200: "H200", QWEN3_8B_RTX_PRO_6000: "RTX PRO 6000"}
# Light-load arrival rates (req/s), about a fifth of MB capacity at mu_L = 512, mu_O = 256.
LIGHT_RATE_PER_S = {QWEN3_8B_H200: 6.0, QWEN3_8B_RTX_PRO_6000: 2.5}
# Distribution-shift arrival rate per phase (req/s), just above MB capacity 1 / beta_MB(r) / (mu_L + mu_O).
SHIFT_RATE_PER_S = {QWEN3_8B_H200: (30.0, 20.0, 13.0), QWEN3_8B_RTX_PRO_6000: (12.0, 7.0, 4.0)}
SHIFT_LENGTHS = ((1024, 128.0), (512, 512.0), (128, 1024.0))
SCHEDULERS = ("mb", "eb-k", "ebplus", "ebplus-floor")
SCENARIOS = ("light", "saturated", "shift")
# Paper Table 3 (Qwen3-8B), each cell v1 / EB(k*) / EB+: TP tok/s, TTFT s, TPOT ms. light = c = 32,
# saturated = c = 2048, shift = distribution shift.
PAPER_TABLE3: dict[str, dict[str, tuple[tuple[float, float, float], ...]]] = {
    QWEN3_8B_RTX_PRO_6000: {
        "light": ((4_928, 4_728, 4_930), (0.061, 0.090, 0.061), (19.4, 16.5, 19.5)),
        "saturated": ((8_830, 13_179, 13_214), (83.8, 70.8, 68.2), (207.3, 82.7, 101.6)),
        "shift": ((7_025, 9_647, 9_582), (190.7, 157.5, 152.1), (178.5, 105.0, 102.2)),
    },
    QWEN3_8B_H200: {
        "light": ((11_584, 10_779, 11_586), (0.041, 0.062, 0.042), (8.2, 7.1, 8.2)),
        "saturated": ((26_368, 27_198, 27_043), (24.4, 34.6, 33.7), (128.1, 72.8, 79.2)),
        "shift": ((20_396, 20_762, 21_182), (41.2, 66.5, 69.7), (101.0, 42.3, 63.1)),
    },
}
PAPER_COLUMN = {"mb": 0, "eb-k": 1, "ebplus": 2}


class _Discard:
    """A telemetry sink that drops events (runs without a control plane)."""

    def publish(self, event: Event) -> None:
        """Drop ``event``."""
        del event


def _workload(calib_id: str, scenario: str, phase_s: float) -> tuple[Workload, float]:
    stationary = GeometricLengths(prompt_tokens=512, mean_output_tokens=256.0)
    if scenario == "light":
        arrivals = PoissonArrivals(rate_per_s=LIGHT_RATE_PER_S[calib_id])
        return Workload(phases=(WorkloadPhase(start_s=0.0, arrivals=arrivals, lengths=stationary),)), 2 * phase_s
    if scenario == "saturated":
        batch = BatchArrivals(count=6_000)
        return Workload(phases=(WorkloadPhase(start_s=0.0, arrivals=batch, lengths=stationary),)), 2 * phase_s
    phases = tuple(
        WorkloadPhase(
            start_s=i * phase_s,
            arrivals=PoissonArrivals(rate_per_s=rate),
            lengths=GeometricLengths(prompt_tokens=prompt, mean_output_tokens=mean_out),
        )
        for i, (rate, (prompt, mean_out)) in enumerate(zip(SHIFT_RATE_PER_S[calib_id], SHIFT_LENGTHS, strict=True))
    )
    return Workload(phases=phases), 3 * phase_s


def _percentile(values: list[float], q: float) -> float | None:
    return float(np.quantile(values, q)) if values else None


def run_one(calib_id: str, scenario: str, scheduler_name: str, *, phase_s: float, seed: int) -> dict[str, object]:
    """Run one (GPU, workload, scheduler) cell and return its figures."""
    profile = calibration_profile(calib_id)
    # alpha_mb = 0 as in scenarios.toml: the mixed step beta_mb(r) n_tok reproduces v1 saturation.
    timing = dataclasses.replace(EbTiming.from_cost_model(profile.cost_model), alpha_mb_s=0.0)
    config = EngineConfig(
        engine_id=ENGINE_ID,
        model=profile.model,
        gpu=profile.gpu,
        hardware_profile=calib_id,
        max_num_seqs=MAX_NUM_SEQS,
        token_budget_tokens=TOKEN_BUDGET_TOKENS,
        kv_blocks_total=KV_BLOCKS[calib_id],
    )
    plane: OfflineControlPlane | None = None
    scheduler: Scheduler
    if scheduler_name.startswith("ebplus"):
        params = EbplusParams(calibration_id=calib_id, theta_min=0.7 if scheduler_name == "ebplus-floor" else 0.01)
        plane = OfflineControlPlane("bench", default_registry(ebplus=params))
        scheduler = EbplusScheduler()
    elif scheduler_name == "eb-k":
        scheduler = FixedEbScheduler(theta=0.7, n_seqs=MAX_NUM_SEQS, mu_l_tokens=512.0, mu_o_tokens=256.0)
    else:
        scheduler = MixedChunkedScheduler()
    workload, duration_s = _workload(calib_id, scenario, phase_s)
    metrics = MetricsRecorder()
    engine = SimEngine(
        config,
        scheduler=scheduler,
        timing=timing,
        telemetry=EngineTelemetry(engine_id=ENGINE_ID, deployment="bench", sink=plane or _Discard()),
        policy_source=plane or StaticPolicySource(),
        metrics=metrics,
    )
    requests = workload.generate(duration_s, np.random.default_rng(seed))
    started = time.perf_counter()
    Simulation(engines=[engine], router=LeastLoadedRouter(), requests=requests, metrics=metrics).run(duration_s)
    wall_s = time.perf_counter() - started
    summary = metrics.summarize(duration_s)
    ttfts = [f[2] for f in metrics.finishes if f[2] is not None]
    tpots = [float(np.mean(f[3])) for f in metrics.finishes if f[3]]
    modes: list[tuple[float, str, float, int]] = []
    if plane is not None:
        for record in plane.decisions:
            if record.kind == "ebplus" and record.accepted:
                doc = record.document
                payload = doc["payload"]
                assert isinstance(payload, dict)
                modes.append(
                    (float(doc["computed_at"]), str(payload["mode"]), float(payload["theta"]), int(payload["n"]))
                )  # type: ignore[arg-type]
    return {
        "gpu": GPU_LABEL[calib_id],
        "calib_id": calib_id,
        "scenario": scenario,
        "scheduler": scheduler_name,
        "duration_s": duration_s,
        "tokens_per_s": summary.throughput_tokens_per_s,
        "finished": summary.finished,
        "preemptions": summary.preemptions,
        "ttft_p50_s": _percentile(ttfts, 0.5),
        "ttft_p99_s": _percentile(ttfts, 0.99),
        "ttft_mean_s": float(np.mean(ttfts)) if ttfts else None,
        "tpot_mean_ms": 1e3 * float(np.mean(tpots)) if tpots else None,
        "tpot_p50_ms": 1e3 * p if (p := _percentile(tpots, 0.5)) is not None else None,
        "tpot_p99_ms": 1e3 * p if (p := _percentile(tpots, 0.99)) is not None else None,
        "decisions": [{"t_s": t, "mode": m, "theta": th, "n": n} for t, m, th, n in modes],
        "mode_sequence": "".join(m[0] for _, m, _, _ in modes),
        "wall_s": wall_s,
    }


def _fmt(value: object, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _print_table(rows: list[dict[str, object]]) -> None:
    header = (
        f"{'gpu':<13}{'workload':<10}{'scheduler':<13}{'tok/s':>8}{'paper':>8}{'TTFT mean':>10}{'p99':>7}"
        f"{'paper':>7}{'TPOT ms':>8}{'p99':>7}{'paper':>7}  modes"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        column = PAPER_COLUMN.get(str(row["scheduler"]))
        paper = PAPER_TABLE3[str(row["calib_id"])][str(row["scenario"])]
        tp, ttft, tpot = (
            (None, None, None) if column is None else (paper[0][column], paper[1][column], paper[2][column])
        )
        modes = str(row["mode_sequence"])
        print(
            f"{row['gpu']!s:<13}{row['scenario']!s:<10}{row['scheduler']!s:<13}{_fmt(row['tokens_per_s'], ',.0f'):>8}"
            f"{_fmt(tp, ',.0f'):>8}{_fmt(row['ttft_mean_s'], '.2f'):>10}{_fmt(row['ttft_p99_s'], '.1f'):>7}"
            f"{_fmt(ttft, '.2f'):>7}{_fmt(row['tpot_mean_ms'], '.1f'):>8}{_fmt(row['tpot_p99_ms'], '.0f'):>7}"
            f"{_fmt(tpot, '.1f'):>7}  {modes[:40]}"
        )


def _plot(rows: list[dict[str, object]], path: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    width = 0.2
    for ax, calib_id in zip(axes, (QWEN3_8B_RTX_PRO_6000, QWEN3_8B_H200), strict=True):
        x = np.arange(len(SCENARIOS))
        for j, name in enumerate(SCHEDULERS):
            values = [
                float(
                    next(
                        r["tokens_per_s"]
                        for r in rows
                        if r["calib_id"] == calib_id and r["scenario"] == s and r["scheduler"] == name
                    )
                )  # type: ignore[arg-type]
                for s in SCENARIOS
            ]
            ax.bar(x + (j - 1.5) * width, values, width, label=f"ours {name}")
        for name, column in PAPER_COLUMN.items():
            j = SCHEDULERS.index(name)
            paper = [PAPER_TABLE3[calib_id][s][0][column] for s in SCENARIOS]
            ax.scatter(x + (j - 1.5) * width, paper, marker="_", s=300, color="black", zorder=3)
        ax.set_xticks(x, SCENARIOS)
        ax.set_title(f"Qwen3-8B on {GPU_LABEL[calib_id]} (black: paper Table 3)")
        ax.set_ylabel("throughput, tokens/s")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    """Run every cell, print the table, write JSON and the PNG."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out/bench/ebplus_loop.json"))
    parser.add_argument("--phase-s", type=float, default=60.0, help="simulated seconds per workload phase")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rows = [
        run_one(calib_id, scenario, name, phase_s=args.phase_s, seed=args.seed)
        for calib_id in (QWEN3_8B_RTX_PRO_6000, QWEN3_8B_H200)
        for scenario in SCENARIOS
        for name in SCHEDULERS
    ]
    _print_table(rows)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps({"format_version": 1, "phase_s": args.phase_s, "seed": args.seed, "rows": rows}, indent=2)
    )
    png = args.out.with_suffix(".png")
    _plot(rows, png)
    print(f"wrote {args.out} and {png}")


if __name__ == "__main__":
    main()
