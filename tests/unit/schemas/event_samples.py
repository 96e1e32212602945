"""One valid instance of every event type, built through the validating constructors."""

from __future__ import annotations

from schemas.engines import EngineRegistered, Heartbeat, PolicyApplied
from schemas.events import EVENT_TYPES, Event
from schemas.gateway import GatewayCompressed, GatewayQueued, GatewayRouted, GatewayShed, GatewayUpstreamError
from schemas.requests import RequestAdmitted, RequestArrived, RequestFinished, RequestFirstToken, RequestPreempted
from schemas.steps import BfioSelfCheckReport, RankStepReport, StepReport

BASE = {"deployment": "dep-1", "engine_id": "eng-0", "seq": 3, "ts": 12.5}


def sample_events() -> list[Event]:
    """Return one valid event per event type, in ``EVENT_TYPES`` order."""
    events: list[Event] = [
        RequestArrived(
            event_id="a1",
            request_id="r1",
            prompt_tokens=512,
            max_tokens=256,
            tier="paid",
            tbt_slo_s=0.1,
            category="prose",
            **BASE,
        ),
        RequestAdmitted(event_id="a2", request_id="r1", queue_time_s=0.02, dp_rank=1, **BASE),
        RequestFirstToken(event_id="a3", request_id="r1", ttft_s=0.3, **BASE),
        RequestFinished(
            event_id="a4",
            request_id="r1",
            prompt_tokens=512,
            output_tokens=200,
            finish_reason="length",
            arrived_ts=10.0,
            admitted_ts=10.1,
            ttft_s=0.3,
            tbt_mean_s=0.02,
            tbt_p99_s=0.05,
            tbt_max_s=0.06,
            tbt_gaps=199,
            tbt_gaps_over_slo=0,
            **BASE,
        ),
        RequestPreempted(event_id="a5", request_id="r1", generated_tokens=17, **BASE),
        StepReport(
            event_id="a6",
            step_id=7,
            duration_s=0.031,
            batch_kind="mixed",
            num_prefill_requests=1,
            sum_prefill_tokens=480,
            num_decode_requests=32,
            sum_decode_kv_tokens=20_000,
            num_running=33,
            num_waiting=4,
            kv_blocks_used=900,
            kv_blocks_total=1000,
            **BASE,
        ),
        RankStepReport(
            event_id="a7",
            step_id=7,
            dp_rank=2,
            load_tokens=80_000,
            num_running=70,
            free_slots=2,
            local_compute_s=0.011,
            barrier_wait_s=0.002,
            **BASE,
        ),
        BfioSelfCheckReport(
            event_id="a7b",
            first_step_id=100,
            last_step_id=140,
            judged_steps=41,
            differing_steps=30,
            expired_steps=0,
            lookahead_horizon_steps=7,
            lookahead_in_force=True,
            myopic_imbalance_tokens=4.1e6,
            lookahead_imbalance_tokens=3.2e6,
            squared_difference_tokens2=4.0e10,
            shadow_compute_s=0.02,
            **BASE,
        ),
        EngineRegistered(
            event_id="a8",
            model="Qwen3-8B",
            gpu="H200",
            hardware_profile="h200-qwen3-8b",
            max_num_seqs=256,
            max_num_batched_tokens=8192,
            max_model_len=32768,
            kv_blocks_total=40_000,
            block_size_tokens=16,
            **BASE,
        ),
        Heartbeat(event_id="a9", num_running=3, num_waiting=0, **BASE),
        PolicyApplied(event_id="a10", kind="ebplus", scope="eng-0", version=4, **BASE),
        GatewayRouted(
            event_id="a11",
            request_id="r1",
            model="Qwen3-8B",
            pool="short",
            upstream="eng-0",
            reason="fleetopt_compressed",
            balancer="bfio",
            prompt_tokens=1800,
            max_tokens=200,
            l_total_tokens=2000,
            tier="paid",
            category="prose",
            queued_s=0.01,
            **BASE,
        ),
        GatewayQueued(event_id="a12", request_id="r1", pool="short", tier="paid", queue_depth=3, **BASE),
        GatewayCompressed(
            event_id="a13",
            request_id="r1",
            category="prose",
            original_prompt_tokens=2500,
            compressed_prompt_tokens=1800,
            target_tokens=1848,
            sentences_total=40,
            sentences_kept=29,
            **BASE,
        ),
        GatewayShed(event_id="a14", request_id="r2", pool="short", reason="deadline", waited_s=5.0, **BASE),
        GatewayUpstreamError(event_id="a15", request_id="r3", upstream="eng-1", kind="status", status=503, **BASE),
    ]
    assert [type(e) for e in events] == list(EVENT_TYPES)
    return events
