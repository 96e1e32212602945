"""Builds one engine's schema events and hands them to its ``TelemetrySink`` (services/sdk/protocol.py).

Each engine owns one ``EngineTelemetry``: it stamps the envelope (event time ``ts``, per-engine
monotonic ``seq``, ``engine_id``, ``deployment``, the policy versions in effect) and builds every
event through its validating constructor, only at the moment it is emitted.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Literal

from schemas.engines import EngineRegistered, Heartbeat, PolicyApplied
from schemas.requests import RequestAdmitted, RequestArrived, RequestFinished, RequestFirstToken, RequestPreempted
from schemas.steps import BfioSelfCheckReport, RankStepReport, StepReport
from services.sdk.envelope import EnvelopeStamper
from services.sdk.protocol import TelemetrySink
from services.sdk.step_counts import DEFAULT_BLOCK_SIZE_TOKENS, StepCounts
from services.sdk.token_gaps import token_gap_summary
from services.sim.request import RequestSpec, SimRequest
from services.sim.selfcheck import SelfCheckReport


@dataclass(frozen=True, slots=True, kw_only=True)
class Registration:
    """What ``engine.registered`` announces besides the pool and the policy kinds obeyed, in its field names.

    Limits carry vLLM's names; a DP deployment sums them over its ranks.
    """

    model: str
    gpu: str
    hardware_profile: str | None
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    kv_blocks_total: int
    block_size_tokens: int
    dp_size: int = 1


_REGISTRATION_FIELDS = tuple(f.name for f in fields(Registration))
_SELF_CHECK_FIELDS = tuple(f.name for f in fields(SelfCheckReport))


def _event_fields(value: object, names: tuple[str, ...]) -> dict[str, Any]:
    """``value``'s attributes ``names`` as event keyword arguments (a shallow ``asdict``, cheap per step)."""
    return {name: getattr(value, name) for name in names}


class EngineTelemetry:
    """One engine's event stream: envelope stamping plus one builder per event type."""

    def __init__(self, *, engine_id: str, deployment: str, sink: TelemetrySink, source_epoch: int = 0) -> None:
        self.engine_id = engine_id
        self.deployment = deployment
        self.sink = sink
        self._stamper = EnvelopeStamper(engine_id=engine_id, deployment=deployment, source_epoch=source_epoch)
        self._envelope = self._stamper.next
        self._block_size_tokens = DEFAULT_BLOCK_SIZE_TOKENS

    @property
    def policy_versions(self) -> dict[str, int]:
        """Policy kind -> version in effect, as the engine's last ack recorded it."""
        return self._stamper.policy_versions

    def registered(self, now_s: float, registration: Registration, *, pool: str, obeys: list[str]) -> None:
        """Emit ``engine.registered``; ``obeys`` lists the policy kinds the engine's scheduler or router reads."""
        self._block_size_tokens = registration.block_size_tokens
        self.sink.publish(
            EngineRegistered(
                **self._envelope(now_s), **_event_fields(registration, _REGISTRATION_FIELDS), pool=pool, obeys=obeys
            )
        )

    def heartbeat(self, now_s: float, *, num_running: int, num_waiting: int) -> None:
        """Emit ``engine.heartbeat``."""
        self.sink.publish(
            Heartbeat(
                **self._envelope(now_s),
                num_running=num_running,
                num_waiting=num_waiting,
            )
        )

    def policy_applied(self, now_s: float, *, kind: str, scope: str, version: int) -> None:
        """Record ``version`` as in effect for ``kind`` and emit ``policy.applied``."""
        self._stamper.applied(kind, version)
        self.sink.publish(
            PolicyApplied(
                **self._envelope(now_s),
                kind=kind,
                scope=scope,
                version=version,
            )
        )

    def arrived(self, now_s: float, spec: RequestSpec) -> None:
        """Emit ``request.arrived``."""
        self.sink.publish(
            RequestArrived(
                **self._envelope(now_s),
                request_id=spec.request_id,
                prompt_tokens=spec.prompt_tokens,
                max_tokens=spec.max_tokens,
                tier=spec.tier,
                tbt_slo_s=spec.tbt_slo_s,
            )
        )

    def admitted(self, now_s: float, request: SimRequest) -> None:
        """Emit ``request.admitted`` (first admission only)."""
        self.sink.publish(
            RequestAdmitted(
                **self._envelope(now_s, dp_rank=request.dp_rank),
                request_id=request.spec.request_id,
                queue_time_s=max(0.0, now_s - request.spec.arrival_s),
            )
        )

    def first_token(self, now_s: float, request: SimRequest) -> None:
        """Emit ``request.first_token``."""
        self.sink.publish(
            RequestFirstToken(
                **self._envelope(now_s, dp_rank=request.dp_rank),
                request_id=request.spec.request_id,
                ttft_s=max(0.0, now_s - request.spec.arrival_s),
            )
        )

    def preempted(self, now_s: float, request: SimRequest) -> None:
        """Emit ``request.preempted``."""
        self.sink.publish(
            RequestPreempted(
                **self._envelope(now_s),
                request_id=request.spec.request_id,
                generated_tokens=request.generated_tokens,
            )
        )

    def finished(
        self, now_s: float, request: SimRequest, *, finish_reason: Literal["stop", "length", "abort", "error"]
    ) -> None:
        """Emit ``request.finished`` with the request's TTFT and token-gap summary."""
        spec = request.spec
        self.sink.publish(
            RequestFinished(
                **self._envelope(now_s, dp_rank=request.dp_rank),
                finish_reason=finish_reason,
                request_id=spec.request_id,
                prompt_tokens=spec.prompt_tokens,
                output_tokens=request.generated_tokens,
                ttft_s=None if request.first_token_s is None else request.first_token_s - spec.arrival_s,
                tier=spec.tier,
                tbt_slo_s=spec.tbt_slo_s,
                arrived_ts=spec.arrival_s,
                admitted_ts=request.admitted_s,
                preemptions=request.preemptions,
                **token_gap_summary(request.gaps_s, spec.tbt_slo_s),
            )
        )

    def step(self, now_s: float, counts: StepCounts, *, step_id: int) -> None:
        """Emit one ``step`` (forward-pass metrics of one iteration); its batch kind follows from the counts."""
        values = counts.event_fields(registered_block_size_tokens=self._block_size_tokens)
        self.sink.publish(StepReport(**self._envelope(now_s), step_id=step_id, **values))

    def rank_step(
        self,
        now_s: float,
        *,
        dp_rank: int,
        step_id: int,
        load_tokens: int,
        num_running: int,
        free_slots: int,
        local_compute_s: float,
        barrier_wait_s: float,
        admitted: int,
        completed: int,
    ) -> None:
        """Emit one ``rank.step`` (a DP rank's share of a synchronised step)."""
        self.sink.publish(
            RankStepReport(
                **self._envelope(now_s, dp_rank=dp_rank),
                step_id=step_id,
                load_tokens=load_tokens,
                num_running=num_running,
                free_slots=free_slots,
                local_compute_s=local_compute_s,
                barrier_wait_s=barrier_wait_s,
                admitted=admitted,
                completed=completed,
            )
        )

    def bfio_self_check(self, now_s: float, report: SelfCheckReport) -> None:
        """Emit one ``bfio.self_check`` (BF-IO's shadow judgements over a period, services/sim/selfcheck.py)."""
        self.sink.publish(BfioSelfCheckReport(**self._envelope(now_s), **_event_fields(report, _SELF_CHECK_FIELDS)))
