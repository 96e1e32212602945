"""The vLLM adapter's registration: what ``governor gateway`` needs (endpoint, DP group and rank), and the ranks
of vLLM's internal data parallelism as one engine."""

from __future__ import annotations

import time
import warnings
from types import SimpleNamespace
from typing import Any

import pytest

from fold.engine_estimates import EngineEstimates
from schemas.engines import EngineRegistered, Heartbeat
from schemas.errors import ConfigError
from schemas.events import Event
from schemas.steps import RankStepReport
from services.engines.stream import RequestTrack
from services.engines.vllm import connect
from services.engines.vllm.connect import EngineLink, VllmEngineSettings, gateway_dp_rank, internal_dp_rank
from services.gateway.upstreams import UpstreamRegistry
from services.sdk.publisher import EventSource, PublisherStats
from services.sdk.step_counts import StepCounts


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


def _vllm_config(*, data_parallel_rank: int = 0, parallel_config: Any = None) -> Any:
    """The attributes of vLLM's ``VllmConfig`` the link reads (by default a server of vLLM's external LB mode)."""
    if parallel_config is None:
        parallel_config = SimpleNamespace(
            data_parallel_size=2, data_parallel_rank=data_parallel_rank, data_parallel_external_lb=True
        )
    return SimpleNamespace(
        model_config=SimpleNamespace(served_model_name=["tiny"], model="/models/tiny", max_model_len=2048),
        scheduler_config=SimpleNamespace(max_num_seqs=8, max_num_batched_tokens=1024),
        parallel_config=parallel_config,
    )


def _internal_dp(rank: int, *, engine_core: bool = True) -> Any:
    """vLLM's own parallel config of ``--data-parallel-size 2``: in a dense model's engine core of ``rank``, or
    in the front end (which keeps rank 0)."""
    with warnings.catch_warnings():  # torch, which vLLM imports as it builds the config, warns of its deprecations
        warnings.simplefilter("ignore", DeprecationWarning)
        vllm_config = pytest.importorskip("vllm.config", reason="vLLM is not installed: bash ops/install.sh --vllm")
        parallel = vllm_config.ParallelConfig(data_parallel_size=2)
    if engine_core:
        parallel.data_parallel_index = rank
        parallel.reconfigure_for_independent_dp_rank()  # what vLLM's engine core does before the scheduler
    return _vllm_config(parallel_config=parallel)


