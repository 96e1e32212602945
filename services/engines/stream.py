"""``EngineStream``: one real engine's Governor event stream, whatever engine feeds it.

An adapter (services/engines/vllm) observes its engine (a request arrived, a step ran, tokens came
out, a request ended, a policy was applied) and tells this class; the class keeps per-request
bookkeeping (arrival, first token, token gaps, preemptions), builds the schema events through their
validating constructors and hands them to a ``TelemetrySink`` (the non-blocking Kafka publisher in
production). It is thread-safe: an engine's step loop and its heartbeat thread share one ``seq``.

Event building is kept off the engine's step path: a stream made ``deferred`` only
appends each call's raw numbers to a deque (``collections.deque.append`` is atomic, so the step loop
takes no lock and shares nothing else with other threads), and the bookkeeping, the pydantic events
and the hand-over to the sink happen when the stream is drained, by the publisher's own thread
(``TelemetryPublisher.attach``). Validating an event, stamping its envelope and queueing it took
0.2-0.45 ms of the step loop's Python per step, plus the waits on the queue's lock and the GIL that
the sending thread held; deferred, a step costs an append. The events are the same, in the same
order, with the same ``seq`` (tests/unit/engines/test_stream_golden.py); a synchronous stream (the
default, for tests and tools) drains itself on every call.

An engine core that is one rank of vLLM's internal data parallelism (``RankSlots``) follows each ``step``
with its ``rank.step``: the rank's load L_g (summed prompt and generated tokens of the requests it has
admitted and not finished, kept by the same bookkeeping), its running requests and free slots, the
step's duration as its local compute time, and the admissions and finishes since its previous step.

A restarted engine gets a new ``source_epoch`` (the start time in milliseconds), so its ``seq`` and
step ids starting again at 0 are a new producer generation, not duplicates; it registers again, and
the requests it lost are simply never finished (they count neither as completions nor as lengths).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Concatenate, ParamSpec

import structlog
from pydantic import ValidationError

from schemas.events import Event
from schemas.policy_docs.base import PolicyDocument
from services.sdk.engine_events import (
    MIN_STEP_DURATION_S,
    Announcement,
    EngineEvents,
    FinishedRequest,
    FinishReasonName,
    RankShare,
    Registration,
)
from services.sdk.envelope import EnvelopeStamper
from services.sdk.protocol import TelemetrySink
from services.sdk.step_counts import DEFAULT_BLOCK_SIZE_TOKENS, StepCounts

log = structlog.get_logger(__name__)

P = ParamSpec("P")

# Records a deferred stream holds for its drainer at most (the publisher's own queue bound): past it, a
# stalled drainer costs the engine its telemetry, never its memory.
MAX_PENDING_RECORDS = 100_000


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
class RankSlots:
    """The rank an engine core is of a data-parallel engine, and its own request slots.

    Attributes:
        dp_rank: the rank, stamped on every event of the core.
        max_num_seqs: requests the rank runs at most (its ``free_slots`` are this less its running ones).
    """

    dp_rank: int
    max_num_seqs: int


class EventBuilder:
    """The stream's bookkeeping and event building, run by whichever thread drains the stream.

    Only one thread at a time runs it (``EngineStream.drain`` holds the drain lock), so it keeps its
    per-request state without a lock of its own. Its methods are the stream's calls, applied in order.
    """

    def __init__(
        self, *, stamper: EnvelopeStamper, sink: TelemetrySink, block_size_tokens: int, rank: RankSlots | None = None
    ) -> None:
        self._events = EngineEvents(stamper)
        self._sink = sink
        self._requests: dict[str, RequestTrack] = {}
        self._step_id = 0
        self.block_size_tokens = block_size_tokens
        self.rejected = 0
        self.rank = rank
        self.load_tokens = 0
        self._admitted = 0
        self._completed = 0

    def registered(self, now_s: float, registration: Registration, announced: Announcement) -> None:
        """Emit ``engine.registered`` with the engine's limits and what it announces besides them."""
        self.block_size_tokens = registration.block_size_tokens
        self.emit(lambda: self._events.registered(now_s, registration, announced))

    def arrived(self, now_s: float, track: RequestTrack) -> None:
        """Start tracking ``track`` and emit ``request.arrived``."""
        self._requests[track.request_id] = track
        self.emit(lambda: self._arrival(now_s, track))

    def scheduled(self, now_s: float, request_ids: Iterable[str]) -> None:
        """Note the first time each of ``request_ids`` was scheduled (its admission)."""
        for request_id in request_ids:
            track = self._requests.get(request_id)
            if track is not None and track.admitted_s is None:
                track.admitted_s = now_s
                self.load_tokens += track.prompt_tokens + track.output_tokens
                self._admitted += 1

    def preempted(self, request_id: str) -> None:
        """Count one preemption of ``request_id``."""
        track = self._requests.get(request_id)
        if track is not None:
            track.preemptions += 1

    def tokens(self, now_s: float, counts: Iterable[tuple[str, int]]) -> None:
        """Record new output tokens at ``now_s`` per (request id, count); a first one emits ``request.first_token``."""
        for request_id, count in counts:
            track = self._requests.get(request_id)
            if track is None or count <= 0:
                continue
            if track.first_token_s is None:
                track.first_token_s = now_s
                self.emit(
                    partial(self._events.first_token, now_s, request_id=track.request_id, arrived_s=track.arrived_s)
                )
            elif track.last_token_s is not None:
                track.gaps_s.append(max(0.0, now_s - track.last_token_s))
            track.last_token_s = now_s
            track.output_tokens += count
            if track.admitted_s is not None:
                self.load_tokens += count

    def finished(self, now_s: float, request_id: str, reason: FinishReasonName) -> None:
        """Emit ``request.finished`` for a tracked request and forget it (unknown ids are ignored)."""
        track = self._requests.pop(request_id, None)
        if track is None:
            return
        if track.admitted_s is not None:
            self.load_tokens -= track.prompt_tokens + track.output_tokens
            self._completed += 1
        self._publish_finished(now_s, track, reason, ttft_s=None, tbt_mean_s=None)

    def summarised(
        self,
        now_s: float,
        track: RequestTrack,
        reason: FinishReasonName,
        ttft_s: float | None,
        tbt_mean_s: float | None,
    ) -> None:
        """Emit ``request.arrived`` and ``request.finished`` of a request known only once it ended."""
        self.emit(lambda: self._arrival(now_s, track))
        self._publish_finished(now_s, track, reason, ttft_s=ttft_s, tbt_mean_s=tbt_mean_s)

    def step(self, now_s: float, counts: StepCounts) -> None:
        """Emit one ``step`` (and a rank's ``rank.step``); an iteration that computed nothing is skipped."""
        if counts.sum_prefill_tokens <= 0 and counts.num_decode_requests <= 0:
            return
        step_id = self._step_id
        self._step_id += 1
        block_size_tokens = self.block_size_tokens
        self.emit(
            lambda: self._events.step(now_s, counts, step_id=step_id, registered_block_size_tokens=block_size_tokens)
        )
        if self.rank is not None:
            self._rank_step(now_s, step_id, counts, self.rank)

    def _rank_step(self, now_s: float, step_id: int, counts: StepCounts, rank: RankSlots) -> None:
        """The rank's share of its step: vLLM's ranks step on their own, so no barrier wait is observed (0)."""
        admitted, completed, self._admitted, self._completed = self._admitted, self._completed, 0, 0
        share = RankShare(
            dp_rank=rank.dp_rank,
            step_id=step_id,
            load_tokens=max(0, self.load_tokens),
            num_running=counts.num_running,
            free_slots=max(0, rank.max_num_seqs - counts.num_running),
            local_compute_s=max(counts.duration_s, MIN_STEP_DURATION_S),
            barrier_wait_s=0.0,
            admitted=admitted,
            completed=completed,
        )
        self.emit(lambda: self._events.rank_step(now_s, share))

    def heartbeat(self, now_s: float, num_running: int, num_waiting: int) -> None:
        """Emit ``engine.heartbeat`` (liveness while the engine is idle)."""
        self.emit(lambda: self._events.heartbeat(now_s, num_running=num_running, num_waiting=num_waiting))

    def applied(self, now_s: float, document: PolicyDocument) -> None:
        """Record ``document`` as in effect for every later event and emit its ``policy.applied`` ack."""
        self.emit(
            lambda: self._events.applied(now_s, kind=document.kind, scope=document.scope, version=document.version)
        )

    def emit(self, build: Callable[[], Event]) -> None:
        """Build one event and hand it over; an event that fails its schema is counted, logged, never raised."""
        try:
            event = build()
        except (ValidationError, ValueError) as exc:
            self.reject(str(exc).splitlines()[0])
            return
        self._sink.publish(event)

    def reject(self, reason: str) -> None:
        """Count one event that could not be built (logged on the first and every thousandth)."""
        self.rejected += 1
        if self.rejected == 1 or self.rejected % 1000 == 0:
            log.warning("engine_event_rejected", rejected_total=self.rejected, reason=reason)

    def _arrival(self, now_s: float, track: RequestTrack) -> Event:
        return self._events.arrived(
            now_s,
            request_id=track.request_id,
            prompt_tokens=track.prompt_tokens,
            max_tokens=track.max_tokens,
            tier=track.tier,
            tbt_slo_s=track.tbt_slo_s,
        )

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
        story = FinishedRequest(
            request_id=track.request_id,
            prompt_tokens=track.prompt_tokens,
            output_tokens=track.output_tokens,
            tier=track.tier,
            tbt_slo_s=track.tbt_slo_s,
            arrived_s=track.arrived_s,
            admitted_s=track.admitted_s,
            ttft_s=ttft_s,
            preemptions=track.preemptions,
            gaps_s=track.gaps_s,
            tbt_mean_s=tbt_mean_s,
        )
        self.emit(lambda: self._events.finished(now_s, story, reason=reason))


