"""Event files, paced replay and the offline replay of a recorded simulator stream."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from kafka import TopicPartition

from decide.specs import default_registry
from schemas.errors import BackendUnavailableError, InvalidInputError
from services.replay import replay
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


class _ScriptedConsumer:
    """A consumer of one partition whose polls follow a script; every poll advances a fake clock 5 s."""

    def __init__(self, polls: list[list[bytes]], end: int, clock: list[float]) -> None:
        self.partition = TopicPartition("t", 0)
        self.polls = polls
        self.end = end
        self.clock = clock
        self.read = 0

    def topics(self) -> set[str]:
        return {"t"}

    def partitions_for_topic(self, topic: str) -> set[int]:
        return {0}

    def assign(self, partitions: list[TopicPartition]) -> None:
        assert partitions == [self.partition]

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        self.read = 0

    def end_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {self.partition: self.end}

    def position(self, partition: TopicPartition) -> int:
        return self.read

    def poll(self, timeout_ms: int) -> dict[TopicPartition, list[SimpleNamespace]]:
        self.clock[0] += 5.0
        values = self.polls.pop(0) if self.polls else []
        self.read += len(values)
        return {self.partition: [SimpleNamespace(value=v) for v in values]} if values else {}

    def close(self) -> None:
        pass


class TestReadTopic:
    def _read(self, monkeypatch: pytest.MonkeyPatch, consumer: _ScriptedConsumer, clock: list[float]) -> list[bytes]:
        monkeypatch.setattr(replay, "reader", lambda *args, **kwargs: consumer)
        monkeypatch.setattr(replay.time, "monotonic", lambda: clock[0])
        return list(replay.read_topic("broker:9092", "t"))

    def test_a_quiet_spell_while_behind_does_not_end_a_read_to_the_end(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Three empty polls (15 s on the fake clock, past the 3 s idle limit) before the records come:
        under load a fetch can take that long, and stopping there lost the records without a word."""
        clock = [0.0]
        consumer = _ScriptedConsumer([[], [], [], [b"a", b"b"], [b"c"]], end=3, clock=clock)
        assert self._read(monkeypatch, consumer, clock) == [b"a", b"b", b"c"]

    def test_a_read_that_gets_nothing_while_behind_fails_after_the_stall_limit(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        clock = [0.0]
        consumer = _ScriptedConsumer([[b"a"]], end=2, clock=clock)
        with pytest.raises(BackendUnavailableError, match="behind its end offsets"):
            self._read(monkeypatch, consumer, clock)
        assert clock[0] >= replay.READ_STALL_S
