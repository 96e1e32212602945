"""Workloads: seeded, shaped as asked, shifting where told."""

from __future__ import annotations

import numpy as np
import pytest

from schemas.errors import InvalidInputError
from services.sim.workload import (
    BatchArrivals,
    BurstyArrivals,
    GammaLengths,
    GeometricLengths,
    PoissonArrivals,
    Tier,
    Workload,
    WorkloadPhase,
    load_fleetopt_cdf,
    load_sharegpt_lengths,
)


class TestLengths:
    @pytest.mark.paper(seed="000", ref="section 5.1")
    def test_sharegpt_trace_has_the_spec_row_count_and_means(self) -> None:
        """Spec: 30,731 rows; prompt mean 2340.0, decode mean 438.7."""
        trace = load_sharegpt_lengths()
        assert len(trace.prompt_tokens) == 30_731
        assert np.mean(trace.prompt_tokens) == pytest.approx(2340.0, abs=0.5)
        assert np.mean(trace.output_tokens) == pytest.approx(438.7, abs=0.05)

    def test_fleetopt_cdf_draws_stay_within_its_support(self) -> None:
        lengths = load_fleetopt_cdf("azure")
        prompts, outputs = lengths.sample(np.random.default_rng(0), 5000)
        totals = prompts + outputs
        assert totals.min() >= 2
        assert totals.max() <= max(lengths.total_tokens)
        assert np.all(prompts == np.floor(0.8 * totals))

    def test_geometric_and_gamma_means_match(self) -> None:
        rng = np.random.default_rng(1)
        _, geo = GeometricLengths(prompt_tokens=8, mean_output_tokens=64.0).sample(rng, 40_000)
        _, gam = GammaLengths(prompt_tokens=8, mean_output_tokens=64.0, shape=2.0).sample(rng, 40_000)
        assert geo.mean() == pytest.approx(64.0, rel=0.03)
        assert gam.mean() == pytest.approx(64.5, rel=0.03)  # ceil adds half a token on average
        assert geo.min() >= 1
        assert gam.min() >= 1


class TestArrivals:
    def test_poisson_rate_is_met(self) -> None:
        stamps = PoissonArrivals(rate_per_s=50.0).times(np.random.default_rng(2), 0.0, 200.0)
        assert len(stamps) / 200.0 == pytest.approx(50.0, rel=0.03)
        assert np.all(np.diff(stamps) >= 0)

    def test_bursty_rate_lies_between_calm_and_burst(self) -> None:
        process = BurstyArrivals(rate_per_s=5.0, burst_rate_per_s=50.0, mean_calm_s=4.0, mean_burst_s=1.0)
        stamps = process.times(np.random.default_rng(3), 0.0, 500.0)
        assert 5.0 * 1.1 < len(stamps) / 500.0 < 50.0 * 0.5
        assert np.all(np.diff(stamps) >= 0)

    def test_bad_rate_is_refused(self) -> None:
        with pytest.raises(InvalidInputError, match="rate_per_s must be > 0, got 0"):
            PoissonArrivals(rate_per_s=0.0)


class TestWorkload:
    def test_rate_shift_mid_run_changes_the_arrival_count(self) -> None:
        lengths = GeometricLengths(prompt_tokens=8, mean_output_tokens=4.0)
        workload = Workload(
            phases=(
                WorkloadPhase(start_s=0.0, arrivals=PoissonArrivals(rate_per_s=10.0), lengths=lengths),
                WorkloadPhase(start_s=50.0, arrivals=PoissonArrivals(rate_per_s=40.0), lengths=lengths),
            )
        )
        requests = workload.generate(100.0, np.random.default_rng(4))
        early = sum(1 for r in requests if r.arrival_s < 50.0)
        late = len(requests) - early
        assert early == pytest.approx(500, rel=0.15)
        assert late == pytest.approx(2000, rel=0.1)
        assert [r.arrival_s for r in requests] == sorted(r.arrival_s for r in requests)

    def test_same_seed_same_requests_and_tier_mix_follows_weights(self) -> None:
        workload = Workload(
            phases=(WorkloadPhase(start_s=0.0, arrivals=BatchArrivals(count=4000), lengths=load_sharegpt_lengths()),),
            tiers=(Tier(name="paid", weight=0.25, tbt_slo_s=0.1), Tier(name="free", weight=0.75, tbt_slo_s=0.5)),
        )
        first = workload.generate(1.0, np.random.default_rng(5))
        assert first == workload.generate(1.0, np.random.default_rng(5))
        paid = [r for r in first if r.tier == "paid"]
        assert len(paid) / 4000 == pytest.approx(0.25, abs=0.03)
        assert {r.tbt_slo_s for r in paid} == {0.1}

    def test_phases_out_of_order_are_refused(self) -> None:
        lengths = GeometricLengths(prompt_tokens=8, mean_output_tokens=4.0)
        with pytest.raises(InvalidInputError, match="increasing start_s"):
            Workload(
                phases=(
                    WorkloadPhase(start_s=5.0, arrivals=PoissonArrivals(rate_per_s=1.0), lengths=lengths),
                    WorkloadPhase(start_s=1.0, arrivals=PoissonArrivals(rate_per_s=1.0), lengths=lengths),
                )
            )
