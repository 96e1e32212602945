"""The admin API: list, add, drain and remove upstreams while requests stream; its token and its 400s."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from schemas.engines import EngineRegistered
from schemas.errors import ConfigError
from services.gateway.service import admin_token_of
from services.gateway.upstreams import UpstreamRegistry
from services.settings import Settings
from services.testing.upstream import RunningGateway, StubUpstream, gateway_over, upstream_entry, upstreams

TIMEOUT_S = 60.0  # a safety net for awaited events (test files run side by side), never a measured time
TOKEN = "a-token-of-16-chars-or-more"
ADMIN = "/admin/upstreams"


def _run(coro: object) -> None:
    asyncio.run(asyncio.wait_for(coro, TIMEOUT_S))  # type: ignore[arg-type]


async def _call(gw: RunningGateway, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
    async with gw.session.request(method, f"{gw.url}{path}", **kwargs) as response:
        return response.status, await response.json()


async def _complete(gw: RunningGateway) -> str:
    body = {"model": "m", "prompt": "x"}
    async with gw.session.post(f"{gw.url}/v1/completions", json=body) as response:
        assert response.status == 200
        return response.headers["x-governor-upstream"]


class TestListing:
    def test_lists_every_upstream_with_its_state_and_in_flight_count(self, tmp_path: Path) -> None:
        async def scenario() -> None:
            stubs = StubUpstream("e0"), StubUpstream("e1")

            def entries(started: list[StubUpstream]) -> str:
                return upstream_entry(started[0], pool="short") + upstream_entry(
                    started[1], pool="long", extra='dp_group = "dp"\ndp_rank = 0'
                )

            async with gateway_over(tmp_path, *stubs, entries=entries) as gw:
                status, listed = await _call(gw, "GET", ADMIN)
                assert status == 200
                assert listed == [
                    {"url": stubs[0].url, "pool": "short", "dp_rank": None, "state": "active", "in_flight": 0},
                    {"url": stubs[1].url, "pool": "long", "dp_rank": 0, "state": "active", "in_flight": 0},
                ]

        _run(scenario())


class TestAdding:
    def test_an_added_url_learns_its_model_and_takes_requests(self, tmp_path: Path) -> None:
        async def scenario() -> None:
            old = StubUpstream("e0")
            async with upstreams(StubUpstream("new", model="m")) as (added,), gateway_over(tmp_path, old) as gw:
                assert (await _call(gw, "POST", f"{ADMIN}/drain", json={"url": old.url}))[0] == 202
                status, entry = await _call(gw, "POST", ADMIN, json={"url": added.url, "pool": "default"})
                assert status == 200
                assert entry == {
                    "url": added.url,
                    "pool": "default",
                    "dp_rank": None,
                    "state": "active",
                    "in_flight": 0,
                }
                upstream = gw.gateway.registry.by_url(added.url)
                assert upstream is not None
                while upstream.model is None:
                    await asyncio.sleep(0.01)
                assert (upstream.model, upstream.max_model_len) == ("m", 4096)
                assert await _complete(gw) == upstream.engine_id
                assert len(added.requests) == 1

        _run(scenario())

    def test_adding_a_known_url_again_changes_nothing_and_another_pool_conflicts(self, tmp_path: Path) -> None:
        async def scenario() -> None:
            stub = StubUpstream("e0")
            async with gateway_over(tmp_path, stub) as gw:
                status, entry = await _call(gw, "POST", ADMIN, json={"url": stub.url + "/", "pool": "default"})
                assert (status, entry["url"]) == (200, stub.url)
                assert [u.engine_id for u in gw.gateway.registry.all()] == ["e0"]
                status, error = await _call(gw, "POST", ADMIN, json={"url": stub.url, "pool": "long"})
                assert (status, error["error"]["code"]) == (409, "pool_conflict")

        _run(scenario())

    def test_adding_a_draining_url_makes_it_active_again(self, tmp_path: Path) -> None:
        async def scenario() -> None:
            stub = StubUpstream("e0")
            async with gateway_over(tmp_path, stub) as gw:
                assert (await _call(gw, "POST", f"{ADMIN}/drain", json={"url": stub.url}))[0] == 202
                status, entry = await _call(gw, "POST", ADMIN, json={"url": stub.url, "pool": "default"})
                assert (status, entry["state"]) == (200, "active")
                assert await _complete(gw) == "e0"

        _run(scenario())


class TestDraining:
    def test_a_draining_upstream_finishes_its_stream_takes_nothing_new_and_is_removed_once_idle(
        self, tmp_path: Path
    ) -> None:
        async def scenario() -> None:
            busy = StubUpstream("e0", chunks=["one", "two"], gated=True)
            other = StubUpstream("e1", chunks=["a"], gated=True)
            async with gateway_over(tmp_path, busy, other) as gw:
                body = {"model": "m", "prompt": "x", "stream": True}
                response = await gw.session.post(f"{gw.url}/v1/completions", json=body)
                assert response.headers["x-governor-upstream"] == "e0"
                busy.release()
                await response.content.readuntil(b"\n\n")
                # One stream on each: least-load would now pick e0 (first of equals) but for the drain.
                held = await gw.session.post(f"{gw.url}/v1/completions", json=body)
                assert held.headers["x-governor-upstream"] == "e1"
                other.release()
                await held.content.readuntil(b"\n\n")

                status, entry = await _call(gw, "POST", f"{ADMIN}/drain", json={"url": busy.url})
                assert (status, entry["state"], entry["in_flight"]) == (202, "draining", 1)
                async with gw.session.post(f"{gw.url}/v1/completions", json=body) as new:
                    assert new.headers["x-governor-upstream"] == "e1"
                assert len(busy.requests) == 1
                status, error = await _call(gw, "DELETE", ADMIN, params={"url": busy.url})
                assert (status, error["error"]["code"]) == (409, "in_flight")

                busy.release()
                busy.finish.set()
                rest = await response.content.read()
                response.close()
                assert rest.endswith(b"data: [DONE]\n\n")
                assert b'"two"' in rest
                assert not busy.cancelled.is_set()

                status, _ = await _call(gw, "DELETE", ADMIN, params={"url": busy.url})
                assert status == 200
                other.finish.set()
                assert (await held.read()).endswith(b"data: [DONE]\n\n")
                _, listed = await _call(gw, "GET", ADMIN)
                assert [e["url"] for e in listed] == [other.url]

        _run(scenario())

    def test_a_drained_dp_rank_gets_no_assignment(self, tmp_path: Path) -> None:
        async def scenario() -> None:
            stubs = StubUpstream("r0"), StubUpstream("r1")

            def entries(started: list[StubUpstream]) -> str:
                return "".join(
                    upstream_entry(s, extra=f'dp_group = "dp"\ndp_rank = {i}') for i, s in enumerate(started)
                )

            async with gateway_over(tmp_path, *stubs, entries=entries) as gw:
                assert (await _call(gw, "POST", f"{ADMIN}/drain", json={"url": stubs[0].url}))[0] == 202
                assert [await _complete(gw) for _ in range(3)] == ["r1", "r1", "r1"]
                assert stubs[0].requests == []

        _run(scenario())

    def test_a_draining_engine_that_registers_again_stays_draining(self) -> None:
        registry = UpstreamRegistry()
        registration = EngineRegistered(
            event_id="r",
            ts=1.0,
            deployment="test",
            engine_id="e0",
            seq=0,
            model="m",
            gpu="cpu",
            max_num_seqs=8,
            max_num_batched_tokens=2048,
            max_model_len=2048,
            kv_blocks_total=100,
            block_size_tokens=16,
            endpoint_url="http://127.0.0.1:9",
        )
        upstream = registry.register(registration)
        assert upstream is not None
        upstream.draining = True
        again = registry.register(registration)
        assert again is not None
        assert again.draining
        assert not registry.in_rotation(again, 1.0)


class TestRefusals:
    @pytest.mark.parametrize(
        "case",
        [
            ("POST", f"{ADMIN}/drain", {"json": {"url": "http://127.0.0.1:1"}}, 404, "unknown_upstream"),
            ("DELETE", ADMIN, {"params": {"url": "http://127.0.0.1:1"}}, 404, "unknown_upstream"),
            ("DELETE", ADMIN, {}, 400, "invalid_value"),
            ("POST", ADMIN, {"data": b"{not json"}, 400, "invalid_json"),
            ("POST", ADMIN, {"json": {"pool": "short"}}, 400, "invalid_value"),
            ("POST", ADMIN, {"json": {"url": "ftp://h", "pool": "short"}}, 400, "invalid_value"),
            ("POST", ADMIN, {"json": {"url": "http://h:1", "pool": "short", "extra": 1}}, 400, "invalid_value"),
            ("POST", ADMIN, {"json": ["http://h:1"]}, 400, "invalid_value"),
            ("POST", f"{ADMIN}/drain", {"json": {}}, 400, "invalid_value"),
        ],
    )
    def test_unknown_urls_and_bad_input_get_a_json_error(
        self, tmp_path: Path, case: tuple[str, str, dict[str, Any], int, str]
    ) -> None:
        method, path, kwargs, status, code = case

        async def scenario() -> None:
            async with gateway_over(tmp_path, StubUpstream("e0")) as gw:
                got_status, error = await _call(gw, method, path, **kwargs)
                assert (got_status, error["error"]["code"]) == (status, code)
                assert [u.engine_id for u in gw.gateway.registry.all()] == ["e0"]

        _run(scenario())


class TestToken:
    @pytest.mark.parametrize("authorization", [None, "Bearer wrong-token-wrong-token", TOKEN, f"Basic {TOKEN}"])
    def test_without_the_bearer_token_every_admin_call_is_refused(
        self, tmp_path: Path, authorization: str | None
    ) -> None:
        async def scenario() -> None:
            stub = StubUpstream("e0")
            async with gateway_over(tmp_path, stub, admin_token=TOKEN) as gw:
                headers = {} if authorization is None else {"Authorization": authorization}
                for method, path, kwargs in (
                    ("GET", ADMIN, {}),
                    ("POST", ADMIN, {"json": {"url": "http://127.0.0.1:1", "pool": "p"}}),
                    ("POST", f"{ADMIN}/drain", {"json": {"url": stub.url}}),
                    ("DELETE", ADMIN, {"params": {"url": stub.url}}),
                ):
                    status, error = await _call(gw, method, path, headers=headers, **kwargs)
                    assert (status, error["error"]["code"]) == (401, "unauthorized")
                (upstream,) = gw.gateway.registry.all()
                assert not upstream.draining

        _run(scenario())

    def test_with_the_bearer_token_admin_calls_are_served(self, tmp_path: Path) -> None:
        async def scenario() -> None:
            stub = StubUpstream("e0")
            async with gateway_over(tmp_path, stub, admin_token=TOKEN) as gw:
                headers = {"Authorization": f"Bearer {TOKEN}"}
                status, entry = await _call(gw, "POST", f"{ADMIN}/drain", json={"url": stub.url}, headers=headers)
                assert (status, entry["state"]) == (202, "draining")

        _run(scenario())


class TestTokenSetting:
    def test_loopback_needs_no_token(self) -> None:
        for host in ("127.0.0.1", "localhost", "::1"):
            assert admin_token_of(Settings.load({"gateway_host": host}, environ={})) is None

    def test_listening_beyond_loopback_without_a_token_is_refused(self) -> None:
        with pytest.raises(ConfigError, match="GOVERNOR_GATEWAY_ADMIN_TOKEN"):
            admin_token_of(Settings.load({"gateway_host": "0.0.0.0"}, environ={}))

    def test_the_token_comes_from_the_environment_and_is_never_shown(self) -> None:
        settings = Settings.load(
            {"gateway_host": "0.0.0.0"},
            environ={"GOVERNOR_GATEWAY_ADMIN_TOKEN": TOKEN},
        )
        assert admin_token_of(settings) == TOKEN
        assert TOKEN not in str(settings.redacted())

    def test_a_short_token_is_refused_without_showing_it(self) -> None:
        with pytest.raises(ConfigError) as caught:
            Settings.load(environ={"GOVERNOR_GATEWAY_ADMIN_TOKEN": "short"})
        assert "gateway_admin_token" in str(caught.value)
        assert "'short'" not in str(caught.value)
