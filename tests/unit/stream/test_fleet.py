"""Fleet scope on closed slots: per-engine contributions, order-independent merge, late and silent engines."""

from __future__ import annotations

import itertools
from typing import ClassVar

from decide.specs import default_registry
from decide.wiring.fleetopt import fleetopt_inputs
from decide.wiring.summary import fleet_summary
from estimators import bucket_of
from fold.fleet import FleetAggregator, FleetSlot, SilenceRule
from schemas.estimates import FleetContribution, FleetJoin, FleetSilence, FleetSummary
from schemas.records import EstimateSnapshot
from services.replay.replay import replay_offline
from services.testing.models import changed
from services.testing.streams import synthetic_stream


def _contribution(engine: str, index: int, arrivals: int, lengths: list[int]) -> EstimateSnapshot:
    slot = FleetSlot(
        index=index,
        arrivals=arrivals,
        finished=len(lengths),
        prompt_tokens=sum(lengths) * 4 // 5,
        output_tokens=sum(lengths) - sum(lengths) * 4 // 5,
    )
    for length in lengths:
        slot.length_counts[bucket_of(length)] = slot.length_counts.get(bucket_of(length), 0) + 1
    return EstimateSnapshot(
        deployment="d",
        scope=engine,
        snapshot_id=f"sha256:{engine}{index}",
        version=index + 1,
        ts=float(index),
        trigger="fleetopt:contribution",
        offsets=[],
        estimates=slot.contribution(),
    )


def _silence(engine: str, engine_slot: int, fleet_slot: int) -> EstimateSnapshot:
    return EstimateSnapshot(
        deployment="d",
        scope="fleet",
        snapshot_id=f"sha256:silence-{engine}{engine_slot}",
        version=1,
        ts=float(fleet_slot),
        trigger="fleetopt:silence",
        estimates=FleetSilence(engine=engine, engine_slot=engine_slot, fleet_slot=fleet_slot, waited_s=60.0),
    )


def _index(snapshot: EstimateSnapshot) -> int:
    assert isinstance(snapshot.estimates, FleetContribution)
    return snapshot.estimates.slot_index


def _run(contributions: list[EstimateSnapshot]) -> list[FleetSummary]:
    aggregator = FleetAggregator(deployment="d", kind="fleetopt", slot_s=60.0, grace_slots=1)
    return [fleet_summary(s) for c in contributions for s in aggregator.add(c)]


class TestFleetAggregator:
    contributions: ClassVar[list[EstimateSnapshot]] = [
        _contribution(engine, index, arrivals=6 * (index + 1), lengths=[300 * (index + 1), 5000])
        for engine in ("a", "b", "c")
        for index in range(4)
    ]

    def test_a_slot_closes_only_when_every_engine_passed_it_and_the_grace(self) -> None:
        aggregator = FleetAggregator(deployment="d", kind="fleetopt", slot_s=60.0, grace_slots=1)
        assert aggregator.add(self.contributions[0]) == []  # a: slot 0, grace not yet passed
        closed = aggregator.add(self.contributions[1])  # a: slot 1 closes slot 0 (only a is known)
        assert [str(s.trigger) for s in closed] == ["fleetopt:fleet slot 0"]

    def test_merged_slots_do_not_depend_on_the_interleaving_of_engines(self) -> None:
        by_slot = sorted(self.contributions, key=lambda s: (_index(s), s.scope))
        expected = _run(by_slot)
        for order in itertools.islice(itertools.permutations(("a", "b", "c")), 6):
            interleaved = sorted(self.contributions, key=lambda s: (_index(s), order.index(s.scope)))
            assert _run(interleaved) == expected

    def test_the_fleet_window_sums_arrivals_and_lengths_of_all_engines(self) -> None:
        by_slot = sorted(self.contributions, key=lambda s: (_index(s), s.scope))
        last = _run(by_slot)[-1]
        assert last.slots == 3
        assert last.arrival_rate_per_s == (3 * (6 + 12 + 18)) / 180.0
        assert last.finished == 18
        assert last.length_cdf is not None
        cdf = {p.length_tokens: p.cdf_frac for p in last.length_cdf}
        assert cdf[4096] == 9 / 18
        assert (last.length_cdf[-1].length_tokens, last.length_cdf[-1].cdf_frac) == (5120, 1.0)  # (4608, 5120]
        assert last.engines == ["a", "b", "c"]

    def test_a_contribution_for_a_closed_slot_is_dropped_and_counted(self) -> None:
        aggregator = FleetAggregator(deployment="d", kind="fleetopt", slot_s=60.0, grace_slots=0)
        aggregator.add(_contribution("a", 0, 1, [100]))
        aggregator.add(_contribution("a", 1, 1, [100]))
        assert aggregator.add(_contribution("b", 0, 5, [100])) == []
        assert aggregator.late_contributions == 1

    def test_a_silent_engine_stops_holding_the_fleet_back(self) -> None:
        aggregator = FleetAggregator(deployment="d", kind="fleetopt", slot_s=60.0, silent_slots=2, grace_slots=0)
        aggregator.add(_contribution("b", 0, 1, [100]))
        closed = [s for i in range(5) for s in aggregator.add(_contribution("a", i, 1, [100]))]
        assert fleet_summary(closed[-1]).engines == ["a"]
        assert aggregator.closed_through == 4

    def test_state_round_trips(self) -> None:
        aggregator = FleetAggregator(deployment="d", kind="fleetopt", slot_s=60.0)
        for contribution in self.contributions[:5]:
            aggregator.add(contribution)
        copy = FleetAggregator.from_dict(aggregator.to_dict())
        rest = self.contributions[5:]
        assert [s.estimates for c in rest for s in copy.add(c)] == [
            s.estimates for c in rest for s in aggregator.add(c)
        ]


