"""Governor's vLLM schedulers under vLLM's async scheduling: which class an engine builds, and what decodes.

The engine-level checks (two batches in flight, per-batch telemetry, EB+ and SLAI) run a real engine in
tests/integration/test_vllm_adapter.py; these are the rules they rest on, on vLLM's own ``Request``.
"""

from __future__ import annotations

import warnings

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas.events import encode_event
from services.engines.stream import EngineStream
from services.engines.vllm.connect import VllmEngineSettings, finish_reason_name, request_track
from services.sdk.envelope import EnvelopeStamper
from services.sdk.protocol import ListSink
from services.sdk.step_counts import StepCounts

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    pytest.importorskip("vllm", reason="vLLM is not installed: bash ops/install.sh --dev --vllm")
    from vllm import SamplingParams
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.engine import FinishReason
    from vllm.v1.request import Request

    from services.engines.vllm.scheduler import (
        AsyncEbplusScheduler,
        AsyncGovernorScheduler,
        AsyncSlaiScheduler,
        EbplusScheduler,
        GovernorScheduler,
        InFlightBatch,
        SlaiScheduler,
        is_decoding,
        report_arrival,
        report_outputs,
        report_scheduled,
        restore_running,
        schedulable_until_s,
        scheduler_class_for,
        split_decoding,
    )

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

TWINS = [
    (GovernorScheduler, AsyncGovernorScheduler),
    (EbplusScheduler, AsyncEbplusScheduler),
    (SlaiScheduler, AsyncSlaiScheduler),
]


def _request(prompt_tokens: int = 5) -> Request:
    return Request("r", list(range(prompt_tokens)), SamplingParams(max_tokens=8), None)


class TestSchedulerClassFor:
    @pytest.mark.parametrize(("plain", "twin"), TWINS)
    def test_either_name_builds_the_class_of_the_engines_scheduling_mode(
        self, plain: type[GovernorScheduler], twin: type[GovernorScheduler]
    ) -> None:
        assert [scheduler_class_for(named, runs_async=True) for named in (plain, twin)] == [twin, twin]
        assert [scheduler_class_for(named, runs_async=False) for named in (plain, twin)] == [plain, plain]

    @pytest.mark.parametrize(("plain", "twin"), TWINS)
    def test_a_twin_is_the_plain_class_composed_with_vllms_async_scheduler(
        self, plain: type[GovernorScheduler], twin: type[GovernorScheduler]
    ) -> None:
        """Governor's overrides come first, then ``AsyncScheduler``'s, then vLLM's ``Scheduler``."""
        assert not issubclass(plain, AsyncScheduler)
        assert twin.__mro__[1] is plain
        assert twin.__mro__.index(AsyncScheduler) == twin.__mro__.index(GovernorScheduler) + 1

    def test_another_subclass_is_built_as_it_is(self) -> None:
        class Mine(EbplusScheduler):
            pass

        assert scheduler_class_for(Mine, runs_async=True) is Mine


class TestIsDecoding:
    def test_a_request_still_computing_its_prompt_is_not_decoding(self) -> None:
        request = _request()
        assert not is_decoding(request)
        request.num_computed_tokens = 3
        assert not is_decoding(request)

    def test_a_request_with_its_first_token_back_decodes(self) -> None:
        request = _request()
        request.num_computed_tokens = 5
        request.append_output_token_ids(7)
        assert is_decoding(request)

    def test_a_request_whose_last_prompt_chunk_is_in_flight_decodes(self) -> None:
        """Async scheduling: the prompt is computed (scheduled) and the first token is a placeholder."""
        request = _request()
        request.num_computed_tokens = 5
        request.num_output_placeholders = 1
        assert is_decoding(request)

    def test_a_request_with_two_tokens_in_flight_decodes(self) -> None:
        request = _request()
        request.append_output_token_ids(7)
        request.num_computed_tokens = 7
        request.num_output_placeholders = 2
        assert is_decoding(request)

    def test_a_preempted_request_recomputing_its_prompt_and_outputs_is_not_decoding(self) -> None:
        request = _request()
        request.append_output_token_ids([7, 8])
        request.num_computed_tokens = 0
        assert not is_decoding(request)


class TestSplitDecoding:
    @given(
        st.lists(
            st.tuples(
                st.integers(1, 40), st.integers(0, 45), st.integers(0, 3), st.integers(0, 3)
            ),  # prompt, computed, outputs, placeholders
            max_size=30,
        )
    )
    def test_it_splits_as_is_decoding_does_keeping_each_sides_order(
        self, shapes: list[tuple[int, int, int, int]]
    ) -> None:
        """The step path's one-pass split puts each request where ``is_decoding`` says, in its order."""
        requests = []
        for index, (prompt, computed, outputs, placeholders) in enumerate(shapes):
            request = Request(f"r{index}", list(range(prompt)), SamplingParams(max_tokens=8), None)
            request.append_output_token_ids(list(range(outputs)))
            request.num_computed_tokens = computed
            request.num_output_placeholders = placeholders
            requests.append(request)
        decoding, prefilling = split_decoding(requests)
        assert decoding == [r for r in requests if is_decoding(r)]
        assert prefilling == [r for r in requests if not is_decoding(r)]


