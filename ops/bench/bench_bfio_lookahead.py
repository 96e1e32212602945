"""BF-IO lookahead and starvation-guard study: closed-loop imbalance over seeds.

Two parts, each over several seeds (mean +- standard deviation), imbalance (Eq. 2) measured before each
step's admissions, the router on a frozen clock (deterministic), the bundle decided by the registered
``bfio`` policy from the run's own telemetry (censoring-aware survival; true lengths only as ``--hints``):

- ``lookahead``: the Table 1 setting (G = 16, B = 72, R = 64, Poisson 3,000 req/s after a full backlog)
  and bursty load (2,000 req/s calm, 4,000 req/s bursts, mean 1 s calm and 0.5 s bursts) and saturated
  load (Poisson 8,000 req/s, the queue far beyond the visible pool), 3 s runs
  (``--seconds`` sets another length of simulated time; the guard part keeps its 4 s), for
  FCFS, JSQ-by-load, round robin, JSQ by count, power of two, vLLM's DP score (waiting + running,
  KV-weighted; each row with its balance ratio and the longest wait of a top-1% prompt), BF-IO with the
  default parameters (``bfio_default``), H = 0, 1, 2, 4, 8 and 20 (the default weights, decay 0.86 as in the reference
  code), H = 20 with uniform weights (the paper's pure sum, ``bfio_h20_uniform``), and H = 20 with the
  reference code's new-request convention (a request
  admitted now counts its prompt at every offset, ``const_s``), and H = 20 with both decay and
  ``const_s`` (``ref``). With
  ``--hints`` it adds H = 20, H = 20 uniform and H = 20 ``ref`` with every request carrying an output-length hint
  (``services.sim.length_hints``): its true length (the paper's setting) and hints off by up to 10%,
  20% and 50% (o_i U[1 - e, 1 + e], the reference code's o_est), so the value of a hint is measured.
  With ``--exact`` it adds H = 20 and H = 20
  ``ref`` predicted from the workload's own output survival curve (2M draws of its length generator)
  in place of the estimate: the best a predictor that knows only a request's age can do. Each
  variant's row also gives its mean paired change against H = 0 over the same seeds; a variant with the
  online self-check also gives, per seed, when its bundle first moved to H = 0 and the
  H in force at the end.
  ``--workloads`` and ``--variants`` run a subset.
- ``guard``: the starvation guard's cost where it can fire: the router sees the whole queue (no visible
  pool, so waits count from arrival or from entering the candidate window), Poisson 8,000 req/s, 4 s,
  H = 20, aging deadline 2 s and 8 s against 600 s (off), and JSQ-by-load; reports the share of
  admissions the guard forced.

Usage: PYTHONPATH=. python ops/bench/bench_bfio_lookahead.py [--parts lookahead guard] [--seeds 1 2 3 4 5]
       [--hints] [--exact] [--seconds 3.0] [--workloads table1 bursty] [--variants bfio_h0 bfio_h20 ...]
       [--out out/bench/bench_bfio_lookahead.json]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import numpy as np

import policies.bfio.router as router_module
from policies.bfio import BfioParams, NewRequestModel, WeightScheme
from policies.bfio.lookahead import ClassPredictor, SurvivalCurve
from services.sim.bfio_loop import BurstGptLikeLengths, DpLoopResult, dp_workload, run_dp_loop
from services.sim.length_hints import LengthHints
from services.sim.workload import BurstyArrivals, PoissonArrivals, Workload

G, B, R = 16, 72, 64
BACKLOG = G * B + R
WORKLOADS = {
    "table1": dp_workload(PoissonArrivals(rate_per_s=3000.0), backlog_requests=BACKLOG),
    "bursty": dp_workload(
        BurstyArrivals(rate_per_s=2000.0, burst_rate_per_s=4000.0, mean_calm_s=1.0, mean_burst_s=0.5),
        backlog_requests=BACKLOG,
    ),
    "saturated": dp_workload(PoissonArrivals(rate_per_s=8000.0), backlog_requests=BACKLOG),
}
SATURATED = WORKLOADS["saturated"]


def _alone(**params: Any) -> BfioParams:
    """A lookahead measured alone: its online self-check off, as every figure before it."""
    return BfioParams(self_check=False, **params)


REFERENCE_RECIPE = _alone(
    horizon_steps=20, weight_scheme=WeightScheme.DECAY, new_request_model=NewRequestModel.CONST_S
)  # the reference code's conventions together: decay 0.86 and a new request's prompt at every offset
VARIANTS: dict[str, tuple[str, BfioParams | None]] = {
    "fcfs": ("fcfs", None),
    "jsq-load": ("jsq-load", None),
    "round-robin": ("round-robin", None),
    "jsq-count": ("jsq-count", None),
    "power-of-two": ("power-of-two", None),
    "vllm-score": ("vllm-score", None),
    "bfio_default": ("bfio", BfioParams()),
    "bfio_h0": ("bfio", BfioParams(horizon_steps=0)),
    "bfio_h1": ("bfio", _alone(horizon_steps=1)),
    "bfio_h2": ("bfio", _alone(horizon_steps=2)),
    "bfio_h4": ("bfio", _alone(horizon_steps=4)),
    "bfio_h8": ("bfio", _alone(horizon_steps=8)),
    "bfio_h20": ("bfio", _alone(horizon_steps=20)),
    "bfio_h20_uniform": ("bfio", _alone(horizon_steps=20, weight_scheme=WeightScheme.UNIFORM)),
    "bfio_h20_const_s": ("bfio", _alone(horizon_steps=20, new_request_model=NewRequestModel.CONST_S)),
    "bfio_h20_ref": ("bfio", REFERENCE_RECIPE),
    "bfio_h20_self_check": ("bfio", BfioParams(horizon_steps=20)),
}
HINT_ERRORS = {"true": 0.0, "err10": 0.1, "err20": 0.2, "err50": 0.5}  # largest relative error of a hint
HINT_VARIANTS = {
    f"{label}_hint_{name}": (params, LengthHints(error_frac=error))
    for label, params in (
        ("bfio_h20", _alone(horizon_steps=20)),
        ("bfio_h20_uniform", _alone(horizon_steps=20, weight_scheme=WeightScheme.UNIFORM)),
        ("bfio_h20_ref", REFERENCE_RECIPE),
        ("bfio_h20_self_check", BfioParams(horizon_steps=20)),
    )
    for name, error in HINT_ERRORS.items()
}
EXACT_VARIANTS = {
    "bfio_h20_exact_curve": _alone(horizon_steps=20),
    "bfio_h20_ref_exact_curve": REFERENCE_RECIPE,
}


def exact_output_survival(draws: int = 2_000_000, seed: int = 12_345) -> SurvivalCurve:
    """S(n) = P(O > n) at every whole token of the workloads' output lengths, from ``draws`` of their generator."""
    _, outputs = BurstGptLikeLengths().sample(np.random.default_rng(seed), draws)
    edges = np.arange(int(outputs.max()) + 1, dtype=np.float64)
    at_most = np.cumsum(np.bincount(outputs, minlength=edges.shape[0]))[: edges.shape[0]]
    return SurvivalCurve(edges_tokens=edges, survival_frac=np.clip(1.0 - at_most / draws, 0.0, 1.0))