class TestFleetoptInputs:
    def test_inputs_come_from_the_fleet_window(self) -> None:
        stream = synthetic_stream(engines=2, requests=4000, seed=3)

        plane = replay_offline(stream, default_registry())
        fleet = [s for s in plane.snapshots if s.scope == "fleet"]
        assert fleet
        inputs = fleetopt_inputs(fleet[-1])
        assert inputs is not None
        assert inputs.cdf.frac[-1] == 1.0
        assert inputs.arrival_rate_per_s > 0
        assert [d.kind for d in plane.decisions].count("fleetopt") >= 1


class TestFleetAggregatorContract:
    def test_a_second_contribution_for_the_same_engine_and_slot_is_skipped_and_counted(self) -> None:
        aggregator = FleetAggregator(deployment="d", kind="fleetopt", slot_s=60.0, grace_slots=1)
        aggregator.add(_contribution("a", 0, 3, [100]))
        aggregator.add(_contribution("b", 0, 4, [100]))
        assert aggregator.add(_contribution("a", 0, 3, [100])) == []
        closed = aggregator.add(_contribution("a", 1, 1, [100])) + aggregator.add(_contribution("b", 1, 1, [100]))
        assert aggregator.add(_contribution("b", 0, 4, [100])) == []  # after its slot closed: still a duplicate
        assert aggregator.duplicate_contributions == 2
        assert aggregator.late_contributions == 0
        first = fleet_summary(closed[0])
        assert first.arrival_rate_per_s == 7 / 60.0
        assert first.duplicate_contributions == 1

    def test_a_silent_engine_is_named_in_the_fleet_snapshot_until_it_speaks_again(self) -> None:
        aggregator = FleetAggregator(deployment="d", kind="fleetopt", slot_s=60.0, silent_slots=2, grace_slots=0)
        aggregator.add(_contribution("b", 0, 1, [100]))
        closed = [s for i in range(5) for s in aggregator.add(_contribution("a", i, 1, [100]))]
        assert fleet_summary(closed[-1]).silent_engines == ["b"]
        back = aggregator.add(_contribution("b", 5, 1, [100]))
        assert back == []  # a has not closed slot 5 yet
        closed = aggregator.add(_contribution("a", 5, 1, [100]))
        assert fleet_summary(closed[-1]).silent_engines == []
        assert fleet_summary(closed[-1]).engines == ["a", "b"]

    def test_an_engine_idle_for_slots_still_advances_its_watermark_from_the_slot_it_entered(self) -> None:
        aggregator = FleetAggregator(deployment="d", kind="fleetopt", slot_s=60.0, grace_slots=0)
        aggregator.add(_contribution("a", 0, 1, [100]))
        aggregator.add(_contribution("b", 0, 1, [100]))
        idle_b = changed(_contribution("b", 1, 1, [100]), ts=4 * 60.0 + 1.0)  # b idle in slots 2 and 3
        aggregator.add(idle_b)
        closed = [s for i in (1, 2, 3) for s in aggregator.add(_contribution("a", i, 1, [100]))]
        assert [str(s.trigger) for s in closed] == [f"fleetopt:fleet slot {i}" for i in (1, 2, 3)]

    def test_the_input_share_is_read_on_a_one_percent_grid(self) -> None:
        plane = replay_offline(synthetic_stream(engines=2, requests=4000, seed=3), default_registry())
        fleet = [s for s in plane.snapshots if s.scope == "fleet" and fleet_summary(s).finished >= 50]
        shares = [inputs.input_frac for s in fleet if (inputs := fleetopt_inputs(s)) is not None]
        assert shares
        assert all(share == round(share, 2) for share in shares)