Record = tuple[Callable[..., None], tuple[Any, ...]]


class EngineStream:
    """One engine's events: registration, requests, steps, heartbeats and policy acks, in order.

    Every call becomes a record (a builder method and its raw arguments). A synchronous stream builds
    the events at once; a ``deferred`` one only appends the record, and ``drain`` (the publisher's
    thread, ``TelemetryPublisher.attach``) builds them, so the engine's step loop never validates,
    stamps or queues an event, nor takes a lock another thread holds.
    """

    def __init__(
        self,
        *,
        stamper: EnvelopeStamper,
        sink: TelemetrySink,
        block_size_tokens: int = DEFAULT_BLOCK_SIZE_TOKENS,
        deferred: bool = False,
        max_pending: int = MAX_PENDING_RECORDS,
        rank: RankSlots | None = None,
    ) -> None:
        self._stamper = stamper
        self._builder = EventBuilder(stamper=stamper, sink=sink, block_size_tokens=block_size_tokens, rank=rank)
        self._records: deque[Record] = deque()
        self._drain_lock = threading.Lock()
        self._deferred = deferred
        self._max_pending = max_pending
        self._acked: dict[str, int] = dict(stamper.policy_versions)
        self._overflow_logged = 0
        self.overflowed = 0

    @property
    def engine_id(self) -> str:
        """The engine's id, as every event carries it."""
        return self._stamper.engine_id

    @property
    def policy_versions(self) -> dict[str, int]:
        """Policy kind -> version in effect, as the last ``applied`` call recorded it (even before a drain)."""
        return self._acked

    @property
    def block_size_tokens(self) -> int:
        """Tokens per KV block, as the registration (once built) says."""
        return self._builder.block_size_tokens

    @property
    def rejected(self) -> int:
        """Events that failed their schema (or could not be built), counted, never sent."""
        return self._builder.rejected

    def later(self, build: Callable[Concatenate[EventBuilder, P], None], /, *args: P.args, **kwargs: P.kwargs) -> None:
        """Apply ``build(builder, *args)`` in order with the stream's other calls: at once, or at the next drain.

        An adapter passes a function of its own to do work it keeps off its step path (reading a
        step's outputs into token counts, building its ``StepCounts``); ``args`` must not change after.
        """
        if kwargs:
            build = partial(build, **kwargs)
        if not self._deferred:
            self._records.append((build, args))
            self.drain()
        elif len(self._records) < self._max_pending:
            self._records.append((build, args))
        else:
            self.overflowed += 1

    def drain(self) -> int:
        """Build and hand over the events of every record so far, in order; returns how many records ran.

        One thread drains at a time; a record that raises is counted in ``rejected`` and logged, so a
        drain never raises into the thread that runs it.
        """
        records = self._records
        if not records:
            return 0
        ran = 0
        with self._drain_lock:
            builder = self._builder
            while records:
                build, args = records.popleft()
                try:
                    build(builder, *args)
                except Exception as exc:
                    log.exception("engine_record_failed")
                    builder.reject(repr(exc))
                ran += 1
            if self.overflowed > self._overflow_logged:
                log.warning("engine_records_dropped", dropped_total=self.overflowed, max_pending=self._max_pending)
                self._overflow_logged = self.overflowed
        return ran

    def pending(self) -> bool:
        """True while records wait for a drain or a drain is handing events over."""
        return bool(self._records) or self._drain_lock.locked()

    def registered(self, now_s: float, registration: Registration, announced: Announcement) -> None:
        """Emit ``engine.registered`` with the engine's limits and what it announces besides them."""
        self.later(EventBuilder.registered, now_s, registration, announced)

    def arrived(self, now_s: float, track: RequestTrack) -> None:
        """Start tracking ``track`` and emit ``request.arrived``."""
        self.later(EventBuilder.arrived, now_s, track)

    def scheduled(self, now_s: float, request_ids: Iterable[str]) -> None:
        """Note the first time each of ``request_ids`` was scheduled (its admission); taken as a tuple now."""
        self.later(EventBuilder.scheduled, now_s, tuple(request_ids))

    def preempted(self, request_id: str) -> None:
        """Count one preemption of ``request_id``."""
        self.later(EventBuilder.preempted, request_id)

    def tokens(self, now_s: float, counts: Iterable[tuple[str, int]]) -> None:
        """Record new output tokens at ``now_s`` per (request id, count); a first one emits ``request.first_token``."""
        self.later(EventBuilder.tokens, now_s, tuple(counts))

    def finished(self, now_s: float, request_id: str, reason: FinishReasonName) -> None:
        """Emit ``request.finished`` for a tracked request and forget it (unknown ids are ignored)."""
        self.later(EventBuilder.finished, now_s, request_id, reason)

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
        self.later(EventBuilder.summarised, now_s, track, reason, ttft_s, tbt_mean_s)

    def step(self, now_s: float, counts: StepCounts) -> None:
        """Emit one ``step``; an iteration that computed nothing is not a step and is skipped."""
        self.later(EventBuilder.step, now_s, counts)

    def heartbeat(self, now_s: float, *, num_running: int, num_waiting: int) -> None:
        """Emit ``engine.heartbeat`` (liveness while the engine is idle)."""
        self.later(EventBuilder.heartbeat, now_s, num_running, num_waiting)

    def applied(self, now_s: float, document: PolicyDocument) -> None:
        """Record ``document`` as in effect (for ``policy_versions`` at once) and emit its ``policy.applied`` ack."""
        self._acked = {**self._acked, document.kind: document.version}
        self.later(EventBuilder.applied, now_s, document)
