"""``governor policy slai``: the documented example runs, bad files give one clear line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from services.cli.main import main

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "policies" / "examples" / "slai-input.json"


class TestPolicySlaiCommand:
    def test_documented_example_prints_the_payload_as_json(self, capsys: pytest.CaptureFixture[str]) -> None:
        assert main(["policy", "slai", "--input", str(EXAMPLE), "--json"]) == 0
        payload = json.loads(capsys.readouterr().out)
        assert (payload["mode"], payload["delta_lo"], payload["delta_hi"], payload["kv_threshold_frac"]) == (
            "dynamic",
            5.0,
            10.0,
            0.96,
        )
        assert payload["tier_tbt_s"] == {"paid": 0.1, "free": 0.5}

    def test_table_shows_the_delta_in_effect_and_the_safety_floor(self, capsys: pytest.CaptureFixture[str]) -> None:
        assert main(["policy", "slai", "--input", str(EXAMPLE)]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert any(line.split() == ["diag", "delta_in_effect", "10"] for line in lines)
        assert any(line.split() == ["diag", "delta_min", "3"] for line in lines)

    def test_overrides_reach_the_payload(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        path = tmp_path / "in.json"
        path.write_text(json.dumps({"params": {"offset_mode": "fixed", "tier_tbt_s": {"gold": 0.05}}}))
        assert main(["policy", "slai", "--input", str(path), "--json"]) == 0
        payload = json.loads(capsys.readouterr().out)
        assert (payload["mode"], payload["tier_tbt_s"]) == ("fixed", {"gold": 0.05})

    @pytest.mark.parametrize(
        ("content", "expected"),
        [
            ('{"tiers": [{"tier": "paid", "tbt_p99_s": -1}]}', "tiers.0.tbt_p99_s"),
            ('{"kv_use_frac": 1.5}', "kv_use_frac"),
            ('{"tbar": 0.05}', "tbar"),
            ("{not json", "not JSON"),
            ('{"params": {"delta_lo": 20}}', "delta_lo"),
        ],
    )
    def test_bad_file_is_one_line_naming_file_and_field(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, expected: str
    ) -> None:
        path = tmp_path / "bad.json"
        path.write_text(content)
        assert main(["policy", "slai", "--input", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1
        assert str(path) in err
        assert expected in err

    def test_missing_file_is_reported_with_exit_2(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        assert main(["policy", "slai", "--input", str(tmp_path / "absent.json")]) == 2
        assert "cannot read" in capsys.readouterr().err
