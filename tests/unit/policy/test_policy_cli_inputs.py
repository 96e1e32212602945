"""``governor policy ebplus --input`` reads what ``governor explain ebplus SCOPE --inputs --json`` prints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from policies.ebplus import EbplusParams
from policies.ebplus import decide as decide_ebplus
from schemas.policy_docs import EbplusPolicy
from schemas.records import DecisionRecord, EstimateSnapshot
from services.cli.main import main
from services.policy.wiring.ebplus import ebplus_inputs
from services.replay.offline import OfflineControlPlane


def _explained(plane: OfflineControlPlane, scope: str) -> tuple[DecisionRecord, EstimateSnapshot]:
    """The engine's last EB+ decision and the snapshot it read, as explain finds them."""
    snapshots = {s.snapshot_id: s for s in plane.snapshots}
    for record in reversed(plane.decisions):
        if record.kind == "ebplus" and record.scope == scope:
            document = EbplusPolicy.model_validate(record.document)
            return record, snapshots[document.inputs.snapshot_id]
    pytest.fail(f"no EB+ decision of {scope}")


class TestExplainOutputAsInput:
    def test_the_explained_snapshot_is_decided_from_the_engines_registered_profile(
        self, demo_plane: OfflineControlPlane, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        record, snapshot = _explained(demo_plane, "h200-0")
        path = tmp_path / "explain.json"
        body = {"decision": record.model_dump(mode="json"), "snapshot": snapshot.model_dump(mode="json")}
        path.write_text(json.dumps(body, indent=2, sort_keys=True))
        assert main(["policy", "ebplus", "--input", str(path), "--json"]) == 0
        printed = json.loads(capsys.readouterr().out)
        inputs = ebplus_inputs(snapshot)
        assert inputs is not None
        computed_at = EbplusPolicy.model_validate(record.document).computed_at
        expected = decide_ebplus(inputs, None, EbplusParams(), computed_at).payload
        assert printed == expected.model_dump(mode="json")
        assert printed["calib_id"] == EbplusPolicy.model_validate(record.document).payload.calib_id != "probe"

    def test_a_snapshot_without_ebplus_inputs_is_one_line_naming_it(
        self, demo_plane: OfflineControlPlane, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        record, snapshot = _explained(demo_plane, "h200-0")
        empty = snapshot.model_dump(mode="json")
        empty["estimates"]["hazard"] = None
        path = tmp_path / "explain.json"
        path.write_text(json.dumps({"decision": record.model_dump(mode="json"), "snapshot": empty}))
        assert main(["policy", "ebplus", "--input", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1
        assert snapshot.snapshot_id in err

    def test_a_missing_field_is_named_without_dumping_the_file(
        self, demo_plane: OfflineControlPlane, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The what-if form names the missing field; the offending value is shortened, not the whole document."""
        _, snapshot = _explained(demo_plane, "h200-0")
        path = tmp_path / "snapshot-only.json"
        path.write_text(snapshot.model_dump_json())
        assert main(["policy", "ebplus", "--input", str(path)]) == 2
        err = capsys.readouterr().err
        assert "field p0" in err
        assert len(err) < 400