@contextmanager
def _exact_curve() -> Iterator[None]:
    """Route with the exact output survival curve in place of the published estimate (H still from the bundle)."""
    exact = exact_output_survival()

    def predictor(curve: object, **kwargs: Any) -> ClassPredictor:
        return ClassPredictor(exact, **kwargs)

    name = "ClassPredictor"
    saved = getattr(router_module, name)
    setattr(router_module, name, predictor)
    try:
        yield
    finally:
        setattr(router_module, name, saved)


@contextmanager
def _unpatched() -> Iterator[None]:
    yield


def _run(
    router: str,
    workload: Workload,
    seed: int,
    params: BfioParams | None,
    *,
    duration_s: float = 3.0,
    visible_pool: int | None = R,
    length_hints: LengthHints | None = None,
) -> DpLoopResult:
    return run_dp_loop(
        router=router,  # type: ignore[arg-type]
        workload=workload,
        duration_s=duration_s,
        seed=seed,
        ranks=G,
        slots_per_rank=B,
        params=params,
        visible_pool=visible_pool,
        bundle_interval_s=0.25,
        length_hints=length_hints,
    )


def _summary(values: list[float], h0: list[float] | None = None) -> dict[str, Any]:
    """Mean and standard deviation over seeds; with H = 0's values of the same seeds, the mean paired change."""
    row: dict[str, Any] = {
        "per_seed": [round(v, 4) for v in values],
        "mean": float(np.mean(values)),
        "std": float(np.std(values)),
    }
    if h0 is not None:
        changes = np.asarray(values) / np.asarray(h0) - 1.0
        row["paired_change_vs_h0"] = float(np.mean(changes))
        row["paired_change_se"] = float(np.std(changes, ddof=1) / np.sqrt(len(changes))) if len(changes) > 1 else None
    return row


