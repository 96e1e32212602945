"""BF-IO acting through the gateway: a DP group's central pool, slot limits, and JSQ-by-load without a bundle."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from policies.bfio import BfioRouter
from policies.bfio.router import ActiveBatch, WaitingBatch
from schemas.policy_docs import AdmissionPolicy
from schemas.policy_docs.bfio import RankDoc, WaitingRequestDoc
from services.gateway.admission import AdmissionGate
from services.gateway.config import StaticUpstream
from services.gateway.ranks import RankGroup, vllm_score
from services.gateway.telemetry import GatewayTelemetry
from services.gateway.upstreams import InFlight, Upstream, UpstreamRegistry
from services.sdk.protocol import ListSink, StaticPolicySource
from services.testing.upstream import RunningGateway, StubUpstream, gateway_over, upstream_entry
from tests.unit.gateway.documents import NOW_S, admission, bfio_bundle
from tests.unit.gateway.steps import step

IntArray = npt.NDArray[np.int64]
TIMEOUT_S = 60.0  # a safety net for awaited events (the router's kernels may compile first), never a measured time


def _ranks(stubs: list[StubUpstream], slots: int = 1) -> str:
    return "".join(
        upstream_entry(stub, extra=f'dp_group = "dp0"\ndp_rank = {g}\nmax_num_seqs = {slots}\n')
        for g, stub in enumerate(stubs)
    )


async def _post(gw: RunningGateway, words: int) -> tuple[int, str]:
    body = {"model": "m", "prompt": " ".join(["w"] * words), "max_tokens": 8}
    async with gw.session.post(f"{gw.url}/v1/completions", json=body) as response:
        return response.status, response.headers["x-governor-upstream"]


class TestCentralPool:
    def test_no_rank_gets_more_than_its_slots_and_waiting_requests_go_when_one_frees(self, tmp_path: Path) -> None:
        async def scenario() -> None:
            policies = StaticPolicySource([bfio_bundle("dp0")])
            stubs = StubUpstream("r0", gated=True), StubUpstream("r1", gated=True)
            async with gateway_over(tmp_path, *stubs, policies=policies, entries=_ranks) as gw:
                requests = [asyncio.ensure_future(_post(gw, words)) for words in (30, 20, 10)]
                await asyncio.gather(stubs[0].started.wait(), stubs[1].started.wait())
                assert len(gw.events("gateway.routed")) == 2
                stubs[0].finish.set()
                stubs[1].finish.set()
                answers = await asyncio.gather(*requests)
                assert [status for status, _ in answers] == [200, 200, 200]
                assert (stubs[0].max_running, stubs[1].max_running) == (1, 1)
                assert len(stubs[0].requests) + len(stubs[1].requests) == 3
                routed = gw.events("gateway.routed")
                assert {e.balancer for e in routed} == {"bfio"}
                assert sorted(e.dp_rank for e in routed) in ([0, 0, 1], [0, 1, 1])
                assert ("bfio", "dp0", 1) in [(e.kind, e.scope, e.version) for e in gw.events("policy.applied")]

        asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S))

    def test_the_next_request_goes_to_the_idle_rank(self, tmp_path: Path) -> None:
        async def scenario() -> None:
            policies = StaticPolicySource([bfio_bundle("dp0")])
            stubs = StubUpstream("r0", gated=True), StubUpstream("r1", gated=True)
            entries = functools.partial(_ranks, slots=4)
            async with gateway_over(tmp_path, *stubs, policies=policies, entries=entries) as gw:
                first = asyncio.ensure_future(_post(gw, 50))
                started = [asyncio.ensure_future(stub.started.wait()) for stub in stubs]
                done, _ = await asyncio.wait(started, return_when=asyncio.FIRST_COMPLETED)
                busy = started.index(done.pop())
                second = asyncio.ensure_future(_post(gw, 5))
                await started[1 - busy]
                assert (len(stubs[busy].requests), len(stubs[1 - busy].requests)) == (1, 1)
                for stub in stubs:
                    stub.finish.set()
                assert {(await first)[1], (await second)[1]} == {"r0", "r1"}

        asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S))

    def test_it_falls_back_to_jsq_by_load_when_the_bundle_expires(self, tmp_path: Path) -> None:
        async def scenario() -> None:
            now = [NOW_S]
            policies = StaticPolicySource([bfio_bundle("dp0", valid_s=10.0)])
            stubs = StubUpstream("r0"), StubUpstream("r1")
            async with gateway_over(tmp_path, *stubs, policies=policies, entries=_ranks, clock=lambda: now[0]) as gw:
                assert (await _post(gw, 5))[0] == 200
                now[0] = NOW_S + 20.0
                assert (await _post(gw, 5))[0] == 200
                assert [e.balancer for e in gw.events("gateway.routed")] == ["bfio", "jsq_load"]
                routing = gw.gateway.group("dp0").last_routing
                assert routing is not None
                assert routing.fallback_reason == "bundle_expired"

        asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S))

    def test_without_any_bundle_it_is_jsq_by_load(self, tmp_path: Path) -> None:
        async def scenario() -> None:
            stubs = StubUpstream("r0"), StubUpstream("r1")
            async with gateway_over(tmp_path, *stubs, entries=_ranks) as gw:
                assert (await _post(gw, 5))[0] == 200
                assert [e.balancer for e in gw.events("gateway.routed")] == ["jsq_load"]
                routing = gw.gateway.group("dp0").last_routing
                assert routing is not None
                assert routing.fallback_reason == "no_bundle"

        asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S))

    @pytest.mark.parametrize(
        "closed",
        [admission("r0", "overloaded"), admission("r0", "busy", admit_fraction=0.0)],
        ids=["overloaded", "busy_0"],
    )
    def test_an_overloaded_rank_or_a_busy_one_at_fraction_zero_gets_no_slot(
        self, tmp_path: Path, closed: AdmissionPolicy
    ) -> None:
        async def scenario() -> None:
            policies = StaticPolicySource([bfio_bundle("dp0"), closed])
            stubs = StubUpstream("r0"), StubUpstream("r1")
            async with gateway_over(tmp_path, *stubs, policies=policies, entries=_ranks) as gw:
                for _ in range(3):
                    assert await _post(gw, 5) == (200, "r1")
                assert stubs[0].requests == []

        asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S))


class TestRankGroup:
    def test_a_request_cancelled_in_the_turn_it_was_assigned_never_leaks_its_slot(self) -> None:
        async def scenario() -> None:
            group = _group(slots=1, ranks=1)
            task = asyncio.ensure_future(group.submit(request_id="q1", prompt_tokens=5, max_tokens=4, timeout_s=60.0))
            await asyncio.sleep(0)  # one turn of the loop: the request enters the pool
            assert group.waiting == 1
            routing = group.assign(NOW_S)
            assert routing is not None
            assert routing.assignments == (("q1", 0),)
            (rank,) = group.ranks()
            assert list(rank.in_flight) == ["q1"]
            task.cancel()
            try:
                assignment = await task
            except asyncio.CancelledError:
                assignment = None
            # The slot is held exactly when the caller got the assignment (and will release it itself).
            assert list(rank.in_flight) == ([] if assignment is None else ["q1"])

        asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S))


class RecordingRouter(BfioRouter):
    """The pure router, noting the documents of each round."""

    def __init__(self) -> None:
        super().__init__(clock=time.perf_counter)
        self.rounds: list[tuple[list[WaitingRequestDoc], list[RankDoc]]] = []

    def batches(
        self, waiting: Sequence[WaitingRequestDoc], ranks: Sequence[RankDoc]
    ) -> tuple[WaitingBatch, ActiveBatch, IntArray]:
        self.rounds.append((list(waiting), list(ranks)))
        return super().batches(waiting, ranks)


def _group(slots: int, *, ranks: int = 2, router: BfioRouter | None = None) -> RankGroup:
    """A DP group ``dp0`` of ``ranks`` static ranks with ``slots`` each, no documents, the clock at ``NOW_S``."""
    registry = UpstreamRegistry()
    registry.add_static(
        [
            StaticUpstream(
                engine_id=f"r{g}", url=f"http://h:{g + 1}", model="m", dp_group="dp0", dp_rank=g, max_num_seqs=slots
            )
            for g in range(ranks)
        ]
    )
    policies = StaticPolicySource()
    telemetry = GatewayTelemetry(ListSink(), gateway_id="gw", deployment="test", clock=lambda: NOW_S)
    return RankGroup(
        "dp0",
        registry=registry,
        policies=policies,
        gate=AdmissionGate(policies, telemetry, seed=0),
        telemetry=telemetry,
        router=router or BfioRouter(clock=time.perf_counter),
        tick_s=60.0,
        clock=lambda: NOW_S,
    )


class TestOutputHint:
    def test_the_clients_hint_reaches_the_router_waiting_and_then_in_flight(self) -> None:
        """BF-IO's lookahead uses o^_i where a request has one (specs/seed-003-bfio.md 6.2)."""

        async def scenario() -> None:
            router = RecordingRouter()
            group = _group(slots=2, router=router)
            tasks = [
                asyncio.ensure_future(
                    group.submit(
                        request_id=f"q{n}", prompt_tokens=5, max_tokens=64, timeout_s=60.0, output_tokens_hint=hint
                    )
                )
                for n, hint in enumerate((40, None))
            ]
            await asyncio.sleep(0)
            assert group.assign(NOW_S) is not None
            waiting, _ = router.rounds[-1]
            assert [(w.request_id, w.output_tokens_hint) for w in waiting] == [("q0", 40), ("q1", None)]
            tasks.append(
                asyncio.ensure_future(group.submit(request_id="q2", prompt_tokens=5, max_tokens=64, timeout_s=60.0))
            )
            await asyncio.sleep(0)
            assert group.assign(NOW_S) is not None
            _, ranks = router.rounds[-1]
            assert sorted((a.output_tokens_hint or 0) for rank in ranks for a in rank.active) == [0, 40]
            for task in tasks:
                task.cancel()

        asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S))


