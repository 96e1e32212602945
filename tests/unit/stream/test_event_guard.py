"""Each engine's guard: duplicates skipped, seq gaps and restarts counted, events out of time refused.

The guard lives in the engine's folded state, so the checks are run through the fold itself and
through a state round trip (what a restarted processor resumes from).
"""

from __future__ import annotations

import bisect
import json

import pytest

from decide.specs import default_registry
from fold.engine_estimates import EngineEstimates
from fold.event_guard import Admission, EventGuard, GuardLimits
from fold.folder import Folder
from schemas.engines import EngineRegistered, Heartbeat
from schemas.errors import FutureEventError, InvalidInputError, LateEventError
from schemas.events import Event
from schemas.names import RecordPosition
from schemas.records import DecisionRecord, EstimateSnapshot
from schemas.requests import RequestArrived
from services.replay.offline import OfflineControlPlane
from services.testing.streams import long_requests_still_running, synthetic_stream

AT = RecordPosition("t", 0, 0)
GUARD_COUNTS = {"duplicate_events", "seq_gaps", "seq_missing_events", "restarts"}


def _fold(folder: Folder, events: list[Event]) -> list[EstimateSnapshot]:
    snapshots: list[EstimateSnapshot] = []
    for offset, event in enumerate(events):
        snapshots.extend(folder.fold(event, RecordPosition("t", 0, offset)))
    return snapshots


def _estimates(snapshots: list[EstimateSnapshot]) -> list[dict[str, object]]:
    """What each snapshot says, less the guard's own counts (and the content hash that covers them)."""
    return [
        {"scope": s.scope, "version": s.version, "ts": s.ts, "trigger": s.trigger}
        | s.estimates.model_dump(exclude=GUARD_COUNTS)
        for s in snapshots
    ]


def _positionless(snapshots: list[EstimateSnapshot]) -> list[dict[str, object]]:
    """The snapshots less the log positions they were taken at (the refused event took one)."""
    return [s.model_dump(exclude={"offsets"}) for s in snapshots]


def _decided(record: DecisionRecord) -> dict[str, object]:
    """A decision less the log positions of its inputs."""
    return record.model_dump(exclude={"document": {"inputs"}})


def _heartbeat(engine: str, *, ts: float, seq: int, epoch: int = 0, event_id: str | None = None) -> Heartbeat:
    return Heartbeat(
        event_id=event_id or f"hb-{engine}-{epoch}-{seq}",
        ts=ts,
        deployment="dep",
        engine_id=engine,
        seq=seq,
        source_epoch=epoch,
        num_running=0,
        num_waiting=0,
    )


class TestDuplicates:
    def test_every_tenth_event_sent_twice_folds_as_once_and_is_counted(self) -> None:
        events = synthetic_stream(engines=2, requests=300)
        doubled: list[Event] = []
        for i, event in enumerate(events):
            doubled.append(event)
            if i % 10 == 0:
                doubled.append(event)
        clean, folder = Folder("dep", default_registry()), Folder("dep", default_registry())
        expected = _fold(clean, events)
        got = _fold(folder, doubled)
        assert _estimates(got) == _estimates(expected)
        duplicates = sum(folder.engines[e].summary().duplicate_events for e in folder.engines)
        assert duplicates == len(doubled) - len(events)

    def test_a_batch_retried_after_a_processor_restart_is_skipped_by_the_resumed_state(self) -> None:
        """The producer's retry lands after the processor committed and restarted: the ids are in the state."""
        events = synthetic_stream(engines=1, requests=300)
        whole = Folder("dep", default_registry())
        expected = _fold(whole, events)
        first = Folder("dep", default_registry())
        snapshots = _fold(first, events[:400])
        second = Folder("dep", default_registry())
        for engine in first.engines:
            second.load(engine, first.state_json(engine))
        retried = events[360:400] + events[400:]
        snapshots += _fold(second, retried)
        assert _estimates(snapshots) == _estimates(expected)
        assert second.engines["eng-0"].summary().duplicate_events == 40

    def test_the_window_is_bounded_by_count(self) -> None:
        folder = Folder("dep", default_registry(), limits=GuardLimits(dedup_window=8))
        beats = [_heartbeat("eng-0", ts=float(i), seq=i) for i in range(20)]
        _fold(folder, beats)
        assert folder.admit(beats[15], AT).duplicate
        assert not folder.admit(beats[5], AT).duplicate
        guard = folder.engines["eng-0"].guard
        assert len(guard.to_dict()["ids"]) == 8

    def test_a_repeated_event_id_is_a_duplicate_whatever_its_seq(self) -> None:
        folder = Folder("dep", default_registry())
        folder.fold(_heartbeat("eng-0", ts=1.0, seq=1, event_id="same"), RecordPosition("t", 0, 0))
        for seq in range(2, 502):
            assert folder.admit(_heartbeat("eng-0", ts=1.0, seq=seq, event_id="same"), AT).duplicate
        assert folder.engines["eng-0"].summary().duplicate_events == 500
        assert folder.engines["eng-0"].events_folded == 1