class TestFarClockQuarantine:
    """Event-time sanity from an engine's first contribution (the probe: a registered ghost 70 slots ahead)."""

    REAL: ClassVar[list[str]] = [f"eng-{i}" for i in range(7)]

    @staticmethod
    def _aggregator() -> FleetAggregator:
        return FleetAggregator(deployment="d", kind="fleetopt", slot_s=10.0, grace_slots=1)

    def _real(self, slots: range) -> list[EstimateSnapshot]:
        return [
            changed(_contribution(engine, index, 3, [400]), ts=10.0 * index + 5.0)
            for index in slots
            for engine in self.REAL
        ]

    @staticmethod
    def _ghost(index: int) -> EstimateSnapshot:
        return changed(_contribution("ghost", index, 50, [9000]), ts=10.0 * index + 5.0)

    def test_a_new_engine_far_ahead_is_quarantined_and_cannot_move_the_fleets_slots(self) -> None:
        honest, probed = self._aggregator(), self._aggregator()
        without = [s for c in self._real(range(20)) for s in honest.add(c)]
        stream = [*self._real(range(5)), self._ghost(75), self._ghost(76), *self._real(range(5, 20))]
        with_ghost = [s for c in stream for s in probed.add(c)]
        assert [s.trigger for s in with_ghost] == [s.trigger for s in without]
        last = fleet_summary(with_ghost[-1])
        assert (last.engines, last.silent_engines, last.late_contributions) == (self.REAL, [], 0)
        assert (last.quarantined_engines, last.quarantined_contributions) == (["ghost"], 2)
        assert last.arrival_rate_per_s == fleet_summary(without[-1]).arrival_rate_per_s

    def test_a_quarantined_engine_is_trusted_once_the_fleet_catches_up_with_its_clock(self) -> None:
        aggregator = self._aggregator()
        for contribution in [*self._real(range(3)), self._ghost(60)]:
            aggregator.add(contribution)
        assert aggregator.quarantined == {"ghost": 60}
        for contribution in self._real(range(3, 40)):
            aggregator.add(contribution)
        aggregator.add(self._ghost(41))
        assert (aggregator.quarantined, aggregator.watermarks["ghost"]) == ({}, 41)
        assert (aggregator.late_contributions, aggregator.quarantined_contributions) == (0, 1)

    def test_a_fleet_whose_clocks_jumped_together_is_followed_once_half_of_it_agrees(self) -> None:
        aggregator = self._aggregator()
        for contribution in self._real(range(3)):
            aggregator.add(contribution)
        jumped = [changed(_contribution(engine, 500, 1, [100]), ts=5005.0) for engine in self.REAL[:4]]
        for contribution in jumped[:3]:
            aggregator.add(contribution)
        assert sorted(aggregator.quarantined) == self.REAL[:3]
        aggregator.add(jumped[3])
        assert aggregator.quarantined == {}
        assert [aggregator.watermarks[e] for e in self.REAL[:4]] == [500, 500, 500, 500]

    def test_quarantine_round_trips_with_the_state(self) -> None:
        aggregator = self._aggregator()
        for contribution in [*self._real(range(3)), self._ghost(60)]:
            aggregator.add(contribution)
        copy = FleetAggregator.from_dict(aggregator.to_dict())
        assert (copy.quarantined, copy.quarantined_contributions) == ({"ghost": 60}, 1)

    def test_the_ghost_is_quarantined_the_same_whether_it_comes_first_or_last(self) -> None:
        """The fleet partition's order may put the ghost first (Apache Kafka did): the outcome is the same.

        The merged per-slot data of the real engines, the slots closed, and the engines live, silent
        and quarantined at the end match. What cannot match: the fleet snapshots closed before the
        ghost's contribution arrives in the ghost-last order do not name it yet (quarantined_engines,
        quarantined_contributions), and so their snapshot ids differ.
        """
        real, ghost = self._real(range(10)), self._ghost(70)
        outcomes = []
        for order in ([*real, ghost], [ghost, *real]):
            aggregator = self._aggregator()
            closed = [fleet_summary(s) for c in order for s in aggregator.add(c)]
            merged = [s.model_dump(exclude={"quarantined_engines", "quarantined_contributions"}) for s in closed]
            outcomes.append((merged, aggregator.quarantined, aggregator.quarantined_contributions))
            assert (aggregator.late_contributions, closed[-1].engines, closed[-1].silent_engines) == (0, self.REAL, [])
        assert outcomes[0] == outcomes[1]
        assert outcomes[0][1:] == ({"ghost": 70}, 1)
        assert len(outcomes[0][0]) == 9

    def test_one_engine_against_one_trusts_the_lower_clock_in_either_order(self) -> None:
        """Nothing tells which of two lone clocks is wrong; trusting the one ahead would close slots for good."""
        early = changed(_contribution("a", 2, 1, [100]), ts=25.0)
        far = changed(_contribution("b", 40, 1, [100]), ts=405.0)
        for order in ([early, far], [far, early]):
            aggregator = self._aggregator()
            assert [s for c in order for s in aggregator.add(c)] == []
            assert (aggregator.watermarks, aggregator.quarantined) == ({"a": 2}, {"b": 40})
            assert (aggregator.quarantined_contributions, aggregator.late_contributions) == (1, 0)

    def test_a_state_of_the_previous_format_loads_and_goes_on_alike(self) -> None:
        """Format 1 kept neither the pending slots' per-engine parts nor the first closed slot."""
        stream = [*self._real(range(4)), self._ghost(60), *self._real(range(4, 12))]
        aggregator = self._aggregator()
        for contribution in stream[:32]:
            aggregator.add(contribution)
        state = aggregator.to_dict()
        assert state["first_closed"] == 0
        assert all(slot["parts"] for slot in state["pending"].values())
        previous = {k: v for k, v in state.items() if k != "first_closed"} | {"format": 1}
        previous["pending"] = {
            k: {f: v for f, v in slot.items() if f != "parts"} for k, slot in state["pending"].items()
        }
        loaded = FleetAggregator.from_dict(previous)
        assert (loaded.first_closed, loaded.quarantined) == (0, {"ghost": 60})
        rest = stream[32:]
        expected = [s.estimates for c in rest for s in aggregator.add(c)]
        assert [s.estimates for c in rest for s in loaded.add(c)] == expected