def _stock_schedule(offered: list[object], *, preempt: int, admit: list[object]) -> list[object]:
    """What vLLM's ``schedule`` does to the list it is given: the last ``preempt`` go, ``admit`` come after."""
    return [*offered[: len(offered) - preempt], *admit]


class TestRestoreRunning:
    @given(
        st.integers(min_value=0, max_value=30),
        st.data(),
    )
    def test_running_is_the_old_order_less_the_preempted_then_the_admitted(
        self, size: int, data: st.DataObject
    ) -> None:
        before = [object() for _ in range(size)]
        shown = data.draw(st.lists(st.booleans(), min_size=size, max_size=size))
        offered = [r for r, show in zip(before, shown, strict=True) if show]
        offered = data.draw(st.permutations(offered))
        preempt = data.draw(st.integers(min_value=0, max_value=len(offered)))
        admitted = [object() for _ in range(data.draw(st.integers(min_value=0, max_value=5)))]
        after = _stock_schedule(list(offered), preempt=preempt, admit=admitted)
        preempted = offered[len(offered) - preempt :]
        expected = [r for r in before if all(r is not p for p in preempted)] + admitted
        assert restore_running(before, offered, after) == expected

    def test_a_request_that_was_not_offered_keeps_its_place(self) -> None:
        """SLAI offers at most beta decodes: the critical decodes past beta stay running for the next step."""
        first, second, third, new = object(), object(), object(), object()
        after = _stock_schedule([third, first], preempt=0, admit=[new])
        assert restore_running([first, second, third], [third, first], after) == [first, second, third, new]

    def test_a_preempted_request_leaves_running(self) -> None:
        first, second, third = object(), object(), object()
        after = _stock_schedule([first, third], preempt=1, admit=[])
        assert restore_running([first, second, third], [first, third], after) == [first, second]


class TestSchedulableUntil:
    def test_without_batches_in_flight_it_is_the_deadline(self) -> None:
        assert schedulable_until_s(10.0, batches_in_flight=0, tokens_in_flight=0, tbar_s=0.5) == 10.0

    def test_a_request_in_every_batch_in_flight_keeps_its_deadline(self) -> None:
        """Its next token comes one step after its in-flight one, as in a synchronous engine."""
        assert schedulable_until_s(10.0, batches_in_flight=2, tokens_in_flight=2, tbar_s=0.5) == 10.0

    def test_each_batch_in_flight_without_the_request_makes_it_due_one_step_earlier(self) -> None:
        assert schedulable_until_s(10.0, batches_in_flight=1, tokens_in_flight=0, tbar_s=0.5) == 9.5
        assert schedulable_until_s(10.0, batches_in_flight=2, tokens_in_flight=1, tbar_s=0.5) == 9.5
        assert schedulable_until_s(10.0, batches_in_flight=2, tokens_in_flight=0, tbar_s=0.5) == 9.0


def _stream(sink: ListSink, *, deferred: bool) -> EngineStream:
    stamper = EnvelopeStamper(engine_id="vllm-0", deployment="dep", source_epoch=7)
    return EngineStream(stamper=stamper, sink=sink, deferred=deferred)


class TestStepRecords:
    def test_the_records_of_a_step_give_the_events_the_step_path_built_before(self) -> None:
        """The scheduler's records, built on the draining thread, equal its former direct calls, JSON for JSON."""
        settings = VllmEngineSettings.load(environ={"GOVERNOR_TIER": "paid"})
        request, other = _request(5), Request("x", [1, 2, 3], SamplingParams(max_tokens=4), None)
        batch = InFlightBatch(
            scheduled_s=1.1, scheduler_mode="eb", num_prefill_requests=1, sum_prefill_tokens=3, num_decode_requests=1
        )
        batch.sum_decode_kv_tokens, batch.num_preempted = 6, 1
        before_sink, after_sink = ListSink(), ListSink()
        before = _stream(before_sink, deferred=False)
        for track in (request_track(request, settings), request_track(other, settings)):
            before.arrived(1.0, track)
        before.scheduled(1.1, {"r": 1, "x": 3})
        before.preempted("x")
        before.tokens(1.2, [("r", 1), ("x", 0)])
        before.finished(1.2, "r", finish_reason_name(str(FinishReason.LENGTH)))
        counts = StepCounts(
            duration_s=0.1,
            num_prefill_requests=1,
            sum_prefill_tokens=3,
            num_decode_requests=1,
            sum_decode_kv_tokens=6,
            num_running=1,
            num_waiting=2,
            kv_blocks_used=3,
            kv_blocks_total=100,
            num_preempted=1,
            scheduler_mode="eb",
        )
        before.step(1.2, counts)
        after = _stream(after_sink, deferred=True)
        for queued in (request, other):
            after.later(report_arrival, 1.0, queued, settings)
        after.later(report_scheduled, 1.1, ("r", "x"), ("x",))
        after.later(report_outputs, 1.2, [("r", 1, FinishReason.LENGTH), ("x", 0, None)], (batch, 0.1, 1, 2, 3, 100))
        assert after_sink.events == []
        after.drain()
        encoded = [encode_event(event) for event in after_sink.events]
        assert encoded == [encode_event(event) for event in before_sink.events]
        assert [event.event_type for event in after_sink.events] == [
            "request.arrived",
            "request.arrived",
            "request.first_token",
            "request.finished",
            "step",
        ]