def _link(
    monkeypatch: pytest.MonkeyPatch,
    settings: VllmEngineSettings,
    vllm_config: Any,
    *,
    engine_index: int | None = None,
) -> EngineLink:
    monkeypatch.setattr(connect, "TelemetryPublisher", _RecordingPublisher)
    return EngineLink.open(
        vllm_config,
        block_size_tokens=16,
        kv_blocks_total=100,
        scheduler="vllm",
        obeys=[],
        load=lambda: (0, 0),
        settings=settings,
        engine_index=engine_index,
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
    assert gateway_dp_rank(_vllm_config(data_parallel_rank=3), settings) == 3
    assert gateway_dp_rank(SimpleNamespace(), settings) == 0
    assert gateway_dp_rank(_vllm_config(data_parallel_rank=3), VllmEngineSettings(dp_group="dp-a", dp_rank=1)) == 1
    assert gateway_dp_rank(_vllm_config(data_parallel_rank=3), VllmEngineSettings()) is None


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


def _serve_one(link: EngineLink, request_id: str, *, prompt_tokens: int, start_s: float) -> None:
    """One request through the rank's stream as the scheduler reports it: arrival, prefill step, decode step."""
    stream = link.stream
    stream.arrived(start_s, RequestTrack(request_id=request_id, arrived_s=start_s, prompt_tokens=prompt_tokens))
    stream.scheduled(start_s, [request_id])
    for offset, prefill in ((0.1, prompt_tokens), (0.2, 0)):
        stream.tokens(start_s + offset, [(request_id, 1)])
        stream.step(
            start_s + offset,
            StepCounts(
                duration_s=0.05,
                num_prefill_requests=1 if prefill else 0,
                sum_prefill_tokens=prefill,
                num_decode_requests=0 if prefill else 1,
                sum_decode_kv_tokens=0 if prefill else prompt_tokens + 1,
                num_running=1,
                num_waiting=0,
                kv_blocks_used=1,
                kv_blocks_total=100,
            ),
        )


class TestInternalDataParallelism:
    def test_vllms_parallel_config_gives_the_rank_and_size_in_a_dense_models_engine_core(self) -> None:
        """vLLM rewrites a dense model's rank to a single rank 0 of 1; the rank and size survive elsewhere."""
        assert internal_dp_rank(_internal_dp(1)) == connect.InternalDpRank(dp_rank=1, dp_size=2)
        assert internal_dp_rank(_internal_dp(0, engine_core=False)) == connect.InternalDpRank(dp_rank=0, dp_size=2)
        assert internal_dp_rank(_vllm_config()) is None, "a server of the external LB mode is its own engine"
        assert internal_dp_rank(SimpleNamespace()) is None

    def test_a_rank_registers_the_engine_with_its_dp_size_and_the_ranks_limits(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        link = _link(monkeypatch, VllmEngineSettings(engine_id="vllm-dp", deployment="dep"), _internal_dp(1))
        link.close()
        (registered,) = _published(link)
        assert isinstance(registered, EngineRegistered)
        assert (registered.dp_size, registered.dp_rank) == (2, 1)
        assert (registered.max_num_seqs, registered.max_num_batched_tokens, registered.kv_blocks_total) == (
            16,
            2048,
            200,
        )
        assert registered.event_id == f"vllm-dp-r1-{registered.source_epoch}-0"

    def test_both_ranks_fold_as_one_engine_with_a_producer_each(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Interleaved in one partition, the ranks' streams fold with no gap, restart or refusal, and the
        engine's rank loads are both ranks' latest."""
        settings = VllmEngineSettings(engine_id="vllm-dp", deployment="dep")
        links = [_link(monkeypatch, settings, _internal_dp(rank)) for rank in (0, 1)]
        for rank, link in enumerate(links):
            # Event time is the ranks' wall clock, as their registrations' is.
            _serve_one(link, f"r{rank}", prompt_tokens=40 * (rank + 1), start_s=time.time() + rank)
            link.close()
        streams = [_published(link) for link in links]
        ranked = [event for event in streams[1] if isinstance(event, RankStepReport)]
        assert [(r.dp_rank, r.step_id, r.load_tokens) for r in ranked] == [(1, 0, 81), (1, 1, 82)]
        estimates = EngineEstimates("vllm-dp")
        for pair in zip(*streams, strict=True):
            for event in pair:
                assert not estimates.admit(event).duplicate
                estimates.fold(event)
        guard = estimates.guard
        assert (guard.seq_gaps, guard.restarts, guard.rank_producers) == (0, 0, True)
        summary = estimates.summary()
        assert summary.dp is not None
        assert summary.dp.loads_tokens == [42.0, 82.0]
        assert summary.engine is not None
        assert summary.engine.dp_size == 2

    def test_a_dp_group_on_a_server_of_internal_dp_is_refused(self, monkeypatch: pytest.MonkeyPatch) -> None:
        settings = VllmEngineSettings(engine_id="vllm-dp", deployment="dep", dp_group="dp-a")
        with pytest.raises(ConfigError, match="GOVERNOR_DP_GROUP=dp-a"):
            _link(monkeypatch, settings, _internal_dp(1))

    def test_a_front_end_stat_logger_reports_as_the_rank_of_its_engine_index(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """vLLM's front end keeps rank 0 in its config and builds a stat logger per rank; it sees no L_g."""
        settings = VllmEngineSettings(engine_id="vllm-dp", deployment="dep")
        link = _link(monkeypatch, settings, _internal_dp(0, engine_core=False), engine_index=1)
        _serve_one(link, "r", prompt_tokens=40, start_s=100.0)
        link.close()
        events = _published(link)
        assert {event.dp_rank for event in events} == {1}
        assert [event.event_type for event in events].count("step") == 2
        assert not any(isinstance(event, RankStepReport) for event in events)
