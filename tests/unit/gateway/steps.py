"""Step reports of one rank, as the gateway's tests need them: how busy the rank is, nothing else."""

from __future__ import annotations

from schemas.steps import StepReport

BLOCK = 16


def step(ts: float, *, running: int, waiting: int = 0, kv_blocks: int = 0, seq: int = 0) -> StepReport:
    return StepReport(
        event_id=f"s{seq}",
        ts=ts,
        deployment="prod",
        engine_id="r0",
        seq=seq,
        step_id=seq,
        duration_s=0.02,
        batch_kind="decode",
        num_prefill_requests=0,
        sum_prefill_tokens=0,
        num_decode_requests=max(1, running),
        sum_decode_kv_tokens=kv_blocks * BLOCK,
        num_running=running,
        num_waiting=waiting,
        kv_blocks_used=kv_blocks,
        kv_blocks_total=1000,
        block_size_tokens=BLOCK,
    )
