"""The engine-side event stream of the adapters: lifecycle bookkeeping, restarts, bad values, vLLM mappings."""

from __future__ import annotations

from decide.specs import default_registry
from fold.folder import Folder
from schemas.names import RecordPosition
from schemas.requests import RequestFinished, RequestFirstToken
from schemas.steps import RankStepReport, StepReport
from services.engines.stream import EngineStream, RankSlots, RequestTrack
from services.engines.vllm.connect import finish_reason_name, identifier
from services.sdk.envelope import EnvelopeStamper
from services.sdk.protocol import ListSink
from services.sdk.step_counts import StepCounts
from tests.unit.engines.stream_scenario import ANNOUNCED, REGISTRATION


def _stream(sink: ListSink, epoch: int) -> EngineStream:
    return EngineStream(stamper=EnvelopeStamper(engine_id="vllm-0", deployment="dep", source_epoch=epoch), sink=sink)


def _serve(stream: EngineStream, start_s: float, ids: list[str], *, finish: bool = True) -> None:
    for offset, request_id in enumerate(ids):
        now = start_s + offset
        stream.arrived(now, RequestTrack(request_id=request_id, arrived_s=now, prompt_tokens=50, tbt_slo_s=1.2))
        stream.scheduled(now + 0.1, [request_id])
        stream.tokens(now + 0.5, [(request_id, 1)])
        stream.tokens(now + 1.5, [(request_id, 1)])
        stream.tokens(now + 3.0, [(request_id, 1)])
        if finish:
            stream.finished(now + 3.0, request_id, "stop")


class TestEngineStream:
    def test_a_request_reports_its_first_token_and_its_token_gaps_at_the_finish(self) -> None:
        sink = ListSink()
        _serve(_stream(sink, 1), 10.0, ["r1"])
        first = next(e for e in sink.events if isinstance(e, RequestFirstToken))
        finished = next(e for e in sink.events if isinstance(e, RequestFinished))
        assert first.ttft_s == 0.5
        assert (finished.output_tokens, finished.ttft_s, finished.tbt_gaps) == (3, 0.5, 2)
        assert finished.admitted_ts == 10.1
        assert finished.tbt_max_s == 1.5
        assert finished.tbt_gaps_over_slo == 1  # 1.0 s is within the 1.2 s SLO, 1.5 s is not

    def test_a_restarted_engine_is_a_new_epoch_and_its_lost_requests_never_count(self) -> None:
        sink = ListSink()
        before = _stream(sink, 1_000)
        before.registered(0.0, REGISTRATION, ANNOUNCED)
        _serve(before, 1.0, ["a", "b", "c"])
        _serve(before, 5.0, ["lost"], finish=False)
        after = _stream(sink, 2_000)
        after.registered(20.0, REGISTRATION, ANNOUNCED)
        _serve(after, 21.0, ["a", "b"])
        assert len({e.event_id for e in sink.events}) == len(sink.events)
        assert [e.seq for e in sink.events if e.event_type == "engine.registered"] == [0, 0]
        folder = Folder("dep", default_registry())
        for offset, event in enumerate(sink.events):
            folder.fold(event, RecordPosition("t", 0, offset))
        summary = folder.engines["vllm-0"].summary()
        assert summary.completions_total == 5
        assert summary.engine is not None
        assert summary.engine.obeys == ["ebplus"]

    def test_an_event_that_fails_its_schema_is_counted_not_raised(self) -> None:
        sink = ListSink()
        stream = _stream(sink, 1)
        stream.arrived(1.0, RequestTrack(request_id="huge", arrived_s=1.0, prompt_tokens=50_000_000))
        stream.step(
            2.0,
            StepCounts(
                duration_s=0.01,
                num_prefill_requests=1,
                sum_prefill_tokens=10,
                num_decode_requests=0,
                sum_decode_kv_tokens=0,
                num_running=1,
                num_waiting=0,
                kv_blocks_used=1,
                kv_blocks_total=10,
            ),
        )
        assert stream.rejected == 1
        assert [e.event_type for e in sink.events] == ["step"]

    def test_an_iteration_that_computed_nothing_is_not_a_step(self) -> None:
        sink = ListSink()
        empty = StepCounts(
            duration_s=0.01,
            num_prefill_requests=0,
            sum_prefill_tokens=0,
            num_decode_requests=0,
            sum_decode_kv_tokens=0,
            num_running=0,
            num_waiting=3,
            kv_blocks_used=0,
            kv_blocks_total=10,
        )
        _stream(sink, 1).step(1.0, empty)
        assert sink.events == []


