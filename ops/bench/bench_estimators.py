"""Observations folded per second for each estimator (target: >= 200k/s for histogram and hazard window).

Usage: ``python ops/bench/bench_estimators.py [--n 300000] [--out out/bench/estimators.json]``.
Prints one line per estimator and writes the figures as JSON. Inputs are generated from a fixed seed.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from estimators import (
    AsymmetricEma,
    EventRate,
    LengthHistogram,
    LinearCostModel,
    OutputLengthWindow,
    QuantileSketch,
    fit_linear_hazard,
)
from schemas.steps import BatchKind


def _rate(n: int, fold: Callable[[int], None]) -> float:
    start = time.perf_counter()
    fold(n)
    return n / (time.perf_counter() - start)


def main() -> None:
    """Run every benchmark and write the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=300_000)
    parser.add_argument("--out", type=Path, default=Path("out/bench/estimators.json"))
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    lengths = rng.geometric(1 / 256, size=args.n).tolist()
    censored = (rng.random(args.n) < 0.05).tolist()
    ts = np.cumsum(rng.exponential(1e-3, size=args.n)).tolist()
    durations = rng.random(args.n).tolist()

    window = OutputLengthWindow(capacity=500)
    hist = LengthHistogram()
    rate = EventRate()
    sketch = QuantileSketch()
    ema = AsymmetricEma(initial=256.0)
    cost = LinearCostModel()

    def fold_window(n: int) -> None:
        for i in range(n):
            window.update(ts_s=ts[i], output_tokens=lengths[i], censored=censored[i])

    def fold_hist(n: int) -> None:
        for i in range(n):
            hist.update(ts_s=ts[i], length_tokens=lengths[i])

    def fold_rate(n: int) -> None:
        for i in range(n):
            rate.update(ts_s=ts[i])

    def fold_sketch(n: int) -> None:
        for i in range(n):
            sketch.update(durations[i])

    def fold_ema(n: int) -> None:
        for i in range(n):
            ema.update(lengths[i])

    def fold_cost(n: int) -> None:
        for i in range(n):
            cost.update(kind=BatchKind.DECODE, n_units=lengths[i], duration_s=durations[i])

    figures = {
        "output_length_window_per_s": _rate(args.n, fold_window),
        "length_histogram_per_s": _rate(args.n, fold_hist),
        "event_rate_per_s": _rate(args.n, fold_rate),
        "quantile_sketch_per_s": _rate(args.n, fold_sketch),
        "asymmetric_ema_per_s": _rate(args.n, fold_ema),
        "linear_cost_model_per_s": _rate(min(args.n, 100_000), fold_cost),
    }
    sample = window.snapshot()
    reps = 200
    start = time.perf_counter()
    for _ in range(reps):
        fit_linear_hazard(sample)
    figures["fit_linear_hazard_w500_per_s"] = reps / (time.perf_counter() - start)
    for name, value in figures.items():
        print(f"{name:32s} {value:12,.0f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"n": args.n, "figures": figures}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
