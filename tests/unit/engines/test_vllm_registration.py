"""The vLLM plugin's registration carries what ``governor gateway`` needs: endpoint, DP group and rank."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from schemas.engines import EngineRegistered, Heartbeat
from schemas.errors import ConfigError
from schemas.events import Event
from services.engines.vllm import connect
from services.engines.vllm.connect import EngineLink, VllmEngineSettings, gateway_fields
from services.gateway.upstreams import UpstreamRegistry
from services.sdk.publisher import EventSource, PublisherStats


class _RecordingPublisher:
    """Stands in for the Kafka publisher: keeps what the link publishes."""

    def __init__(self, bootstrap: str, **_: object) -> None:
        self.bootstrap = bootstrap
        self.events: list[Event] = []
        self.sources: list[EventSource] = []

    def attach(self, source: EventSource) -> None:
        self.sources.append(source)

    def publish(self, event: Event) -> None:
        self.events.append(event)

    def stats(self) -> PublisherStats:
        return PublisherStats(published=len(self.events), delivered=0, dropped=0, queued=len(self.events))

    def close(self, timeout_s: float) -> None:
        del timeout_s


def _vllm_config(*, data_parallel_rank: int = 0) -> Any:
    """The attributes of vLLM's ``VllmConfig`` the link reads."""
    return SimpleNamespace(
        model_config=SimpleNamespace(served_model_name=["tiny"], model="/models/tiny", max_model_len=2048),
        scheduler_config=SimpleNamespace(max_num_seqs=8, max_num_batched_tokens=1024),
        parallel_config=SimpleNamespace(data_parallel_size=2, data_parallel_rank=data_parallel_rank),
    )


def _link(monkeypatch: pytest.MonkeyPatch, settings: VllmEngineSettings, vllm_config: Any) -> EngineLink:
    monkeypatch.setattr(connect, "TelemetryPublisher", _RecordingPublisher)
    return EngineLink.open(
        vllm_config,
        block_size_tokens=16,
        kv_blocks_total=100,
        scheduler="vllm",
        obeys=[],
        load=lambda: (0, 0),
        settings=settings,
    )


def _published(link: EngineLink) -> list[Event]:
    publisher = link.publisher
    assert isinstance(publisher, _RecordingPublisher)
    for source in publisher.sources:
        source.drain()
    return publisher.events


def test_the_environment_names_the_endpoint_the_group_and_the_rank() -> None:
    settings = VllmEngineSettings.load(
        environ={
            "GOVERNOR_ENGINE_ID": "rank-1",
            "GOVERNOR_ENDPOINT_URL": "http://10.0.0.7:8001",
            "GOVERNOR_DP_GROUP": "dp-a",
            "GOVERNOR_DP_RANK": "1",
        }
    )
    assert (settings.endpoint_url, settings.dp_group, settings.dp_rank) == ("http://10.0.0.7:8001", "dp-a", 1)


@pytest.mark.parametrize(
    ("environ", "named"),
    [
        ({"GOVERNOR_DP_RANK": "1"}, "GOVERNOR_DP_RANK is set without GOVERNOR_DP_GROUP"),
        ({"GOVERNOR_ENDPOINT_URL": "10.0.0.7:8001"}, "endpoint_url"),
        ({"GOVERNOR_DP_GROUP": "dp a"}, "dp_group"),
        ({"GOVERNOR_DP_GROUP": "dp-a", "GOVERNOR_DP_RANK": "-1"}, "dp_rank"),
    ],
)
def test_a_bad_gateway_setting_is_refused_by_name(environ: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        VllmEngineSettings.load(environ=environ)


def test_the_rank_defaults_to_vllms_data_parallel_rank() -> None:
    settings = VllmEngineSettings(dp_group="dp-a")
    assert gateway_fields(_vllm_config(data_parallel_rank=3), settings) == ({"dp_group": "dp-a"}, 3)
    assert gateway_fields(SimpleNamespace(), settings) == ({"dp_group": "dp-a"}, 0)
    assert gateway_fields(_vllm_config(data_parallel_rank=3), VllmEngineSettings(dp_group="dp-a", dp_rank=1))[1] == 1
    assert gateway_fields(_vllm_config(), VllmEngineSettings()) == ({}, None)


def test_a_rank_registers_its_endpoint_and_group_and_joins_the_gateway_as_that_rank(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = VllmEngineSettings(
        engine_id="rank-1", deployment="dep", endpoint_url="http://10.0.0.7:8001/", dp_group="dp-a"
    )
    link = _link(monkeypatch, settings, _vllm_config(data_parallel_rank=1))
    link.stream.heartbeat(1.0, num_running=2, num_waiting=0)
    link.close()
    registered, beat = _published(link)
    assert isinstance(registered, EngineRegistered)
    assert isinstance(beat, Heartbeat)
    assert (registered.endpoint_url, registered.dp_group, registered.dp_rank) == ("http://10.0.0.7:8001/", "dp-a", 1)
    assert beat.dp_rank == 1, "every event of a rank reads as that rank's"
    upstream = UpstreamRegistry().register(registered)
    assert upstream is not None
    assert (upstream.url, upstream.dp_group, upstream.dp_rank, upstream.max_num_seqs) == (
        "http://10.0.0.7:8001",
        "dp-a",
        1,
        8,
    )


def test_an_engine_without_gateway_settings_registers_as_before_and_is_no_upstream(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    link = _link(monkeypatch, VllmEngineSettings(engine_id="solo", deployment="dep"), _vllm_config())
    link.close()
    (registered,) = _published(link)
    assert isinstance(registered, EngineRegistered)
    assert (registered.endpoint_url, registered.dp_group, registered.dp_rank) == (None, None, None)
    assert UpstreamRegistry().register(registered) is None