class TestSeq:
    def test_a_gap_is_counted_with_the_events_it_lost(self) -> None:
        events = synthetic_stream(engines=1, requests=100)
        kept = events[:50] + events[53:80] + events[81:]
        folder = Folder("dep", default_registry())
        _fold(folder, kept)
        summary = folder.engines["eng-0"].summary()
        assert (summary.seq_gaps, summary.seq_missing_events, summary.restarts) == (2, 4, 0)

    def test_an_unbroken_stream_has_no_gap(self) -> None:
        folder = Folder("dep", default_registry())
        _fold(folder, synthetic_stream(engines=2, requests=200))
        assert all(folder.engines[e].summary().seq_gaps == 0 for e in folder.engines)

    def test_a_restart_censors_the_old_generations_running_requests_and_finishes_none(self) -> None:
        """20 requests are running at 61 tokens when the engine restarts (epoch 0 -> 1, seq back to 0)."""
        estimates = EngineEstimates("eng-0")
        events = long_requests_still_running()
        for event in events:
            estimates.admit(event)
            estimates.fold(event)
        before = estimates.summary()
        assert (before.in_flight_censored, before.output_samples, before.completions_total) == (20, 20, 20)
        restart = _heartbeat("eng-0", ts=events[-1].ts + 1.0, seq=0, epoch=1)
        admission = estimates.admit(restart)
        estimates.fold(restart)
        after = estimates.summary()
        assert admission.restart
        assert after.restarts == 1
        assert after.seq_gaps == 0
        assert after.in_flight_censored == 0
        assert after.output_samples == 40
        assert after.completions_total == 20
        assert after.mu_o_tokens == before.mu_o_tokens
        assert after.survival is not None
        assert (after.survival.n_samples, after.survival.n_censored) == (40, 20)
        edges, fracs = after.survival.bin_edges_tokens, after.survival.survival_frac
        assert fracs[bisect.bisect_right(edges, 32) - 1] == pytest.approx(0.5)  # S(32) of the step function

    def test_an_event_of_the_old_generation_after_a_restart_is_refused(self) -> None:
        folder = Folder("dep", default_registry())
        _fold(folder, [_heartbeat("eng-0", ts=1.0, seq=5), _heartbeat("eng-0", ts=2.0, seq=0, epoch=7)])
        state = folder.engines["eng-0"].to_dict()
        with pytest.raises(InvalidInputError) as refused:
            folder.fold(_heartbeat("eng-0", ts=2.5, seq=6), RecordPosition("t", 0, 2))
        assert refused.value.code == "stale_epoch"
        assert refused.value.field == "source_epoch"
        assert folder.engines["eng-0"].to_dict() == state

    def test_an_old_recorded_stream_without_epochs_is_one_generation(self) -> None:
        folder = Folder("dep", default_registry())
        _fold(folder, synthetic_stream(engines=1, requests=50))
        assert folder.engines["eng-0"].guard.epoch == 0
        assert folder.engines["eng-0"].summary().restarts == 0


