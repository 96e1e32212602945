"""Slot-level M/G/c pool simulation: known queueing answers and the planner's own service law."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from policies.fleetopt.cdf import LengthCdf
from policies.fleetopt.erlang import erlang_c
from policies.fleetopt.inputs import FleetoptInputs
from policies.fleetopt.params import FleetoptParams, PlannerMode
from policies.fleetopt.sweep import plan_fleet
from schemas.errors import InvalidInputError
from services.sim.slot_pool import PoolRequests, pool_requests, simulate_slot_pool

DATA = Path(__file__).resolve().parents[3] / "services" / "sim" / "data"
RAW = json.loads((DATA / "fleetopt-azure_cdf.json").read_text())
AZURE = LengthCdf(tokens=tuple(int(t) for t, _ in RAW), frac=tuple(float(f) for _, f in RAW))


def _exponential(n: int, mean_s: float, seed: int) -> PoolRequests:
    rng = np.random.default_rng(seed)
    return PoolRequests(service_s=rng.exponential(mean_s, size=n), prefill_s=np.zeros(n))


class TestSimulateSlotPool:
    @pytest.mark.parametrize(("c", "lam"), [(3, 2.1), (200, 170.0)])
    def test_mmc_utilisation_is_lambda_over_c_mu(self, c: int, lam: float) -> None:
        """40k requests: the utilisation estimate's sampling error is well under 0.02 at these loads."""
        result = simulate_slot_pool(
            arrival_rate_per_s=lam, c_slots=c, requests=_exponential(40_000, 1.0, 1), rng=np.random.default_rng(2)
        )
        assert result.util_frac == pytest.approx(lam / c, abs=0.02)

    def test_mmc_waiting_probability_matches_erlang_c(self) -> None:
        """M/M/3 at varrho = 0.7: C = (9.261/6/0.3) / (1 + 2.1 + 2.205 + 9.261/6/0.3) = 0.4923, within 0.03 over 40k."""
        result = simulate_slot_pool(
            arrival_rate_per_s=2.1, c_slots=3, requests=_exponential(40_000, 1.0, 3), rng=np.random.default_rng(4)
        )
        assert erlang_c(3, 2.1) == pytest.approx(0.4923, abs=1e-4)
        assert result.wait_prob_frac == pytest.approx(erlang_c(3, 2.1), abs=0.03)

    def test_mm1_mean_wait_matches_the_closed_form(self) -> None:
        """M/M/1 at rho = 0.5, mu = 1: E[Wq] = rho / (mu - lambda) = 1 s, within 10 % over 40k requests."""
        result = simulate_slot_pool(
            arrival_rate_per_s=0.5, c_slots=1, requests=_exponential(40_000, 1.0, 5), rng=np.random.default_rng(6)
        )
        assert result.mean_wait_s == pytest.approx(1.0, rel=0.1)

    def test_an_oversized_pool_never_queues(self) -> None:
        result = simulate_slot_pool(
            arrival_rate_per_s=1.0, c_slots=500, requests=_exponential(2_000, 1.0, 7), rng=np.random.default_rng(8)
        )
        assert (result.wait_prob_frac, result.p99_wait_s) == (0.0, 0.0)

    def test_ttft_adds_the_prefill_to_the_wait(self) -> None:
        requests = PoolRequests(service_s=np.full(100, 0.01), prefill_s=np.full(100, 0.25))
        result = simulate_slot_pool(arrival_rate_per_s=1.0, c_slots=10, requests=requests, rng=np.random.default_rng(9))
        assert result.p99_ttft_s == pytest.approx(0.25)

    @pytest.mark.parametrize(
        ("kwargs", "field"),
        [
            ({"arrival_rate_per_s": 0.0}, "arrival_rate_per_s"),
            ({"c_slots": 0}, "c_slots"),
            ({"warmup_frac": 1.0}, "warmup_frac"),
        ],
    )
    def test_rejects_bad_arguments_naming_the_field(self, kwargs: dict[str, float], field: str) -> None:
        args = {"arrival_rate_per_s": 1.0, "c_slots": 2.0, "warmup_frac": 0.2} | kwargs
        with pytest.raises(InvalidInputError, match=field):
            simulate_slot_pool(
                arrival_rate_per_s=args["arrival_rate_per_s"],
                c_slots=int(args["c_slots"]),
                requests=_exponential(100, 1.0, 0),
                rng=np.random.default_rng(0),
                warmup_frac=args["warmup_frac"],
            )


class TestPoolRequests:
    @pytest.mark.parametrize("mode", [PlannerMode.PAPER, PlannerMode.EXACT])
    @pytest.mark.parametrize("long_pool", [False, True])
    def test_mean_service_matches_the_planner_calibration(self, mode: PlannerMode, long_pool: bool) -> None:
        """Azure, B = 4096, gamma = 1.5: 40k draws put the sample mean of S within 3 % of the calibrated E[S]."""
        inputs = FleetoptInputs(arrival_rate_per_s=1000.0, cdf=AZURE)
        params = FleetoptParams(mode=mode, b_short_candidates_tokens=(4096,), gammas=(1.5,))
        point = plan_fleet(inputs, params).points[0]
        calib = point.long_calib if long_pool else point.short_calib
        assert calib is not None
        drawn = pool_requests(
            inputs,
            params,
            b_short_tokens=4096,
            gamma_b_tokens=point.split.gamma_b_tokens,
            long_pool=long_pool,
            size=40_000,
            rng=np.random.default_rng(11),
        )
        assert float(drawn.service_s.mean()) == pytest.approx(calib.mean_service_s, rel=0.03)

    def test_a_pool_without_traffic_is_refused(self) -> None:
        inputs = FleetoptInputs(arrival_rate_per_s=10.0, cdf=LengthCdf(tokens=(100, 200), frac=(0.5, 1.0)))
        with pytest.raises(InvalidInputError, match="long pool receives no traffic"):
            pool_requests(
                inputs,
                FleetoptParams(),
                b_short_tokens=200,
                gamma_b_tokens=200,
                long_pool=True,
                size=10,
                rng=np.random.default_rng(0),
            )
