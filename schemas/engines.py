"""Engine lifecycle events: registration, heartbeat, and the PolicyApplied acknowledgement."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from schemas.envelope import Envelope, Identifier, Label


class EngineRegistered(Envelope):
    """An engine (re)started: its hardware, limits and pool, so policies can size for it."""

    event_type: Literal["engine.registered"] = "engine.registered"
    model: Label
    gpu: Label
    hardware_profile: Label | None = Field(default=None, description="calibration profile key")
    pool: Label = "default"
    max_num_seqs: int = Field(ge=1, le=1_000_000)
    max_num_batched_tokens: int = Field(ge=1, le=10_000_000)
    max_model_len: int = Field(ge=1, le=10_000_000)
    kv_blocks_total: int = Field(ge=1)
    block_size_tokens: int = Field(ge=1, le=4096)
    dp_size: int = Field(default=1, ge=1, le=4096)
    scheduler: Label | None = Field(default=None, description="the scheduler the engine runs (vllm, ebplus, slai, ...)")
    obeys: list[Identifier] | None = Field(
        default=None,
        max_length=16,
        description="engine-scope policy kinds the engine's scheduler or router obeys; None: not declared, so the "
        "control plane decides every engine-scope policy for it",
    )
    endpoint_url: str | None = Field(
        default=None,
        max_length=2048,
        pattern=r"^https?://[^\s]+$",
        description="base URL of the engine's OpenAI-compatible HTTP server, for `governor gateway`; None: the "
        "engine takes no requests through the gateway",
    )
    dp_group: Identifier | None = Field(
        default=None,
        description="the data-parallel deployment this engine serves as rank `dp_rank` of, when the ranks are "
        "separate servers (the BF-IO scope the gateway balances them under); None: a standalone engine",
    )


class Heartbeat(Envelope):
    """Liveness and a coarse load sample, so a silent engine stops holding the fleet watermark."""

    event_type: Literal["engine.heartbeat"] = "engine.heartbeat"
    num_running: int = Field(ge=0)
    num_waiting: int = Field(ge=0)


class PolicyApplied(Envelope):
    """The engine acknowledges a policy version: applied, or refused with a reason."""

    event_type: Literal["policy.applied"] = "policy.applied"
    kind: Identifier
    scope: Identifier
    version: int = Field(ge=0)
    applied: bool = True
    reason: str | None = Field(default=None, max_length=512)
