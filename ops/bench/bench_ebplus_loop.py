"""EB+ closed-loop benchmark: EB+ deciding from its online cost fit vs mixed batching, over seeds.

One simulated Qwen3-8B engine per run. Its true step times are the EB paper's calibrations
(specs/seed-001-ebplus.md section 6.4) with alpha_MB as calibrated (alpha_MB = alpha_p, the reference
code's default) and, by default, 3% seeded per-step noise (``JitteredTiming``). EB+ never sees that
model: the engine registers no hardware profile and the policy runs with ``online_cost_model=True``,
so every decision rests on the alpha/beta and beta_MB(r) fits the stream processor folds from the
engine's own step events; until those fits exist there is no decision and the engine stays on its
cold-start mode (MB). ``--cost-model profile`` instead hands EB+ the noise-free profile (the former,
tilted setting) for comparison.

Workloads (Table 3 lengths mu_L = 512, mu_O = 256, geometric outputs, unless said):

- ``light``: Poisson arrivals at about a fifth of MB capacity (the paper's c = 32 row);
- ``saturated``: 6,000 requests queued at t = 0 (the c = 2048 row);
- ``shift``: the paper's distribution shift mu_L 1024 -> 512 -> 128 with mu_O 128 -> 512 -> 1024,
  one phase per ``--phase-s`` seconds, arrivals slightly above MB capacity.

Schedulers: ``mb`` (vLLM v1 mixed batching, the strongest baseline of the paper's Table 3: chunked
prefill under the token budget) and ``ebplus`` (the closed loop: telemetry -> OfflineControlPlane ->
EB+ document every 100 completions -> the engine's phase machine).

Throughput is tokens (prompt + output) of requests finished within the run per simulated second;
TTFT and TPOT (a request's mean token gap) are over finished requests. Every cell runs ``--seeds``
seeds (workload and noise both reseeded); the table gives mean +- sample standard deviation, and
the EB+/MB ratio is taken per seed (same workload) before averaging. The online fits at the end of
each EB+ run are printed beside the true coefficients. JSON goes to ``--out``.

Usage (from the repository root):
    PYTHONPATH=. .venv/bin/python ops/bench/bench_ebplus_loop.py [--seeds 5] [--jitter 0.03] [--phase-s 60]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from decide.registry import PolicyRegistry
from decide.wiring.ebplus import ebplus_inputs, ebplus_spec
from policies.ebplus import CostModel, EbplusParams
from policies.ebplus.calibration import QWEN3_8B_H200, QWEN3_8B_RTX_PRO_6000, calibration_profile
from schemas.events import Event
from services.replay.offline import OfflineControlPlane
from services.sdk.protocol import StaticPolicySource
from services.sim.engine import EngineConfig, SimEngine
from services.sim.routing import LeastLoadedRouter
from services.sim.run_summary import MetricsRecorder
from services.sim.schedulers import EbplusScheduler, MixedChunkedScheduler, Scheduler
from services.sim.simulation import Simulation
from services.sim.telemetry import EngineTelemetry
from services.sim.timing import EbTiming, JitteredTiming
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
SCHEDULERS = ("mb", "ebplus")
SCENARIOS = ("light", "saturated", "shift")
# Paper Table 3 (Qwen3-8B) throughput, tok/s, v1 (MB) / EB+: light = c = 32, saturated = c = 2048,
# shift = distribution shift.
PAPER_TABLE3_TOKENS_PER_S: dict[str, dict[str, tuple[float, float]]] = {
    QWEN3_8B_RTX_PRO_6000: {"light": (4_928, 4_930), "saturated": (8_830, 13_214), "shift": (7_025, 9_582)},
    QWEN3_8B_H200: {"light": (11_584, 11_586), "saturated": (26_368, 27_043), "shift": (20_396, 21_182)},
}


class _Discard:
    """A telemetry sink that drops events (runs without a control plane)."""

    def publish(self, event: Event) -> None:
        """Drop ``event``."""
        del event


@dataclass(frozen=True, slots=True, kw_only=True)
class RunResult:
    """One (GPU, workload, scheduler, seed) run."""

    tokens_per_s: float
    finished: int
    preemptions: int
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    tpot_mean_ms: float | None
    mode_sequence: str
    decisions_online: int
    decisions_total: int
    fitted: CostModel | None


def workload_for(calib_id: str, scenario: str, phase_s: float) -> tuple[Workload, float]:
    """The workload of ``scenario`` on ``calib_id`` and its duration in simulated seconds."""
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


def run_one(
    calib_id: str,
    workload: Workload,
    duration_s: float,
    *,
    ebplus: bool,
    seed: int,
    jitter_frac: float,
    online: bool = True,
    kv_blocks: int | None = None,
    max_num_seqs: int = MAX_NUM_SEQS,
    token_budget_tokens: int = TOKEN_BUDGET_TOKENS,
) -> RunResult:
    """Run one engine of ``calib_id`` under ``workload``: EB+ in the closed loop, or plain mixed batching.

    The true timing is the calibration with alpha_MB = alpha_p and ``jitter_frac`` noise seeded by
    ``seed``; with ``online`` the engine registers no hardware profile and EB+ decides from the online
    fits only.
    """
    profile = calibration_profile(calib_id)
    timing = JitteredTiming(
        EbTiming.from_cost_model(profile.cost_model),
        jitter_frac=jitter_frac,
        seed=np.random.SeedSequence([seed, 1]),
    )
    config = EngineConfig(
        engine_id=ENGINE_ID,
        model=profile.model,
        gpu=profile.gpu,
        hardware_profile=None if online else calib_id,
        max_num_seqs=max_num_seqs,
        token_budget_tokens=token_budget_tokens,
        kv_blocks_total=kv_blocks or KV_BLOCKS[calib_id],
    )
    plane: OfflineControlPlane | None = None
    scheduler: Scheduler = MixedChunkedScheduler()
    if ebplus:
        # No profile in the online loop: EB+ probes EB until the engine's exclusive steps are fitted.
        params = EbplusParams(calibration_id=None if online else calib_id)
        plane = OfflineControlPlane("bench", PolicyRegistry([ebplus_spec(params, online_cost_model=online)]))
        scheduler = EbplusScheduler()
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
    Simulation(engines=[engine], router=LeastLoadedRouter(), requests=requests, metrics=metrics).run(duration_s)
    summary = metrics.summarize(duration_s)
    ttfts = [f[2] for f in metrics.finishes if f[2] is not None]
    tpots = [float(np.mean(f[3])) for f in metrics.finishes if f[3]]
    modes: list[str] = []
    online_count = 0
    fitted: CostModel | None = None
    if plane is not None:
        accepted = [d for d in plane.decisions if d.kind == "ebplus" and d.accepted]
        for record in accepted:
            payload = record.document["payload"]
            if isinstance(payload, dict):
                modes.append(str(payload["mode"]))
                online_count += payload["calib_id"] in ("online", "probe")
        ebplus_snapshots = [s for s in plane.snapshots if s.scope == ENGINE_ID]
        if ebplus_snapshots:
            inputs = ebplus_inputs(ebplus_snapshots[-1], online_cost_model=True)
            fitted = inputs.cost_model if inputs is not None else None
    return RunResult(
        tokens_per_s=summary.throughput_tokens_per_s,
        finished=summary.finished,
        preemptions=summary.preemptions,
        ttft_p50_s=_percentile(ttfts, 0.5),
        ttft_p99_s=_percentile(ttfts, 0.99),
        tpot_mean_ms=1e3 * float(np.mean(tpots)) if tpots else None,
        mode_sequence="".join(m[0] for m in modes),
        decisions_online=online_count,
        decisions_total=len(modes),
        fitted=fitted,
    )


def _mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def _cost_row(cost: CostModel) -> dict[str, float]:
    beta_mb = cost.beta_mb
    return {
        "alpha_p_s": cost.alpha_p_s,
        "beta_p_s_per_token": cost.beta_p_s_per_token,
        "alpha_d_s": cost.alpha_d_s,
        "beta_d_s_per_seq": cost.beta_d_s_per_seq,
        "alpha_mb_s": cost.alpha_mb_s,
        "beta_mb_at_1_3_s_per_token": float("nan") if beta_mb is None else beta_mb.at(1.0 / 3.0),
    }


def main() -> None:
    """Run every cell over the seeds, print the table and the fits, write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out/bench/ebplus_loop.json"))
    parser.add_argument("--phase-s", type=float, default=60.0, help="simulated seconds per workload phase")
    parser.add_argument("--seeds", type=int, default=5, help="seeds 1..SEEDS per cell")
    parser.add_argument("--jitter", type=float, default=0.03, help="per-step noise, relative spread")
    parser.add_argument("--cost-model", choices=("online", "profile"), default="online")
    parser.add_argument("--scenarios", nargs="+", choices=SCENARIOS, default=list(SCENARIOS))
    args = parser.parse_args()
    online = args.cost_model == "online"
    rows: list[dict[str, object]] = []
    print(f"cost model: {args.cost_model}; jitter {args.jitter:.0%}; seeds 1..{args.seeds}; phase {args.phase_s:.0f} s")
    header = f"{'gpu':<13}{'workload':<10}{'MB tok/s':>16}{'EB+ tok/s':>16}{'EB+/MB':>14}{'min':>7}{'paper':>7}  modes"
    print(header)
    print("-" * len(header))
    for calib_id in (QWEN3_8B_RTX_PRO_6000, QWEN3_8B_H200):
        for scenario in args.scenarios:
            workload, duration_s = workload_for(calib_id, scenario, args.phase_s)
            started = time.perf_counter()
            results: dict[str, list[RunResult]] = {name: [] for name in SCHEDULERS}
            for seed in range(1, args.seeds + 1):
                for name in SCHEDULERS:
                    results[name].append(
                        run_one(
                            calib_id,
                            workload,
                            duration_s,
                            ebplus=name == "ebplus",
                            seed=seed,
                            jitter_frac=args.jitter,
                            online=online,
                        )
                    )
            ratios = [e.tokens_per_s / m.tokens_per_s for e, m in zip(results["ebplus"], results["mb"], strict=True)]
            mb_mean, mb_std = _mean_std([r.tokens_per_s for r in results["mb"]])
            eb_mean, eb_std = _mean_std([r.tokens_per_s for r in results["ebplus"]])
            ratio_mean, ratio_std = _mean_std(ratios)
            paper_mb, paper_eb = PAPER_TABLE3_TOKENS_PER_S[calib_id][scenario]
            print(
                f"{GPU_LABEL[calib_id]:<13}{scenario:<10}{mb_mean:>9,.0f}+-{mb_std:<5,.0f}{eb_mean:>9,.0f}+-{eb_std:<5,.0f}"
                f"{ratio_mean:>8.3f}+-{ratio_std:.3f}{min(ratios):>7.3f}{paper_eb / paper_mb:>7.3f}  "
                f"{results['ebplus'][0].mode_sequence[:30]}"
            )
            true_cost = calibration_profile(calib_id).cost_model
            fits = [r.fitted for r in results["ebplus"] if r.fitted is not None]
            rows.append(
                {
                    "gpu": GPU_LABEL[calib_id],
                    "calib_id": calib_id,
                    "scenario": scenario,
                    "duration_s": duration_s,
                    "paper_mb_tokens_per_s": paper_mb,
                    "paper_ebplus_tokens_per_s": paper_eb,
                    "ratio_per_seed": ratios,
                    "runs": {
                        name: [
                            {
                                "seed": seed,
                                "tokens_per_s": r.tokens_per_s,
                                "finished": r.finished,
                                "preemptions": r.preemptions,
                                "ttft_p50_s": r.ttft_p50_s,
                                "ttft_p99_s": r.ttft_p99_s,
                                "tpot_mean_ms": r.tpot_mean_ms,
                                "mode_sequence": r.mode_sequence,
                                "decisions_online": r.decisions_online,
                                "decisions_total": r.decisions_total,
                                "fitted": None if r.fitted is None else _cost_row(r.fitted),
                            }
                            for seed, r in enumerate(runs, start=1)
                        ]
                        for name, runs in results.items()
                    },
                    "true_cost": _cost_row(true_cost),
                    "wall_s": time.perf_counter() - started,
                }
            )
            for fit in fits[:1]:
                truth, got = _cost_row(true_cost), _cost_row(fit)
                print("    fit vs true: " + ", ".join(f"{k} {got[k]:.3g}/{truth[k]:.3g}" for k in truth))
            decisions = sum(r.decisions_total for r in results["ebplus"])
            from_fit = sum(r.decisions_online for r in results["ebplus"])
            print(f"    EB+ decisions from the online fit: {from_fit} of {decisions}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "format_version": 2,
        "cost_model": args.cost_model,
        "jitter_frac": args.jitter,
        "seeds": args.seeds,
        "phase_s": args.phase_s,
        "rows": rows,
    }
    args.out.write_text(json.dumps(document, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
