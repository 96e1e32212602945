"""Length histogram on fixed log buckets: FleetOpt CDFs, windows, merge, KS distance."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from estimators.histogram import (
    BUCKET_EDGES_TOKENS,
    FLEETOPT_BREAKPOINTS_TOKENS,
    OVERFLOW_BUCKET,
    LengthDistribution,
    LengthHistogram,
    bucket_of,
)
from schemas.errors import InvalidInputError, LateEventError

DATA = Path(__file__).resolve().parents[3] / "services" / "sim" / "data"

# seed-002-fleetopt.md section 3.3, table "Workload CDFs", F(L_total <= t) at the 18 breakpoints.
AZURE = (0.00837324818165691, 0.02817101295015079, 0.06758914316125599, 0.2886287032109278, 0.36427177576725206,
         0.40447046301224054, 0.6568742238779492, 0.779847436579741, 0.8686535391165514, 0.8982082668085861,
         0.9758027319496186, 0.9999645201348235, 0.9999645201348235, 1.0, 1.0, 1.0, 1.0, 1.0)  # fmt: skip
LMSYS = (0.13143902904110133, 0.2359468756113688, 0.3824772725584252, 0.6383272206772047, 0.7579833930565839,
         0.8306616774845409, 0.9088599256575542, 0.9482847003642829, 0.9728657502222596, 0.9837422332946185,
         0.9928852149665558, 0.996530520768585, 0.998633010324239, 0.9992645001201069, 0.9996557761504877,
         0.9997944562625215, 0.999839032012818, 1.0)  # fmt: skip
AGENT = (0.0, 0.0, 0.00007, 0.00407, 0.02237, 0.05757, 0.15871, 0.26459, 0.43163, 0.53802, 0.65987, 0.74042,
         0.85213, 0.91717, 0.97282, 0.99046, 0.99849, 1.0)  # fmt: skip


def _load(name: str) -> LengthDistribution:
    raw = json.loads((DATA / f"fleetopt-{name}_cdf.json").read_text())
    points = raw["cdf"] if isinstance(raw, dict) else raw
    return LengthDistribution.from_cdf([(float(t), float(f)) for t, f in points])


class TestBuckets:
    def test_every_fleetopt_breakpoint_is_an_edge_and_overflow_is_last(self) -> None:
        assert set(map(float, FLEETOPT_BREAKPOINTS_TOKENS)) <= set(BUCKET_EDGES_TOKENS)
        assert bucket_of(65536) < OVERFLOW_BUCKET
        assert bucket_of(65537) == OVERFLOW_BUCKET

    @given(st.integers(0, 70_000))
    @settings(max_examples=60)
    def test_bucket_holds_its_length_between_its_edges(self, n: int) -> None:
        b = bucket_of(n)
        assert b == bucket_of(float(n))
        if b < OVERFLOW_BUCKET:
            assert BUCKET_EDGES_TOKENS[b] <= n <= BUCKET_EDGES_TOKENS[b + 1]
            assert n == 0 or n > BUCKET_EDGES_TOKENS[b]


class TestFleetOptCdfs:
    @pytest.mark.paper(seed="002", ref="section 3.3 workload CDF table")
    @pytest.mark.parametrize(("name", "expected"), [("azure", AZURE), ("lmsys", LMSYS), ("agent_heavy", AGENT)])
    def test_cdf_at_the_breakpoints_reproduces_the_table(self, name: str, expected: tuple[float, ...]) -> None:
        dist = _load(name)
        for t, f in zip(FLEETOPT_BREAKPOINTS_TOKENS, expected, strict=True):
            assert dist.cdf(t) == pytest.approx(f, abs=1e-12)

    @pytest.mark.paper(seed="002", ref="section 3.3: Azure mean 1,627, p90 4,143, p99 7,347 from the CDF")
    def test_azure_mean_and_quantiles(self) -> None:
        dist = _load("azure")
        assert dist.mean_tokens == pytest.approx(1627, abs=1)  # spec rounds to whole tokens
        assert dist.quantile(0.9) == pytest.approx(4143, abs=1)
        assert dist.quantile(0.99) == pytest.approx(7347, abs=1)

    @pytest.mark.paper(seed="002", ref="section 3.3: Agent-heavy mean 6,512, p50/p90/p99 3,730/15,303/32,554")
    def test_agent_heavy_mean_and_quantiles(self) -> None:
        dist = _load("agent_heavy")
        assert dist.mean_tokens == pytest.approx(6512, abs=1)
        assert dist.quantile(0.5) == pytest.approx(3730, abs=1)
        assert dist.quantile(0.9) == pytest.approx(15303, abs=1)
        assert dist.quantile(0.99) == pytest.approx(32554, abs=1)

    def test_ks_distance_is_zero_to_itself_and_the_largest_cdf_gap(self) -> None:
        azure, lmsys = _load("azure"), _load("lmsys")
        assert azure.ks_distance(azure) == 0.0
        gap = max(abs(a - b) for a, b in zip(AZURE, LMSYS, strict=True))
        assert azure.ks_distance(lmsys) >= gap
        assert azure.ks_distance(lmsys) == pytest.approx(lmsys.ks_distance(azure))


lengths = st.lists(st.tuples(st.integers(0, 600), st.integers(0, 100_000)), max_size=60)  # (ts_s, tokens)


def _fold(stream: list[tuple[int, int]], **kw: float | int) -> LengthHistogram:
    h = LengthHistogram(**kw)  # type: ignore[arg-type]
    for ts, n in stream:
        h.update(ts_s=ts, length_tokens=n)
    return h


class TestLengthHistogram:
    def test_mean_and_second_moment_are_exact(self) -> None:
        d = _fold([(0, 100), (1, 300), (2, 70_000)]).snapshot()
        assert d.mean_tokens == pytest.approx((100 + 300 + 70_000) / 3)
        assert d.second_moment_tokens2 == pytest.approx((100**2 + 300**2 + 70_000**2) / 3)
        assert d.cdf(70_000) == 1.0
        assert d.quantile(1.0) == 70_000

    @given(lengths)
    @settings(max_examples=40)
    def test_window_keeps_exactly_the_last_slots(self, stream: list[tuple[int, int]]) -> None:
        stream = sorted(stream)
        d = _fold(stream, slot_s=10.0, n_slots=6).snapshot()
        head = stream[-1][0] // 10 if stream else 0
        kept = [n for ts, n in stream if ts // 10 > head - 6]
        assert d.total == len(kept)
        assert d.sum_tokens == sum(kept)

    @given(lengths, lengths)
    @settings(max_examples=40)
    def test_merge_equals_folding_the_event_time_ordered_stream(
        self, a: list[tuple[int, int]], b: list[tuple[int, int]]
    ) -> None:
        merged = _fold(sorted(a), slot_s=10.0, n_slots=6).merge(_fold(sorted(b), slot_s=10.0, n_slots=6)).snapshot()
        folded = _fold(sorted(a + b), slot_s=10.0, n_slots=6).snapshot()
        assert merged.counts == folded.counts
        assert merged.sum_sq_tokens == pytest.approx(folded.sum_sq_tokens)
        assert merged.max_tokens == folded.max_tokens

    @given(lengths)
    @settings(max_examples=30)
    def test_round_trips_through_to_dict(self, stream: list[tuple[int, int]]) -> None:
        h = _fold(sorted(stream), slot_s=10.0, n_slots=6)
        back = LengthHistogram.from_dict(json.loads(json.dumps(h.to_dict())))
        assert back.snapshot() == h.snapshot()
        assert back.to_dict() == h.to_dict()

    def test_memory_stays_bounded_for_a_million_observations(self) -> None:
        h = LengthHistogram(slot_s=1.0, n_slots=30)
        for i in range(1_000_000):
            h.update(ts_s=i * 1e-3, length_tokens=i % 70_001)
        state = h.to_dict()
        assert len(state["slots"]) == 30
        assert h.snapshot().total == 30_000

    @pytest.mark.parametrize("bad", [-1, math.nan, math.inf])
    def test_bad_length_raises(self, bad: float) -> None:
        with pytest.raises(InvalidInputError, match="length_tokens"):
            LengthHistogram().update(ts_s=0.0, length_tokens=bad)

    def test_event_outside_the_window_raises_late(self) -> None:
        h = LengthHistogram(slot_s=60.0, n_slots=2)
        h.update(ts_s=600.0, length_tokens=5)
        with pytest.raises(LateEventError):
            h.update(ts_s=479.0, length_tokens=5)

    def test_wrong_format_is_refused(self) -> None:
        with pytest.raises(InvalidInputError, match="format"):
            LengthHistogram.from_dict(LengthHistogram().to_dict() | {"format": 2})
