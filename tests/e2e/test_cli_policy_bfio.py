"""``governor policy bfio`` and ``governor bfio assign`` through ``services.cli.main.main``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from services.cli.main import main

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "policies" / "examples"


class TestPolicyBfio:
    def test_documented_example_prints_the_bundle_as_json(self, capsys: pytest.CaptureFixture[str]) -> None:
        assert main(["policy", "bfio", "--input", str(EXAMPLES / "bfio-input.json"), "--json"]) == 0
        payload = json.loads(capsys.readouterr().out)
        assert payload["mode"] == "bfio"
        assert payload["horizon_steps"] == 20
        assert [t["traffic_class"] for t in payload["survival_tables"]] == ["chat"]
        assert payload["step_model"] == {"c_s": 0.0049, "t_l_s_per_token": 1e-07}

    def test_default_output_is_a_readable_table(self, capsys: pytest.CaptureFixture[str]) -> None:
        assert main(["policy", "bfio", "--input", str(EXAMPLES / "bfio-input.json")]) == 0
        out = capsys.readouterr().out
        assert "horizon_steps" in out
        assert "diagnostics.dropped_tables" in out

    def test_bad_field_is_one_line_naming_file_and_field(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps({"num_ranks": 0, "slots_per_rank": 72}))
        assert main(["policy", "bfio", "--input", str(bad)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0
        assert str(bad) in err
        assert "num_ranks" in err

    def test_missing_file_is_a_clear_error(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        assert main(["policy", "bfio", "--input", str(tmp_path / "absent.json")]) == 2
        assert "cannot read input file" in capsys.readouterr().err


class TestBfioAssign:
    def test_documented_step_assigns_every_free_slot(self, capsys: pytest.CaptureFixture[str]) -> None:
        assert main(["bfio", "assign", "--input", str(EXAMPLES / "bfio-step.json"), "--json"]) == 0
        document = json.loads(capsys.readouterr().out)
        ranks = [a["rank"] for a in document["assignments"]]
        assert sorted(ranks) == [0, 1, 1]
        assert len({a["request_id"] for a in document["assignments"]}) == 3
        assert all(a["valid_until_step"] == 1550 for a in document["assignments"])

    def test_default_output_is_a_table_with_a_summary_line(self, capsys: pytest.CaptureFixture[str]) -> None:
        assert main(["bfio", "assign", "--input", str(EXAMPLES / "bfio-step.json")]) == 0
        assert "admitted 3, still waiting 1" in capsys.readouterr().out

    def test_nested_bad_field_names_its_path(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        bad = tmp_path / "step.json"
        bad.write_text(json.dumps({"step_index": 0, "now_s": 0.0, "ranks": [{"free_slots": -1}]}))
        assert main(["bfio", "assign", "--input", str(bad)]) == 2
        assert "ranks.0.free_slots" in capsys.readouterr().err
