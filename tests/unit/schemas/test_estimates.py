"""The typed estimate summaries on the wire: a round trip, and one clear line for an old or unknown format."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from decide.specs import default_registry
from fold.folder import Folder
from schemas.names import RecordPosition
from schemas.records import EstimateSnapshot
from services.testing.streams import synthetic_stream


def _snapshots() -> list[EstimateSnapshot]:
    folder = Folder("dep", default_registry(fleet_slot_s=5.0))
    taken: list[EstimateSnapshot] = []
    for offset, event in enumerate(synthetic_stream(engines=2, requests=400)):
        taken.extend(folder.fold(event, RecordPosition("t", 0, offset)))
    return taken + folder.release(None)


def _refusal(raw: dict[str, object]) -> str:
    with pytest.raises(ValidationError) as caught:
        EstimateSnapshot.model_validate_json(json.dumps(raw))
    (error,) = caught.value.errors(include_url=False)
    return str(error["msg"])


class TestEstimateSummaryWire:
    snapshots = _snapshots()

    def test_every_kind_of_summary_round_trips_through_json(self) -> None:
        kinds = {s.estimates.summary_type for s in self.snapshots}
        assert kinds == {"engine", "fleet_join", "fleet_contribution"}
        for snapshot in self.snapshots:
            assert EstimateSnapshot.model_validate_json(snapshot.model_dump_json()) == snapshot

    def test_an_untyped_summary_of_format_one_is_refused_in_one_line(self) -> None:
        raw = json.loads(self.snapshots[-1].model_dump_json())
        raw["estimates"] = {"engine_id": "e0", "hazard": {"p0": 0.004, "eta": 1e-6}, "n_obs": 7.0}
        message = _refusal(raw)
        assert "format 1" in message
        assert "\n" not in message

    def test_another_format_of_a_known_summary_is_refused_in_one_line(self) -> None:
        raw = json.loads(self.snapshots[-1].model_dump_json())
        raw["estimates"]["format"] = 3
        message = _refusal(raw)
        assert "format 3" in message
        assert "reads 2" in message

    def test_a_renamed_field_is_refused(self) -> None:
        engine = next(s for s in self.snapshots if s.estimates.summary_type == "engine")
        raw = json.loads(engine.model_dump_json())
        raw["estimates"]["n_obs"] = raw["estimates"].pop("n_obs_requests")
        with pytest.raises(ValidationError, match="n_obs"):
            EstimateSnapshot.model_validate_json(json.dumps(raw))
