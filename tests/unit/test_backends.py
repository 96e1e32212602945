"""services/backends.py: a service waits for a backend with doubling pauses, says so, and gives up in time."""

from __future__ import annotations

import pytest
import structlog

from schemas.errors import BackendUnavailableError
from services.backends import MAX_BACKOFF_S, OUTAGE_MAX_BACKOFF_S, BackendOutage, kafka_answers, wait_for


class FakeClock:
    """Time that moves only when slept on."""

    def __init__(self) -> None:
        self.now_s = 0.0
        self.pauses: list[float] = []

    def __call__(self) -> float:
        return self.now_s

    def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now_s += seconds


class TestWaitFor:
    def test_pauses_double_up_to_the_cap_and_each_wait_is_logged(self) -> None:
        clock = FakeClock()
        answers = iter([False] * 6 + [True])
        with structlog.testing.capture_logs() as logs:
            wait_for("kafka", "k:9092", lambda: next(answers), wait_s=60.0, clock=clock, sleep=clock.sleep)
        assert clock.pauses == [0.5, 1.0, 2.0, 4.0, MAX_BACKOFF_S, MAX_BACKOFF_S]
        waits = [e for e in logs if e["event"] == "backend_waiting"]
        assert [(e["backend"], e["address"], e["retry_in_s"]) for e in waits] == [
            ("kafka", "k:9092", p) for p in clock.pauses
        ]
        assert logs[-1]["event"] == "backend_answered"

    def test_gives_up_after_the_wait_with_one_error_naming_backend_and_address(self) -> None:
        clock = FakeClock()
        with pytest.raises(BackendUnavailableError, match=r"^redis at redis://r:6379 did not answer within 3 s$"):
            wait_for("redis", "redis://r:6379", lambda: False, wait_s=3.0, clock=clock, sleep=clock.sleep)
        assert clock.now_s == 3.0

    def test_an_answering_backend_costs_no_pause(self) -> None:
        clock = FakeClock()
        wait_for("kafka", "k:9092", lambda: True, wait_s=0.0, clock=clock, sleep=clock.sleep)
        assert clock.pauses == []


def test_a_bootstrap_list_with_no_listening_server_does_not_answer() -> None:
    assert kafka_answers("127.0.0.1:1,not-a-port", timeout_s=0.2) is False


class TestBackendOutage:
    def test_an_outage_is_logged_once_when_it_starts_and_once_when_it_ends_with_paced_retries(self) -> None:
        clock = FakeClock()
        outage = BackendOutage("policy", clock=clock)
        error = BackendUnavailableError("redis GET failed: Timeout reading from socket", backend="redis")
        with structlog.testing.capture_logs() as logs:
            for _ in range(5):
                clock.sleep(outage.failed(error, "redis"))
            outage.succeeded("kafka")
            assert outage.ongoing
            outage.succeeded("redis")
            outage.succeeded("redis")
        assert clock.pauses == [0.5, 1.0, OUTAGE_MAX_BACKOFF_S, OUTAGE_MAX_BACKOFF_S, OUTAGE_MAX_BACKOFF_S]
        assert [e["event"] for e in logs] == ["backend_unavailable", "backend_recovered"]
        assert (logs[0]["service"], logs[0]["backend"]) == ("policy", "redis")
        assert (logs[1]["outage_s"], logs[1]["failed_tries"]) == (sum(clock.pauses), 5)
        assert not outage.ongoing

    def test_a_second_outage_starts_its_backoff_afresh(self) -> None:
        clock = FakeClock()
        outage = BackendOutage("stream", clock=clock)
        error = BackendUnavailableError("kafka did not take 3 records", backend="kafka")
        first = [outage.failed(error, "kafka") for _ in range(3)]
        outage.succeeded("kafka")
        assert [outage.failed(error, "kafka") for _ in range(3)] == first
        assert outage.outages == 2
