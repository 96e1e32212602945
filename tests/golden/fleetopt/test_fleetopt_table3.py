"""Seed 002 Table 3 (and spec section 4.8's full gamma sweeps) in paper mode, number for number."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from policies.fleetopt.cdf import LengthCdf
from policies.fleetopt.inputs import FleetoptInputs
from policies.fleetopt.params import FleetoptParams, PlannerMode
from policies.fleetopt.sweep import FleetPlan, plan_fleet

DATA = Path(__file__).resolve().parents[3] / "services" / "sim" / "data"
PAPER = FleetoptParams(mode=PlannerMode.PAPER)


def _cdf(name: str) -> LengthCdf:
    raw = json.loads((DATA / f"fleetopt-{name}_cdf.json").read_text())
    points = raw["cdf"] if isinstance(raw, dict) else raw
    return LengthCdf(tokens=tuple(int(t) for t, _ in points), frac=tuple(float(f) for _, f in points))


@pytest.fixture(scope="module")
def plans() -> dict[str, FleetPlan]:
    setups = {"azure": (4096, 1.0), "lmsys": (1536, 1.0), "agent_heavy": (8192, 0.75)}
    return {
        name: plan_fleet(FleetoptInputs(arrival_rate_per_s=1000.0, cdf=_cdf(name), p_c=p_c), PAPER, b_short_tokens=(b,))
        for name, (b, p_c) in setups.items()
    }


# Seed 002 Table 3 rows (homogeneous total; PR = gamma 1.0; PR+C&R = gamma 1.5; FleetOpt = gamma*), exact integers.
TABLE3 = [
    ("azure", 284, (43, 131), (47, 45), 2.0, (48, 2), 5498, 968, 0.824),
    ("lmsys", 139, (7, 74), (7, 65), 2.0, (7, 52), 2691, 1142, 0.576),
    ("agent_heavy", 2397, (229, 2037), (255, 1981), 1.5, (255, 1981), 46405, 43288, 0.067),
]


@pytest.mark.paper(seed="002", ref="Table 3")
@pytest.mark.parametrize("row", TABLE3, ids=[row[0] for row in TABLE3])
def test_table3_rows_reproduce_exactly(plans: dict[str, FleetPlan], row: tuple[object, ...]) -> None:
    """E.g. Azure: Homogeneous 284 (5,498 K$); PR 43+131; PR+C&R 47+45; FleetOpt 2.0: 48+2 = 50 (968 K$, 82.4%)."""
    name, homo, pr, cr15, gamma_star, best, homo_kusd, best_kusd, savings = row
    assert isinstance(name, str)
    plan = plans[name]
    by_gamma = {p.split.gamma: (p.short.n_gpus, p.long.n_gpus) for p in plan.points}
    assert plan.homogeneous.total_gpus == homo
    assert by_gamma[1.0] == pr
    assert by_gamma[1.5] == cr15
    assert plan.best.split.gamma == gamma_star
    assert (plan.best.short.n_gpus, plan.best.long.n_gpus) == best
    # Annual K$ are printed rounded to the unit; savings to 0.1 percentage point.
    assert round(plan.homogeneous.cost_usd_per_hr * 8.76) == homo_kusd
    assert round(plan.best.cost_usd_per_hr * 8.76) == best_kusd
    assert round(plan.savings_frac, 3) == pytest.approx(savings, abs=1e-9)


# Spec seed-002 section 4.8: full gamma sweeps n_s+n_l at lambda=1000 (gamma 1.0 .. 2.0), from the reference code.
SWEEPS = {
    "azure": [
        (43, 131), (44, 117), (45, 102), (46, 85), (46, 66), (47, 45), (47, 38), (48, 30), (48, 21), (48, 11), (48, 2),
    ],
    "lmsys": [(7, 74), (7, 74), (7, 70), (7, 68), (7, 67), (7, 65), (7, 62), (7, 59), (7, 59), (7, 57), (7, 52)],
    "agent_heavy": [
        (229, 2037), (234, 2028), (239, 2009), (245, 2001), (250, 1993), (255, 1981),
        (258, 1990), (261, 1981), (264, 1981), (267, 1971), (270, 1982),
    ],
}  # fmt: skip


@pytest.mark.paper(seed="002", ref="Table 3 (spec section 4.8 gamma sweeps)")
@pytest.mark.parametrize("name", sorted(SWEEPS))
def test_every_gamma_of_the_sweep_reproduces(plans: dict[str, FleetPlan], name: str) -> None:
    assert [(p.short.n_gpus, p.long.n_gpus) for p in plans[name].points] == SWEEPS[name]


# Spec section 4.8 calibration outputs (mu_gpu req/s/GPU at 4 decimals; Cs^2 at 4; mean prefill ms at 2).
CALIBRATION = [
    ("azure", "short", 24.6468, 1.5125, 20.16),
    ("azure", "long", 0.9191, 0.0819, 80.14),
    ("lmsys", "short", 168.3295, 2.0508, 10.95),
    ("lmsys", "long", 1.4580, 17.150, 48.00),
    ("agent_heavy", "short", 3.8109, 1.1196, 47.40),
    ("agent_heavy", "long", 0.1500, 1.2073, 219.74),
]


@pytest.mark.paper(seed="002", ref="Table 5 rho_ana inputs, section 7.4 P99 TTFT (spec section 4.8)")
@pytest.mark.parametrize("row", CALIBRATION, ids=[f"{r[0]}-{r[1]}" for r in CALIBRATION])
def test_pr_fleet_calibration_matches_the_reference(
    plans: dict[str, FleetPlan], row: tuple[str, str, float, float, float]
) -> None:
    name, pool, mu_gpu, cv2, prefill_ms = row
    point = plans[name].points[0]
    calib = point.short_calib if pool == "short" else point.long_calib
    assert calib is not None
    assert round(calib.mu_gpu_per_s, 4) == pytest.approx(mu_gpu, abs=1e-9)
    assert round(calib.cv2, 4 if cv2 < 10 else 3) == pytest.approx(cv2, abs=1e-9)
    assert round(calib.mean_prefill_s * 1000, 2) == pytest.approx(prefill_ms, abs=1e-9)


# Seed 002 Table 5 rho_ana (3 decimals) for the PR fleet.
RHO_ANA = [("azure", 0.848, 0.845), ("lmsys", 0.771, 0.845), ("agent_heavy", 0.848, 0.850)]


@pytest.mark.paper(seed="002", ref="Table 5")
@pytest.mark.parametrize(("name", "short_util", "long_util"), RHO_ANA)
def test_pr_fleet_analytic_utilisation_matches_table5(
    plans: dict[str, FleetPlan], name: str, short_util: float, long_util: float
) -> None:
    point = plans[name].points[0]
    assert round(point.short.util_frac, 3) == pytest.approx(short_util, abs=1e-9)
    assert round(point.long.util_frac, 3) == pytest.approx(long_util, abs=1e-9)
