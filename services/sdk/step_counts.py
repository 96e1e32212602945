"""``StepCounts``: one engine iteration as its engine saw it, the one type every engine reports a step with.

The simulated engines (services/sim) and the vLLM adapter (services/engines) both hand one to their
event builder after each iteration; the ``step`` event (schemas/steps.py, ``StepReport``) takes its
forward-pass fields from it. Adding a step field means this class
(and ``event_fields``) and the event.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

BatchKind = Literal["prefill", "decode", "mixed"]
DEFAULT_BLOCK_SIZE_TOKENS = 16  # vLLM's default KV block size, and the step event's default


@dataclass(frozen=True, slots=True, kw_only=True)
class StepCounts:
    """What one finished iteration did, in the ``step`` event's own field names.

    Attributes:
        duration_s: the iteration's duration, seconds (the simulator's event time, vLLM's wall time).
        num_prefill_requests: requests that computed prompt tokens (a chunk or an admission).
        sum_prefill_tokens: prompt tokens computed.
        num_decode_requests: requests that decoded one token.
        sum_decode_kv_tokens: summed context of the decoding requests, tokens.
        num_running: requests holding KV after the iteration.
        num_waiting: requests queued after the iteration.
        kv_blocks_used: KV blocks in use after the iteration.
        kv_blocks_total: KV blocks of the engine.
        num_preempted: requests preempted by the iteration's scheduling.
        scheduler_mode: what the scheduler ran (``EB``, ``MB``, ``slai``, ``stock``, ``dp``...), or None.
        block_size_tokens: tokens per KV block; None: the block size the engine registered.
    """

    duration_s: float
    num_prefill_requests: int
    sum_prefill_tokens: int
    num_decode_requests: int
    sum_decode_kv_tokens: int
    num_running: int
    num_waiting: int
    kv_blocks_used: int
    kv_blocks_total: int
    num_preempted: int = 0
    scheduler_mode: str | None = None
    block_size_tokens: int | None = None

    @property
    def batch_kind(self) -> BatchKind:
        """``mixed`` with prompt and decode work, ``prefill`` with prompt work only, else ``decode``."""
        if self.sum_prefill_tokens > 0:
            return "mixed" if self.num_decode_requests > 0 else "prefill"
        return "decode"

    def event_fields(self, *, registered_block_size_tokens: int) -> dict[str, Any]:
        """The ``step`` event's forward-pass fields with its batch kind; no block size here: the registered one."""
        return {
            "duration_s": self.duration_s,
            "batch_kind": self.batch_kind,
            "num_prefill_requests": self.num_prefill_requests,
            "sum_prefill_tokens": self.sum_prefill_tokens,
            "num_decode_requests": self.num_decode_requests,
            "sum_decode_kv_tokens": self.sum_decode_kv_tokens,
            "num_running": self.num_running,
            "num_waiting": self.num_waiting,
            "kv_blocks_used": self.kv_blocks_used,
            "kv_blocks_total": self.kv_blocks_total,
            "block_size_tokens": (
                registered_block_size_tokens if self.block_size_tokens is None else self.block_size_tokens
            ),
            "num_preempted": self.num_preempted,
            "scheduler_mode": self.scheduler_mode,
        }