class TestDeclaredSilence:
    """The live rule: an overdue engine holds the fleet back until a declaration read from the log silences it."""

    in_step: ClassVar[list[tuple[str, int]]] = [(e, i) for i in range(10) for e in ("a", "b")]
    skewed: ClassVar[list[tuple[str, int]]] = [  # b's reader stops after slot 0 and comes back 6 slots later
        ("a", 0),
        ("b", 0),
        *[("a", i) for i in range(1, 7)],
        *[p for i in range(7, 10) for p in (("b", i - 6), ("a", i))],
        *[("b", i) for i in range(4, 10)],
    ]

    @staticmethod
    def _aggregator(silence: SilenceRule = "declared") -> FleetAggregator:
        return FleetAggregator(deployment="d", kind="fleetopt", slot_s=60.0, silent_slots=2, silence=silence)

    @staticmethod
    def _fleet(order: list[tuple[str, int]], aggregator: FleetAggregator) -> list[FleetSummary]:
        return [
            fleet_summary(s)
            for engine, index in order
            for s in aggregator.add(_contribution(engine, index, arrivals=index + 1, lengths=[100 * (index + 1)]))
        ]

    def test_a_reader_far_behind_for_one_engine_changes_no_fleet_slot(self) -> None:
        expected = self._fleet(self.in_step, self._aggregator())
        assert self._fleet(self.skewed, self._aggregator()) == expected
        assert len(expected) == 9
        assert all(summary.engines == ["a", "b"] and summary.late_contributions == 0 for summary in expected)

    def test_the_same_skew_under_the_lag_rule_drops_the_late_engine(self) -> None:
        """What the live service did before: b was found silent and its slots dropped as late."""
        lag = self._aggregator("lag")
        assert self._fleet(self.skewed, lag) != self._fleet(self.in_step, self._aggregator("lag"))
        assert lag.late_contributions > 0

    def test_an_overdue_engine_is_named_and_holds_the_fleet_until_declared_silent(self) -> None:
        aggregator = self._aggregator()
        self._fleet(self.skewed[:8], aggregator)
        assert aggregator.closed_through == 0
        assert aggregator.overdue() == {"b": 0}
        closed = aggregator.add(_silence("b", 0, 6))
        assert [fleet_summary(s).silent_engines for s in closed] == [["b"]] * 5
        assert aggregator.closed_through == 5
        assert aggregator.overdue() == {}

    def test_a_declaration_the_engine_outran_is_ignored(self) -> None:
        aggregator = self._aggregator()
        self._fleet(self.skewed[:9], aggregator)
        assert aggregator.add(_silence("b", 0, 6)) == []
        assert aggregator.silenced == {}
        assert aggregator.overdue() == {"b": 1}

    def test_a_silenced_engine_holds_the_fleet_again_once_it_catches_up(self) -> None:
        aggregator = self._aggregator()
        self._fleet(self.skewed[:8], aggregator)
        aggregator.add(_silence("b", 0, 6))
        self._fleet([("b", i) for i in range(1, 6)], aggregator)
        assert (aggregator.late_contributions, aggregator.silenced) == (5, {})
        self._fleet([("b", 6), ("a", 7), ("b", 7), ("a", 8)], aggregator)
        assert aggregator.closed_through == 7

    def test_the_lag_rule_ignores_declarations(self) -> None:
        aggregator = self._aggregator("lag")
        self._fleet(self.skewed[:8], aggregator)
        assert aggregator.add(_silence("b", 0, 6)) == []
        assert aggregator.overdue() == {}

    def test_declared_silence_survives_the_state_round_trip(self) -> None:
        aggregator = self._aggregator()
        self._fleet(self.skewed[:8], aggregator)
        aggregator.add(_silence("b", 0, 6))
        restored = FleetAggregator.from_dict(aggregator.to_dict(), silence="declared")
        assert restored.silenced == {"b": 0}
        assert restored.to_dict() == aggregator.to_dict()


