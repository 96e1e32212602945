"""The fold: per-engine estimates, trigger positions, snapshots, and state round trips."""

from __future__ import annotations

import itertools
import json

from schemas.engines import EngineRegistered
from schemas.policy_docs.base import SourceOffset
from services.policy.specs import default_registry
from services.stream.estimates import EngineEstimates
from services.stream.fold import Folder
from tests.unit.stream.synthetic import synthetic_stream


def _fold_all(folder: Folder, events: list) -> list:
    snapshots = []
    for offset, event in enumerate(events):
        snapshots.extend(folder.fold(event, SourceOffset(topic="t", partition=0, offset=offset)))
    return snapshots


class TestFolder:
    def test_ebplus_snapshot_fires_at_every_hundredth_completion_of_an_engine(self) -> None:
        events = synthetic_stream(engines=1, requests=250)
        folder = Folder("dep", default_registry())
        ebplus = [s for s in _fold_all(folder, events) if s.trigger.startswith("ebplus:")]
        assert [s.estimates["completions_total"] for s in ebplus] == [100, 200]
        assert [s.version for s in ebplus] == sorted({s.version for s in ebplus})

    def test_engine_that_declares_what_it_obeys_gets_snapshots_of_those_kinds_only(self) -> None:
        events = synthetic_stream(engines=1, requests=400)
        registration = events[0]
        assert isinstance(registration, EngineRegistered)
        events[0] = registration.model_copy(update={"scheduler": "slai", "obeys": ["slai"]})
        kinds = {s.trigger.split(":")[0] for s in _fold_all(Folder("dep", default_registry()), events)}
        assert "slai" in kinds
        assert "admission" in kinds
        assert "ebplus" not in kinds

    def test_engine_that_declares_nothing_gets_every_engine_kind(self) -> None:
        kinds = {s.trigger.split(":")[0] for s in _fold_all(Folder("dep", default_registry()), synthetic_stream())}
        assert {"admission", "ebplus", "slai"} <= kinds

    def test_admission_snapshot_fires_every_five_seconds_of_event_time(self) -> None:
        events = synthetic_stream(engines=1, requests=400)
        folder = Folder("dep", default_registry())
        times = [s.ts for s in _fold_all(folder, events) if s.trigger.startswith("admission:")]
        assert len(times) >= 3
        assert all(later - earlier >= 5.0 for earlier, later in itertools.pairwise(times))

    def test_snapshots_carry_the_triggering_position_and_a_content_hash(self) -> None:
        events = synthetic_stream(engines=2, requests=300)
        snapshots = _fold_all(Folder("dep", default_registry()), events)
        again = _fold_all(Folder("dep", default_registry()), events)
        assert [s.snapshot_id for s in snapshots] == [s.snapshot_id for s in again]
        assert len({s.snapshot_id for s in snapshots}) == len(snapshots)
        assert all(len(s.offsets) == 1 for s in snapshots)

    def test_state_round_trip_then_continue_equals_uninterrupted_fold(self) -> None:
        events = synthetic_stream(engines=2, requests=400)
        whole = Folder("dep", default_registry())
        expected = _fold_all(whole, events)
        first = Folder("dep", default_registry())
        snapshots = _fold_all(first, events[:600])
        second = Folder("dep", default_registry())
        for engine in first.engines:
            second.load(engine, first.state_json(engine))
        for offset, event in enumerate(events[600:], start=600):
            snapshots.extend(second.fold(event, SourceOffset(topic="t", partition=0, offset=offset)))
        assert [s.model_dump() for s in snapshots] == [s.model_dump() for s in expected]
        assert {e: whole.summary_json(e) for e in whole.engines} == {e: second.summary_json(e) for e in second.engines}


class TestEngineEstimates:
    def test_summary_reports_censoring_aware_hazard_and_means(self) -> None:
        estimates = EngineEstimates("eng-0")
        for event in synthetic_stream(engines=1, requests=300):
            estimates.fold(event)
        summary = estimates.summary()
        hazard = summary["hazard"]
        assert isinstance(hazard, dict)
        assert hazard["n_samples"] == 300
        assert 0 < hazard["n_censored"] < 300
        assert 1 / 300 < hazard["p0"] < 1 / 100
        assert summary["completions_total"] == 300
        assert summary["engine"]["max_num_seqs"] == 256  # type: ignore[index]
        json.dumps(summary)
