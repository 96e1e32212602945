"""``governor replay --offline --as-deployment``: a recording of one deployment decided as another's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from decide.specs import default_registry
from services.cli.main import main
from services.replay.files import write_events
from services.replay.replay import replay_offline
from services.testing.streams import synthetic_stream


def test_offline_replay_as_another_deployment_makes_the_same_decisions_under_the_new_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    events = synthetic_stream(engines=2, requests=300, deployment="recorded", seed=5)
    path = tmp_path / "recorded.jsonl.gz"
    write_events(path, events)
    out = tmp_path / "decisions.jsonl"
    assert main(["replay", str(path), "--offline", "--as-deployment", "staging", "--out", str(out)]) == 0
    capsys.readouterr()
    replayed = [json.loads(line) for line in out.read_text().splitlines()]
    original = replay_offline(events, default_registry()).decisions
    assert len(replayed) == len(original) > 0
    assert {record["deployment"] for record in replayed} == {"staging"}
    assert [(r["kind"], r["scope"], r["version"], r["document"]["payload"]) for r in replayed] == [
        (d.kind, d.scope, d.version, d.document["payload"]) for d in original
    ]
