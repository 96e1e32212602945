"""``governor schema check``: a count for a good file, line numbers and fields for a bad one."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from schemas.events import encode_event
from services.cli.main import main
from tests.unit.schemas.event_samples import sample_events


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_all_valid_file_exits_zero_with_a_count(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = [encode_event(e).decode() for e in sample_events()]
    path = _write(tmp_path / "good.jsonl", good)
    assert main(["schema", "check", str(path)]) == 0
    assert capsys.readouterr().out.strip() == f"{path}: {len(good)} events valid"


def test_gzip_file_is_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "good.jsonl.gz"
    with gzip.open(path, "wt") as handle:
        handle.write(encode_event(sample_events()[0]).decode() + "\n")
    assert main(["schema", "check", str(path)]) == 0
    assert "1 events valid" in capsys.readouterr().out


def test_bad_lines_are_reported_with_line_number_and_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    events = sample_events()
    arrived = json.loads(encode_event(events[0]))
    step = json.loads(encode_event(events[5]))
    lines = [
        encode_event(events[1]).decode(),
        json.dumps(arrived | {"prompt_tokens": -1}),
        "",
        json.dumps(step | {"ts": "soon"}),
        "{not json",
        encode_event(events[2]).decode(),
    ]
    path = _write(tmp_path / "mixed.jsonl", lines)
    assert main(["schema", "check", str(path)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"{path}:2: prompt_tokens: Input should be greater than or equal to 0"
    assert err[1] == f"{path}:4: ts: Input should be a valid number"
    assert err[2].startswith(f"{path}:5: <event>: Invalid JSON")
    assert err[3] == f"{path}: 3 invalid, 2 valid"


def test_missing_file_is_one_clear_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "check", str(tmp_path / "absent.jsonl")]) == 2
    assert capsys.readouterr().err.strip() == f"governor: error: {tmp_path / 'absent.jsonl'}: no such file"
