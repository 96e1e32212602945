"""Upstreams: the gateway file, registrations with an endpoint, silence, and health checks in and out of rotation."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from schemas.engines import EngineRegistered, Heartbeat
from schemas.envelope import MAX_ID_CHARS
from schemas.errors import ConfigError
from schemas.names import IDENTIFIER_PATTERN
from services.gateway.config import read_gateway_config
from services.gateway.upstreams import UpstreamRegistry
from services.testing.upstream import StubUpstream, gateway_over

TIMEOUT_S = 60.0  # a safety net for awaited events (test files run side by side), never a measured time


def _registration(engine_id: str, url: str | None, ts: float, **fields: object) -> EngineRegistered:
    return EngineRegistered(
        event_id=f"{engine_id}-reg",
        ts=ts,
        deployment="test",
        engine_id=engine_id,
        seq=0,
        model="m",
        gpu="cpu",
        pool="short",
        max_num_seqs=8,
        max_num_batched_tokens=2048,
        max_model_len=2048,
        kv_blocks_total=100,
        block_size_tokens=16,
        endpoint_url=url,
        **fields,  # type: ignore[arg-type]
    )


class TestGatewayFile:
    def test_a_rank_without_its_group_is_refused_with_the_field(self, tmp_path: Path) -> None:
        path = tmp_path / "gateway.toml"
        path.write_text('[[upstreams]]\nengine_id = "a"\nurl = "http://h:1"\nmodel = "m"\ndp_rank = 0\n')
        with pytest.raises(ConfigError, match="dp_group and dp_rank go together"):
            read_gateway_config(path)

    def test_a_bad_url_names_the_file_and_the_field(self, tmp_path: Path) -> None:
        path = tmp_path / "gateway.toml"
        path.write_text('[[upstreams]]\nengine_id = "a"\nurl = "ftp://h"\nmodel = "m"\n')
        with pytest.raises(ConfigError, match=r"gateway.toml: upstreams.0.url"):
            read_gateway_config(path)

    def test_repeated_engine_ids_are_refused(self, tmp_path: Path) -> None:
        path = tmp_path / "gateway.toml"
        entry = '[[upstreams]]\nengine_id = "a"\nurl = "http://h:1"\nmodel = "m"\n'
        path.write_text(entry + entry)
        with pytest.raises(ConfigError, match="repeated"):
            read_gateway_config(path)

    def test_no_file_is_no_static_upstream(self) -> None:
        assert read_gateway_config(None).upstreams == []


class TestRegistry:
    def test_a_registration_with_an_endpoint_is_an_upstream_in_its_dp_group(self) -> None:
        registry = UpstreamRegistry(silent_after_s=30.0)
        upstream = registry.register(
            _registration("dp0-1", "http://10.0.0.1:8000/", ts=100.0, dp_group="dp0", dp_rank=1)
        )
        assert upstream is not None
        assert (upstream.url, upstream.pool, upstream.dp_group, upstream.dp_rank) == (
            "http://10.0.0.1:8000",
            "short",
            "dp0",
            1,
        )
        assert registry.serving("m", 120.0) == [upstream]

    def test_a_registration_without_an_endpoint_is_not_an_upstream(self) -> None:
        registry = UpstreamRegistry()
        assert registry.register(_registration("e0", None, ts=1.0)) is None
        assert registry.all() == ()

    def test_a_silent_engine_leaves_rotation_until_it_is_heard_again(self) -> None:
        registry = UpstreamRegistry(silent_after_s=30.0)
        registry.register(_registration("e0", "http://h:1", ts=100.0))
        assert registry.serving("m", 131.0) == []
        registry.heartbeat(
            Heartbeat(event_id="hb", ts=140.0, deployment="test", engine_id="e0", seq=1, num_running=0, num_waiting=0)
        )
        assert [u.engine_id for u in registry.serving("m", 150.0)] == ["e0"]

    def test_failures_eject_and_one_pass_restores(self) -> None:
        registry = UpstreamRegistry(failures_to_eject=2)
        upstream = registry.register(_registration("e0", "http://h:1", ts=0.0))
        assert upstream is not None
        assert not registry.check_failed(upstream)
        assert registry.check_failed(upstream)
        assert not registry.in_rotation(upstream, 1.0)
        assert registry.check_passed(upstream)
        assert registry.in_rotation(upstream, 1.0)


class TestThroughTheGateway:
    def test_a_failing_upstream_leaves_rotation_and_comes_back_when_healthy(self, tmp_path: Path) -> None:
        async def scenario() -> None:
            stub = StubUpstream("e0")
            async with gateway_over(tmp_path, stub) as gw:
                health = gw.gateway.health
                assert health is not None
                body = {"model": "m", "prompt": "x"}
                stub.healthy = False
                await health.check_all()
                async with gw.session.post(f"{gw.url}/v1/completions", json=body) as response:
                    assert response.status == 503
                async with gw.session.get(f"{gw.url}/readyz") as response:
                    assert response.status == 503
                stub.healthy = True
                await health.check_all()
                async with gw.session.post(f"{gw.url}/v1/completions", json=body) as response:
                    assert response.status == 200

        asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S))

    def test_a_registered_engine_takes_requests(self, tmp_path: Path) -> None:
        async def scenario() -> None:
            stub = StubUpstream("reg-0")
            async with gateway_over(tmp_path, stub, entries=lambda stubs: "") as gw:
                body = {"model": "m", "prompt": "x"}
                async with gw.session.post(f"{gw.url}/v1/completions", json=body) as response:
                    assert response.status == 404
                gw.gateway.registered(_registration("reg-0", stub.url, ts=990.0))
                async with gw.session.post(f"{gw.url}/v1/completions", json=body) as response:
                    assert response.status == 200
                    assert response.headers["x-governor-upstream"] == "reg-0"

        asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S))


class TestAddedByUrl:
    def test_the_engine_id_made_from_a_url_is_a_contract_identifier_whatever_the_host(self) -> None:
        """Non-ASCII letters and a host longer than an id allows still give an id the routing events accept."""
        registry = UpstreamRegistry(failures_to_eject=1)
        long_host = "h" * 300
        first = registry.add_url("http://münchen.example:8000", pool="short", model="m")
        second = registry.add_url(f"http://{long_host}:8000", pool="short", model="m")
        third = registry.add_url(f"http://{long_host}:8001", pool="short", model="m")
        for upstream in (first, second, third):
            assert re.fullmatch(IDENTIFIER_PATTERN, upstream.engine_id)
            assert len(upstream.engine_id) <= MAX_ID_CHARS
        assert len({first.engine_id, second.engine_id, third.engine_id}) == 3
