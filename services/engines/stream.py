"""``EngineStream``: one real engine's Governor event stream, whatever engine feeds it.

An adapter (services/engines/vllm) observes its engine (a request arrived, a step ran, tokens came
out, a request ended, a policy was applied) and tells this class; the class keeps per-request
bookkeeping (arrival, first token, token gaps, preemptions), builds the schema events through their
validating constructors and hands them to a ``TelemetrySink`` (the non-blocking Kafka publisher in
production). It is thread-safe: an engine's step loop and its heartbeat thread share one ``seq``.

A restarted engine gets a new ``source_epoch`` (the start time in milliseconds), so its ``seq`` and
step ids starting again at 0 are a new producer generation, not duplicates; it registers again, and
the requests it lost are simply never finished (they count neither as completions nor as lengths).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Literal

import structlog
from pydantic import ValidationError

from schemas.engines import EngineRegistered, Heartbeat, PolicyApplied
from schemas.events import Event
from schemas.policy_docs.base import PolicyDocument
from schemas.requests import RequestArrived, RequestFinished, RequestFirstToken
from schemas.steps import StepReport
from services.sdk.envelope import EnvelopeStamper
from services.sdk.protocol import TelemetrySink
from services.sdk.token_gaps import token_gap_summary

log = structlog.get_logger(__name__)

FinishReasonName = Literal["stop", "length", "abort", "error"]


@dataclass(slots=True, kw_only=True)
class RequestTrack:
    """What the stream remembers of one request between its events.

    Attributes:
        request_id: the engine's id.
        arrived_s: event time of arrival, seconds.
        prompt_tokens: prompt length, tokens.
        max_tokens: the request's output limit, or None.
        tier: Governor tier.
        tbt_slo_s: the tier's TBT SLO, or None.
        admitted_s: event time of its first scheduled step, or None.
        first_token_s: event time of its first output token, or None.
        last_token_s: event time of its latest output token, or None.
        output_tokens: tokens generated so far.
        gaps_s: gaps between consecutive output tokens, seconds.
        preemptions: times it lost its KV.
    """

    request_id: str
    arrived_s: float
    prompt_tokens: int
    max_tokens: int | None = None
    tier: str = "default"
    tbt_slo_s: float | None = None
    admitted_s: float | None = None
    first_token_s: float | None = None
    last_token_s: float | None = None
    output_tokens: int = 0
    gaps_s: list[float] = field(default_factory=list)
    preemptions: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class StepCounts:
    """One engine iteration as the adapter saw it (the forward-pass metrics of schemas/steps.py).

    Attributes:
        duration_s: wall time of the iteration, seconds (> 0).
        num_prefill_requests: requests that computed prompt tokens.
        sum_prefill_tokens: prompt tokens computed.
        num_decode_requests: requests that decoded one token.
        sum_decode_kv_tokens: summed context of the decoding requests, tokens.
        num_running: requests holding KV after the iteration.
        num_waiting: requests queued after the iteration.
        kv_blocks_used: KV blocks in use after the iteration.
        kv_blocks_total: KV blocks of the engine.
        num_preempted: requests preempted by the iteration's scheduling.
        scheduler_mode: what the scheduler ran (``mb``, ``eb``, ``slai``, ``vllm``...).
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


