"""Seed 002 Table 1 (the cost cliff at B_short = 8192) and Table 2 (borderline fractions)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from policies.fleetopt.calibration import slots_per_gpu
from policies.fleetopt.cdf import LengthCdf
from policies.fleetopt.compression import split_traffic
from policies.fleetopt.params import FleetoptParams

DATA = Path(__file__).resolve().parents[3] / "services" / "sim" / "data"
PARAMS = FleetoptParams()


def _cdf(name: str) -> LengthCdf:
    raw = json.loads((DATA / f"fleetopt-{name}_cdf.json").read_text())
    points = raw["cdf"] if isinstance(raw, dict) else raw
    return LengthCdf(tokens=tuple(int(t) for t, _ in points), frac=tuple(float(f) for _, f in points))


@pytest.mark.paper(seed="002", ref="Table 1")
def test_table1_slots_per_gpu_and_cost_ratio_at_8k() -> None:
    """Rows: 8,192 -> P_s 128 slots, 1.0x; 8,193 / 12,000 / 65,536 -> P_l 16 slots, 8.0x."""
    short, long = slots_per_gpu(8192, PARAMS), slots_per_gpu(65536, PARAMS)
    assert (short, long) == (128, 16)
    assert short / long == 8.0


@pytest.mark.paper(seed="002", ref="Table 1")
@pytest.mark.parametrize(("l_total", "kv_pct"), [(8193, 12.5), (12000, 18.3), (65536, 100.0)])
def test_table1_long_pool_kv_utilised(l_total: int, kv_pct: float) -> None:
    """KV utilised = L / C_max^(l), printed to 0.1 %."""
    assert round(100 * l_total / PARAMS.long_ctx_tokens, 1) == kv_pct


# Table 2: workload, B_short, alpha, beta at gamma 1.5 (3 decimals), cliff ratio (integer, "42x" for 42.6).
TABLE2 = [("azure", 4096, 0.898, 0.078, 16), ("lmsys", 1536, 0.909, 0.046, 42), ("agent_heavy", 8192, 0.740, 0.112, 8)]


@pytest.mark.paper(seed="002", ref="Table 2")
@pytest.mark.parametrize(("name", "b", "alpha", "beta", "cliff"), TABLE2)
def test_table2_alpha_beta_and_cliff(name: str, b: int, alpha: float, beta: float, cliff: int) -> None:
    split = split_traffic(_cdf(name), 1000.0, b, 1.5, 1.0)
    assert round(split.alpha, 3) == pytest.approx(alpha, abs=1e-9)
    assert round(split.beta, 3) == pytest.approx(beta, abs=1e-9)
    assert int(slots_per_gpu(b, PARAMS) / slots_per_gpu(65536, PARAMS)) == cliff
