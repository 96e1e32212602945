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
    assert summary["control"] == "offline"
    printed = capsys.readouterr().out
    assert printed.splitlines()[1].startswith("control: offline (governed by the in-process control plane")
    assert f"summary: {out / 'summary.json'}" in printed
    assert "tier paid:" in printed
    applied = [parse_event(line) for line in lines if b'"policy.applied"' in line]
    assert {event.event_type for event in applied} == {"policy.applied"}
    assert len(applied) > 0


def test_sim_without_control_says_so_and_no_engine_applies_a_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "none"
    code = main(["sim", "demo", "--duration-s", "3", "--control", "none", "--out", str(out), "--record"])
    assert code == 0
    assert json.loads((out / "summary.json").read_text())["control"] == "none"
    assert capsys.readouterr().out.splitlines()[1] == (
        "control: none (no control plane: every engine runs its safe default policy)"
    )
    events = [parse_event(line) for line in (out / "events.jsonl").read_bytes().splitlines()]
    assert [e for e in events if e.event_type == "policy.applied"] == []


def test_sim_compare_reports_every_arm_and_ends_with_the_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "compare"
    code = main(["sim", "demo", "--duration-s", "3", "--seed", "4", "--compare", "--out", str(out)])
    assert code == 0
    comparison = json.loads((out / "summary.json").read_text())["comparison"]
    assert list(comparison["arms"]) == ["baseline", "ungoverned", "governed"]
    assert comparison["seed"] == 4
    assert comparison["arms"]["governed"]["policy_changes"]
    assert comparison["arms"]["ungoverned"]["policy_changes"] == []
    metrics = {row["metric"] for row in comparison["rows"]}
    assert {"throughput", "TTFT p99 paid", "TBT p99 free", "SLO attainment paid", "preemptions"} <= metrics
    for name in ("compare_timeline.png", "compare_tiers.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG"
    printed = capsys.readouterr().out.splitlines()
    assert printed[-1] == comparison["verdict"]
    assert printed[-1].startswith("Governing bought on this run (seed 4, governed vs ungoverned): throughput ")


def test_sim_live_cannot_record_an_event_time_stream(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "smoke", "--control", "live", "--record"]) == 2
    assert "--record writes the events of an event-time run" in capsys.readouterr().err


def test_sim_list_names_the_scenarios(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "--list"]) == 0
    assert "fleet-8: Eight H200 engines" in capsys.readouterr().out


def test_unknown_scenario_is_one_clear_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "nope"]) == 2
    assert capsys.readouterr().err.startswith("governor: error: unknown scenario 'nope'; known: smoke")
