"""DDSketch-style quantile sketch: relative error, merge, bounded memory, windows."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from estimators.quantiles import QuantileSketch, WindowedQuantileSketch
from schemas.errors import InvalidInputError

values = st.lists(st.floats(1e-6, 1e6, allow_nan=False), min_size=1, max_size=200)


class TestQuantileSketch:
    @given(values, st.sampled_from([0.0, 0.1, 0.5, 0.9, 0.99, 1.0]))
    @settings(max_examples=60)
    def test_quantile_within_relative_accuracy_of_the_exact_order_statistic(self, xs: list[float], q: float) -> None:
        sketch = QuantileSketch(relative_accuracy=0.01)
        for x in xs:
            sketch.update(x)
        exact = sorted(xs)[math.floor(q * (len(xs) - 1))]
        got = sketch.quantile(q)
        assert got is not None
        assert abs(got - exact) <= 0.01 * exact * (1 + 1e-9)

    @given(values, values)
    @settings(max_examples=30)
    def test_merge_equals_folding_the_concatenation(self, a: list[float], b: list[float]) -> None:
        sa, sb, both = QuantileSketch(), QuantileSketch(), QuantileSketch()
        for x in a:
            sa.update(x)
            both.update(x)
        for x in b:
            sb.update(x)
            both.update(x)
        merged = sa.merge(sb)
        assert merged.to_dict()["bins"] == both.to_dict()["bins"]
        assert merged.summary().quantiles == both.summary().quantiles

    @given(values)
    @settings(max_examples=30)
    def test_round_trips_through_to_dict(self, xs: list[float]) -> None:
        s = QuantileSketch()
        for x in xs:
            s.update(x)
        assert QuantileSketch.from_dict(s.to_dict()).to_dict() == s.to_dict()

    def test_buckets_stay_bounded(self) -> None:
        s = QuantileSketch(max_buckets=64)
        for x in np.geomspace(1e-6, 1e9, 100_000):
            s.update(float(x))
        assert s.n_buckets() <= 64
        assert s.count == 100_000
        assert s.quantile(0.99) == pytest.approx(float(np.geomspace(1e-6, 1e9, 100_000)[98_999]), rel=0.01)

    @pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf])
    def test_bad_value_raises(self, bad: float) -> None:
        with pytest.raises(InvalidInputError, match="value"):
            QuantileSketch().update(bad)


class TestWindowedQuantileSketch:
    def test_window_forgets_old_slots_but_cumulative_keeps_them(self) -> None:
        w = WindowedQuantileSketch(slot_s=5.0, n_slots=12)
        w.update(ts_s=0.0, value=100.0)
        w.update(ts_s=61.0, value=1.0)
        assert w.snapshot().count == 1
        assert w.cumulative().count == 2
        back = WindowedQuantileSketch.from_dict(w.to_dict())
        assert back.snapshot().to_dict() == w.snapshot().to_dict()

    def test_merge_adds_slot_counts(self) -> None:
        a, b = WindowedQuantileSketch(), WindowedQuantileSketch()
        a.update(ts_s=1.0, value=0.1)
        b.update(ts_s=2.0, value=0.2)
        assert a.merge(b).snapshot().count == 2
