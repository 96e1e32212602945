"""One simulated engine's telemetry: what the engine observed, as events handed to its ``TelemetrySink``.

The events are built by the engine SDK (services/sdk/engine_events.py, ``EngineEvents``), the same
builders the vLLM adapter uses; this class reads the simulator's own objects (a ``RequestSpec``, a
``SimRequest`` that keeps its admission, first token, gaps and preemptions) into their plain values
and publishes each event the moment it is built. A simulated engine's numbers are its own, so an
event that fails its schema is a bug here and raises.
"""

from __future__ import annotations

from typing import Literal

from services.sdk.engine_events import (
    Announcement,
    EngineEvents,
    FinishedRequest,
    RankShare,
    Registration,
    SelfCheckReport,
)
from services.sdk.envelope import EnvelopeStamper
from services.sdk.protocol import TelemetrySink
from services.sdk.step_counts import DEFAULT_BLOCK_SIZE_TOKENS, StepCounts
from services.sim.request import RequestSpec, SimRequest


class EngineTelemetry:
    """One simulated engine's event stream, in order, through one ``EngineEvents``."""

    def __init__(self, *, engine_id: str, deployment: str, sink: TelemetrySink, source_epoch: int = 0) -> None:
        self.engine_id = engine_id
        self.deployment = deployment
        self.sink = sink
        self._events = EngineEvents(
            EnvelopeStamper(engine_id=engine_id, deployment=deployment, source_epoch=source_epoch)
        )
        self._block_size_tokens = DEFAULT_BLOCK_SIZE_TOKENS

    @property
    def policy_versions(self) -> dict[str, int]:
        """Policy kind -> version in effect, as the engine's last ack recorded it."""
        return self._events.policy_versions

    def registered(self, now_s: float, registration: Registration, *, pool: str, obeys: list[str]) -> None:
        """Emit ``engine.registered``; ``obeys`` lists the policy kinds the engine's scheduler or router reads."""
        self._block_size_tokens = registration.block_size_tokens
        self.sink.publish(self._events.registered(now_s, registration, Announcement(pool=pool, obeys=obeys)))

    def heartbeat(self, now_s: float, *, num_running: int, num_waiting: int) -> None:
        """Emit ``engine.heartbeat``."""
        self.sink.publish(self._events.heartbeat(now_s, num_running=num_running, num_waiting=num_waiting))

    def policy_applied(self, now_s: float, *, kind: str, scope: str, version: int) -> None:
        """Record ``version`` as in effect for ``kind`` and emit ``policy.applied``."""
        self.sink.publish(self._events.applied(now_s, kind=kind, scope=scope, version=version))

    def arrived(self, now_s: float, spec: RequestSpec) -> None:
        """Emit ``request.arrived``."""
        self.sink.publish(
            self._events.arrived(
                now_s,
                request_id=spec.request_id,
                prompt_tokens=spec.prompt_tokens,
                max_tokens=spec.max_tokens,
                tier=spec.tier,
                tbt_slo_s=spec.tbt_slo_s,
            )
        )

    def admitted(self, now_s: float, request: SimRequest) -> None:
        """Emit ``request.admitted`` (first admission only)."""
        spec = request.spec
        self.sink.publish(
            self._events.admitted(now_s, request_id=spec.request_id, arrived_s=spec.arrival_s, dp_rank=request.dp_rank)
        )

    def first_token(self, now_s: float, request: SimRequest) -> None:
        """Emit ``request.first_token``."""
        spec = request.spec
        self.sink.publish(
            self._events.first_token(
                now_s, request_id=spec.request_id, arrived_s=spec.arrival_s, dp_rank=request.dp_rank
            )
        )

    def preempted(self, now_s: float, request: SimRequest) -> None:
        """Emit ``request.preempted``."""
        self.sink.publish(
            self._events.preempted(now_s, request_id=request.spec.request_id, generated_tokens=request.generated_tokens)
        )

    def finished(
        self, now_s: float, request: SimRequest, *, finish_reason: Literal["stop", "length", "abort", "error"]
    ) -> None:
        """Emit ``request.finished`` with the request's TTFT and token-gap summary."""
        spec = request.spec
        story = FinishedRequest(
            request_id=spec.request_id,
            prompt_tokens=spec.prompt_tokens,
            output_tokens=request.generated_tokens,
            tier=spec.tier,
            tbt_slo_s=spec.tbt_slo_s,
            arrived_s=spec.arrival_s,
            admitted_s=request.admitted_s,
            ttft_s=None if request.first_token_s is None else request.first_token_s - spec.arrival_s,
            preemptions=request.preemptions,
            gaps_s=request.gaps_s,
            dp_rank=request.dp_rank,
        )
        self.sink.publish(self._events.finished(now_s, story, reason=finish_reason))

    def step(self, now_s: float, counts: StepCounts, *, step_id: int) -> None:
        """Emit one ``step`` (forward-pass metrics of one iteration); its batch kind follows from the counts."""
        self.sink.publish(
            self._events.step(now_s, counts, step_id=step_id, registered_block_size_tokens=self._block_size_tokens)
        )

    def rank_step(self, now_s: float, share: RankShare) -> None:
        """Emit one ``rank.step`` (a DP rank's share of a synchronised step)."""
        self.sink.publish(self._events.rank_step(now_s, share))

    def bfio_self_check(self, now_s: float, report: SelfCheckReport) -> None:
        """Emit one ``bfio.self_check`` (BF-IO's shadow judgements over a period, services/sim/selfcheck.py)."""
        self.sink.publish(self._events.bfio_self_check(now_s, report))