def _join(engine: str, slot: int) -> EstimateSnapshot:
    return EstimateSnapshot(
        deployment="d",
        scope=engine,
        snapshot_id=f"sha256:join-{engine}",
        version=slot + 1,
        ts=60.0 * slot,
        trigger="fleetopt:join",
        estimates=FleetJoin(slot_index=slot),
    )


class TestFleetJoin:
    """An engine is waited for from its first event, not from its first closed slot."""

    def test_a_joined_engine_holds_its_first_slot_until_it_contributes(self) -> None:
        aggregator = FleetAggregator(deployment="d", kind="fleetopt", slot_s=60.0, grace_slots=1, silence="declared")
        assert aggregator.add(_join("a", 0)) == []
        assert aggregator.add(_join("b", 0)) == []
        closed = [s for i in range(4) for s in aggregator.add(_contribution("a", i, 1, [100]))]
        assert closed == []
        assert aggregator.watermarks == {"a": 3, "b": -1}
        closed = aggregator.add(_contribution("b", 0, 5, [200]))
        assert [fleet_summary(s).engines for s in closed] == [["a", "b"]]
        assert aggregator.late_contributions == 0

    def test_without_its_join_the_first_slots_closed_without_the_engine(self) -> None:
        """What a processor that died before releasing b's first slot did to the fleet."""
        aggregator = FleetAggregator(deployment="d", kind="fleetopt", slot_s=60.0, grace_slots=1, silence="declared")
        for i in range(4):
            aggregator.add(_contribution("a", i, 1, [100]))
        aggregator.add(_contribution("b", 0, 5, [200]))
        assert aggregator.late_contributions == 1

    def test_a_join_of_a_known_engine_changes_nothing(self) -> None:
        aggregator = FleetAggregator(deployment="d", kind="fleetopt", slot_s=60.0, grace_slots=1)
        for i in range(3):
            aggregator.add(_contribution("a", i, 1, [100]))
        before = aggregator.to_dict()
        assert aggregator.add(_join("a", 0)) == []
        assert aggregator.to_dict() == before

    def test_the_processor_sends_each_engines_join_before_its_first_contribution(self) -> None:
        events = synthetic_stream(engines=2, requests=400, deployment="d")
        offline = replay_offline(events, default_registry(fleet_slot_s=5.0))
        fleet = [s for s in offline.snapshots if s.trigger.kind == "fleetopt" and s.scope != "fleet"]
        firsts = {}
        for snapshot in fleet:
            firsts.setdefault(snapshot.scope, snapshot.estimates.summary_type)
        assert firsts == {"eng-0": "fleet_join", "eng-1": "fleet_join"}
        joins = [s.scope for s in fleet if isinstance(s.estimates, FleetJoin)]
        assert sorted(joins) == ["eng-0", "eng-1"]
