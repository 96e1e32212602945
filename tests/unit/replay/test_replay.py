"""Event files, paced replay and the offline replay of a recorded simulator stream."""

from __future__ import annotations

from pathlib import Path

import pytest

from schemas.errors import InvalidInputError
from services.policy.specs import default_registry
from services.replay.files import read_events, write_events
from services.replay.replay import replay_events, replay_offline
from services.sdk.protocol import ListSink
from tests.fixtures import recorded_sim_stream


@pytest.fixture(scope="module")
def stream(tmp_path_factory: pytest.TempPathFactory) -> list:
    return recorded_sim_stream(tmp_path_factory.mktemp("rec") / "demo.jsonl.gz", duration_s=30.0)


class TestFiles:
    def test_gzip_round_trip_keeps_every_event(self, stream: list, tmp_path: Path) -> None:
        assert write_events(tmp_path / "copy.jsonl.gz", stream) == len(stream)
        assert list(read_events(tmp_path / "copy.jsonl.gz")) == stream

    def test_a_bad_line_names_file_line_and_field(self, tmp_path: Path) -> None:
        path = tmp_path / "bad.jsonl"
        path.write_text('{"event_type": "engine.heartbeat"}\n')
        with pytest.raises(InvalidInputError, match=r"bad\.jsonl:1\)$") as info:
            list(read_events(path))
        assert info.value.field == "event_id"


class TestReplayEvents:
    def test_pacing_waits_out_event_time_gaps_divided_by_speed(self, stream: list) -> None:
        now = [0.0]
        waits: list[float] = []

        def sleep(seconds: float) -> None:
            waits.append(seconds)
            now[0] += seconds

        sink = ListSink()
        stats = replay_events(stream[:200], sink, speed=4.0, clock=lambda: now[0], sleep=sleep)
        assert sink.events == stream[:200]
        span = stream[199].ts - stream[0].ts
        assert stats.event_span_s == pytest.approx(span)
        assert sum(waits) == pytest.approx(span / 4.0)

    def test_max_speed_never_sleeps(self, stream: list) -> None:
        def sleep(seconds: float) -> None:
            raise AssertionError(seconds)

        stats = replay_events(stream, ListSink(), speed=None, sleep=sleep)
        assert stats.events == len(stream)


class TestReplayOffline:
    def test_two_offline_replays_of_a_recorded_stream_decide_identically(self, stream: list) -> None:
        first = replay_offline(stream, default_registry())
        second = replay_offline(stream, default_registry())
        assert len(first.decisions) > 10
        assert [d.model_dump() for d in first.decisions] == [d.model_dump() for d in second.decisions]
        assert first.events_folded == len(stream)
