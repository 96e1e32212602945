"""End-to-end tests of ``governor policy ebplus`` through services.cli.main.main."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from services.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "policies" / "examples" / "ebplus-input.json"


class TestPolicyEbplusCommand:
    def test_documented_example_runs_and_picks_eb_on_the_saturated_rtx_snapshot(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        assert main(["policy", "ebplus", "--input", str(EXAMPLE), "--json"]) == 0
        payload = json.loads(capsys.readouterr().out)
        assert payload["mode"] == "EB"
        assert payload["calib_id"] == "qwen3-8b@rtx-pro-6000"
        assert payload["k"] == int(payload["theta"] * payload["n"])
        assert payload["fallback"] == {"mode": "MB", "theta": 0.7, "n": 1024}

    def test_default_output_is_a_table_with_the_eq8_audit_trail(self, capsys: pytest.CaptureFixture[str]) -> None:
        assert main(["policy", "ebplus", "--input", str(EXAMPLE)]) == 0
        lines = capsys.readouterr().out.splitlines()
        names = [line.split()[0] for line in lines]
        assert names[:4] == ["mode", "theta", "k", "N"]
        assert {"lhs", "rhs", "signal", "theta0", "delta_theta", "n_star_raw"} <= set(names)
        assert len(names) == len(set(names))

    def test_params_overrides_apply(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        snapshot = json.loads(EXAMPLE.read_text())
        snapshot["params"] = {"calibration_id": "qwen3-8b@h200", "theta_min": 0.7, "n_star_method": "clt"}
        path = tmp_path / "in.json"
        path.write_text(json.dumps(snapshot))
        assert main(["policy", "ebplus", "--input", str(path), "--json"]) == 0
        payload = json.loads(capsys.readouterr().out)
        assert (payload["calib_id"], payload["theta"]) == ("qwen3-8b@h200", 0.7)

    def test_bad_field_names_file_and_field_path_and_exits_2(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        snapshot = json.loads(EXAMPLE.read_text())
        snapshot["params"] = {"theta_max": 1.5}
        path = tmp_path / "bad.json"
        path.write_text(json.dumps(snapshot))
        assert main(["policy", "ebplus", "--input", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1
        assert str(path) in err
        assert "params.theta_max" in err
        assert "Traceback" not in err

    def test_unknown_calibration_is_one_line_naming_the_file(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        snapshot = json.loads(EXAMPLE.read_text())
        snapshot["params"] = {"calibration_id": "gpt-9@tpu"}
        path = tmp_path / "unknown.json"
        path.write_text(json.dumps(snapshot))
        assert main(["policy", "ebplus", "--input", str(path)]) == 2
        err = capsys.readouterr().err
        assert str(path) in err
        assert "calibration_id" in err

    def test_missing_file_and_invalid_json_exit_2(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        assert main(["policy", "ebplus", "--input", str(tmp_path / "nope.json")]) == 2
        assert "nope.json" in capsys.readouterr().err
        broken = tmp_path / "broken.json"
        broken.write_text("{not json")
        assert main(["policy", "ebplus", "--input", str(broken)]) == 2
        assert "broken.json" in capsys.readouterr().err
