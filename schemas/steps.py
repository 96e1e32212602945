"""Per-step telemetry: one engine iteration and, for DP engines, one report per rank and step.

Per-step names follow the forward-pass-metrics schema that Dynamo, SGLang and vLLM converge on
(``num_prefill_requests``, ``sum_prefill_tokens``, ``num_decode_requests``,
``sum_decode_kv_tokens``; specs/anchors.md section 4).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field, field_validator, model_validator

from schemas.envelope import Envelope, Seconds, Tokens
from schemas.policy_docs.ebplus import EbplusMode


class BatchKind(StrEnum):
    """What a step's batch held: prompt tokens only, decodes only, or both."""

    PREFILL = "prefill"
    DECODE = "decode"
    MIXED = "mixed"


def scheduler_mode_label(mode: str) -> str:
    """A step's scheduler mode with EB+'s modes in their one spelling (``eb`` reads ``EB``); other labels unchanged.

    Engines of earlier releases wrote ``eb`` and ``mb``; readers of raw step JSON (services/fleet_run) count
    both spellings as one mode through this.
    """
    ebplus = EbplusMode.named(mode)
    return mode if ebplus is None else ebplus.value


class StepReport(Envelope):
    """One engine iteration: its duration, its batch and the engine's queue and KV state after it."""

    event_type: Literal["step"] = "step"
    step_id: int = Field(ge=0)
    duration_s: float = Field(gt=0.0, le=3600.0, allow_inf_nan=False)
    batch_kind: Literal["prefill", "decode", "mixed"]
    num_prefill_requests: int = Field(ge=0, le=1_000_000)
    sum_prefill_tokens: Tokens
    num_decode_requests: int = Field(ge=0, le=1_000_000)
    sum_decode_kv_tokens: Tokens = Field(description="summed context of the decoding requests")
    num_running: int = Field(ge=0, le=1_000_000)
    num_waiting: int = Field(ge=0, le=10_000_000)
    kv_blocks_used: int = Field(ge=0)
    kv_blocks_total: int = Field(ge=1)
    block_size_tokens: int = Field(default=16, ge=1, le=4096)
    num_preempted: int = Field(default=0, ge=0)
    scheduler_mode: str | None = Field(
        default=None, max_length=32, description="MB, EB (read from mb, eb too), slai, stock, ... in effect"
    )

    @field_validator("scheduler_mode")
    @classmethod
    def _ebplus_mode_spelt_one_way(cls, mode: str | None) -> str | None:
        """EB+'s modes as ``EbplusMode`` spells them, whichever case the engine wrote; other labels as written."""
        return None if mode is None else scheduler_mode_label(mode)

    @model_validator(mode="after")
    def _check_batch(self) -> StepReport:
        if self.kv_blocks_used > self.kv_blocks_total:
            msg = f"kv_blocks_used ({self.kv_blocks_used}) must not exceed kv_blocks_total ({self.kv_blocks_total})"
            raise ValueError(msg)
        has_prefill = self.sum_prefill_tokens > 0
        has_decode = self.num_decode_requests > 0
        expected = {(True, False): "prefill", (False, True): "decode", (True, True): "mixed"}.get(
            (has_prefill, has_decode)
        )
        if expected is not None and expected != self.batch_kind:
            msg = f"batch_kind is {self.batch_kind!r} but the batch holds a {expected} batch"
            raise ValueError(msg)
        if expected is None:
            msg = "a step must hold prefill tokens or decode requests"
            raise ValueError(msg)
        return self


class RankStepReport(Envelope):
    """One DP rank's share of one synchronised decode step (``dp_rank`` is required)."""

    event_type: Literal["rank.step"] = "rank.step"
    step_id: int = Field(ge=0)
    load_tokens: Tokens = Field(description="L_g: summed context (prompt + generated) of the rank's active requests")
    num_running: int = Field(ge=0, le=1_000_000)
    free_slots: int = Field(ge=0, le=1_000_000)
    local_compute_s: Seconds
    barrier_wait_s: Seconds
    admitted: int = Field(default=0, ge=0)
    completed: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _check_rank(self) -> RankStepReport:
        if self.dp_rank is None:
            msg = "a rank.step event needs dp_rank"
            raise ValueError(msg)
        return self


class BfioSelfCheckReport(Envelope):
    """BF-IO's online self-check over one period: both decisions of every judged step, by realised imbalance.

    See docs/policies/bfio.md, "Online self-check". At each step the DP router applies one
    decision and shadows the other (H = 0 and the bundle's lookahead H); once the step's requests have
    finished or run past H, each decision is judged by the lookahead's objective
    R = sum_k omega_k Imbalance(k + h_k) (Eq. 2) over the requests it placed and the active ones, with
    their realised lengths (``policies.bfio.selfcheck``).
    The sums here are over the period's judged steps; the stream processor folds them per engine.
    """

    event_type: Literal["bfio.self_check"] = "bfio.self_check"
    format: Literal[1] = 1
    first_step_id: int = Field(ge=0, description="earliest decode step judged in the period")
    last_step_id: int = Field(ge=0, description="latest decode step judged in the period")
    judged_steps: int = Field(ge=1, le=10_000_000)
    differing_steps: int = Field(ge=0, le=10_000_000, description="steps recorded whose two decisions differed")
    expired_steps: int = Field(ge=0, le=10_000_000, description="steps dropped: outcomes not known in time")
    lookahead_horizon_steps: int = Field(ge=1, le=4096, description="the lookahead H judged against H = 0")
    lookahead_in_force: bool = Field(description="the router applied the lookahead (else H = 0) at the last step")
    myopic_imbalance_tokens: float = Field(ge=0.0, allow_inf_nan=False, description="sum of R of H = 0's decisions")
    lookahead_imbalance_tokens: float = Field(
        ge=0.0, allow_inf_nan=False, description="sum of R of the lookahead's decisions"
    )
    squared_difference_tokens2: float = Field(
        ge=0.0, allow_inf_nan=False, description="sum over judged steps of (R lookahead - R H = 0)^2, for the spread"
    )
    shadow_compute_s: Seconds = Field(description="router time spent on the shadow decisions in the period")

    @model_validator(mode="after")
    def _check_steps(self) -> BfioSelfCheckReport:
        if self.last_step_id < self.first_step_id:
            msg = f"last_step_id ({self.last_step_id}) precedes first_step_id ({self.first_step_id})"
            raise ValueError(msg)
        return self