def _balance(results: list[DpLoopResult]) -> dict[str, Any]:
    """Balance ratio (mean / max load) and the longest wait of a top-1% prompt, mean and spread over seeds."""
    ratios = [r.balance_ratio for r in results]
    waits = [r.long_prompt_max_wait_s or 0.0 for r in results]
    return {
        "balance_ratio_mean": float(np.mean(ratios)),
        "balance_ratio_std": float(np.std(ratios)),
        "long_prompt_max_wait_s_mean": float(np.mean(waits)),
        "long_prompt_max_wait_s_max": float(np.max(waits)),
    }


def _self_check(params: BfioParams | None, results: list[DpLoopResult]) -> dict[str, Any]:
    """Per seed: the event time the bundle first moved from the lookahead to H = 0 (None: never), and the H at the end.

    Empty for a variant without the self-check, or a run whose first bundle has no lookahead (nothing to move).
    """
    if params is None or not params.self_check or params.horizon_steps == 0:
        return {}
    flips: list[float | None] = []
    final: list[int] = []
    for result in results:
        stats = result.router_stats
        if stats is None or not stats.bundle_horizons or stats.bundle_horizons[0] == 0:
            return {}
        horizons = stats.bundle_horizons
        flips.append(next((t for h, t in zip(horizons, stats.bundle_adopted_s, strict=True) if h == 0), None))
        final.append(horizons[-1])
    return {"flip_to_h0_s_per_seed": flips, "final_horizon_per_seed": final}


def lookahead(
    seeds: list[int],
    hints: bool,
    seconds: float = 3.0,
    *,
    exact: bool = False,
    workloads: list[str] | None = None,
    variants: list[str] | None = None,
) -> dict[str, dict[str, dict[str, Any]]]:
    """Imbalance (1e4 tokens) per workload and variant, runs of ``seconds`` simulated seconds."""
    table: dict[str, dict[str, dict[str, Any]]] = {}
    diagnoses: list[tuple[str, BfioParams, LengthHints | None, Callable[[], AbstractContextManager[None]]]]
    diagnoses = [(label, params, hint, _unpatched) for label, (params, hint) in HINT_VARIANTS.items() if hints]
    diagnoses += [(label, params, None, _exact_curve) for label, params in EXACT_VARIANTS.items() if exact]
    for name in workloads or list(WORKLOADS):
        workload = WORKLOADS[name]
        table[name] = {}
        h0: list[float] | None = None
        for label in [v for v in variants or VARIANTS if v in VARIANTS]:
            router, params = VARIANTS[label]
            results = [_run(router, workload, seed, params, duration_s=seconds) for seed in seeds]
            values = [r.avg_imbalance_tokens / 1e4 for r in results]
            if label == "bfio_h0":
                h0 = values
            summary = _summary(values, h0 if label != "bfio_h0" else None)
            table[name][label] = {**summary, **_balance(results), **_self_check(params, results)}
            _print(name, label, table[name][label])
        for label, params, hint, patch in diagnoses:
            if variants and label not in variants:
                continue
            with patch():
                results = [
                    _run("bfio", workload, seed, params, duration_s=seconds, length_hints=hint) for seed in seeds
                ]
            values = [r.avg_imbalance_tokens / 1e4 for r in results]
            table[name][label] = {**_summary(values, h0), **_self_check(params, results)}
            _print(name, label, table[name][label])
    return table