def _counts(*, prefill_tokens: int, decodes: int, running: int) -> StepCounts:
    return StepCounts(
        duration_s=0.02,
        num_prefill_requests=1 if prefill_tokens else 0,
        sum_prefill_tokens=prefill_tokens,
        num_decode_requests=decodes,
        sum_decode_kv_tokens=0,
        num_running=running,
        num_waiting=0,
        kv_blocks_used=1,
        kv_blocks_total=10,
    )


class TestRankSteps:
    def test_a_ranks_step_is_followed_by_its_load_slots_admissions_and_finishes(self) -> None:
        """L_g counts the prompt and the tokens generated of each admitted request until it finishes."""
        sink = ListSink()
        stamper = EnvelopeStamper(engine_id="vllm-dp", deployment="dep", source_epoch=1)
        stream = EngineStream(stamper=stamper, sink=sink, rank=RankSlots(dp_rank=1, max_num_seqs=4))
        stream.arrived(1.0, RequestTrack(request_id="a", arrived_s=1.0, prompt_tokens=30))
        stream.arrived(1.0, RequestTrack(request_id="b", arrived_s=1.0, prompt_tokens=20))
        stream.scheduled(1.1, ["a", "b"])
        stream.tokens(1.2, [("a", 1), ("b", 1)])
        stream.step(1.2, _counts(prefill_tokens=50, decodes=0, running=2))
        stream.tokens(1.3, [("a", 1), ("b", 1)])
        stream.finished(1.3, "b", "stop")
        stream.step(1.3, _counts(prefill_tokens=0, decodes=2, running=1))
        ranks = [e for e in sink.events if isinstance(e, RankStepReport)]
        steps = [e for e in sink.events if isinstance(e, StepReport)]
        assert [(r.step_id, r.dp_rank, r.load_tokens, r.num_running, r.free_slots) for r in ranks] == [
            (0, 1, 52, 2, 2),
            (1, 1, 32, 1, 3),
        ]
        assert [(r.admitted, r.completed, r.local_compute_s, r.barrier_wait_s) for r in ranks] == [
            (2, 0, 0.02, 0.0),
            (0, 1, 0.02, 0.0),
        ]
        assert [s.step_id for s in steps] == [0, 1]
        assert sink.events.index(ranks[0]) == sink.events.index(steps[0]) + 1, "each step, then its rank's share"

    def test_an_engine_that_is_no_rank_sends_no_rank_steps(self) -> None:
        sink = ListSink()
        stream = _stream(sink, 1)
        stream.step(1.0, _counts(prefill_tokens=10, decodes=0, running=1))
        assert [e.event_type for e in sink.events] == ["step"]


class TestVllmMappings:
    def test_length_abort_and_repetition_finishes_are_censored_and_unknown_ones_are_errors(self) -> None:
        names = {reason: finish_reason_name(reason) for reason in ("stop", "length", "abort", "repetition", "new")}
        assert names == {"stop": "stop", "length": "length", "abort": "abort", "repetition": "abort", "new": "error"}

    def test_model_paths_become_schema_identifiers(self) -> None:
        assert identifier("/models/Qwen 3 (8B)") == "/models/Qwen-3-8B"
        assert identifier("   ") == "unknown"
        assert len(identifier("x" * 300)) == 128
