"""``EngineEvents``: every event an engine emits, built in one place from plain values.

The simulated engines (services/sim/telemetry.py) and the vLLM adapter (services/engines/stream.py)
observe different things (a ``SimRequest`` that knows its own story; a vLLM request seen through a
``RequestTrack``), but the events they send are one contract (schemas/engines.py, schemas/requests.py,
schemas/steps.py). Each adapter turns what it observes into the plain values below, and this class
stamps the envelope (``EnvelopeStamper``: event id, time, ``seq``, epoch, the policy versions in
effect) and builds the event through its validating constructor. Adding a field to an engine event
is one change here and one in each adapter that knows the value.

Building never publishes: the simulator hands each event to its sink at once, the vLLM adapter builds
on its publisher's thread and counts an event that fails its schema instead of raising into the
engine (``EventBuilder.emit``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from schemas.engines import EngineRegistered, Heartbeat, PolicyApplied
from schemas.requests import RequestAdmitted, RequestArrived, RequestFinished, RequestFirstToken, RequestPreempted
from schemas.steps import BfioSelfCheckReport, RankStepReport, StepReport
from services.sdk.envelope import EnvelopeStamper
from services.sdk.step_counts import StepCounts
from services.sdk.token_gaps import token_gap_summary

FinishReasonName = Literal["stop", "length", "abort", "error"]

# Shortest step an event carries: an engine clock that read the same time twice still ran a step.
MIN_STEP_DURATION_S = 1e-6


@dataclass(frozen=True, slots=True, kw_only=True)
class Registration:
    """What ``engine.registered`` announces of an engine besides its pool, scheduler and the policies it obeys.

    Limits carry vLLM's names; a data-parallel engine sums them over its ranks.
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


@dataclass(frozen=True, slots=True, kw_only=True)
class Announcement:
    """What ``engine.registered`` announces besides the engine's limits.

    Attributes:
        pool: the pool the engine serves in.
        obeys: the engine-scope policy kinds its scheduler or router reads; None: not declared.
        scheduler: the scheduler it runs (vllm, ebplus, slai, ...), or None.
        endpoint_url: base URL of its OpenAI-compatible server for ``governor gateway``, or None.
        dp_group: the data-parallel group it is a rank of, or None.
    """

    pool: str = "default"
    obeys: list[str] | None = None
    scheduler: str | None = None
    endpoint_url: str | None = None
    dp_group: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RankShare:
    """One data-parallel rank's share of a step, as ``rank.step`` reports it.

    Attributes:
        dp_rank: the rank.
        step_id: the engine's step.
        load_tokens: L_g, the summed context (prompt and generated) of the rank's active requests.
        num_running: requests the rank runs.
        free_slots: requests it could still admit.
        local_compute_s: its own compute time in the step, seconds.
        barrier_wait_s: its wait for the slowest rank, seconds (0 where ranks step on their own).
        admitted: requests it admitted since its previous step.
        completed: requests it finished since its previous step.
    """

    dp_rank: int
    step_id: int
    load_tokens: int
    num_running: int
    free_slots: int
    local_compute_s: float
    barrier_wait_s: float
    admitted: int
    completed: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SelfCheckReport:
    """One period of BF-IO's online self-check, in the ``bfio.self_check`` event's field names."""

    first_step_id: int
    last_step_id: int
    judged_steps: int
    differing_steps: int
    expired_steps: int
    lookahead_horizon_steps: int
    lookahead_in_force: bool
    myopic_imbalance_tokens: float
    lookahead_imbalance_tokens: float
    squared_difference_tokens2: float
    shadow_compute_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class FinishedRequest:
    """One request's story at its end, as ``request.finished`` reports it.

    Attributes:
        request_id: the engine's id.
        prompt_tokens: prompt length, tokens.
        output_tokens: tokens generated.
        tier: Governor tier.
        tbt_slo_s: the tier's TBT SLO, or None.
        arrived_s: event time of arrival, seconds.
        admitted_s: event time of its first scheduled step, or None.
        ttft_s: time to its first token, or None (none came).
        preemptions: times it lost its KV.
        gaps_s: gaps between its consecutive output tokens, seconds.
        tbt_mean_s: its mean token gap when the engine knows only that (``gaps_s`` empty), else None.
        dp_rank: the data-parallel rank that served it, or None.
    """

    request_id: str
    prompt_tokens: int
    output_tokens: int
    tier: str
    tbt_slo_s: float | None
    arrived_s: float
    admitted_s: float | None
    ttft_s: float | None
    preemptions: int
    gaps_s: Sequence[float]
    tbt_mean_s: float | None = None
    dp_rank: int | None = None