class TestReportedLoad:
    """A rank that also serves other clients: its step telemetry shows requests the gateway never sent."""

    def test_requests_of_other_clients_take_the_ranks_slots(self) -> None:
        async def scenario() -> None:
            group = _group(slots=2)
            rank0 = group.ranks()[0]
            rank0.reported.reconcile(step(NOW_S - 0.1, running=2, kv_blocks=2))
            tasks = [
                asyncio.ensure_future(group.submit(request_id=f"q{n}", prompt_tokens=5, max_tokens=4, timeout_s=60.0))
                for n in range(2)
            ]
            await asyncio.sleep(0)
            routing = group.assign(NOW_S)
            assert routing is not None
            assert sorted(g for _, g in routing.assignments) == [1, 1]
            for task in tasks:
                task.cancel()

        asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S))

    def test_their_tokens_count_in_the_ranks_load(self) -> None:
        """Without a bundle the pool goes by JSQ-by-load: the rank busy with another client's long context is not
        the least loaded, though the gateway has nothing in flight there."""

        async def scenario() -> None:
            group = _group(slots=4)
            rank0, rank1 = group.ranks()
            rank1.start(InFlight(request_id="mine", prompt_tokens=50), NOW_S - 1.0)
            assert group.load_tokens(NOW_S) == 25.0
            rank0.reported.reconcile(step(NOW_S - 0.1, running=1, kv_blocks=40))
            assert group.load_tokens(NOW_S) == (640 + 50) / 2
            task = asyncio.ensure_future(group.submit(request_id="q", prompt_tokens=5, max_tokens=4, timeout_s=60.0))
            await asyncio.sleep(0)
            routing = group.assign(NOW_S)
            assert routing is not None
            assert routing.assignments == (("q", 1),)
            task.cancel()

        asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S))


