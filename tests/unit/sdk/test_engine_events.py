"""One builder for every engine event: the simulator and the vLLM adapter report the same story the same way."""

from __future__ import annotations

from schemas.events import Event
from schemas.steps import StepReport
from services.engines.stream import EngineStream, RequestTrack
from services.sdk.engine_events import EngineEvents
from services.sdk.envelope import EnvelopeStamper
from services.sdk.protocol import ListSink
from services.sdk.step_counts import StepCounts
from services.sim.request import RequestSpec, SimRequest
from services.sim.telemetry import EngineTelemetry

# What differs between two engines' events by construction: who sent them, and their place in its stream.
PRODUCER_FIELDS = {"event_id", "engine_id", "seq", "source_epoch"}
ARRIVED_S, ADMITTED_S, TOKENS_S, FINISHED_S = 10.0, 10.1, (10.5, 11.5, 13.0), 13.0


def _comparable(events: list[Event], event_types: set[str]) -> list[dict[str, object]]:
    return [event.model_dump(exclude=PRODUCER_FIELDS) for event in events if event.event_type in event_types]


def _simulated() -> list[Event]:
    sink = ListSink()
    telemetry = EngineTelemetry(engine_id="sim-0", deployment="dep", sink=sink)
    spec = RequestSpec(
        request_id="r1",
        arrival_s=ARRIVED_S,
        prompt_tokens=50,
        output_tokens=3,
        max_tokens=64,
        tier="paid",
        tbt_slo_s=1.2,
    )
    request = SimRequest(spec)
    telemetry.arrived(ARRIVED_S, spec)
    request.admitted_s = ADMITTED_S
    for now_s in TOKENS_S:
        if request.first_token_s is None:
            request.first_token_s = now_s
            telemetry.first_token(now_s, request)
        else:
            assert request.last_token_s is not None
            request.gaps_s.append(now_s - request.last_token_s)
        request.last_token_s = now_s
        request.generated_tokens += 1
    telemetry.finished(FINISHED_S, request, finish_reason="stop")
    return sink.events


def _vllm() -> list[Event]:
    sink = ListSink()
    stream = EngineStream(stamper=EnvelopeStamper(engine_id="vllm-0", deployment="dep"), sink=sink)
    stream.arrived(
        ARRIVED_S,
        RequestTrack(request_id="r1", arrived_s=ARRIVED_S, prompt_tokens=50, max_tokens=64, tier="paid", tbt_slo_s=1.2),
    )
    stream.scheduled(ADMITTED_S, ["r1"])
    for now_s in TOKENS_S:
        stream.tokens(now_s, [("r1", 1)])
    stream.finished(FINISHED_S, "r1", "stop")
    return sink.events


def test_the_simulator_and_the_vllm_adapter_report_one_request_life_as_the_same_events() -> None:
    kinds = {"request.arrived", "request.first_token", "request.finished"}
    simulated, real = _comparable(_simulated(), kinds), _comparable(_vllm(), kinds)
    assert [event["event_type"] for event in real] == ["request.arrived", "request.first_token", "request.finished"]
    assert simulated == real
    finished = real[-1]
    assert (finished["ttft_s"], finished["admitted_ts"], finished["tbt_gaps"], finished["tbt_gaps_over_slo"]) == (
        0.5,
        ADMITTED_S,
        2,
        1,  # gaps of 1.0 s and 1.5 s against a 1.2 s SLO
    )


def test_a_step_with_a_clock_that_did_not_move_and_blocks_over_the_total_is_clamped_not_lost() -> None:
    events = EngineEvents(EnvelopeStamper(engine_id="e-0", deployment="dep"))
    counts = StepCounts(
        duration_s=0.0,
        num_prefill_requests=0,
        sum_prefill_tokens=0,
        num_decode_requests=2,
        sum_decode_kv_tokens=300,
        num_running=2,
        num_waiting=0,
        kv_blocks_used=120,
        kv_blocks_total=100,
        num_preempted=0,
    )
    step = events.step(5.0, counts, step_id=3, registered_block_size_tokens=16)
    assert isinstance(step, StepReport)
    assert (step.duration_s, step.kv_blocks_used, step.step_id, step.seq) == (1e-6, 100, 3, 0)
