"""A simulated request: what the workload decided about it and how far the engine has carried it.

``RequestSpec`` is the value the workload generates (arrival time, lengths, tier); ``SimRequest`` is
the engine-side entity with its progress (computed tokens, generated tokens, token gaps), mutated
only by the engine that owns it. Schedulers read it and never write it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestSpec:
    """One request as the workload drew it.

    ``output_tokens`` is the length the model would generate; the request stops at
    ``min(output_tokens, max_tokens)`` and finishes with ``length`` when ``max_tokens`` cut it.
    """

    request_id: str
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    max_tokens: int | None = None
    tier: str = "default"
    tbt_slo_s: float | None = None

    @property
    def target_output_tokens(self) -> int:
        """Tokens the request will generate: its natural length, capped by ``max_tokens``."""
        if self.max_tokens is None:
            return self.output_tokens
        return min(self.output_tokens, self.max_tokens)

    @property
    def finish_reason(self) -> Literal["stop", "length"]:
        """``length`` when ``max_tokens`` cuts the natural output, else ``stop``."""
        if self.max_tokens is not None and self.max_tokens < self.output_tokens:
            return "length"
        return "stop"


class SimRequest:
    """Engine-side progress of one request (mutable; owned by one engine).

    Attributes:
        spec: the workload's request.
        computed_tokens: tokens whose KV is in the cache (prefilled plus decoded).
        prefill_target_tokens: tokens a (re)prefill must compute before decoding: the prompt, or
            the prompt plus the tokens generated before a recompute preemption.
        generated_tokens: output tokens produced so far (never lost by a preemption).
        kv_blocks: KV blocks the request holds.
        admitted_s, first_token_s, last_token_s: event times, None until they happen.
        gaps_s: the time between consecutive output tokens, one entry per gap.
        preemptions: how many times the request lost its KV.
        dp_rank: the rank serving it in a DP deployment, else None.
    """

    __slots__ = (
        "admitted_s",
        "computed_tokens",
        "dp_rank",
        "first_token_s",
        "gaps_s",
        "generated_tokens",
        "kv_blocks",
        "last_token_s",
        "preemptions",
        "prefill_target_tokens",
        "spec",
        "target_output_tokens",
    )

    def __init__(self, spec: RequestSpec) -> None:
        self.spec = spec
        self.computed_tokens = 0
        self.prefill_target_tokens = spec.prompt_tokens
        self.generated_tokens = 0
        self.target_output_tokens = spec.target_output_tokens
        self.kv_blocks = 0
        self.admitted_s: float | None = None
        self.first_token_s: float | None = None
        self.last_token_s: float | None = None
        self.gaps_s: list[float] = []
        self.preemptions = 0
        self.dp_rank: int | None = None

    @property
    def prefill_done(self) -> bool:
        """True once the (re)prefill has computed all its tokens, i.e. the request decodes."""
        return self.computed_tokens >= self.prefill_target_tokens

    @property
    def prefill_remaining_tokens(self) -> int:
        """Prompt tokens still to compute before the request decodes."""
        return max(0, self.prefill_target_tokens - self.computed_tokens)


def blocks_for_tokens(tokens: int, block_size_tokens: int) -> int:
    """KV blocks that hold ``tokens`` tokens (paged KV: ceil(tokens / block size))."""
    return math.ceil(tokens / block_size_tokens) if tokens > 0 else 0