class TestEventTime:
    def test_one_far_future_event_moves_no_estimate_trigger_or_fleet_slot(self) -> None:
        """A request.arrived at event time +700 s mid-stream: the same snapshots, fleet snapshots,
        decisions and engine states as the stream without it, and it is refused as ahead."""
        events = synthetic_stream(engines=2, requests=400)
        middle = events[300]
        future = RequestArrived(
            event_id="from-the-future",
            ts=middle.ts + 700.0,
            deployment="dep",
            engine_id=middle.engine_id,
            seq=10_000,
            request_id="r-future",
            prompt_tokens=100,
            max_tokens=100,
            tier="free",
        )
        clean = OfflineControlPlane("dep", default_registry(fleet_slot_s=5.0))
        hit = OfflineControlPlane("dep", default_registry(fleet_slot_s=5.0))
        for event in events:
            clean.publish(event)
        for event in [*events[:301], future, *events[301:]]:
            hit.publish(event)
        assert hit.refused == {"event_time_ahead": 1}
        assert _positionless(hit.snapshots) == _positionless(clean.snapshots)
        assert any(s.scope == "fleet" for s in clean.snapshots)
        assert clean.decisions
        assert [_decided(d) for d in hit.decisions] == [_decided(d) for d in clean.decisions]
        assert {e: hit.folder.engines[e].to_dict() for e in hit.folder.engines} == {
            e: clean.folder.engines[e].to_dict() for e in clean.folder.engines
        }

    def test_the_refusal_names_the_bound_and_the_watermark(self) -> None:
        folder = Folder("dep", default_registry())
        folder.fold(_heartbeat("eng-0", ts=100.0, seq=0), RecordPosition("t", 0, 0))
        with pytest.raises(FutureEventError) as ahead:
            folder.admit(_heartbeat("eng-0", ts=800.0, seq=1), AT)
        refused = ahead.value
        assert (refused.code, refused.watermark_s, refused.allowed_lead_s) == ("event_time_ahead", 100.0, 300.0)
        assert "300.0 s ahead of the watermark 100.0" in str(ahead.value)

    def test_an_event_too_far_behind_is_refused(self) -> None:
        folder = Folder("dep", default_registry(), limits=GuardLimits(max_behind_s=5.0))
        _fold(folder, [_heartbeat("eng-0", ts=10.0 + i, seq=i) for i in range(5)])
        with pytest.raises(LateEventError) as behind:
            folder.admit(_heartbeat("eng-0", ts=8.0, seq=5), AT)
        assert behind.value.code == "event_time_behind"
        assert folder.admit(_heartbeat("eng-0", ts=10.0, seq=6), AT).duplicate is False

    def test_a_clock_that_really_jumped_is_followed_after_the_reanchor_count(self) -> None:
        folder = Folder("dep", default_registry(), limits=GuardLimits(reanchor_after=3))
        folder.fold(_heartbeat("eng-0", ts=10.0, seq=0), RecordPosition("t", 0, 0))
        jumped = [_heartbeat("eng-0", ts=5000.0 + i, seq=1 + i) for i in range(3)]
        for event in jumped[:2]:
            with pytest.raises(FutureEventError):
                folder.admit(event, AT)
        assert not folder.admit(jumped[2], AT).duplicate
        assert folder.engines["eng-0"].guard.watermark_s == 5002.0
        assert folder.engines["eng-0"].summary().seq_missing_events == 2

    def test_an_in_bounds_event_between_resets_the_reanchor_count(self) -> None:
        folder = Folder("dep", default_registry(), limits=GuardLimits(reanchor_after=2))
        folder.fold(_heartbeat("eng-0", ts=10.0, seq=0), RecordPosition("t", 0, 0))
        for seq in range(1, 7, 2):
            with pytest.raises(FutureEventError):
                folder.admit(_heartbeat("eng-0", ts=5000.0, seq=seq), AT)
            folder.admit(_heartbeat("eng-0", ts=11.0, seq=seq + 1), AT)
        assert folder.engines["eng-0"].guard.watermark_s == 11.0

    def test_a_restart_anchors_the_watermark_afresh(self) -> None:
        folder = Folder("dep", default_registry())
        folder.fold(_heartbeat("eng-0", ts=10.0, seq=0), RecordPosition("t", 0, 0))
        assert folder.admit(_heartbeat("eng-0", ts=9000.0, seq=0, epoch=1), AT).restart
        assert folder.engines["eng-0"].guard.watermark_s == 9000.0


def _registered(*, seq: int, epoch: int, dp_rank: int | None, dp_size: int = 2) -> EngineRegistered:
    return EngineRegistered(
        event_id=f"reg-{dp_rank}-{epoch}-{seq}",
        ts=1.0,
        deployment="dep",
        engine_id="eng-dp",
        dp_rank=dp_rank,
        seq=seq,
        source_epoch=epoch,
        model="tiny",
        gpu="cpu",
        max_num_seqs=16,
        max_num_batched_tokens=1024,
        max_model_len=2048,
        kv_blocks_total=200,
        block_size_tokens=16,
        dp_size=dp_size,
    )


