"""Output-length window and Kaplan-Meier survival with right-censoring."""

from __future__ import annotations

import itertools
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from estimators.survival import (
    DEFAULT_MAX_SURVIVAL_EDGES,
    InFlightAges,
    OutputLengthSample,
    OutputLengthWindow,
    fine_bin_edges_tokens,
    fine_survival_table,
    kaplan_meier,
    log_bin_edges_tokens,
    smoothed_survival_table,
    survival_table,
)
from schemas.errors import InvalidInputError, LateEventError

events = st.lists(
    st.tuples(st.integers(0, 50), st.integers(0, 40), st.booleans()), min_size=0, max_size=60
)  # (ts_s, output_tokens, censored)


def _fold(stream: list[tuple[float, int, bool]], **kw: float | int | None) -> OutputLengthWindow:
    w = OutputLengthWindow(**kw)  # type: ignore[arg-type]
    for ts, n, c in stream:
        w.update(ts_s=ts, output_tokens=n, censored=c)
    return w


class TestKaplanMeier:
    def test_hand_computed_example_with_censoring(self) -> None:
        """Lengths 3, 5+, 5, 7, 8+, 10 (+ = censored): S = 5/6, 2/3, 4/9, 0 at 3, 5, 7, 10."""
        sample = OutputLengthSample(
            lengths_tokens=(3, 5, 5, 7, 8, 10), censored=(False, True, False, False, True, False)
        )
        curve = kaplan_meier(sample)
        assert curve.tokens == (3, 5, 7, 10)
        assert curve.survival == pytest.approx((5 / 6, 2 / 3, 4 / 9, 0.0), abs=1e-15)
        assert curve.at(2) == 1.0
        assert curve.at(6) == pytest.approx(2 / 3)
        assert (curve.n_samples, curve.n_censored) == (6, 2)

    def test_without_censoring_equals_empirical_survival(self) -> None:
        lengths = (1, 2, 2, 4, 4, 4, 9)
        curve = kaplan_meier(OutputLengthSample(lengths_tokens=lengths, censored=(False,) * 7))
        for t in range(0, 11):
            assert curve.at(t) == pytest.approx(sum(x > t for x in lengths) / 7)

    def test_in_flight_requests_count_as_censored(self) -> None:
        base = OutputLengthSample(lengths_tokens=(2, 4), censored=(False, False))
        with_flight = base.with_in_flight([3])
        assert with_flight.n_censored == 1
        # at t=4 the risk set is {4} only: the in-flight request left it at 3 without an event
        assert kaplan_meier(with_flight).survival == pytest.approx((2 / 3, 0.0))

    def test_delayed_entry_keeps_a_request_out_of_the_risk_sets_below_its_entry(self) -> None:
        """Lengths 2, 4, 6, 5+ entering at 0, 3, 0, 3: the risk set at 2 holds the 2 and the 6 only (the
        others were observed from age 3 on), so S(2) = 1/2 (3/4 without the entries); at 4 it holds
        4, 5+ and 6: S = 1/3; then 0 at 6."""
        sample = OutputLengthSample(
            lengths_tokens=(2, 4, 6, 5), censored=(False, False, False, True), entry_tokens=(0, 3, 0, 3)
        )
        d, r = sample.event_and_risk_counts()
        assert list(r) == [2, 2, 2, 3, 3, 2, 1]
        assert list(d) == [0, 0, 1, 0, 1, 0, 1]
        curve = kaplan_meier(sample)
        assert curve.survival == pytest.approx((1 / 2, 1 / 3, 0.0))

    def test_an_entry_above_its_length_is_refused(self) -> None:
        with pytest.raises(InvalidInputError, match="entry_tokens"):
            OutputLengthSample(lengths_tokens=(3,), censored=(False,), entry_tokens=(4,))

    def test_log_binned_table_samples_the_step_function(self) -> None:
        sample = OutputLengthSample(
            lengths_tokens=(3, 5, 5, 7, 8, 10), censored=(False, True, False, False, True, False)
        )
        edges = log_bin_edges_tokens(max_tokens=16, bins_per_octave=1)
        assert edges == (0, 1, 2, 4, 8, 16)
        table = survival_table(kaplan_meier(sample), edges)
        assert table.survival == pytest.approx((1.0, 1.0, 1.0, 5 / 6, 4 / 9, 0.0))

    def test_fine_table_is_the_curve_at_every_event_length(self) -> None:
        """Lengths 3, 5+, 5, 7, 8+, 10: edges 0 and the event lengths 3, 5, 7, 10, so S between edges is the
        Kaplan-Meier curve itself (the log grid with 1 bin per octave had put the drop at 3 on edge 4)."""
        sample = OutputLengthSample(
            lengths_tokens=(3, 5, 5, 7, 8, 10), censored=(False, True, False, False, True, False)
        )
        curve = kaplan_meier(sample)
        table = fine_survival_table(curve, max_tokens=32_768)
        assert table.bin_edges_tokens == (0, 3, 5, 7, 10)
        assert table.survival == pytest.approx((1.0, 5 / 6, 2 / 3, 4 / 9, 0.0))
        assert (table.n_samples, table.n_censored) == (6, 2)

    def test_fine_edges_collapse_lengths_above_max_tokens_onto_it(self) -> None:
        assert fine_bin_edges_tokens([3, 40, 90], max_tokens=64) == (0, 3, 40, 64)

    @given(st.lists(st.integers(0, 40_000), max_size=2_000), st.integers(80, 700))
    @settings(max_examples=40)
    def test_fine_edges_stay_within_the_bound_and_keep_the_shortest_lengths(
        self, drops: list[int], max_edges: int
    ) -> None:
        """At most ``max_edges`` edges whatever the sample; when thinned, the log grid survives and every
        length kept is shorter than every non-grid length dropped."""
        edges = fine_bin_edges_tokens(drops, max_tokens=32_768, max_edges=max_edges)
        assert len(edges) <= max_edges
        assert edges[0] == 0
        assert all(b > a for a, b in itertools.pairwise(edges))
        wanted = {0} | {min(d, 32_768) for d in drops}
        if len(wanted) <= max_edges:
            assert set(edges) == wanted
        else:
            grid = set(log_bin_edges_tokens(max_tokens=32_768))
            assert grid <= set(edges)
            dropped = wanted - set(edges)
            kept = set(edges) - grid
            assert len(edges) == max_edges
            assert max(kept, default=-1) < min(dropped)

    def test_a_window_of_500_finishes_is_published_whole(self) -> None:
        """W = 500 finishes have at most 500 event lengths, within the default bound of 512 edges."""
        rng = random.Random(5)
        lengths = tuple(rng.randrange(1, 30_000) for _ in range(500))
        curve = kaplan_meier(OutputLengthSample(lengths_tokens=lengths, censored=(False,) * 500))
        table = fine_survival_table(curve, max_tokens=32_768)
        assert table.bin_edges_tokens == (0, *sorted(set(lengths)))
        assert len(table.bin_edges_tokens) <= DEFAULT_MAX_SURVIVAL_EDGES

    def test_fine_edges_refuse_a_bound_below_the_log_grid(self) -> None:
        with pytest.raises(InvalidInputError, match="max_edges"):
            fine_bin_edges_tokens([1, 2], max_tokens=32_768, max_edges=10)

    def test_smoothed_table_keeps_the_curve_on_the_log_grid_and_a_constant_hazard_inside_a_bin(self) -> None:
        """Lengths 3, 5+, 5, 7, 8+, 10 on a 1-bin-per-octave grid up to 16 would put the drops on 4, 8 and 16;
        the 4-per-octave grid holds 0..8, 10, 11, 13, 16, so at 9 (inside [8, 10)) the hazard is constant:
        S(9) = S(8) (S(10) / S(8))^(1/2) = (4/9) x 0 -> linear, since S(10) = 0: S(9) = 2/9."""
        sample = OutputLengthSample(
            lengths_tokens=(3, 5, 5, 7, 8, 10), censored=(False, True, False, False, True, False)
        )
        curve = kaplan_meier(sample)
        table = smoothed_survival_table(curve, max_tokens=16, max_edges=64)
        assert table.bin_edges_tokens == tuple(range(17))
        at = dict(zip(table.bin_edges_tokens, table.survival, strict=True))
        for edge in log_bin_edges_tokens(max_tokens=16):
            assert at[edge] == pytest.approx(curve.at(edge))
        assert at[9] == pytest.approx(2 / 9)
        assert at[12] == 0.0

    def test_smoothed_table_interpolates_geometrically_where_the_bin_end_is_positive(self) -> None:
        """Empirical lengths 1..100 once each: S(16) = 0.84 and S(19) = 0.81 are grid edges, so
        S(17) = 0.84 (0.81 / 0.84)^(1/3)."""
        curve = kaplan_meier(OutputLengthSample(lengths_tokens=tuple(range(1, 101)), censored=(False,) * 100))
        table = smoothed_survival_table(curve, max_tokens=32_768)
        at = dict(zip(table.bin_edges_tokens, table.survival, strict=True))
        assert at[17] == pytest.approx(0.84 * (0.81 / 0.84) ** (1 / 3))

    @pytest.mark.parametrize("max_edges", [64, 100, 512, 4096])
    def test_smoothed_table_is_dense_as_far_as_the_bound_allows(self, max_edges: int) -> None:
        """Every token up to D, then the log grid: exactly ``max_edges`` edges when the grid is shorter."""
        curve = kaplan_meier(OutputLengthSample(lengths_tokens=(3, 50, 900), censored=(False,) * 3))
        table = smoothed_survival_table(curve, max_tokens=32_768, max_edges=max_edges)
        edges = table.bin_edges_tokens
        assert len(edges) == max_edges
        dense = next(i for i, e in enumerate(edges) if e != i)
        assert set(edges[dense:]) <= set(log_bin_edges_tokens(max_tokens=32_768))
        assert all(b <= a for a, b in itertools.pairwise(table.survival))

    def test_table_refuses_unsorted_edges(self) -> None:
        curve = kaplan_meier(OutputLengthSample(lengths_tokens=(1,), censored=(False,)))
        with pytest.raises(InvalidInputError, match="strictly increasing"):
            survival_table(curve, [0, 4, 2])


