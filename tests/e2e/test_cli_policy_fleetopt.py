"""``governor policy fleetopt``: the what-if CLI, its documented example and its errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from services.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "policies" / "examples" / "fleetopt-input.json"
AGENT_CDF = ROOT / "services" / "sim" / "data" / "fleetopt-agent_heavy_cdf.json"


class TestPolicyFleetoptCli:
    @pytest.mark.paper(seed="002", ref="Table 3")
    def test_documented_example_reproduces_the_azure_fleetopt_row(self, capsys: pytest.CaptureFixture[str]) -> None:
        """Table 3, Azure FleetOpt gamma* = 2.0: 48 + 2 = 50 GPUs, 968 K$, 82.4 % against 284."""
        assert main(["policy", "fleetopt", "--input", str(EXAMPLE)]) == 0
        out = capsys.readouterr().out
        assert "gamma 2.0" in out
        assert "total            50" in out
        assert "homogeneous     284" in out
        assert "savings 82.4%" in out
        assert "968 K$/yr" in out

    def test_json_prints_the_plan_payload(self, capsys: pytest.CaptureFixture[str]) -> None:
        assert main(["policy", "fleetopt", "--input", str(EXAMPLE), "--json"]) == 0
        payload = json.loads(capsys.readouterr().out)
        assert (payload["fleet"]["short"]["n_gpus"], payload["fleet"]["long"]["n_gpus"]) == (48, 2)
        assert payload["routing"]["gamma_b_tokens"] == 8192
        assert payload["mode"] == "paper"

    @pytest.mark.paper(seed="002", ref="Table 3")
    def test_bare_cdf_file_with_flags_reproduces_the_agent_row(self, capsys: pytest.CaptureFixture[str]) -> None:
        """Table 3, Agent-heavy FleetOpt gamma* = 1.5: 255 + 1,981 = 2,236 GPUs against 2,397."""
        argv = ["policy", "fleetopt", "--input", str(AGENT_CDF), "--arrival-rate-per-s", "1000", "--p-c", "0.75"]
        assert main([*argv, "--mode", "paper", "--b-short", "8192", "--json"]) == 0
        payload = json.loads(capsys.readouterr().out)
        assert payload["fleet"]["short"]["n_gpus"] + payload["fleet"]["long"]["n_gpus"] == 2236
        assert payload["cost"]["homogeneous_gpus"] == 2397

    def test_bad_field_names_the_file_and_the_field(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps({"arrival_rate_per_s": 10.0, "cdf": [[64, 0.5], [32, 1.0]]}))
        assert main(["policy", "fleetopt", "--input", str(bad)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1
        assert str(bad) in err
        assert "cdf[1].tokens" in err

    def test_schema_error_names_the_field_path(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps({"arrival_rate_per_s": 10.0, "cdf_file": "x.json", "params": {"rho_max": 2}}))
        assert main(["policy", "fleetopt", "--input", str(bad)]) == 2
        assert "params.rho_max" in capsys.readouterr().err

    def test_missing_file_is_one_clear_line(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        assert main(["policy", "fleetopt", "--input", str(tmp_path / "none.json")]) == 2
        err = capsys.readouterr().err
        assert err.startswith("governor: error: ")
        assert "none.json" in err
