"""services/sdk/step_counts.py: one step type, and both engine builders read it the same way."""

from __future__ import annotations

import pytest

from schemas.steps import StepReport
from services.engines.stream import EngineStream
from services.sdk.engine_events import Announcement, Registration
from services.sdk.envelope import EnvelopeStamper
from services.sdk.protocol import ListSink
from services.sdk.step_counts import StepCounts
from services.sim.telemetry import EngineTelemetry

# The step event's forward-pass fields, which a StepCounts fills and the envelope does not.
FORWARD_PASS_FIELDS = (
    "duration_s",
    "batch_kind",
    "num_prefill_requests",
    "sum_prefill_tokens",
    "num_decode_requests",
    "sum_decode_kv_tokens",
    "num_running",
    "num_waiting",
    "kv_blocks_used",
    "kv_blocks_total",
    "block_size_tokens",
    "num_preempted",
    "scheduler_mode",
)


def _counts(*, prefill_tokens: int, decodes: int, block_size_tokens: int | None = 32) -> StepCounts:
    return StepCounts(
        duration_s=0.04,
        num_prefill_requests=1 if prefill_tokens else 0,
        sum_prefill_tokens=prefill_tokens,
        num_decode_requests=decodes,
        sum_decode_kv_tokens=300 * decodes,
        num_running=decodes + 1,
        num_waiting=7,
        kv_blocks_used=40,
        kv_blocks_total=100,
        num_preempted=2,
        scheduler_mode="EB",
        block_size_tokens=block_size_tokens,
    )


@pytest.mark.parametrize(
    ("prefill_tokens", "decodes", "kind"),
    [(128, 0, "prefill"), (128, 3, "mixed"), (0, 3, "decode")],
)
def test_the_batch_kind_follows_from_the_counts(prefill_tokens: int, decodes: int, kind: str) -> None:
    assert _counts(prefill_tokens=prefill_tokens, decodes=decodes).batch_kind == kind


def _simulated(counts: StepCounts, *, registered_block_size: int | None = None) -> StepReport:
    sink = ListSink()
    telemetry = EngineTelemetry(engine_id="e-0", deployment="dep", sink=sink)
    if registered_block_size is not None:
        registration = Registration(
            model="m",
            gpu="g",
            hardware_profile=None,
            max_num_seqs=8,
            max_num_batched_tokens=512,
            max_model_len=1024,
            kv_blocks_total=100,
            block_size_tokens=registered_block_size,
        )
        telemetry.registered(0.5, registration, pool="short", obeys=[])
    telemetry.step(1.0, counts, step_id=0)
    event = sink.events[-1]
    assert isinstance(event, StepReport)
    return event


def _vllm(counts: StepCounts, *, registered_block_size: int | None = None) -> StepReport:
    sink = ListSink()
    stream = EngineStream(stamper=EnvelopeStamper(engine_id="v-0", deployment="dep"), sink=sink)
    if registered_block_size is not None:
        registration = Registration(
            model="m",
            gpu="g",
            hardware_profile=None,
            max_num_seqs=8,
            max_num_batched_tokens=512,
            max_model_len=1024,
            kv_blocks_total=100,
            block_size_tokens=registered_block_size,
        )
        stream.registered(0.5, registration, Announcement())
    stream.step(1.0, counts)
    event = sink.events[-1]
    assert isinstance(event, StepReport)
    return event


@pytest.mark.parametrize(("prefill_tokens", "decodes"), [(128, 0), (128, 3), (0, 3)])
def test_the_simulator_and_the_vllm_adapter_report_the_same_step_from_the_same_counts(
    prefill_tokens: int, decodes: int
) -> None:
    counts = _counts(prefill_tokens=prefill_tokens, decodes=decodes)
    simulated, real = _simulated(counts), _vllm(counts)
    assert {name: getattr(simulated, name) for name in FORWARD_PASS_FIELDS} == {
        name: getattr(real, name) for name in FORWARD_PASS_FIELDS
    }
    assert (real.block_size_tokens, real.num_waiting, real.batch_kind) == (32, 7, counts.batch_kind)


def test_a_step_without_a_block_size_takes_the_one_the_engine_registered() -> None:
    counts = _counts(prefill_tokens=0, decodes=3, block_size_tokens=None)
    assert _simulated(counts, registered_block_size=64).block_size_tokens == 64
    assert _vllm(counts, registered_block_size=64).block_size_tokens == 64
    assert _vllm(counts).block_size_tokens == 16  # nothing registered yet: vLLM's default block size
