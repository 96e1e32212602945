"""FleetOpt acting through the gateway: pool by L_total, compress-and-route, context fit without a plan."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from schemas.engines import PolicyApplied
from services.gateway.fleet_routing import choose_pool
from services.sdk.protocol import StaticPolicySource
from services.testing.upstream import RunningGateway, StubUpstream, gateway_over, upstream_entry, words
from tests.unit.gateway.documents import fleetopt_plan

TIMEOUT_S = 60.0  # a safety net for awaited events (test files run side by side), never a measured time
SENTENCES = [
    "The river flooded the valley in spring.",
    "Farmers in the valley lost their crops to the river.",
    "A festival was held in the town square last year.",
    "Engineers proposed a dam on the river above the valley.",
    "The dam would protect valley farms from the spring flood.",
    "Some residents liked the colourful market stalls.",
    "The council debated the river dam for many months.",
    "Tourists bought postcards and ice cream at the market.",
    "Rainfall records show the river floods the valley often.",
    "A local choir sang at the opening of the library.",
    "Critics said the dam costs too much for the valley.",
    "Should the council build the dam on the river?",
]
TEXT = " ".join(SENTENCES)


def _pools(stubs: list[StubUpstream]) -> str:
    short, long = stubs
    return upstream_entry(short, pool="short") + upstream_entry(long, pool="long")


async def _complete(gw: RunningGateway, body: dict[str, Any], category: str | None = None) -> str:
    headers = {} if category is None else {"x-governor-category": category}
    async with gw.session.post(f"{gw.url}/v1/completions", json=body, headers=headers) as response:
        assert response.status == 200, await response.text()
        return response.headers["x-governor-upstream"]


def _prompt(n_words: int) -> str:
    return " ".join(["w"] * n_words)


class TestChoosePool:
    def test_boundary_band_and_the_rest(self) -> None:
        routing = fleetopt_plan(b_short_tokens=100, gamma=1.5).payload.routing
        pick = {"short_pool": "s", "long_pool": "l", "routing": routing}
        assert choose_pool(l_total_tokens=100, l_out_tokens=10, category=None, **pick).pool == "s"
        band = choose_pool(l_total_tokens=150, l_out_tokens=10, category="prose", **pick)
        assert (band.pool, band.reason, band.compress_to_tokens) == ("s", "fleetopt_compressed", 90)
        assert choose_pool(l_total_tokens=150, l_out_tokens=10, category="code", **pick).pool == "l"
        assert choose_pool(l_total_tokens=150, l_out_tokens=10, category=None, **pick).pool == "l"
        assert choose_pool(l_total_tokens=151, l_out_tokens=10, category="prose", **pick).pool == "l"

    def test_a_band_request_whose_output_alone_fills_the_boundary_goes_long(self) -> None:
        routing = fleetopt_plan(b_short_tokens=100, gamma=1.5).payload.routing
        choice = choose_pool(
            l_total_tokens=120, l_out_tokens=100, category="prose", routing=routing, short_pool="s", long_pool="l"
        )
        assert (choice.pool, choice.reason) == ("l", "fleetopt_long")

    def test_without_a_plan_it_is_context_fit(self) -> None:
        choice = choose_pool(
            l_total_tokens=10**6, l_out_tokens=1, category="prose", routing=None, short_pool="s", long_pool="l"
        )
        assert (choice.pool, choice.reason) == (None, "context_fit")


class TestPlanRouting:
    def test_routes_follow_the_plan_and_change_when_a_new_plan_is_pushed(self, tmp_path: Path) -> None:
        async def scenario() -> None:
            policies = StaticPolicySource([fleetopt_plan(b_short_tokens=40, version=1)])
            stubs = StubUpstream("short-0"), StubUpstream("long-0")
            async with gateway_over(tmp_path, *stubs, policies=policies, entries=_pools) as gw:
                small = {"model": "m", "prompt": _prompt(10), "max_tokens": 10}
                large = {"model": "m", "prompt": _prompt(60), "max_tokens": 10}
                assert await _complete(gw, small) == "short-0"
                assert await _complete(gw, large) == "long-0"
                policies.put(fleetopt_plan(b_short_tokens=15, version=2))
                assert await _complete(gw, small) == "long-0"
                routed = gw.events("gateway.routed")
                assert [(e.reason, e.l_total_tokens) for e in routed] == [
                    ("fleetopt_short", 20),
                    ("fleetopt_long", 70),
                    ("fleetopt_long", 20),
                ]
                acks = [e for e in gw.sink.events if isinstance(e, PolicyApplied)]
                assert [(a.kind, a.version) for a in acks] == [("fleetopt", 1), ("fleetopt", 2)]
                assert routed[-1].policy_versions == {"fleetopt": 2}

        asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S))

    def test_an_expired_plan_falls_back_to_context_fit(self, tmp_path: Path) -> None:
        async def scenario() -> None:
            policies = StaticPolicySource([fleetopt_plan(b_short_tokens=40, valid_s=-0.5)])
            stubs = StubUpstream("short-0"), StubUpstream("long-0")
            async with gateway_over(tmp_path, *stubs, policies=policies, entries=_pools) as gw:
                await _complete(gw, {"model": "m", "prompt": _prompt(60), "max_tokens": 10})
                (routed,) = gw.events("gateway.routed")
                assert routed.reason == "context_fit"
                assert gw.events("policy.applied") == []

        asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S))


class TestCompressAndRoute:
    def test_a_band_request_of_a_safe_category_is_cut_to_fit_the_short_pool(self, tmp_path: Path) -> None:
        async def scenario() -> None:
            policies = StaticPolicySource([fleetopt_plan(b_short_tokens=60, gamma=2.5)])
            stubs = StubUpstream("short-0"), StubUpstream("long-0")
            async with gateway_over(tmp_path, *stubs, policies=policies, entries=_pools) as gw:
                assert words(TEXT) == 110
                body = {"model": "m", "prompt": TEXT, "max_tokens": 20}
                assert await _complete(gw, body, category="prose") == "short-0"
                sent = stubs[0].requests[0]["prompt"]
                assert words(sent) <= 40
                assert sent.endswith(SENTENCES[-1])
                assert sent.startswith(SENTENCES[0])
                assert all(sentence in TEXT for sentence in sent.split("? ")[0].split(". "))
                (compressed,) = gw.events("gateway.compressed")
                assert compressed.original_prompt_tokens == 110
                assert compressed.compressed_prompt_tokens == words(sent)
                assert compressed.target_tokens == 40
                assert compressed.sentences_total == len(SENTENCES)
                (routed,) = gw.events("gateway.routed")
                assert (routed.reason, routed.prompt_tokens) == ("fleetopt_compressed", words(sent))

        asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S))

    def test_an_unsafe_category_is_never_altered(self, tmp_path: Path) -> None:
        async def scenario() -> None:
            policies = StaticPolicySource([fleetopt_plan(b_short_tokens=60, gamma=2.5)])
            stubs = StubUpstream("short-0"), StubUpstream("long-0")
            async with gateway_over(tmp_path, *stubs, policies=policies, entries=_pools) as gw:
                body = {"model": "m", "prompt": TEXT, "max_tokens": 20}
                assert await _complete(gw, body, category="code") == "long-0"
                assert stubs[1].requests == [body]
                assert gw.events("gateway.compressed") == []

        asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S))

    def test_a_chat_request_keeps_its_system_message_and_fits_by_the_templates_count(self, tmp_path: Path) -> None:
        async def scenario() -> None:
            policies = StaticPolicySource([fleetopt_plan(b_short_tokens=60, gamma=2.5)])
            stubs = StubUpstream("short-0"), StubUpstream("long-0")
            async with gateway_over(tmp_path, *stubs, policies=policies, entries=_pools) as gw:
                system = {"role": "system", "content": "You answer briefly."}
                body = {"model": "m", "messages": [system, {"role": "user", "content": TEXT}], "max_tokens": 20}
                async with gw.session.post(
                    f"{gw.url}/v1/chat/completions", json=body, headers={"x-governor-category": "prose"}
                ) as response:
                    assert response.headers["x-governor-upstream"] == "short-0"
                sent = stubs[0].requests[0]["messages"]
                assert sent[0] == system
                assert words(sent[0]["content"]) + words(sent[1]["content"]) + 4 <= 40

        asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S))

    def test_a_prompt_whose_last_sentence_alone_is_too_long_goes_long_unaltered(self, tmp_path: Path) -> None:
        async def scenario() -> None:
            policies = StaticPolicySource([fleetopt_plan(b_short_tokens=60, gamma=2.5)])
            stubs = StubUpstream("short-0"), StubUpstream("long-0")
            async with gateway_over(tmp_path, *stubs, policies=policies, entries=_pools) as gw:
                body = {"model": "m", "prompt": _prompt(90), "max_tokens": 20}
                assert await _complete(gw, body, category="prose") == "long-0"
                assert stubs[1].requests == [body]

        asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S))


class TestContextFit:
    def test_without_a_plan_only_upstreams_whose_window_holds_the_request_are_used(self, tmp_path: Path) -> None:
        def entries(stubs: list[StubUpstream]) -> str:
            small, big = stubs
            return upstream_entry(small, extra="max_model_len = 50") + upstream_entry(big, extra="max_model_len = 1000")

        async def scenario() -> None:
            stubs = StubUpstream("small"), StubUpstream("big")
            async with gateway_over(tmp_path, *stubs, entries=entries) as gw:
                for _ in range(3):
                    assert await _complete(gw, {"model": "m", "prompt": _prompt(60), "max_tokens": 10}) == "big"
                body = {"model": "m", "prompt": _prompt(995), "max_tokens": 10}
                async with gw.session.post(f"{gw.url}/v1/completions", json=body) as response:
                    assert response.status == 400
                    assert (await response.json())["error"]["code"] == "context_too_long"
                assert stubs[0].requests == []
                assert [e.reason for e in gw.events("gateway.shed")] == ["context_too_long"]

        asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S))