class EngineStream:
    """One engine's events: registration, requests, steps, heartbeats and policy acks, in order."""

    def __init__(self, *, stamper: EnvelopeStamper, sink: TelemetrySink, block_size_tokens: int = 16) -> None:
        self._stamper = stamper
        self._sink = sink
        self._lock = threading.Lock()
        self._requests: dict[str, RequestTrack] = {}
        self._step_id = 0
        self.block_size_tokens = block_size_tokens
        self.rejected = 0

    @property
    def engine_id(self) -> str:
        """The engine's id, as every event carries it."""
        return self._stamper.engine_id

    @property
    def policy_versions(self) -> dict[str, int]:
        """Policy kind -> version in effect, as the last ack recorded it."""
        return self._stamper.policy_versions

    def registered(self, now_s: float, **fields: object) -> None:
        """Emit ``engine.registered`` with the engine's limits (fields of ``EngineRegistered``)."""
        with self._lock:
            self.block_size_tokens = int(fields.get("block_size_tokens", self.block_size_tokens))  # type: ignore[call-overload]
            self._emit(lambda: EngineRegistered(**self._stamper.next(now_s), **fields))  # type: ignore[arg-type]

    def arrived(self, now_s: float, track: RequestTrack) -> None:
        """Start tracking ``track`` and emit ``request.arrived``."""
        with self._lock:
            self._requests[track.request_id] = track
            self._emit(lambda: self._arrival(now_s, track))

    def scheduled(self, now_s: float, request_ids: Iterable[str]) -> None:
        """Note the first time each of ``request_ids`` was scheduled (its admission); one lock per step."""
        with self._lock:
            for request_id in request_ids:
                track = self._requests.get(request_id)
                if track is not None and track.admitted_s is None:
                    track.admitted_s = now_s

    def preempted(self, request_id: str) -> None:
        """Count one preemption of ``request_id``."""
        with self._lock:
            track = self._requests.get(request_id)
            if track is not None:
                track.preemptions += 1

    def tokens(self, now_s: float, counts: Iterable[tuple[str, int]]) -> None:
        """Record new output tokens at ``now_s`` per (request id, count); a first one emits ``request.first_token``.

        One call (one lock) per engine step: the step loop pays for the bookkeeping once, not per request.
        """
        with self._lock:
            for request_id, count in counts:
                track = self._requests.get(request_id)
                if track is None or count <= 0:
                    continue
                if track.first_token_s is None:
                    track.first_token_s = now_s
                    self._emit(partial(self._first_token, now_s, track))
                elif track.last_token_s is not None:
                    track.gaps_s.append(max(0.0, now_s - track.last_token_s))
                track.last_token_s = now_s
                track.output_tokens += count

    def finished(self, now_s: float, request_id: str, reason: FinishReasonName) -> None:
        """Emit ``request.finished`` for a tracked request and forget it (unknown ids are ignored)."""
        with self._lock:
            track = self._requests.pop(request_id, None)
            if track is None:
                return
            self._publish_finished(now_s, track, reason, ttft_s=None, tbt_mean_s=None)

    def summarised(
        self,
        now_s: float,
        track: RequestTrack,
        reason: FinishReasonName,
        *,
        ttft_s: float | None,
        tbt_mean_s: float | None,
    ) -> None:
        """Emit ``request.arrived`` and ``request.finished`` of a request known only once it ended.

        A stat logger learns of a request when vLLM reports it finished; the arrival is emitted then
        (late by the request's end-to-end latency) with the true ``arrived_ts`` on the finish.
        """
        with self._lock:
            self._emit(lambda: self._arrival(now_s, track))
            self._publish_finished(now_s, track, reason, ttft_s=ttft_s, tbt_mean_s=tbt_mean_s)

    def _first_token(self, now_s: float, track: RequestTrack) -> RequestFirstToken:
        return RequestFirstToken(
            **self._stamper.next(now_s), request_id=track.request_id, ttft_s=max(0.0, now_s - track.arrived_s)
        )

    def _arrival(self, now_s: float, track: RequestTrack) -> RequestArrived:
        return RequestArrived(
            **self._stamper.next(now_s),
            request_id=track.request_id,
            prompt_tokens=track.prompt_tokens,
            max_tokens=track.max_tokens,
            tier=track.tier,
            tbt_slo_s=track.tbt_slo_s,
        )

    def _emit(self, build: Callable[[], Event]) -> None:
        """Build one event and hand it over; an event that fails its schema is counted, logged, never raised."""
        try:
            event = build()
        except (ValidationError, ValueError) as exc:
            self.rejected += 1
            if self.rejected == 1 or self.rejected % 1000 == 0:
                log.warning("engine_event_rejected", rejected_total=self.rejected, reason=str(exc).splitlines()[0])
            return
        self._sink.publish(event)

    def _publish_finished(
        self,
        now_s: float,
        track: RequestTrack,
        reason: FinishReasonName,
        *,
        ttft_s: float | None,
        tbt_mean_s: float | None,
    ) -> None:
        if ttft_s is None and track.first_token_s is not None:
            ttft_s = max(0.0, track.first_token_s - track.arrived_s)
        gaps = token_gap_summary(track.gaps_s, track.tbt_slo_s)
        if tbt_mean_s is not None and gaps["tbt_gaps"] == 0:
            gaps["tbt_mean_s"] = tbt_mean_s
        self._emit(
            lambda: RequestFinished(
                **self._stamper.next(now_s),
                request_id=track.request_id,
                prompt_tokens=track.prompt_tokens,
                output_tokens=track.output_tokens,
                finish_reason=reason,
                tier=track.tier,
                tbt_slo_s=track.tbt_slo_s,
                arrived_ts=min(track.arrived_s, now_s),
                admitted_ts=track.admitted_s,
                ttft_s=ttft_s,
                preemptions=track.preemptions,
                **gaps,
            )
        )

    def step(self, now_s: float, counts: StepCounts) -> None:
        """Emit one ``step``; an iteration that computed nothing is not a step and is skipped."""
        if counts.sum_prefill_tokens <= 0 and counts.num_decode_requests <= 0:
            return
        kind: Literal["prefill", "decode", "mixed"] = (
            ("mixed" if counts.num_decode_requests > 0 else "prefill") if counts.sum_prefill_tokens > 0 else "decode"
        )
        with self._lock:
            step_id = self._step_id
            self._step_id += 1
            self._emit(
                lambda: StepReport(
                    **self._stamper.next(now_s),
                    step_id=step_id,
                    duration_s=max(counts.duration_s, 1e-6),
                    batch_kind=kind,
                    num_prefill_requests=counts.num_prefill_requests,
                    sum_prefill_tokens=counts.sum_prefill_tokens,
                    num_decode_requests=counts.num_decode_requests,
                    sum_decode_kv_tokens=counts.sum_decode_kv_tokens,
                    num_running=counts.num_running,
                    num_waiting=counts.num_waiting,
                    kv_blocks_used=min(counts.kv_blocks_used, counts.kv_blocks_total),
                    kv_blocks_total=counts.kv_blocks_total,
                    block_size_tokens=self.block_size_tokens,
                    num_preempted=counts.num_preempted,
                    scheduler_mode=counts.scheduler_mode,
                )
            )

    def heartbeat(self, now_s: float, *, num_running: int, num_waiting: int) -> None:
        """Emit ``engine.heartbeat`` (liveness while the engine is idle)."""
        with self._lock:
            self._emit(lambda: Heartbeat(**self._stamper.next(now_s), num_running=num_running, num_waiting=num_waiting))

    def applied(self, now_s: float, document: PolicyDocument) -> None:
        """Record ``document`` as in effect and emit its ``policy.applied`` ack."""
        with self._lock:
            self._stamper.applied(document.kind, document.version)
            self._emit(
                lambda: PolicyApplied(
                    **self._stamper.next(now_s),
                    kind=document.kind,
                    scope=document.scope,
                    version=document.version,
                )
            )