def _rank_beat(*, rank: int, seq: int, epoch: int) -> Heartbeat:
    return Heartbeat(
        event_id=f"hb-{rank}-{epoch}-{seq}",
        ts=2.0 + seq,
        deployment="dep",
        engine_id="eng-dp",
        dp_rank=rank,
        seq=seq,
        source_epoch=epoch,
        num_running=0,
        num_waiting=0,
    )


class TestRankProducers:
    def test_ranks_that_register_with_their_rank_each_keep_their_own_seq_and_epoch(self) -> None:
        guard = EventGuard()
        guard.admit(_registered(seq=0, epoch=500, dp_rank=0))
        guard.admit(_registered(seq=0, epoch=499, dp_rank=1))
        for seq in (1, 2):
            for rank, epoch in ((0, 500), (1, 499)):
                assert guard.admit(_rank_beat(rank=rank, seq=seq, epoch=epoch)) == Admission()
        assert (guard.rank_producers, guard.seq_gaps, guard.restarts) == (True, 0, 0)

    def test_one_ranks_restart_is_counted_once_and_leaves_the_other_rank_alone(self) -> None:
        guard = EventGuard()
        guard.admit(_registered(seq=0, epoch=500, dp_rank=0))
        guard.admit(_registered(seq=0, epoch=500, dp_rank=1))
        assert guard.admit(_registered(seq=0, epoch=900, dp_rank=1)).restart
        assert guard.admit(_rank_beat(rank=0, seq=1, epoch=500)) == Admission()
        with pytest.raises(InvalidInputError, match="source_epoch 500"):
            guard.admit(_rank_beat(rank=1, seq=1, epoch=500))
        assert (guard.restarts, guard.epoch) == (1, 900)

    def test_a_dp_engine_registered_without_a_rank_is_one_producer(self) -> None:
        """The simulator's DP engine stamps ranks on some events, all from one ``seq``."""
        guard = EventGuard()
        guard.admit(_registered(seq=0, epoch=7, dp_rank=None))
        guard.admit(_rank_beat(rank=0, seq=1, epoch=7))
        assert guard.admit(_rank_beat(rank=1, seq=3, epoch=7)) == Admission(seq_missing=1)
        assert (guard.rank_producers, guard.seq_gaps) == (False, 1)

    def test_the_producers_round_trip_and_a_format_1_state_is_one_producer(self) -> None:
        guard = EventGuard()
        guard.admit(_registered(seq=0, epoch=500, dp_rank=0))
        guard.admit(_registered(seq=0, epoch=499, dp_rank=1))
        data = json.loads(json.dumps(guard.to_dict()))
        assert EventGuard.from_dict(data).to_dict() == guard.to_dict()
        old = {k: v for k, v in data.items() if k not in {"producers", "rank_producers"}}
        old |= {"format": 1, "epoch": 499, "max_seq": 4}
        loaded = EventGuard.from_dict(old)
        assert (loaded.rank_producers, loaded.producers) == (False, {None: (499, 4)})


class TestState:
    def test_the_guard_round_trips_and_a_smaller_window_keeps_the_newest_ids(self) -> None:
        guard = EventGuard()
        for i in range(30):
            guard.admit(_heartbeat("eng-0", ts=float(i), seq=i if i != 20 else 25))
        data = json.loads(json.dumps(guard.to_dict()))
        assert EventGuard.from_dict(data).to_dict() == guard.to_dict()
        small = EventGuard.from_dict(data, GuardLimits(dedup_window=4))
        assert small.to_dict()["ids"] == guard.to_dict()["ids"][-4:]
        assert (small.seq_gaps, small.seq_missing) == (1, 5)

    def test_a_state_stored_before_the_guard_loads_with_an_empty_one(self) -> None:
        estimates = EngineEstimates("eng-0")
        for event in synthetic_stream(engines=1, requests=20):
            estimates.admit(event)
            estimates.fold(event)
        stored = estimates.to_dict()
        del stored["guard"]
        stored["format"] = 2
        loaded = EngineEstimates.from_dict(json.loads(json.dumps(stored)))
        assert loaded.guard.epoch is None
        assert loaded.summary().model_dump(exclude=GUARD_COUNTS) == estimates.summary().model_dump(exclude=GUARD_COUNTS)
