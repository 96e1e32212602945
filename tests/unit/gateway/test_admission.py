"""Admission acting through the gateway: busy and overloaded upstreams, the queue, 429 with counts, defaults."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from services.gateway.admission import AdmissionGate
from services.gateway.pool_queue import PoolQueue
from services.gateway.telemetry import GatewayTelemetry
from services.sdk.policy_client import PolicyClient
from services.sdk.protocol import ListSink, StaticPolicySource
from services.testing.upstream import RunningGateway, StubUpstream, gateway_over, upstream_entry
from tests.unit.gateway.documents import NOW_S, admission

TIMEOUT_S = 60.0  # a safety net for awaited events (test files run side by side), never a measured time
BODY = {"model": "m", "prompt": "a b c", "max_tokens": 5}
QUEUE = "[queue]\ndeadline_s = 0.2\nrecheck_s = 0.01\n"


def _with_queue(options: str) -> Callable[[list[StubUpstream]], str]:
    def entries(stubs: list[StubUpstream]) -> str:
        return options + "".join(upstream_entry(s) for s in stubs)

    return entries


async def _post(gw: RunningGateway, tier: str = "default") -> tuple[int, str | None, dict[str, str]]:
    headers = {"x-governor-tier": tier}
    async with gw.session.post(f"{gw.url}/v1/completions", json=BODY, headers=headers) as response:
        return response.status, response.headers.get("x-governor-upstream"), dict(response.headers)


class TestLevels:
    def test_an_overloaded_upstream_gets_nothing_while_another_takes_requests(self, tmp_path: Path) -> None:
        async def scenario() -> None:
            policies = StaticPolicySource([admission("e0", "overloaded")])
            stubs = StubUpstream("e0"), StubUpstream("e1")
            async with gateway_over(tmp_path, *stubs, policies=policies) as gw:
                answers = [await _post(gw) for _ in range(4)]
                assert [(status, upstream) for status, upstream, _ in answers] == [(200, "e1")] * 4
                assert stubs[0].requests == []

        asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S))

    def test_a_busy_upstream_gets_its_admit_fraction(self, tmp_path: Path) -> None:
        """With fraction 0 the busy upstream never wins its draw; with 1 it takes requests like an ok one."""

        async def scenario() -> None:
            policies = StaticPolicySource([admission("e0", "busy", admit_fraction=0.0)])
            stubs = StubUpstream("e0"), StubUpstream("e1")
            async with gateway_over(tmp_path, *stubs, policies=policies) as gw:
                for _ in range(4):
                    await _post(gw)
                assert (len(stubs[0].requests), len(stubs[1].requests)) == (0, 4)
                policies.put(admission("e0", "busy", admit_fraction=1.0, version=2))
                policies.put(admission("e1", "overloaded"))
                for _ in range(3):
                    await _post(gw)
                assert len(stubs[0].requests) == 3
                acks = [(e.kind, e.scope, e.version) for e in gw.events("policy.applied")]
                assert acks.count(("admission", "e0", 1)) == 1
                assert ("admission", "e0", 2) in acks
                assert ("admission", "e1", 1) in acks

        asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S))


class TestOfferedSlots:
    """A BF-IO round fills several slots at once: a busy rank offers each with probability admit_fraction."""

    def test_ok_offers_all_overloaded_none_busy_about_its_fraction(self) -> None:
        policies = StaticPolicySource(
            [admission("ok", "ok"), admission("hot", "overloaded"), admission("warm", "busy", admit_fraction=0.25)]
        )
        telemetry = GatewayTelemetry(ListSink(), gateway_id="gw", deployment="test", clock=lambda: NOW_S)
        gate = AdmissionGate(policies, telemetry, seed=0)
        assert gate.offered_slots("ok", 8, NOW_S) == 8
        assert gate.offered_slots("hot", 8, NOW_S) == 0
        assert gate.offered_slots("unknown", 8, NOW_S) == 8, "no document: the safe default admits"
        offered = sum(gate.offered_slots("warm", 4, NOW_S) for _ in range(250))
        assert 200 <= offered <= 300, "1,000 slots at 0.25: 250 expected, +-3.5 sigma"


class TestQueue:
    def test_overload_queues_then_sheds_with_429_retry_after_and_counts(self, tmp_path: Path) -> None:
        async def scenario() -> None:
            policies = StaticPolicySource([admission("e0", "overloaded")])
            stub = StubUpstream("e0")
            async with gateway_over(tmp_path, stub, policies=policies, entries=_with_queue(QUEUE)) as gw:
                status, _, headers = await _post(gw)
                assert status == 429
                assert headers["Retry-After"] == "1"
                assert stub.requests == []
                (queued,) = gw.events("gateway.queued")
                (shed,) = gw.events("gateway.shed")
                assert (queued.pool, queued.queue_depth) == ("default", 1)
                assert (shed.reason, shed.pool, shed.request_id) == ("deadline", "default", queued.request_id)
                async with gw.session.get(f"{gw.url}/metrics") as response:
                    text = await response.text()
                assert 'governor_gateway_shed_total{deployment="test",reason="deadline",service="gateway"} 1.0' in text

        asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S))

    def test_a_full_queue_sheds_at_once(self, tmp_path: Path) -> None:
        async def scenario() -> None:
            policies = StaticPolicySource([admission("e0", "overloaded")])
            options = "[queue]\nmax_waiting = 0\n"
            async with gateway_over(
                tmp_path, StubUpstream("e0"), policies=policies, entries=_with_queue(options)
            ) as gw:
                status, _, _ = await _post(gw)
                assert status == 429
                assert [e.reason for e in gw.events("gateway.shed")] == ["queue_full"]
                assert gw.events("gateway.queued") == []

        asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S))

    def test_a_queued_request_is_served_when_the_upstream_recovers(self, tmp_path: Path) -> None:
        async def scenario() -> None:
            policies = StaticPolicySource([admission("e0", "overloaded")])
            options = "[queue]\ndeadline_s = 30.0\nrecheck_s = 0.01\n"
            stub = StubUpstream("e0")
            async with gateway_over(tmp_path, stub, policies=policies, entries=_with_queue(options)) as gw:
                request = asyncio.ensure_future(_post(gw))
                await gw.sink.seen("gateway.queued").wait()
                policies.put(admission("e0", "ok", version=2))
                status, upstream, _ = await request
                assert (status, upstream) == (200, "e0")
                assert gw.events("gateway.shed") == []

        asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S))


class TestPoolQueue:
    def test_the_paying_tier_is_served_first_then_arrival_order(self) -> None:
        async def scenario() -> None:
            queue: PoolQueue[str] = PoolQueue(max_waiting=10, deadline_s=30.0, recheck_s=30.0)
            capacity: list[str] = []
            served: list[str] = []

            def take() -> str | None:
                return capacity.pop() if capacity else None

            async def wait(name: str, priority: int, queued: asyncio.Event) -> None:
                result = await queue.wait_for(priority, take, lambda depth: queued.set())
                served.append(f"{name}:{result}")

            queued = [asyncio.Event() for _ in range(3)]
            tasks = []
            for (name, priority), event in zip([("free-1", 1), ("free-2", 1), ("paid", 0)], queued, strict=True):
                tasks.append(asyncio.ensure_future(wait(name, priority, event)))
                await event.wait()
            assert queue.depth == 3
            assert queue.must_wait(1)
            for slot in ("s1", "s2", "s3"):
                capacity.append(slot)
                queue.notify()
                while len(served) < ("s1", "s2", "s3").index(slot) + 1:
                    await asyncio.sleep(0)
            await asyncio.gather(*tasks)
            assert served == ["paid:s1", "free-1:s2", "free-2:s3"]
            assert queue.depth == 0

        asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S))


class TestControlPlaneDown:
    def test_without_redis_the_gateway_serves_on_the_safe_defaults(self, tmp_path: Path) -> None:
        async def scenario(policies: PolicyClient) -> None:
            async with gateway_over(tmp_path, StubUpstream("e0"), policies=policies) as gw:
                for _ in range(3):
                    status, upstream, _ = await _post(gw)
                    assert (status, upstream) == (200, "e0")
                assert [e.reason for e in gw.events("gateway.routed")] == ["context_fit"] * 3

        client = PolicyClient("redis://127.0.0.1:1/0", "test", poll_interval_s=0.05, timeout_s=0.05)
        try:
            asyncio.run(asyncio.wait_for(scenario(client), TIMEOUT_S))
        finally:
            client.close()

    def test_expired_documents_fall_back_to_admitting(self, tmp_path: Path) -> None:
        async def scenario() -> None:
            policies = StaticPolicySource([admission("e0", "overloaded", valid_s=-0.5)])
            async with gateway_over(tmp_path, StubUpstream("e0"), policies=policies) as gw:
                status, upstream, _ = await _post(gw)
                assert (status, upstream) == (200, "e0")

        asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S))
