"""Request lifecycle events: arrived, admitted, first token, finished, preempted (DESIGN section 5).

Field names follow DESIGN's contract; where an OpenTelemetry GenAI attribute exists for the same
quantity its name is recorded in the JSON Schema under ``otel``. Output lengths of ``length`` and
``abort`` finishes are right-censored: estimators treat them as censored, not as completions.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field, model_validator

from schemas.envelope import Envelope, Label, Seconds, Tokens


class FinishReason(StrEnum):
    """Why a request stopped; ``length`` and ``abort`` right-censor the output length."""

    STOP = "stop"
    LENGTH = "length"
    ABORT = "abort"
    ERROR = "error"


CENSORING_REASONS = frozenset({FinishReason.LENGTH, FinishReason.ABORT})


class RequestArrived(Envelope):
    """A request reached the engine (or its router): prompt size, tier and limits are known."""

    event_type: Literal["request.arrived"] = "request.arrived"
    request_id: Label
    prompt_tokens: Tokens = Field(json_schema_extra={"otel": "gen_ai.usage.input_tokens"})
    max_tokens: int | None = Field(
        default=None, ge=1, le=10_000_000, json_schema_extra={"otel": "gen_ai.request.max_tokens"}
    )
    tier: Label = "default"
    tbt_slo_s: float | None = Field(default=None, gt=0.0, le=3600.0, allow_inf_nan=False)
    category: Label | None = Field(default=None, description="traffic category (prose, code, rag, ...)")


class RequestAdmitted(Envelope):
    """The request got KV memory and a slot (on ``dp_rank`` for DP engines)."""

    event_type: Literal["request.admitted"] = "request.admitted"
    request_id: Label
    queue_time_s: Seconds = Field(default=0.0)


class RequestFirstToken(Envelope):
    """The request's first output token was produced (end of prefill)."""

    event_type: Literal["request.first_token"] = "request.first_token"
    request_id: Label
    ttft_s: Seconds = Field(json_schema_extra={"otel": "gen_ai.server.time_to_first_token"})


class RequestFinished(Envelope):
    """The request left the engine; carries its lengths and its latency summary."""

    event_type: Literal["request.finished"] = "request.finished"
    request_id: Label
    prompt_tokens: Tokens = Field(json_schema_extra={"otel": "gen_ai.usage.input_tokens"})
    output_tokens: Tokens = Field(json_schema_extra={"otel": "gen_ai.usage.output_tokens"})
    finish_reason: Literal["stop", "length", "abort", "error"] = Field(
        json_schema_extra={"otel": "gen_ai.response.finish_reasons"}
    )
    tier: Label = "default"
    tbt_slo_s: float | None = Field(default=None, gt=0.0, le=3600.0, allow_inf_nan=False)
    category: Label | None = None
    arrived_ts: Seconds = Field(description="event time the request arrived, seconds")
    admitted_ts: Seconds | None = None
    ttft_s: Seconds | None = Field(default=None, json_schema_extra={"otel": "gen_ai.server.time_to_first_token"})
    tbt_mean_s: Seconds | None = Field(default=None, json_schema_extra={"otel": "gen_ai.server.time_per_output_token"})
    tbt_p99_s: Seconds | None = None
    tbt_max_s: Seconds | None = None
    tbt_gaps: int = Field(default=0, ge=0, description="number of token gaps measured")
    tbt_gaps_over_slo: int = Field(default=0, ge=0, description="token gaps longer than tbt_slo_s")
    preemptions: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _check_consistency(self) -> RequestFinished:
        if self.arrived_ts > self.ts:
            msg = f"arrived_ts ({self.arrived_ts}) must not be after ts ({self.ts})"
            raise ValueError(msg)
        if self.tbt_gaps_over_slo > self.tbt_gaps:
            msg = f"tbt_gaps_over_slo ({self.tbt_gaps_over_slo}) must not exceed tbt_gaps ({self.tbt_gaps})"
            raise ValueError(msg)
        return self

    @property
    def censored(self) -> bool:
        """True when the output length is right-censored (a ``length`` or ``abort`` finish)."""
        return FinishReason(self.finish_reason) in CENSORING_REASONS


class RequestPreempted(Envelope):
    """The request lost its KV memory and will be recomputed."""

    event_type: Literal["request.preempted"] = "request.preempted"
    request_id: Label
    generated_tokens: Tokens