def _baseline_ranks(balancer: str) -> Callable[[list[StubUpstream]], str]:
    return lambda stubs: f'[bfio]\nbalancer = "{balancer}"\n' + _ranks(stubs)


class TestBaselines:
    def test_round_robin_cycles_the_ranks_whatever_their_load(self, tmp_path: Path) -> None:
        async def scenario() -> None:
            stubs = StubUpstream("r0"), StubUpstream("r1")
            async with gateway_over(tmp_path, *stubs, entries=_baseline_ranks("round_robin")) as gw:
                placed = [(await _post(gw, words))[1] for words in (500, 1, 1, 1)]
                assert placed == ["r0", "r1", "r0", "r1"]
                assert {e.balancer for e in gw.events("gateway.routed")} == {"round_robin"}

        asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S))

    def test_vllm_score_places_at_once_past_the_slots_on_the_least_waiting_times_4_plus_running(
        self, tmp_path: Path
    ) -> None:
        """One slot per rank: the third request goes to rank 0's queue (score 1 each, ties to rank 0)."""

        async def scenario() -> None:
            stubs = StubUpstream("r0", gated=True), StubUpstream("r1", gated=True)
            async with gateway_over(tmp_path, *stubs, entries=_baseline_ranks("vllm_score")) as gw:
                requests = [asyncio.ensure_future(_post(gw, 5)) for _ in range(3)]
                while len(stubs[0].requests) + len(stubs[1].requests) < 3:
                    await asyncio.sleep(0.01)
                assert [e.dp_rank for e in gw.events("gateway.routed")] == [0, 1, 0]
                assert {e.balancer for e in gw.events("gateway.routed")} == {"vllm_score"}
                assert stubs[0].running == 2
                for stub in stubs:
                    stub.finish.set()
                assert [status for status, _ in await asyncio.gather(*requests)] == [200, 200, 200]

        asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S))


class TestVllmScore:
    def test_waiting_counts_four_times_running(self) -> None:
        rank = Upstream(
            engine_id="r", url="http://h:1", model="m", pool="p", source="static", max_num_seqs=2, max_model_len=9
        )
        scores = []
        for n in range(4):
            scores.append(vllm_score(rank))
            rank.in_flight[f"q{n}"] = InFlight(request_id=f"q{n}", prompt_tokens=1)
        assert scores == [0, 1, 2, 6]