class TestOutputLengthWindow:
    @given(events, st.integers(1, 20))
    @settings(max_examples=40)
    def test_count_window_keeps_exactly_the_last_w(self, stream: list[tuple[int, int, bool]], w: int) -> None:
        stream = sorted(stream)
        snap = _fold(stream, capacity=w).snapshot()
        tail = stream[-w:] if stream else []
        assert snap.lengths_tokens == tuple(n for _, n, _ in tail)
        assert snap.censored == tuple(c for _, _, c in tail)

    @given(events, st.integers(1, 30))
    @settings(max_examples=40)
    def test_time_window_keeps_exactly_the_last_t_seconds(self, stream: list[tuple[int, int, bool]], t: int) -> None:
        stream = sorted(stream)
        snap = _fold(stream, capacity=10_000, window_s=float(t)).snapshot()
        newest = stream[-1][0] if stream else 0
        assert snap.lengths_tokens == tuple(n for ts, n, _ in stream if ts >= newest - t)

    def test_after_an_eviction_entries_start_at_the_span_and_earlier_finishes_drop_out(self) -> None:
        """Capacity 3, finishes (length, step): (4, 2), (5, 2), (6, 3), (9, 5). The first is evicted, so the
        span is the steps after 2: the other finish at step 2 drops out; length 6 at step 3 was 5 old at
        step 2 and entered at 6; length 9 at step 5 was 6 old and entered at 7."""
        w = OutputLengthWindow(capacity=3)
        for ts, (n, step) in enumerate([(4, 2), (5, 2), (6, 3), (9, 5)]):
            w.update(ts_s=float(ts), output_tokens=n, censored=False, step=step)
        assert w.period_start_step == 2
        snap = w.snapshot()
        assert snap.lengths_tokens == (6, 9)
        assert snap.entry_tokens == (6, 7)

    @given(events)
    @settings(max_examples=30)
    def test_with_nothing_evicted_every_entry_age_is_zero(self, stream: list[tuple[int, int, bool]]) -> None:
        w = OutputLengthWindow(capacity=1_000)
        for step, (ts, n, c) in enumerate(sorted(stream)):
            w.update(ts_s=ts, output_tokens=n, censored=c, step=step)
        assert w.period_start_step is None
        assert w.snapshot().entry_tokens == ()

    @given(events)
    @settings(max_examples=30)
    def test_round_trips_through_to_dict(self, stream: list[tuple[int, int, bool]]) -> None:
        w = _fold(sorted(stream), capacity=7, window_s=9.0)
        back = OutputLengthWindow.from_dict(w.to_dict())
        assert back.to_dict() == w.to_dict()
        assert back.snapshot() == w.snapshot()

    def test_memory_stays_bounded_for_a_million_observations(self) -> None:
        w = OutputLengthWindow(capacity=500)
        for i in range(1_000_000):
            w.update(ts_s=i * 1e-3, output_tokens=i % 997, censored=i % 13 == 0)
        assert len(w) == 500

    @pytest.mark.parametrize("bad", [-1, 2.5, math.nan])
    def test_bad_length_raises(self, bad: float) -> None:
        with pytest.raises(InvalidInputError, match="output_tokens"):
            OutputLengthWindow().update(ts_s=0.0, output_tokens=bad, censored=False)  # type: ignore[arg-type]

    def test_nan_time_raises(self) -> None:
        with pytest.raises(InvalidInputError, match="ts must be finite"):
            OutputLengthWindow().update(ts_s=math.nan, output_tokens=3, censored=False)

    def test_event_beyond_allowed_lateness_raises(self) -> None:
        w = OutputLengthWindow(allowed_lateness_s=5.0)
        w.update(ts_s=100.0, output_tokens=3, censored=False)
        w.update(ts_s=96.0, output_tokens=3, censored=False)
        with pytest.raises(LateEventError) as info:
            w.update(ts_s=94.0, output_tokens=3, censored=False)
        assert info.value.watermark_s == 100.0

    def test_a_format_1_state_loads_without_steps(self) -> None:
        """States written before the finish step was kept: every entry enters at 0, as it did then."""
        state = {
            "kind": "output_length_window",
            "format": 1,
            "capacity": 2,
            "window_s": None,
            "allowed_lateness_s": None,
            "newest_ts_s": 3.0,
            "entries": [[2.0, 5, False], [3.0, 9, True]],
        }
        window = OutputLengthWindow.from_dict(state)
        window.update(ts_s=4.0, output_tokens=4, censored=False, step=7)
        assert window.period_start_step is None
        assert window.snapshot() == OutputLengthSample(lengths_tokens=(9, 4), censored=(True, False))

    def test_wrong_format_is_refused(self) -> None:
        state = OutputLengthWindow().to_dict() | {"format": 99}
        with pytest.raises(InvalidInputError, match="format"):
            OutputLengthWindow.from_dict(state)