class EngineEvents:
    """One engine's event builders over its envelope stamper; each returns the validated event."""

    def __init__(self, stamper: EnvelopeStamper) -> None:
        self.stamper = stamper

    @property
    def policy_versions(self) -> dict[str, int]:
        """Policy kind -> version in effect, as the engine's last ack recorded it."""
        return self.stamper.policy_versions

    def registered(self, now_s: float, registration: Registration, announced: Announcement) -> EngineRegistered:
        """``engine.registered``: the engine's limits, its pool and scheduler, the policy kinds it obeys."""
        return EngineRegistered(
            **self.stamper.next(now_s),
            model=registration.model,
            gpu=registration.gpu,
            hardware_profile=registration.hardware_profile,
            pool=announced.pool,
            max_num_seqs=registration.max_num_seqs,
            max_num_batched_tokens=registration.max_num_batched_tokens,
            max_model_len=registration.max_model_len,
            kv_blocks_total=registration.kv_blocks_total,
            block_size_tokens=registration.block_size_tokens,
            dp_size=registration.dp_size,
            scheduler=announced.scheduler,
            obeys=announced.obeys,
            endpoint_url=announced.endpoint_url,
            dp_group=announced.dp_group,
        )

    def heartbeat(self, now_s: float, *, num_running: int, num_waiting: int) -> Heartbeat:
        """``engine.heartbeat``: liveness and load while the engine may be idle."""
        return Heartbeat(**self.stamper.next(now_s), num_running=num_running, num_waiting=num_waiting)

    def applied(self, now_s: float, *, kind: str, scope: str, version: int) -> PolicyApplied:
        """Record ``version`` of ``kind`` as in effect for this and every later event; its ``policy.applied`` ack."""
        self.stamper.applied(kind, version)
        return PolicyApplied(**self.stamper.next(now_s), kind=kind, scope=scope, version=version)

    def arrived(
        self,
        now_s: float,
        *,
        request_id: str,
        prompt_tokens: int,
        max_tokens: int | None,
        tier: str,
        tbt_slo_s: float | None,
    ) -> RequestArrived:
        """``request.arrived``."""
        return RequestArrived(
            **self.stamper.next(now_s),
            request_id=request_id,
            prompt_tokens=prompt_tokens,
            max_tokens=max_tokens,
            tier=tier,
            tbt_slo_s=tbt_slo_s,
        )

    def admitted(self, now_s: float, *, request_id: str, arrived_s: float, dp_rank: int | None) -> RequestAdmitted:
        """``request.admitted``, its queue time measured from ``arrived_s``."""
        return RequestAdmitted(
            **self.stamper.next(now_s, dp_rank),
            request_id=request_id,
            queue_time_s=max(0.0, now_s - arrived_s),
        )

    def first_token(
        self, now_s: float, *, request_id: str, arrived_s: float, dp_rank: int | None = None
    ) -> RequestFirstToken:
        """``request.first_token``, its TTFT measured from ``arrived_s``."""
        return RequestFirstToken(
            **self.stamper.next(now_s, dp_rank), request_id=request_id, ttft_s=max(0.0, now_s - arrived_s)
        )

    def preempted(self, now_s: float, *, request_id: str, generated_tokens: int) -> RequestPreempted:
        """``request.preempted``."""
        return RequestPreempted(**self.stamper.next(now_s), request_id=request_id, generated_tokens=generated_tokens)

    def finished(self, now_s: float, request: FinishedRequest, *, reason: FinishReasonName) -> RequestFinished:
        """``request.finished`` with the request's TTFT and token-gap summary (``token_gap_summary``)."""
        gaps = token_gap_summary(request.gaps_s, request.tbt_slo_s)
        if request.tbt_mean_s is not None and gaps["tbt_gaps"] == 0:
            gaps["tbt_mean_s"] = request.tbt_mean_s
        return RequestFinished(
            **self.stamper.next(now_s, request.dp_rank),
            finish_reason=reason,
            request_id=request.request_id,
            prompt_tokens=request.prompt_tokens,
            output_tokens=request.output_tokens,
            ttft_s=request.ttft_s,
            tier=request.tier,
            tbt_slo_s=request.tbt_slo_s,
            arrived_ts=min(request.arrived_s, now_s),
            admitted_ts=request.admitted_s,
            preemptions=request.preemptions,
            **gaps,
        )

    def step(self, now_s: float, counts: StepCounts, *, step_id: int, registered_block_size_tokens: int) -> StepReport:
        """``step``: one iteration's batch (``StepCounts.event_fields``); its kind follows from the counts.

        An engine's clocks and block counts are taken as they come: a zero duration, or more blocks
        used than the engine has, is clamped to what the event accepts rather than losing the step.
        """
        values = counts.event_fields(registered_block_size_tokens=registered_block_size_tokens)
        values["duration_s"] = max(counts.duration_s, MIN_STEP_DURATION_S)
        values["kv_blocks_used"] = min(counts.kv_blocks_used, counts.kv_blocks_total)
        return StepReport(**self.stamper.next(now_s), step_id=step_id, **values)

    def rank_step(self, now_s: float, share: RankShare) -> RankStepReport:
        """``rank.step``: a data-parallel rank's share of a step (BF-IO's L_g, its slots and its barrier wait)."""
        return RankStepReport(
            **self.stamper.next(now_s, share.dp_rank),
            step_id=share.step_id,
            load_tokens=share.load_tokens,
            num_running=share.num_running,
            free_slots=share.free_slots,
            local_compute_s=share.local_compute_s,
            barrier_wait_s=share.barrier_wait_s,
            admitted=share.admitted,
            completed=share.completed,
        )

    def bfio_self_check(self, now_s: float, report: SelfCheckReport) -> BfioSelfCheckReport:
        """``bfio.self_check``: BF-IO's shadow judgements over a period (services/sim/selfcheck.py)."""
        return BfioSelfCheckReport(
            **self.stamper.next(now_s),
            first_step_id=report.first_step_id,
            last_step_id=report.last_step_id,
            judged_steps=report.judged_steps,
            differing_steps=report.differing_steps,
            expired_steps=report.expired_steps,
            lookahead_horizon_steps=report.lookahead_horizon_steps,
            lookahead_in_force=report.lookahead_in_force,
            myopic_imbalance_tokens=report.myopic_imbalance_tokens,
            lookahead_imbalance_tokens=report.lookahead_imbalance_tokens,
            squared_difference_tokens2=report.squared_difference_tokens2,
            shadow_compute_s=report.shadow_compute_s,
        )
