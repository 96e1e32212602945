"""What the gateway tells the control plane: routing events and acknowledgements, never waiting for it.

Events go to a ``TelemetrySink`` (the SDK's non-blocking Kafka ``TelemetryPublisher`` in service, a list in
tests) under the gateway's own engine id, so ``governor status`` shows the gateway like an engine. The first
time the gateway acts on a policy document version it acknowledges it (``policy.applied``, through the SDK's
``acknowledge``) and stamps the version into the envelope of every later event.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog
from pydantic import ValidationError

from schemas.events import Event
from schemas.gateway import (
    Balancer,
    GatewayCompressed,
    GatewayQueued,
    GatewayRouted,
    GatewayShed,
    GatewayUpstreamError,
    RouteReason,
    ShedReason,
    UpstreamErrorKind,
)
from schemas.policy_docs.base import PolicyDocument
from services.sdk.envelope import EnvelopeStamper
from services.sdk.policy_client import acknowledge
from services.sdk.protocol import TelemetrySink

log = structlog.get_logger(__name__)


class GatewayTelemetry:
    """Builds and hands over the gateway's events; never raises into a request."""

    def __init__(self, sink: TelemetrySink, *, gateway_id: str, deployment: str, clock: Callable[[], float]) -> None:
        self._sink = sink
        self._stamper = EnvelopeStamper(engine_id=gateway_id, deployment=deployment)
        self._clock = clock
        self._acked: set[tuple[str, str, int]] = set()
        self.invalid = 0

    def _publish(self, build: Callable[[], Event]) -> None:
        """Build and hand over one event; one the contract refuses (a value too long) is counted, never raised."""
        try:
            event = build()
        except ValidationError as exc:
            self.invalid += 1
            log.warning("telemetry_event_invalid", error=str(exc).splitlines()[0], invalid_total=self.invalid)
            return
        self._sink.publish(event)

    def applied(self, document: PolicyDocument) -> None:
        """Acknowledge ``document`` once per (kind, scope, version) the gateway acts on."""
        key = (document.kind, document.scope, document.version)
        if key in self._acked:
            return
        self._acked.add(key)
        envelope = self._stamper.next(self._clock())
        acknowledge(
            self._sink,
            document,
            engine_id=envelope["engine_id"],
            seq=envelope["seq"],
            ts=envelope["ts"],
            event_id=envelope["event_id"],
        )
        self._stamper.applied(document.kind, document.version)
        log.info("policy_applied", kind=document.kind, scope=document.scope, version=document.version)

    def routed(
        self,
        *,
        request_id: str,
        model: str,
        pool: str,
        upstream: str,
        reason: RouteReason,
        balancer: Balancer,
        prompt_tokens: int | None,
        max_tokens: int | None,
        l_total_tokens: int | None,
        tier: str,
        category: str | None,
        queued_s: float,
        dp_rank: int | None,
    ) -> None:
        """A request left for ``upstream``."""
        self._publish(
            lambda: GatewayRouted(
                **self._stamper.next(self._clock(), dp_rank),
                request_id=request_id,
                model=model,
                pool=pool,
                upstream=upstream,
                reason=reason,
                balancer=balancer,
                prompt_tokens=prompt_tokens,
                max_tokens=max_tokens,
                l_total_tokens=l_total_tokens,
                tier=tier,
                category=category,
                queued_s=max(0.0, queued_s),
            )
        )

    def queued(self, *, request_id: str, pool: str, tier: str, queue_depth: int) -> None:
        """A request started waiting in ``pool``'s queue."""
        self._publish(
            lambda: GatewayQueued(
                **self._stamper.next(self._clock()),
                request_id=request_id,
                pool=pool,
                tier=tier,
                queue_depth=queue_depth,
            )
        )

    def compressed(
        self,
        *,
        request_id: str,
        category: str,
        original_prompt_tokens: int,
        compressed_prompt_tokens: int,
        target_tokens: int,
        sentences_total: int,
        sentences_kept: int,
    ) -> None:
        """A prompt was cut for the short pool."""
        self._publish(
            lambda: GatewayCompressed(
                **self._stamper.next(self._clock()),
                request_id=request_id,
                category=category,
                original_prompt_tokens=original_prompt_tokens,
                compressed_prompt_tokens=compressed_prompt_tokens,
                target_tokens=target_tokens,
                sentences_total=sentences_total,
                sentences_kept=sentences_kept,
            )
        )

    def shed(self, *, request_id: str, pool: str | None, tier: str, reason: ShedReason, waited_s: float) -> None:
        """A request was refused."""
        self._publish(
            lambda: GatewayShed(
                **self._stamper.next(self._clock()),
                request_id=request_id,
                pool=pool,
                tier=tier,
                reason=reason,
                waited_s=max(0.0, waited_s),
            )
        )

    def upstream_error(self, *, request_id: str, upstream: str, kind: UpstreamErrorKind, status: int | None) -> None:
        """An upstream failed a request."""
        self._publish(
            lambda: GatewayUpstreamError(
                **self._stamper.next(self._clock()),
                request_id=request_id,
                upstream=upstream,
                kind=kind,
                status=status,
            )
        )