class TestInFlightAges:
    def test_a_request_counts_from_age_one_and_gains_a_token_per_full_decode_step(self) -> None:
        """first_token, then the report of the step that produced it, then two decode steps: age 3."""
        ages = InFlightAges()
        ages.first_token("a")
        ages.step(num_decode_requests=0)
        assert ages.ages_tokens() == (1,)
        ages.step(num_decode_requests=1)
        ages.step(num_decode_requests=1)
        assert ages.ages_tokens() == (3,)

    def test_a_step_that_decoded_fewer_than_the_tracked_requests_adds_nothing(self) -> None:
        """A scheduler deferring decodes: the age stays a lower bound instead of overshooting."""
        ages = InFlightAges()
        for request_id in ("a", "b"):
            ages.first_token(request_id)
        ages.step(num_decode_requests=2)
        ages.step(num_decode_requests=1)
        assert ages.ages_tokens() == (1, 1)
        ages.step(num_decode_requests=5)
        assert ages.ages_tokens() == (2, 2)

    def test_finish_drops_and_preemption_freezes_at_the_reported_count(self) -> None:
        ages = InFlightAges()
        for request_id in ("a", "b", "c"):
            ages.first_token(request_id)
        ages.step(num_decode_requests=3)
        for _ in range(4):
            ages.step(num_decode_requests=3)
        ages.finished("a")
        ages.preempted("b", generated_tokens=5)
        ages.step(num_decode_requests=1)
        assert sorted(ages.ages_tokens()) == [5, 6]

    def test_capacity_evicts_the_oldest_request(self) -> None:
        ages = InFlightAges(capacity=2)
        for request_id in ("a", "b", "c"):
            ages.first_token(request_id)
            ages.step(num_decode_requests=3)
        assert len(ages) == 2
        assert ages.ages_tokens() == (2, 1)

    def test_to_dict_round_trip_continues_identically(self) -> None:
        ages = InFlightAges()
        ages.first_token("a")
        ages.step(num_decode_requests=0)
        ages.first_token("b")
        ages.preempted("c", generated_tokens=4)
        copy = InFlightAges.from_dict(ages.to_dict())
        for tracker in (ages, copy):
            tracker.step(num_decode_requests=2)
        assert copy.ages_tokens() == ages.ages_tokens() == (2, 1, 4)

    def test_negative_counts_raise(self) -> None:
        ages = InFlightAges()
        with pytest.raises(InvalidInputError):
            ages.step(num_decode_requests=-1)
        with pytest.raises(InvalidInputError):
            ages.preempted("a", generated_tokens=-2)


