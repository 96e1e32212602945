"""Algorithm 1 sweep properties: monotone in load and SLO, never worse than the homogeneous fleet."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from estimators import FLEETOPT_BREAKPOINTS_TOKENS
from policies.fleetopt.cdf import LengthCdf
from policies.fleetopt.inputs import FleetoptInputs
from policies.fleetopt.params import FleetoptParams, PlannerMode
from policies.fleetopt.sweep import b_short_candidates, plan_fleet
from schemas.errors import InvalidInputError

DATA = Path(__file__).resolve().parents[4] / "services" / "sim" / "data"
BREAKPOINTS = FLEETOPT_BREAKPOINTS_TOKENS  # the paper's 18 breakpoints (seed-002 section 3.3)


def _azure() -> LengthCdf:
    raw = json.loads((DATA / "fleetopt-azure_cdf.json").read_text())
    return LengthCdf(tokens=tuple(int(t) for t, _ in raw), frac=tuple(float(f) for _, f in raw))


AZURE = _azure()
EXACT = FleetoptParams()
PAPER_FIXED_B = FleetoptParams(mode=PlannerMode.PAPER, b_short_candidates_tokens=(4096,))


@st.composite
def cdfs(draw: st.DrawFn) -> LengthCdf:
    """Random length CDFs on the paper's 18 breakpoints."""
    masses = draw(st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=18, max_size=18))
    assume(sum(masses) > 0.1)
    total, running, frac = sum(masses), 0.0, []
    for mass in masses:
        running += mass
        frac.append(min(1.0, running / total))
    frac[-1] = 1.0
    return LengthCdf(tokens=BREAKPOINTS, frac=tuple(frac))


class TestPlanFleet:
    @settings(max_examples=15)
    @given(lam=st.floats(min_value=1.0, max_value=3000.0), factor=st.floats(min_value=1.0, max_value=3.0))
    def test_more_arrival_rate_never_gives_fewer_gpus(self, lam: float, factor: float) -> None:
        low = plan_fleet(FleetoptInputs(arrival_rate_per_s=lam, cdf=AZURE), EXACT)
        high = plan_fleet(FleetoptInputs(arrival_rate_per_s=lam * factor, cdf=AZURE), EXACT)
        assume(low.best.slo_met and high.best.slo_met)
        assert high.best.total_gpus >= low.best.total_gpus

    @settings(max_examples=5)
    @given(lam=st.floats(min_value=1.0, max_value=3000.0), factor=st.floats(min_value=1.0, max_value=3.0))
    def test_more_arrival_rate_never_gives_fewer_gpus_in_paper_mode(self, lam: float, factor: float) -> None:
        low = plan_fleet(FleetoptInputs(arrival_rate_per_s=lam, cdf=AZURE), PAPER_FIXED_B)
        high = plan_fleet(FleetoptInputs(arrival_rate_per_s=lam * factor, cdf=AZURE), PAPER_FIXED_B)
        assume(low.best.slo_met and high.best.slo_met)
        assert high.best.total_gpus >= low.best.total_gpus

    @settings(max_examples=15)
    @given(
        lam=st.floats(min_value=0.5, max_value=2000.0),
        slo_s=st.floats(min_value=0.05, max_value=2.0),
        tighter=st.floats(min_value=0.2, max_value=1.0),
    )
    def test_a_tighter_slo_never_gives_fewer_gpus(self, lam: float, slo_s: float, tighter: float) -> None:
        inputs = FleetoptInputs(arrival_rate_per_s=lam, cdf=AZURE)
        loose = plan_fleet(inputs, FleetoptParams(t_slo_s=slo_s))
        tight = plan_fleet(inputs, FleetoptParams(t_slo_s=slo_s * tighter))
        assume(loose.best.slo_met and tight.best.slo_met)
        assert tight.best.total_gpus >= loose.best.total_gpus

    @settings(max_examples=20)
    @given(cdf=cdfs(), lam=st.floats(min_value=0.1, max_value=5000.0), p_c=st.floats(min_value=0.0, max_value=1.0))
    def test_savings_are_never_negative(self, cdf: LengthCdf, lam: float, p_c: float) -> None:
        plan = plan_fleet(FleetoptInputs(arrival_rate_per_s=lam, cdf=cdf, p_c=p_c), EXACT)
        assert plan.best.cost_usd_per_hr <= plan.homogeneous.cost_usd_per_hr
        assert plan.savings_frac >= 0.0

    def test_exact_mode_sizes_the_short_pool_for_compressed_requests(self) -> None:
        """Spec section 2.7: at gamma = 2 the Azure short pool needs about twice the paper's 48 GPUs."""
        inputs = FleetoptInputs(arrival_rate_per_s=1000.0, cdf=AZURE)
        exact = plan_fleet(inputs, FleetoptParams(b_short_candidates_tokens=(4096,)))
        at_two = next(p for p in exact.points if p.split.gamma == 2.0)
        assert 85 <= at_two.short.n_gpus <= 100

    def test_rejects_a_cdf_longer_than_the_long_pool_window(self) -> None:
        cdf = LengthCdf(tokens=(1024, 131072), frac=(0.5, 1.0))
        with pytest.raises(InvalidInputError, match="long_ctx_tokens"):
            plan_fleet(FleetoptInputs(arrival_rate_per_s=10.0, cdf=cdf), EXACT)

    def test_b_candidates_are_the_breakpoints_within_the_reference_band(self) -> None:
        """Spec section 2.4: Azure candidates {128, ..., 6144}; 64 has F < 0.01 and 8192 has F > 0.999."""
        inputs = FleetoptInputs(arrival_rate_per_s=1.0, cdf=AZURE)
        assert b_short_candidates(inputs, EXACT) == (128, 256, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144)


class TestLengthCdf:
    def test_interpolates_linearly_between_breakpoints(self) -> None:
        cdf = LengthCdf(tokens=(100, 200), frac=(0.5, 1.0))
        assert (cdf.at(0), cdf.at(50), cdf.at(150), cdf.at(500)) == (0.0, 0.25, 0.75, 1.0)

    @pytest.mark.parametrize(
        ("tokens", "frac", "field"),
        [((100, 100), (0.5, 1.0), "cdf[1].tokens"), ((100, 200), (0.6, 0.5), "cdf[1].frac"), ((100,), (0.9,), "frac")],
    )
    def test_rejects_malformed_breakpoints_naming_the_field(
        self, tokens: tuple[int, ...], frac: tuple[float, ...], field: str
    ) -> None:
        with pytest.raises(InvalidInputError, match=field.replace("[", r"\[").replace("]", r"\]")):
            LengthCdf(tokens=tokens, frac=frac)