def guard(seeds: list[int]) -> dict[str, dict[str, Any]]:
    """Imbalance and forced share with the default 2 s deadline and with the guard off, whole queue visible;
    JSQ-by-load on the same runs as the baseline."""
    rows: dict[str, dict[str, Any]] = {}
    values = [
        _run("jsq-load", SATURATED, seed, None, duration_s=4.0, visible_pool=None).avg_imbalance_tokens / 1e4
        for seed in seeds
    ]
    rows["jsq-load"] = _summary(values)
    _print("saturated", "jsq-load", rows["jsq-load"])
    for label, deadline_s in (("aging_2s", 2.0), ("aging_8s", 8.0), ("aging_off_600s", 600.0)):
        values, forced = [], []
        for seed in seeds:
            params = _alone(horizon_steps=20, aging_deadline_s=deadline_s)
            result = _run("bfio", SATURATED, seed, params, duration_s=4.0, visible_pool=None)
            stats = result.router_stats
            assert stats is not None
            values.append(result.avg_imbalance_tokens / 1e4)
            forced.append(stats.forced / max(1, len(stats.admissions)))
        rows[label] = {**_summary(values), "forced_share_per_seed": forced}
        _print("saturated", label, rows[label])
    return rows


def _print(workload: str, label: str, row: dict[str, Any]) -> None:
    extra = f"  forced {max(row['forced_share_per_seed']):.4f} max" if "forced_share_per_seed" in row else ""
    if "balance_ratio_mean" in row:
        extra += (
            f"  balance {row['balance_ratio_mean']:.3f} +- {row['balance_ratio_std']:.3f}"
            f"  long-prompt wait {row['long_prompt_max_wait_s_mean']:.3f} s"
            f" (max {row['long_prompt_max_wait_s_max']:.3f})"
        )
    if "flip_to_h0_s_per_seed" in row:
        flips = ", ".join("-" if t is None else f"{t:.2f}" for t in row["flip_to_h0_s_per_seed"])
        extra += f"  H=0 from [{flips}] s, H at end {row['final_horizon_per_seed']}"
    if row.get("paired_change_vs_h0") is not None:
        se = row["paired_change_se"]
        extra += f"  vs H=0 {row['paired_change_vs_h0']:+.1%}" + ("" if se is None else f" (se {se:.1%})")
    print(f"{workload:10} {label:24} {row['mean']:7.3f} +- {row['std']:5.3f}  {row['per_seed']}{extra}", flush=True)


def main() -> None:
    """Run the parts asked for and write their JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", nargs="+", choices=["lookahead", "guard"], default=["lookahead", "guard"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--hints", action="store_true", help="add the length-hint variants (true and noisy)")
    parser.add_argument("--exact", action="store_true", help="add the exact-survival-curve variants (a diagnosis)")
    parser.add_argument("--workloads", nargs="+", choices=list(WORKLOADS), help="lookahead workloads (default: all)")
    parser.add_argument(
        "--variants",
        nargs="+",
        choices=[*VARIANTS, *HINT_VARIANTS, *EXACT_VARIANTS],
        help="lookahead variants (default: all; hint and exact variants also need --hints or --exact)",
    )
    parser.add_argument("--seconds", type=float, default=3.0, help="simulated seconds of each lookahead run")
    parser.add_argument("--out", type=Path, default=Path("out/bench/bench_bfio_lookahead.json"))
    args = parser.parse_args()
    print(
        f"G={G} B={B}, {args.seconds:g} s, seeds {args.seeds}; AvgImbalance before admission, 1e4 tokens, mean +- std"
    )
    document: dict[str, Any] = {"seeds": args.seeds, "seconds": args.seconds}
    if "lookahead" in args.parts:
        document["lookahead"] = lookahead(
            args.seeds, args.hints, args.seconds, exact=args.exact, workloads=args.workloads, variants=args.variants
        )
    if "guard" in args.parts:
        document["guard"] = guard(args.seeds)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