def _steady_engine(*, seed: int, slots: int, steps: int) -> tuple[OutputLengthWindow, InFlightAges]:
    """An engine that keeps ``slots`` requests running, each decoding one token per step, and starts a
    new one in each finished one's place; lengths 4, 40 or 400 tokens with probability 0.5, 0.3, 0.2,
    so S(t) = 1/2 on [4, 40) and 1/5 on [40, 400). The long requests are 85% of those running."""
    rng = random.Random(seed)
    window, ages = OutputLengthWindow(capacity=500), InFlightAges()
    ids = itertools.count()
    running = {str(next(ids)): [rng.choices((4, 40, 400), (5, 3, 2))[0], 0] for _ in range(slots)}
    for _ in range(steps):
        done = []
        for request_id, request in running.items():
            request[1] += 1
            if request[1] == 1:
                ages.first_token(request_id)
            if request[1] == request[0]:
                done.append(request_id)
        ages.step(num_decode_requests=len(running))
        for request_id in done:
            ages.finished(request_id)
            window.update(ts_s=0.0, output_tokens=running.pop(request_id)[0], censored=False, step=ages.ticks)
            running[str(next(ids))] = [rng.choices((4, 40, 400), (5, 3, 2))[0], 0]
    return window, ages


class TestPeriodEstimate:
    @pytest.mark.parametrize("seed", [1, 2, 3])
    def test_running_long_requests_enter_at_their_age_in_the_span_and_the_survival_is_unbiased(self, seed: int) -> None:
        """500 finishes span about 160 of the 2,000 steps while the 300 running requests began up to 400
        steps ago. Entering them at their age at the span's start recovers S; counting them from age 0
        (the estimate before delayed entry) puts S(64) near 0.45. Tolerance 0.06: three times the spread
        of S(4) over seeds 1-5 of this setup (0.49-0.54)."""
        window, ages = _steady_engine(seed=seed, slots=300, steps=2_000)
        finished = window.snapshot()
        curve = kaplan_meier(finished.with_in_flight(*ages.observed_since(window.period_start_step)))
        assert curve.at(4) == pytest.approx(0.5, abs=0.06)
        assert curve.at(64) == pytest.approx(0.2, abs=0.06)
        from_zero = OutputLengthSample(lengths_tokens=finished.lengths_tokens, censored=finished.censored)
        assert kaplan_meier(from_zero.with_in_flight(ages.ages_tokens())).at(64) > 0.35

    def test_entries_follow_each_request_back_to_the_span_start(self) -> None:
        """Span after step 3 of 5. a counts from step 0 (age 1 + 5 = 6 now): 4 tokens old at step 3,
        entered at 5. b's first token is pending: born inside the span, entered at 0. c was frozen at 5
        tokens at step 4: 4 old at step 3, entered at 5."""
        tracker = InFlightAges()
        tracker.first_token("a")
        tracker.step(num_decode_requests=0)
        tracker.first_token("c")
        for _ in range(4):
            tracker.step(num_decode_requests=2)
        tracker.preempted("c", generated_tokens=5)
        tracker.step(num_decode_requests=1)
        tracker.first_token("b")
        assert tracker.ticks == 5
        assert tracker.observed_since(3) == ((6, 1, 5), (5, 0, 5))
        assert tracker.observed_since(None) == ((6, 1, 5), (0, 0, 0))
