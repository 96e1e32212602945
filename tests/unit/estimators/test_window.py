"""Slot ring and count-window mean."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from estimators.window import CountWindowMean, SlotRing
from schemas.errors import LateEventError


class TestSlotRing:
    def test_live_positions_cover_the_last_n_slots(self) -> None:
        ring = SlotRing(slot_s=10.0, n_slots=3)
        for ts in (0.0, 15.0, 25.0, 38.0):
            ring.place(ts)
        assert [ring.slot_id(p) for p in ring.live_positions()] == [1, 2, 3]
        assert [ring.slot_id(p) for p in ring.live_positions(closed_only=True)] == [1, 2]
        assert SlotRing.from_dict(ring.to_dict()).to_dict() == ring.to_dict()

    def test_slot_that_left_the_ring_is_late(self) -> None:
        ring = SlotRing(slot_s=10.0, n_slots=3)
        ring.place(100.0)
        with pytest.raises(LateEventError):
            ring.place(70.0)


class TestCountWindowMean:
    @given(st.lists(st.integers(0, 10_000), max_size=100), st.integers(1, 20))
    @settings(max_examples=40)
    def test_mean_of_exactly_the_last_w(self, xs: list[int], w: int) -> None:
        m = CountWindowMean(capacity=w)
        for x in xs:
            m.update(x)
        tail = xs[-w:]
        assert m.snapshot() == (pytest.approx(sum(tail) / len(tail)) if tail else None)
        assert CountWindowMean.from_dict(m.to_dict()).values() == m.values()
