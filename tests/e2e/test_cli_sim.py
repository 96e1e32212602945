"""``governor sim``: a named scenario runs end to end and leaves its summary, plots and events."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from schemas.events import parse_event
from services.cli.main import main


def test_sim_writes_summary_plots_and_recorded_events(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    code = main(["sim", "demo", "--duration-s", "4", "--seed", "3", "--out", str(out), "--record"])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["scenario"] == "demo"
    assert summary["arrived"] == summary["finished"] + summary["rejected"] + summary["in_flight"]
    assert summary["finished"] > 0
    assert {tier["tier"] for tier in summary["tiers"]} == {"paid", "free"}
    assert (out / "timeline.png").read_bytes()[:4] == b"\x89PNG"
    lines = (out / "events.jsonl").read_bytes().splitlines()
    assert parse_event(lines[0]).event_type == "engine.registered"
    printed = capsys.readouterr().out
    assert f"summary: {out / 'summary.json'}" in printed
    assert "tier paid:" in printed


def test_sim_list_names_the_scenarios(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "--list"]) == 0
    assert "fleet-8: Eight H200 engines" in capsys.readouterr().out


def test_unknown_scenario_is_one_clear_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "nope"]) == 2
    assert capsys.readouterr().err.startswith("governor: error: unknown scenario 'nope'; known: smoke")
