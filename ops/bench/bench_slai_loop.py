"""SLAI closed-loop benchmark: the paper's arrival-rate sweep in the simulator with the control plane in the loop.

Paper §7 (Fig. 7, 5% paid users): Sarathi-Serve (FCFS) against SLAI (SPF, fixed offset 10) and SLAI
(SPF, dynamic offset 5/10 at 96% KV). Each run is the ``sarathi-sharegpt`` scenario (one Mistral-7B /
RTX 6000 Ada engine priced by the SLAI batch-time fit, ShareGPT lengths, Poisson arrivals, paid 0.1 s
/ free 0.5 s TBT, budget 512, alpha = beta = 128) in offline loop mode: the engine's telemetry feeds
``OfflineControlPlane``, which pushes SLAI documents every 2 s of event time; SLAI engines obey them
(``SlaiScheduler``), Sarathi ignores them. Printed per rate and scheduler: median TTFT (completed
requests, the paper's metric), P99 TBT per tier, completions, KV use; then the capacity at median TTFT
<= 0.5 s (linear interpolation between grid rates; also with the tail-TBT targets) and the median-TTFT
cut at the highest rate, beside the paper's headline numbers. Writes JSON and a PNG under ``--out``.

    PYTHONPATH=. .venv/bin/python ops/bench/bench_slai_loop.py --out out/bench/bench_slai_loop.json
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path

import matplotlib as mpl

mpl.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from decide.registry import PolicyRegistry
from decide.wiring.slai import slai_spec
from policies.slai import OffsetMode, PrefillOrder, SlaiParams
from services.replay.offline import OfflineControlPlane
from services.sim.engine import EngineConfig, SimEngine
from services.sim.routing import LeastLoadedRouter
from services.sim.run_summary import MetricsRecorder
from services.sim.scenario import load_scenario
from services.sim.schedulers import SarathiServeScheduler, SlaiScheduler
from services.sim.schedulers.base import Scheduler
from services.sim.simulation import Simulation
from services.sim.telemetry import EngineTelemetry

PAPER = {  # paper §7, Fig. 7c (5% paid)
    "ttft_high_load_s": {"sarathi-fcfs": 1.5, "slai-spf-dynamic": 0.7},
    "ttft_cut_frac": 0.53,
    "capacity_per_s": {"sarathi-fcfs": 1.15, "slai-spf-dynamic": 1.45},
    "capacity_gain_frac": 0.26,
}
SCHEDULERS = ("sarathi-fcfs", "slai-spf-fixed", "slai-spf-dynamic")
TBT_TARGET_S = {"paid": 0.1, "free": 0.5}
TTFT_TARGET_S = 0.5


@dataclass(frozen=True, slots=True, kw_only=True)
class Point:
    """One run's figures."""

    scheduler: str
    rate_per_s: float
    ttft_p50_s: float | None
    tbt_p99_s: dict[str, float | None]
    arrived: int
    finished: int
    preemptions: int
    kv_use_mean_frac: float
    kv_use_max_frac: float
    slai_decisions: int
    wall_s: float

    @property
    def tbt_met(self) -> bool:
        """Every tier's P99 TBT within its target."""
        return all(v is not None and v <= TBT_TARGET_S[t] for t, v in self.tbt_p99_s.items() if t in TBT_TARGET_S)


def run_point(name: str, rate_per_s: float, duration_s: float, seed: int) -> Point:
    """Run one scheduler at one rate in offline loop mode."""
    scenario = load_scenario("sarathi-sharegpt", duration_s=duration_s, rate_per_s=rate_per_s, seed=seed)
    params = SlaiParams(offset_mode=OffsetMode.FIXED if name == "slai-spf-fixed" else OffsetMode.DYNAMIC)
    plane = OfflineControlPlane("bench", PolicyRegistry([slai_spec(params)]))
    scheduler: Scheduler = (
        SarathiServeScheduler(prefill_order=PrefillOrder.FCFS) if name == "sarathi-fcfs" else SlaiScheduler()
    )
    spec = scenario.engines[0]
    if not isinstance(spec.config, EngineConfig):
        msg = "sarathi-sharegpt must be a single engine"
        raise TypeError(msg)
    metrics = MetricsRecorder()
    engine = SimEngine(
        spec.config,
        scheduler=scheduler,
        timing=spec.timing,
        telemetry=EngineTelemetry(engine_id=spec.config.engine_id, deployment="bench", sink=plane),
        policy_source=plane,
        metrics=metrics,
    )
    requests = scenario.workload.generate(duration_s, np.random.default_rng(seed))
    started = time.perf_counter()
    Simulation(engines=[engine], router=LeastLoadedRouter(), requests=requests, metrics=metrics).run(duration_s)
    wall_s = time.perf_counter() - started
    s = metrics.summarize(duration_s)
    return Point(
        scheduler=name,
        rate_per_s=rate_per_s,
        ttft_p50_s=s.ttft_p50_s,
        tbt_p99_s={t.tier: t.tbt_p99_s for t in s.tiers},
        arrived=s.arrived,
        finished=s.finished,
        preemptions=s.preemptions,
        kv_use_mean_frac=s.kv_use_mean_frac,
        kv_use_max_frac=s.kv_use_max_frac,
        slai_decisions=sum(1 for d in plane.decisions if d.accepted and d.kind == "slai"),
        wall_s=wall_s,
    )


