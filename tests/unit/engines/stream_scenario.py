"""One engine's life through ``EngineStream``'s whole API, for the golden-JSON test of its events.

``tests/unit/engines/data/stream_events.jsonl`` holds the events this scenario produced through the
stream as it was before event building left the step path (every event built on the caller's
thread); ``test_stream_golden.py`` checks that today's stream, synchronous or deferred, gives the
same JSON byte for byte.
"""

from __future__ import annotations

from schemas.policy_docs.base import PolicyDocument
from schemas.policy_docs.ebplus import EbplusMode
from services.engines.stream import EngineStream, RequestTrack
from services.sdk.engine_events import Announcement, Registration
from services.sdk.step_counts import StepCounts

REGISTRATION = Registration(
    model="tiny",
    gpu="cpu",
    hardware_profile=None,
    max_num_seqs=16,
    max_num_batched_tokens=512,
    max_model_len=1024,
    kv_blocks_total=100,
    block_size_tokens=32,
)
ANNOUNCED = Announcement(scheduler="ebplus", obeys=["ebplus"])


def _counts(duration_s: float, prefill: int, decode: int, *, mode: str | None = EbplusMode.MB) -> StepCounts:
    return StepCounts(
        duration_s=duration_s,
        num_prefill_requests=1 if prefill else 0,
        sum_prefill_tokens=prefill,
        num_decode_requests=decode,
        sum_decode_kv_tokens=decode * 40,
        num_running=decode + (1 if prefill else 0),
        num_waiting=2,
        kv_blocks_used=30 + decode,
        kv_blocks_total=100,
        num_preempted=1 if decode == 2 else 0,
        scheduler_mode=mode,
    )


def drive(stream: EngineStream, document: PolicyDocument) -> None:
    """Register, serve four requests (one preempted, one aborted, one huge), ack ``document``, beat."""
    stream.registered(100.0, REGISTRATION, ANNOUNCED)
    for index, request_id in enumerate(("a", "b", "c")):
        stream.arrived(
            100.5 + index,
            RequestTrack(
                request_id=request_id,
                arrived_s=100.5 + index,
                prompt_tokens=40 + index,
                max_tokens=8 if index else None,
                tier="paid" if index == 1 else "default",
                tbt_slo_s=0.05 if index == 1 else None,
            ),
        )
    stream.arrived(103.0, RequestTrack(request_id="huge", arrived_s=103.0, prompt_tokens=50_000_000))
    stream.scheduled(103.1, ["a", "b", "unknown"])
    stream.step(103.2, _counts(0.1, 81, 0))
    stream.tokens(103.2, [("a", 1), ("b", 1), ("unknown", 1), ("c", 0)])
    stream.applied(103.25, document)
    stream.scheduled(103.3, ["a", "b", "c"])
    stream.preempted("b")
    stream.preempted("unknown")
    stream.step(103.4, _counts(0.125, 42, 2))
    stream.tokens(103.4, [("a", 1), ("b", 2), ("c", 1)])
    stream.step(103.45, _counts(0.0, 0, 0))
    stream.heartbeat(103.5, num_running=3, num_waiting=1)
    stream.step(103.5, _counts(0.05, 0, 3, mode=None))
    stream.tokens(103.5, [("a", 1), ("b", 1), ("c", 1)])
    stream.finished(103.5, "a", "stop")
    stream.finished(103.6, "b", "length")
    stream.finished(103.6, "missing", "stop")
    stream.step(103.7, _counts(5000.0, 0, 1))
    stream.finished(103.8, "c", "abort")
    stream.summarised(
        104.0,
        RequestTrack(request_id="late", arrived_s=102.0, prompt_tokens=10, tier="paid", tbt_slo_s=0.1),
        "stop",
        ttft_s=0.3,
        tbt_mean_s=0.02,
    )
    stream.heartbeat(104.5, num_running=0, num_waiting=0)
