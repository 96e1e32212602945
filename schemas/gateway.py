"""Routing events of ``governor gateway``: what the request path did with each request (DESIGN section 7a).

The gateway publishes them on ``gov.telemetry`` under its own ``engine_id`` (the gateway id), beside its
``policy.applied`` acknowledgements, so the log says for every request where it went and why
(``gateway.routed``), that it waited for capacity (``gateway.queued``), that its prompt was shortened
(``gateway.compressed``), that it was refused (``gateway.shed``) or that its upstream failed
(``gateway.upstream_error``). Every event carries the request id the client saw in ``x-request-id``.

Request ids, pools, tiers and categories are ``Label``s, as in the request and engine events (a client's id
such as ``chat:42`` or a pool named like a model path is a value, never part of a key); the upstream is an
engine id, an ``Identifier``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from schemas.envelope import Envelope, Identifier, Label, Seconds, Tokens
from schemas.policy_docs.base import ContractModel

RouteReason = Literal["fleetopt_short", "fleetopt_compressed", "fleetopt_long", "context_fit"]
Balancer = Literal["least_load", "bfio", "jsq_load", "fcfs", "round_robin", "vllm_score"]
ShedReason = Literal["queue_full", "deadline", "no_upstream", "context_too_long"]
UpstreamErrorKind = Literal["status", "unreachable", "timeout", "stream_broken"]


class GatewayRouted(Envelope):
    """A request was sent to an upstream: which one, of which pool, the pool rule and the balancer that chose it."""

    event_type: Literal["gateway.routed"] = "gateway.routed"
    request_id: Label
    model: str = Field(min_length=1, max_length=256)
    pool: Label
    upstream: Identifier = Field(description="engine id of the upstream the request went to")
    reason: RouteReason = Field(description="the pool rule: FleetOpt's short/compressed/long, or context fit")
    balancer: Balancer = Field(description="how the upstream was chosen in the pool (BF-IO for DP ranks)")
    prompt_tokens: Tokens | None = Field(default=None, description="counted by the upstream's tokenizer; None: not")
    max_tokens: int | None = Field(default=None, ge=0, le=10_000_000)
    l_total_tokens: Tokens | None = Field(default=None, description="prompt_tokens + max_tokens (FleetOpt L_total)")
    tier: Label = "default"
    category: Label | None = None
    queued_s: Seconds = Field(default=0.0, description="time the request waited in the gateway, seconds")


class GatewayQueued(Envelope):
    """Every candidate upstream was full or overloaded: the request waits in its pool's queue."""

    event_type: Literal["gateway.queued"] = "gateway.queued"
    request_id: Label
    pool: Label
    tier: Label = "default"
    queue_depth: int = Field(ge=0, description="requests waiting in the pool's queue, this one included")


class GatewayCompressed(Envelope):
    """A borderline request's prompt was cut to fit the short pool (FleetOpt compress-and-route, Eq. 15)."""

    event_type: Literal["gateway.compressed"] = "gateway.compressed"
    request_id: Label
    category: Label
    original_prompt_tokens: Tokens
    compressed_prompt_tokens: Tokens = Field(description="counted by the upstream's own tokenizer after the cut")
    target_tokens: Tokens = Field(description="T_c = B_short - L_out")
    sentences_total: int = Field(ge=0)
    sentences_kept: int = Field(ge=0)


class GatewayShed(Envelope):
    """A request was refused (HTTP 429 or 400) instead of being routed, with the reason."""

    event_type: Literal["gateway.shed"] = "gateway.shed"
    request_id: Label
    pool: Label | None = None
    tier: Label = "default"
    reason: ShedReason
    waited_s: Seconds = Field(default=0.0, description="time the request waited in the queue first, seconds")


class GatewayUpstreamError(Envelope):
    """An upstream answered with an error status, could not be reached, timed out, or broke its stream."""

    event_type: Literal["gateway.upstream_error"] = "gateway.upstream_error"
    request_id: Label
    upstream: Identifier
    kind: UpstreamErrorKind
    status: int | None = Field(default=None, ge=100, le=599, description="the upstream's HTTP status, if any")


UpstreamState = Literal["active", "draining"]
UpstreamUrl = Annotated[str, Field(pattern=r"^https?://[^\s]+$", max_length=2048, description="base URL (without /v1)")]


class UpstreamAdd(ContractModel):
    """Body of ``POST /admin/upstreams``: an engine endpoint the gateway should route to (docs/gateway.md, Admin).

    ``model`` may be left out: the gateway then reads it (and the context window) from the endpoint's
    ``/v1/models`` on its first passing health check, and routes nothing there before.
    """

    url: UpstreamUrl
    pool: Label
    model: Label | None = None


class UpstreamDrain(ContractModel):
    """Body of ``POST /admin/upstreams/drain``: the endpoint that takes no new requests from now on."""

    url: UpstreamUrl


class UpstreamEntry(ContractModel):
    """One upstream as ``GET /admin/upstreams`` lists it: the scaler's local connector drains and removes by it."""

    url: UpstreamUrl
    pool: Label
    dp_rank: int | None = Field(ge=0, le=4096, description="its rank in a DP group; None: not a rank")
    state: UpstreamState = Field(description="active: takes new requests when healthy; draining: takes none")
    in_flight: int = Field(ge=0, description="requests the gateway has on it now, streaming ones included")