def capacity_per_s(points: list[Point], *, with_tbt: bool) -> float | None:
    """Highest rate with median TTFT <= 0.5 s, interpolated linearly to the first crossing.

    With ``with_tbt``, a rate whose tiers miss their P99 TBT target counts as a crossing too
    (at that grid rate, without interpolation).
    """
    ordered = sorted(points, key=lambda p: p.rate_per_s)
    best: float | None = None
    for prev, point in zip([None, *ordered[:-1]], ordered, strict=True):
        ok_ttft = point.ttft_p50_s is not None and point.ttft_p50_s <= TTFT_TARGET_S
        if ok_ttft and (point.tbt_met or not with_tbt):
            best = point.rate_per_s
            continue
        if not ok_ttft and prev is not None and best == prev.rate_per_s and point.ttft_p50_s is not None:
            lo, hi = prev.ttft_p50_s or 0.0, point.ttft_p50_s
            best = prev.rate_per_s + (TTFT_TARGET_S - lo) / (hi - lo) * (point.rate_per_s - prev.rate_per_s)
        break
    return best


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def main() -> None:
    """Run the sweep, print the tables, write JSON and the plot."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out/bench/bench_slai_loop.json"))
    parser.add_argument("--duration-s", type=float, default=900.0, help="event time per run (paper: 2100 s)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--rates", type=float, nargs="+", default=[0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 1.4, 1.6])
    args = parser.parse_args()
    points: list[Point] = []
    print(
        f"{'scheduler':18s} {'rate':>5s} {'TTFT p50':>9s} {'TBT99 paid':>10s} {'TBT99 free':>10s} "
        f"{'finished':>10s} {'KV mean':>7s} {'KV max':>6s} {'docs':>5s} {'wall s':>6s}"
    )
    for rate in args.rates:
        for name in SCHEDULERS:
            p = run_point(name, rate, args.duration_s, args.seed)
            points.append(p)
            print(
                f"{name:18s} {rate:5.2f} {_fmt(p.ttft_p50_s):>9s} {_fmt(p.tbt_p99_s.get('paid')):>10s} "
                f"{_fmt(p.tbt_p99_s.get('free')):>10s} {p.finished:>5d}/{p.arrived:<4d} "
                f"{p.kv_use_mean_frac:7.2f} {p.kv_use_max_frac:6.2f} {p.slai_decisions:5d} {p.wall_s:6.1f}",
                flush=True,
            )
    by = {name: [p for p in points if p.scheduler == name] for name in SCHEDULERS}
    top = max(args.rates)
    ttft_top = {name: next(p.ttft_p50_s for p in by[name] if p.rate_per_s == top) for name in SCHEDULERS}
    cut = None
    if ttft_top["sarathi-fcfs"] and ttft_top["slai-spf-dynamic"] is not None:
        cut = 1.0 - ttft_top["slai-spf-dynamic"] / ttft_top["sarathi-fcfs"]
    capacity = {name: capacity_per_s(by[name], with_tbt=False) for name in SCHEDULERS}
    capacity_tbt = {name: capacity_per_s(by[name], with_tbt=True) for name in SCHEDULERS}
    base, ours = capacity["sarathi-fcfs"], capacity["slai-spf-dynamic"]
    gain = ours / base - 1.0 if base and ours else None
    print()
    print(f"{'headline':44s} {'paper':>12s} {'ours':>12s}")
    print(f"{'median TTFT at high load, Sarathi FCFS (s)':44s} {1.5:12.2f} {_fmt(ttft_top['sarathi-fcfs'], 2):>12s}")
    print(
        f"{'median TTFT at high load, SLAI SPF dyn (s)':44s} {0.7:12.2f} {_fmt(ttft_top['slai-spf-dynamic'], 2):>12s}"
    )
    print(f"{'median TTFT cut':44s} {0.53:12.0%} {'-' if cut is None else f'{cut:.0%}':>12s}")
    print(f"{'capacity @ TTFT<=0.5 s, Sarathi FCFS (req/s)':44s} {1.15:12.2f} {_fmt(base, 2):>12s}")
    print(
        f"{'capacity @ TTFT<=0.5 s, SLAI SPF fixed (req/s)':44s} {'-':>12s} {_fmt(capacity['slai-spf-fixed'], 2):>12s}"
    )
    print(f"{'capacity @ TTFT<=0.5 s, SLAI SPF dyn (req/s)':44s} {1.45:12.2f} {_fmt(ours, 2):>12s}")
    print(f"{'capacity gain':44s} {0.26:12.0%} {'-' if gain is None else f'{gain:.0%}':>12s}")
    for name in SCHEDULERS:
        print(f"{'  with tail TBT met too, ' + name:44s} {'':>12s} {_fmt(capacity_tbt[name], 2):>12s}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    result = {
        "command": "ops/bench/bench_slai_loop.py",
        "duration_s": args.duration_s,
        "seed": args.seed,
        "rates_per_s": args.rates,
        "paper": PAPER,
        "points": [
            {
                "scheduler": p.scheduler,
                "rate_per_s": p.rate_per_s,
                "ttft_p50_s": p.ttft_p50_s,
                "tbt_p99_s": p.tbt_p99_s,
                "arrived": p.arrived,
                "finished": p.finished,
                "preemptions": p.preemptions,
                "kv_use_mean_frac": p.kv_use_mean_frac,
                "kv_use_max_frac": p.kv_use_max_frac,
                "slai_decisions": p.slai_decisions,
                "wall_s": p.wall_s,
            }
            for p in points
        ],
        "ttft_high_load_s": ttft_top,
        "ttft_cut_frac": cut,
        "capacity_per_s": capacity,
        "capacity_with_tbt_per_s": capacity_tbt,
        "capacity_gain_frac": gain,
    }
    args.out.write_text(json.dumps(result, indent=2))
    _plot(by, args.out.with_suffix(".png"), cut, gain)
    print(f"\nwrote {args.out} and {args.out.with_suffix('.png')}")


def _plot(by: dict[str, list[Point]], path: Path, cut: float | None, gain: float | None) -> None:
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for name, pts in by.items():
        rates = [p.rate_per_s for p in pts]
        axes[0].plot(rates, [p.ttft_p50_s for p in pts], marker="o", label=name)
        axes[1].plot(rates, [p.tbt_p99_s.get("paid") for p in pts], marker="o", label=name)
        axes[2].plot(rates, [p.tbt_p99_s.get("free") for p in pts], marker="o", label=name)
    paper = PAPER["ttft_high_load_s"]
    axes[0].scatter(
        [1.6, 1.6],
        [paper["sarathi-fcfs"], paper["slai-spf-dynamic"]],
        marker="*",
        s=150,
        c="k",
        label="paper @ high load (1.5 s, 0.7 s)",
    )
    axes[0].axhline(TTFT_TARGET_S, ls="--", c="grey")
    for rate, label in ((1.15, "paper Sarathi cap 1.15"), (1.45, "paper SLAI cap 1.45")):
        axes[0].axvline(rate, ls=":", c="grey")
        axes[0].text(rate, 0.05, label, rotation=90, fontsize=7)
    axes[0].set(
        xlabel="arrival rate (req/s)",
        ylabel="median TTFT (s)",
        yscale="log",
        title=f"median TTFT; ours: cut {'-' if cut is None else f'{cut:.0%}'}, "
        f"capacity {'-' if gain is None else f'{gain:+.0%}'} (paper -53%, +26%)",
    )
    axes[1].axhline(TBT_TARGET_S["paid"], ls="--", c="grey")
    axes[1].set(xlabel="arrival rate (req/s)", ylabel="P99 TBT (s)", title="paid tier (target 0.1 s)")
    axes[2].axhline(TBT_TARGET_S["free"], ls="--", c="grey")
    axes[2].set(xlabel="arrival rate (req/s)", ylabel="P99 TBT (s)", title="free tier (target 0.5 s)")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
