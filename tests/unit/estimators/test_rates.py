"""Event-time arrival rates: per second, per minute, high quantile of per-minute rates."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from estimators.rates import EventRate
from schemas.errors import InvalidInputError, LateEventError


def _fold(stream: list[int], **kw: float) -> EventRate:
    r = EventRate(**kw)
    for ts in stream:
        r.update(ts_s=ts)
    return r


class TestEventRate:
    def test_rates_from_closed_slots(self) -> None:
        """Minute m carries m + 1 events per second for three minutes; the head slot is excluded."""
        r = EventRate(window_s=600.0)
        for m in range(3):
            for s in range(60):
                r.update(ts_s=60.0 * m + s, count=m + 1)
        r.advance(180.0)
        snap = r.snapshot()
        assert snap.rate_per_s == 3.0
        assert snap.rate_per_min == 180.0
        assert snap.n_minutes == 3
        assert snap.high_rate_per_min == pytest.approx(120 + 0.9 * 60)  # linear quantile at rank 0.95 * 2
        assert snap.window_rate_per_s == pytest.approx(360 / 180)

    def test_silence_reads_as_zero_after_advance(self) -> None:
        r = _fold([0, 1, 2], window_s=60.0)
        r.advance(200.0)
        assert r.snapshot().rate_per_s == 0.0

    @given(st.lists(st.integers(0, 400), max_size=80), st.lists(st.integers(0, 400), max_size=80))
    @settings(max_examples=40)
    def test_merge_equals_folding_the_event_time_ordered_stream(self, a: list[int], b: list[int]) -> None:
        merged = _fold(sorted(a), window_s=120.0).merge(_fold(sorted(b), window_s=120.0))
        assert merged.snapshot() == _fold(sorted(a + b), window_s=120.0).snapshot()
        assert EventRate.from_dict(merged.to_dict()).snapshot() == merged.snapshot()

    @given(st.lists(st.integers(0, 400), min_size=1, max_size=80))
    @settings(max_examples=40)
    def test_window_counts_exactly_the_closed_slots_of_the_last_window(self, stream: list[int]) -> None:
        stream = sorted(stream)
        snap = _fold(stream, window_s=120.0).snapshot()
        head = stream[-1]
        assert snap.n_events == sum(1 for ts in stream if head - 120 < ts < head)

    def test_late_event_and_bad_count_raise(self) -> None:
        r = EventRate(allowed_lateness_s=2.0)
        r.update(ts_s=10.0)
        with pytest.raises(LateEventError):
            r.update(ts_s=7.0)
        with pytest.raises(InvalidInputError, match="count"):
            r.update(ts_s=10.0, count=-1)
        with pytest.raises(InvalidInputError, match="ts"):
            r.update(ts_s=math.nan)

    def test_window_must_tile_minutes(self) -> None:
        with pytest.raises(InvalidInputError, match="window_s"):
            EventRate(window_s=90.0)
