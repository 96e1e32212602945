"""``governor policy KIND --input`` reads what ``governor explain KIND SCOPE --inputs --json`` prints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from decide.wiring.ebplus import ebplus_inputs
from policies.ebplus import EbplusParams
from policies.ebplus import decide as decide_ebplus
from schemas.policy_docs import EbplusPolicy
from schemas.records import DecisionRecord, EstimateSnapshot
from services.cli.explain import NO_SLO, diagnostic_text, render
from services.cli.main import main
from services.replay.offline import OfflineControlPlane
from services.testing.models import changed


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


def _explain_output(plane: OfflineControlPlane, kind: str, scope: str, *, previous: bool = True) -> dict[str, object]:
    """What ``governor explain KIND SCOPE --inputs --json`` prints for the newest accepted decision."""
    records = [r for r in plane.decisions if r.kind == kind and r.scope == scope and r.accepted]
    assert records, f"no {kind} decision of {scope}"
    record = records[-1]
    document = record.document
    assert isinstance(document, dict)
    inputs = document["inputs"]
    assert isinstance(inputs, dict)
    snapshot = next(s for s in plane.snapshots if s.snapshot_id == inputs["snapshot_id"])
    body: dict[str, object] = {"decision": record.model_dump(mode="json"), "snapshot": snapshot.model_dump(mode="json")}
    before = document.get("previous_version")
    if previous and before is not None:
        body["previous"] = next(r for r in records if r.version == before).model_dump(mode="json")
    return body


def _write(tmp_path: Path, body: dict[str, object]) -> Path:
    path = tmp_path / "explain.json"
    path.write_text(json.dumps(body, indent=2, sort_keys=True))
    return path


class TestExplainRoundTrip:
    @pytest.mark.parametrize(
        ("kind", "scope"), [("ebplus", "h200-0"), ("slai", "slai-0"), ("fleetopt", "fleet"), ("bfio", "dp-0")]
    )
    def test_policy_input_decides_the_payload_explain_printed(
        self, demo_plane: OfflineControlPlane, tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, scope: str
    ) -> None:
        """The policy's own inputs, previous version and event time give back the logged payload, with no note."""
        body = _explain_output(demo_plane, kind, scope)
        assert main(["policy", kind, "--input", str(_write(tmp_path, body)), "--json"]) == 0
        out, err = capsys.readouterr()
        decision = body["decision"]
        assert isinstance(decision, dict)
        assert json.loads(out) == decision["document"]["payload"]
        assert err == ""

    def test_the_round_trip_covers_decisions_that_built_on_a_previous_version(
        self, demo_plane: OfflineControlPlane
    ) -> None:
        """SLAI, FleetOpt and BF-IO's explained decisions above carry a previous version (their state is read)."""
        for kind, scope in (("slai", "slai-0"), ("fleetopt", "fleet"), ("bfio", "dp-0")):
            assert "previous" in _explain_output(demo_plane, kind, scope)

    def test_without_the_previous_version_it_decides_from_a_cold_start_and_says_so(
        self, demo_plane: OfflineControlPlane, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        body = _explain_output(demo_plane, "slai", "slai-0", previous=False)
        assert main(["policy", "slai", "--input", str(_write(tmp_path, body)), "--json"]) == 0
        err = capsys.readouterr().err
        assert err.count("\n") == 1
        assert "cold start" in err

    def test_a_decision_made_with_a_config_names_the_params_it_differs_by(
        self, demo_plane: OfflineControlPlane, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        body = _explain_output(demo_plane, "bfio", "dp-0")
        decision = body["decision"]
        assert isinstance(decision, dict)
        decision["config"] = "3a44294e62a65c56"
        assert main(["policy", "bfio", "--input", str(_write(tmp_path, body)), "--json"]) == 0
        err = capsys.readouterr().err
        assert "policy config 3a44294e62a65c56" in err
        assert "--config FILE" in err

    def test_the_config_named_is_the_one_decided_with(
        self, demo_plane: OfflineControlPlane, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """An EB+ config assuming a profile makes the explained snapshot's decision use it; the note names both."""
        body = _explain_output(demo_plane, "ebplus", "h200-0")
        config = tmp_path / "policy.toml"
        config.write_text('[ebplus]\nonline_cost_model = true\ncalibration_id = "qwen3-8b@rtx-pro-6000"\n')
        path = _write(tmp_path, body)
        assert main(["policy", "ebplus", "--input", str(path), "--json", "--config", str(config)]) == 0
        out, err = capsys.readouterr()
        assert json.loads(out)["calib_id"] == "qwen3-8b@rtx-pro-6000"
        assert "made with the default params" in err

    def test_an_explain_output_without_its_snapshot_is_one_line_naming_the_flag(
        self, demo_plane: OfflineControlPlane, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        body = _explain_output(demo_plane, "slai", "slai-0")
        del body["snapshot"]
        path = _write(tmp_path, body)
        assert main(["policy", "slai", "--input", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1
        assert f"{path}: field snapshot: missing" in err
        assert "--inputs" in err

    def test_another_kinds_decision_names_the_command_that_reads_it(
        self, demo_plane: OfflineControlPlane, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        path = _write(tmp_path, _explain_output(demo_plane, "slai", "slai-0"))
        assert main(["policy", "bfio", "--input", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1
        assert "governor policy slai" in err

    @pytest.mark.parametrize("kind", ["ebplus", "slai", "fleetopt", "bfio"])
    def test_a_bad_snapshot_field_is_one_short_line_naming_the_file_and_field(
        self, demo_plane: OfflineControlPlane, tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
    ) -> None:
        scope = {"ebplus": "h200-0", "slai": "slai-0", "fleetopt": "fleet", "bfio": "dp-0"}[kind]
        body = _explain_output(demo_plane, kind, scope)
        snapshot = body["snapshot"]
        assert isinstance(snapshot, dict)
        snapshot["ts"] = "soon"
        path = _write(tmp_path, body)
        assert main(["policy", kind, "--input", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1
        assert f"{path}: field snapshot.ts:" in err
        assert len(err) < 400

    def test_a_snapshot_other_than_the_one_read_is_refused(
        self, demo_plane: OfflineControlPlane, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        body = _explain_output(demo_plane, "slai", "slai-0")
        other = next(s for s in demo_plane.snapshots if s.scope == "slai-1")
        body["snapshot"] = other.model_dump(mode="json")
        assert main(["policy", "slai", "--input", str(_write(tmp_path, body))]) == 2
        assert "is not the snapshot the decision read" in capsys.readouterr().err

    def test_a_group_decision_from_one_ranks_snapshot_is_refused(
        self, demo_plane: OfflineControlPlane, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A DP group's bundle pools its ranks; explain finds only the firing rank's snapshot, which cannot redo it."""
        body = _explain_output(demo_plane, "bfio", "dp-0")
        snapshot = body["snapshot"]
        assert isinstance(snapshot, dict)
        snapshot["scope"] = "dp-0-rank1"
        assert main(["policy", "bfio", "--input", str(_write(tmp_path, body))]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1
        assert "made from its ranks pooled" in err

    def test_what_if_flags_are_refused_with_an_explain_output(
        self, demo_plane: OfflineControlPlane, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        path = _write(tmp_path, _explain_output(demo_plane, "fleetopt", "fleet"))
        assert main(["policy", "fleetopt", "--input", str(path), "--t-slo-s", "1.0"]) == 2
        assert "--t-slo-s" in capsys.readouterr().err


class TestExplainNoSlo:
    def test_an_attainment_without_an_slo_reads_no_slo_and_others_stay_json(self) -> None:
        assert diagnostic_text("tbt_attainment_frac.free", None) == NO_SLO
        assert diagnostic_text("tbt_attainment_frac.paid", 0.5) == "0.5"
        assert diagnostic_text("tbt_p99_s.free", None) == "null"

    def test_the_explained_slai_decision_prints_no_slo_for_a_tier_without_one(
        self, demo_plane: OfflineControlPlane
    ) -> None:
        record = next(r for r in demo_plane.decisions if r.kind == "slai")
        document = dict(record.document)
        diagnostics = dict(document["diagnostics"])  # type: ignore[arg-type]
        diagnostics["tbt_attainment_frac.free"] = None
        document["diagnostics"] = diagnostics
        lines = render(changed(record, document=document), None).splitlines()
        row = next(line for line in lines if "tbt_attainment_frac.free" in line)
        assert row.split()[-2:] == ["no", "SLO"]
