"""Exact-mode plans on seeded random inputs against golden plans from the planner before its compiled loop.

The compiled loop (policies/fleetopt/kernels.py) made a new input share cheap: the per-length terms are
summed by one loop that keeps the running sums only at the lengths a sweep reads, instead of numpy
tabulating every length. The plans must not move: ``fleetopt_exact_plans.json`` holds, for each case below, what the
planner of commit 06dd389 returned: every point's (n_s, n_l), and the boundary (B, gamma*B), the
calibrations, P99 TTFTs and cost of the chosen point, the baseline and a few sampled points. GPU
counts, boundaries and flags must be equal, floats equal within 1e-9 relative (they are equal bit for
bit today; the tolerance leaves room for another numpy or numba to round a last bit differently).

Regenerate only from a planner known to be right:
``python -m tests.unit.policies.fleetopt.test_fleetopt_exact_golden``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from policies.fleetopt.calibration import PoolCalibration, _length_law, _running_at
from policies.fleetopt.cdf import LengthCdf
from policies.fleetopt.inputs import FleetoptInputs
from policies.fleetopt.params import FleetoptParams
from policies.fleetopt.sweep import FleetPlan, PlanPoint, plan_fleet

GOLDEN = Path(__file__).with_name("fleetopt_exact_plans.json")
CASES = 48
SAMPLED_POINTS = 6
REL_TOL = 1e-9
#: Shares whose double lies just below a decimal (0.7, 0.85: f*L rounds up onto an integer) or above it.
ROUND_SHARES = (0.5, 0.55, 0.7, 0.75, 0.8, 0.85, 0.9, 0.99)


def _case(seed: int) -> tuple[FleetoptInputs, FleetoptParams]:
    """Random CDF (breakpoints, masses, empty buckets), load, p_c, input share, chunk size and SLO of one seed."""
    rng = np.random.default_rng(3300 + seed)
    top = int(rng.choice([65536, 65536, 32768, int(rng.integers(2000, 65536))]))
    count = int(rng.integers(3, 30))
    tokens = np.unique(np.concatenate((rng.integers(16, top, size=count), [top])))
    masses = rng.random(tokens.size) ** 3 * (rng.random(tokens.size) > 0.15)
    masses[-1] += 1e-3
    frac = np.cumsum(masses) / masses.sum()
    frac[-1] = 1.0
    share = float(rng.choice(ROUND_SHARES)) if rng.random() < 0.5 else float(rng.uniform(0.5, 0.99))
    inputs = FleetoptInputs(
        arrival_rate_per_s=float(10 ** rng.uniform(-1.0, 3.5)),
        cdf=LengthCdf(tokens=tuple(int(t) for t in tokens), frac=tuple(float(f) for f in frac)),
        p_c=float(rng.choice([0.0, rng.random(), 1.0])),
        input_frac=share,
    )
    params = FleetoptParams(
        chunk_tokens=int(rng.choice([512, 512, 256, 1000])),
        t_slo_s=float(rng.uniform(0.05, 1.0)),
        rho_max=float(rng.uniform(0.5, 0.95)),
    )
    return inputs, params


def _calibration(calib: PoolCalibration | None) -> list[float] | None:
    if calib is None:
        return None
    return [
        calib.n_slots,
        calib.mean_service_s,
        calib.cv2,
        calib.mu_gpu_per_s,
        calib.mean_prefill_s,
        calib.ttft_overhead_s,
    ]


def _detail(point: PlanPoint) -> dict[str, Any]:
    """What a point's plan is made of: its boundary, its pools' calibrations and sizes, its cost."""
    return {
        "b": point.short_ctx_tokens,
        "gamma_b": point.split.gamma_b_tokens,
        "gpus": [point.short.n_gpus, point.long.n_gpus],
        "cost": point.cost_usd_per_hr,
        "slo_met": point.slo_met,
        "short_calib": _calibration(point.short_calib),
        "long_calib": _calibration(point.long_calib),
        "p99_ttft_s": [point.short.p99_ttft_s, point.long.p99_ttft_s],
    }


def _digest(plan: FleetPlan) -> dict[str, Any]:
    points = tuple(plan.points)
    sampled = np.linspace(0, len(points) - 1, SAMPLED_POINTS).astype(int).tolist() if points else []
    return {
        "gpus": [[p.short.n_gpus, p.long.n_gpus] for p in points],
        "best": _detail(plan.best),
        "homogeneous": _detail(plan.homogeneous),
        "sampled": {str(i): _detail(points[i]) for i in sampled},
    }


def _assert_close(got: Any, want: Any, where: str) -> None:
    """Equal structure; ints, bools and None equal; floats within ``REL_TOL`` relative."""
    if isinstance(want, dict):
        assert got.keys() == want.keys(), where
        for key in want:
            _assert_close(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, list):
        assert len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _assert_close(g, w, f"{where}[{i}]")
    elif isinstance(want, float):
        assert math.isclose(got, want, rel_tol=REL_TOL, abs_tol=0.0), f"{where}: {got!r} != {want!r}"
    else:
        assert got == want, where


@pytest.fixture(scope="module")
def golden() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = json.loads(GOLDEN.read_text())
    return cases


def test_golden_file_covers_every_case(golden: list[dict[str, Any]]) -> None:
    assert len(golden) == CASES


@pytest.mark.parametrize("seed", range(CASES))
def test_plan_equals_the_plan_before(seed: int, golden: list[dict[str, Any]]) -> None:
    inputs, params = _case(seed)
    _assert_close(json.loads(json.dumps(_digest(plan_fleet(inputs, params)))), golden[seed], f"case {seed}")


def _table(input_frac: float, chunk_tokens: int, top: int) -> tuple[np.ndarray, np.ndarray]:
    """The per-length rows and their running sums over every length, as the planner before item 5 built them."""
    lengths = np.arange(top + 1, dtype=np.int64)
    lengths[0] = 1
    l_in = np.maximum(1, np.floor(input_frac * lengths).astype(np.int64))
    l_out = np.maximum(1, lengths - l_in)
    total = (l_in + l_out).astype(np.float64)
    chunks = np.ceil(l_in / chunk_tokens)
    m = chunks + l_out
    out = l_out.astype(np.float64)
    rows = np.stack(
        (np.ones(top + 1), m, m * total, m * m, m * total * m, m * total * m * total, chunks, out, out * out)
    )
    rows[:, 0] = 0.0
    return np.cumsum(rows, axis=1), l_out


@pytest.mark.parametrize("input_frac", [0.5, 0.55, 0.7, 0.8, 0.85, 0.99, 0.8000000012, 0.6180339887])
@pytest.mark.parametrize("chunk_tokens", [1, 512, 1000])
def test_running_sums_and_output_edges_equal_a_table_of_every_length(input_frac: float, chunk_tokens: int) -> None:
    """Bit for bit: the sums at random lengths, l_out there, and the first length reaching each output."""
    top = 65536
    running, l_out = _table(input_frac, chunk_tokens, top)
    rng = np.random.default_rng(int(input_frac * 1e6) + chunk_tokens)
    x = np.concatenate(([0, 1, 2, chunk_tokens, top, top], rng.integers(0, top + 1, size=400)))
    law = _length_law(input_frac, chunk_tokens, top)
    assert np.array_equal(_running_at(law, x), running[:, x])  # in any order, with repeats
    assert np.array_equal(law.l_out_at(x), l_out[x])
    wanted = np.concatenate(([-1, 0, 1, 2, int(l_out[-1]), int(l_out[-1]) + 1], rng.integers(0, top, size=400)))
    assert np.array_equal(law.first_l_out_at_least(wanted), np.searchsorted(l_out, wanted, side="left"))


def _write_golden() -> None:
    GOLDEN.write_text(json.dumps([_digest(plan_fleet(*_case(seed))) for seed in range(CASES)], separators=(",", ":")))


if __name__ == "__main__":
    _write_golden()
