"""BF-IO on the simulator's DP deployments: the rank router and the central-pool assignment planner.

specs/seed-003-bfio.md sections 6.2 and 6.5. ``BfioRankRouter`` is the engine side: at every step it
hands the waiting pool and each rank's active requests to ``policies.bfio.BfioRouter``, which solves
(IO) under the bundle the control plane pushed (kind ``bfio``, scope the DP engine id, hot-reloaded
whenever a newer version is served). ``CentralPoolPlanner`` is the central-pool mode (spec 6.1, 6.5):
a telemetry sink placed in front of the control plane that keeps a shadow of the waiting pool and of
each rank's active requests from the request and step events, solves one step of (IO) every
``period_s`` of event time with ``policies.bfio.decide_assignments``, and publishes the per-request
assignments after ``loop_latency_s`` (the Kafka/Redis loop). The router uses a pushed assignment only
while it is valid against live capacity (``BfioRouter.route(pushed=...)``), else solves locally, and
each assignment is judged once: used, rejected, or never considered (its request was admitted first).

The router's solver budget runs on a frozen clock in the simulator (runs stay a pure function of the
seed); its latency is measured by ``ops/bench/bench_bfio.py``.

Deviations: ``visible_pool`` restricts the router to the first R waiting requests, as the paper's
simulator reveals R = 4G requests at a time (spec 5.3); a request's age for the starvation guard then
counts from when it became visible. The BF-IO router does not see KV room (spec 2.7 step 6 is not in
the solver); an assignment whose request would not fit the rank's KV reservation is dropped and the
request keeps waiting.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from policies.bfio import ActiveBatch, BfioParams, BfioRouter, Routing, WaitingBatch, decide_assignments
from schemas.events import Event
from schemas.policy_docs.base import PolicyDocument
from schemas.policy_docs.bfio import (
    ActiveRequestDoc,
    BfioAssignment,
    BfioPolicy,
    BfioStepInput,
    RankDoc,
    WaitingRequestDoc,
)
from schemas.requests import RequestAdmitted, RequestArrived, RequestFinished
from schemas.steps import StepReport
from services.sdk.engine_events import SelfCheckReport
from services.sdk.protocol import PolicySource, TelemetrySink
from services.sim.length_hints import LengthHints
from services.sim.rank_routers import RankView, kv_admissible
from services.sim.request import SimRequest
from services.sim.selfcheck import ShadowJudge, StepDecisions

NO_CLASS = -1


def frozen_clock() -> float:
    """A clock that never advances: the solver's budget never runs out (deterministic runs)."""
    return 0.0


@dataclass(slots=True)
class RouterStats:
    """What a BF-IO rank router did over a run.

    Attributes:
        steps: calls that had waiting requests.
        fallbacks: steps routed by the fallback, by reason (no_bundle, bundle_expired, budget).
        pushed_used: pushed assignments applied.
        pushed_rejected: pushed assignments no longer valid when considered.
        forced: admissions by the starvation guard.
        kv_dropped: assignments dropped because the request did not fit the rank's KV room.
        admissions: (prompt_tokens, age_s) of every admitted request; age from arrival, or from
            becoming visible with a ``visible_pool``.
        bundle_versions: bundle versions the router routed with, in order of adoption.
        bundle_horizons: the horizon H in force of each of those bundles (the self-check's choice among them).
        bundle_adopted_s: the event time each of those bundles was first routed with (when a choice took effect).
    """

    steps: int = 0
    fallbacks: dict[str, int] = field(default_factory=dict)
    pushed_used: int = 0
    pushed_rejected: int = 0
    forced: int = 0
    kv_dropped: int = 0
    admissions: list[tuple[int, float]] = field(default_factory=list)
    bundle_versions: list[int] = field(default_factory=list)
    bundle_horizons: list[int] = field(default_factory=list)
    bundle_adopted_s: list[float] = field(default_factory=list)


class AssignmentSource(Protocol):
    """Central-pool assignments as the router reads them (the policy client's ``assign`` keys)."""

    def current(self, now_s: float) -> Mapping[str, BfioAssignment]:
        """Assignments published by ``now_s``, by request id."""
        ...

    def considered(self, request_ids: Sequence[str], *, used: int, rejected: int) -> None:
        """The router judged these assignments (``used`` valid, ``rejected`` not); none is offered again."""
        ...


class BfioRankRouter:
    """A ``RankRouter`` running ``policies.bfio.BfioRouter`` under the pushed bundle.

    Args:
        visible_pool: R, how many waiting requests (FIFO front) the router sees; None for all.
        assignments: central-pool assignments to honour while valid, or None.
        clock: the solver's budget clock (default: frozen, never falls back on time).
        length_hints: output-length hints every request carries (true or noisy lengths), or None.
        self_check_sink: where the self-check's period reports go (the engine's telemetry,
            ``EngineTelemetry.bfio_self_check``); the router judges its shadow decisions only with one and
            while the bundle carries a ``self_check`` (services/sim/selfcheck.py).
    """

    def __init__(
        self,
        *,
        visible_pool: int | None = None,
        assignments: AssignmentSource | None = None,
        clock: Callable[[], float] = frozen_clock,
        length_hints: LengthHints | None = None,
        self_check_sink: Callable[[float, SelfCheckReport], None] | None = None,
    ) -> None:
        self._router = BfioRouter(clock=clock)
        self._self_check_sink = self_check_sink
        self._judge: ShadowJudge | None = None
        self._hints = length_hints
        self._visible_pool = visible_pool
        self._assignments = assignments
        self._visible_since_s: dict[str, float] = {}
        self.stats = RouterStats()

    @property
    def policy_kind(self) -> str | None:
        """Kind ``bfio``, fetched with the DP engine id as scope."""
        return "bfio"

    def assign(
        self, waiting: Sequence[SimRequest], ranks: Sequence[RankView], policy: PolicyDocument | None
    ) -> list[tuple[int, int]]:
        """Admit waiting requests into free slots by BF-IO; return (index into ``waiting``, rank) pairs."""
        if isinstance(policy, BfioPolicy):
            previous = self._router.policy
            self._router.reload(policy)
            if self._router.policy is not previous:
                self.stats.bundle_versions.append(policy.version)
                self.stats.bundle_horizons.append(policy.payload.horizon_steps)
                self.stats.bundle_adopted_s.append(ranks[0].now_s)
        now_s = ranks[0].now_s
        visible = waiting if self._visible_pool is None else waiting[: self._visible_pool]
        if not visible:
            return []
        self.stats.steps += 1
        ids = tuple(r.spec.request_id for r in visible)
        if self._visible_pool is None:
            since = np.fromiter((r.spec.arrival_s for r in visible), dtype=np.float64, count=len(visible))
        else:
            since = np.fromiter(
                (self._visible_since_s.setdefault(i, now_s) for i in ids), dtype=np.float64, count=len(visible)
            )
        batch = WaitingBatch(
            request_ids=ids,
            prompt_tokens=np.fromiter((r.spec.prompt_tokens for r in visible), dtype=np.float64, count=len(visible)),
            arrival_s=since,
            max_tokens=np.fromiter((_cap(r) for r in visible), dtype=np.float64, count=len(visible)),
            class_id=np.full(len(visible), NO_CLASS, dtype=np.int64),
            output_tokens_hint=_hint_array(self._hints, visible),
        )
        pushed = self._pushed(ids, now_s)
        routing = self._router.route(
            waiting=batch,
            active=_active_batch(ranks, self._hints),
            free_slots=np.asarray([v.free_slots for v in ranks], dtype=np.int64),
            now_s=now_s,
            step_index=ranks[0].step_id,
            pushed=pushed,
        )
        if routing.fallback_reason is not None:
            reasons = self.stats.fallbacks
            reasons[routing.fallback_reason] = reasons.get(routing.fallback_reason, 0) + 1
        judged = routing.pushed_used + routing.pushed_rejected
        if pushed and judged == len(pushed) and self._assignments is not None:
            self._assignments.considered(tuple(pushed), used=routing.pushed_used, rejected=routing.pushed_rejected)
        self.stats.pushed_used += routing.pushed_used
        self.stats.pushed_rejected += routing.pushed_rejected
        self.stats.forced += routing.forced
        self._judge_step(visible, ranks, routing, now_s)
        return self._admit(visible, ranks, routing.rank_of, since, now_s)

    def _judge_step(
        self, visible: Sequence[SimRequest], ranks: Sequence[RankView], routing: Routing, now_s: float
    ) -> None:
        """Feed the self-check's judge this step's progress and decisions; publish a period's report when due."""
        policy = self._router.policy
        check = None if policy is None else policy.payload.self_check
        if self._self_check_sink is None or policy is None or check is None:
            return
        if self._judge is None:
            self._judge = ShadowJudge(num_ranks=len(ranks), drift_tokens_per_step=policy.payload.drift_tokens_per_step)
        step_id = ranks[0].step_id
        active = [view.requests for view in ranks]
        self._judge.observe(step_id=step_id, ranks=active, now_s=now_s)
        if routing.shadow_rank_of is not None:
            self._judge.record(
                StepDecisions(
                    step_id=step_id,
                    ranks=active,
                    waiting=visible,
                    applied_rank_of=routing.rank_of,
                    shadow_rank_of=routing.shadow_rank_of,
                    lookahead_applied=policy.payload.horizon_steps > 0,
                    horizon_steps=check.horizon_steps,
                    offsets_steps=np.asarray(check.horizon_grid_steps, dtype=np.float64),
                    weights=np.asarray(check.horizon_weights, dtype=np.float64),
                ),
                shadow_compute_s=routing.shadow_s,
            )
        report = self._judge.report(now_s, check.period_s)
        if report is not None:
            self._self_check_sink(now_s, report)

    def _pushed(self, ids: tuple[str, ...], now_s: float) -> dict[str, BfioAssignment]:
        if self._assignments is None:
            return {}
        offered = self._assignments.current(now_s)
        return {i: offered[i] for i in ids if i in offered}

    def _admit(
        self,
        visible: Sequence[SimRequest],
        ranks: Sequence[RankView],
        rank_of: np.ndarray,
        since: np.ndarray,
        now_s: float,
    ) -> list[tuple[int, int]]:
        admitted, dropped = kv_admissible(visible, ranks, rank_of)
        self.stats.kv_dropped += len(dropped)
        for index, _ in admitted:
            request = visible[index]
            self.stats.admissions.append((request.spec.prompt_tokens, now_s - float(since[index])))
            self._visible_since_s.pop(request.spec.request_id, None)
        return admitted


def _cap(request: SimRequest) -> float:
    return float("inf") if request.spec.max_tokens is None else float(request.spec.max_tokens)


def _hint_array(hints: LengthHints | None, requests: Sequence[SimRequest]) -> np.ndarray | None:
    if hints is None:
        return None
    return np.fromiter((hints.hint_tokens(r) for r in requests), dtype=np.float64, count=len(requests))


def _active_batch(ranks: Sequence[RankView], hints: LengthHints | None = None) -> ActiveBatch:
    """Every rank's active requests as arrays (rank index = position in ``ranks``), with their hints if any."""
    count = sum(len(v.requests) for v in ranks)
    rank = np.empty(count, dtype=np.int64)
    prompt = np.empty(count, dtype=np.float64)
    generated = np.empty(count, dtype=np.float64)
    cap = np.empty(count, dtype=np.float64)
    row = 0
    for g, view in enumerate(ranks):
        n = len(view.requests)
        rank[row : row + n] = g
        prompt[row : row + n] = [r.spec.prompt_tokens for r in view.requests]
        generated[row : row + n] = [r.generated_tokens for r in view.requests]
        cap[row : row + n] = [_cap(r) for r in view.requests]
        row += n
    return ActiveBatch(
        rank=rank,
        prompt_tokens=prompt,
        generated_tokens=generated,
        max_tokens=cap,
        class_id=np.full(count, NO_CLASS, dtype=np.int64),
        output_tokens_hint=_hint_array(hints, [r for view in ranks for r in view.requests]),
    )


@dataclass(slots=True)
class PlannerStats:
    """What the central-pool planner did over a run.

    Attributes:
        plans: plans computed (one per ``period_s`` with a valid bundle and waiting requests).
        planned: assignments published.
        used: assignments the router applied (still valid against live capacity).
        rejected: assignments the router judged no longer valid.
        superseded: assignments whose request was admitted before the router considered them.
    """

    plans: int = 0
    planned: int = 0
    used: int = 0
    rejected: int = 0
    superseded: int = 0

    @property
    def valid_when_used_frac(self) -> float | None:
        """Share of considered assignments that were still valid, or None when none was considered."""
        judged = self.used + self.rejected
        return self.used / judged if judged else None


@dataclass(frozen=True, slots=True, kw_only=True)
class _Active:
    rank: int
    prompt_tokens: int
    max_tokens: int | None
    admitted_step: int


class CentralPoolPlanner:
    """Central-pool BF-IO assignments from step and queue telemetry, published after a loop latency.

    It is a ``TelemetrySink``: every event goes on to ``inner`` (the control plane) unchanged.

    Args:
        inner: the sink behind the planner (the offline control plane).
        policy_source: where the bundle is read (kind ``bfio``, scope ``engine_id``).
        params: ``assignment_ttl_steps`` sets each assignment's validity.
        engine_id: the DP engine planned for.
        num_ranks: G.
        slots_per_rank: B.
        period_s: event time between plans.
        loop_latency_s: event time from a plan to its assignments being readable by the router.
        window: most waiting requests a plan considers.

    A plan skips the queue front that the router will admit on its own before the plan is readable:
    ``admitted per step x steps in loop_latency_s``, both measured from the step reports.
    """

    def __init__(
        self,
        *,
        inner: TelemetrySink,
        policy_source: PolicySource,
        params: BfioParams | None = None,
        engine_id: str,
        num_ranks: int,
        slots_per_rank: int,
        period_s: float = 0.1,
        loop_latency_s: float = 0.05,
        window: int = 128,
    ) -> None:
        self._inner = inner
        self._policy_source = policy_source
        self._engine_id = engine_id
        self._num_ranks = num_ranks
        self._slots_per_rank = slots_per_rank
        self._params = params or BfioParams()
        self._period_s = period_s
        self._loop_latency_s = loop_latency_s
        self._window = window
        self._waiting: dict[str, WaitingRequestDoc] = {}
        self._active: dict[str, _Active] = {}
        self._next_step = 0
        self._last_plan_s: float | None = None
        self._pending: deque[tuple[float, tuple[BfioAssignment, ...]]] = deque()
        self._live: dict[str, BfioAssignment] = {}
        self._admitted_total = 0
        self._steps_total = 0
        self._step_s_total = 0.0
        self.stats = PlannerStats()

    def publish(self, event: Event) -> None:
        """Forward ``event`` to the control plane, then update the shadow state and plan when due."""
        self._inner.publish(event)
        if event.engine_id != self._engine_id:
            return
        if isinstance(event, RequestArrived):
            self._waiting[event.request_id] = WaitingRequestDoc(
                request_id=event.request_id,
                prompt_tokens=event.prompt_tokens,
                arrival_s=event.ts,
                max_tokens=event.max_tokens,
            )
        elif isinstance(event, RequestAdmitted):
            self._admitted_total += 1
            waiting = self._waiting.pop(event.request_id, None)
            if waiting is not None and event.dp_rank is not None:
                self._active[event.request_id] = _Active(
                    rank=event.dp_rank,
                    prompt_tokens=waiting.prompt_tokens,
                    max_tokens=waiting.max_tokens,
                    admitted_step=self._next_step,
                )
            if self._live.pop(event.request_id, None) is not None:
                self.stats.superseded += 1
        elif isinstance(event, RequestFinished):
            self._active.pop(event.request_id, None)
            self._waiting.pop(event.request_id, None)
        elif isinstance(event, StepReport):
            self._next_step = event.step_id + 1
            self._steps_total += 1
            self._step_s_total += event.duration_s
            if self._last_plan_s is None or event.ts - self._last_plan_s >= self._period_s:
                self._last_plan_s = event.ts
                self._plan(event.ts)

    def _plan(self, now_s: float) -> None:
        document = self._policy_source.current("bfio", self._engine_id, now_s)
        if not isinstance(document, BfioPolicy) or not self._waiting:
            return
        ranks: list[list[ActiveRequestDoc]] = [[] for _ in range(self._num_ranks)]
        for active in self._active.values():
            ranks[active.rank].append(
                ActiveRequestDoc(
                    prompt_tokens=active.prompt_tokens,
                    generated_tokens=max(0, self._next_step - active.admitted_step),
                    max_tokens=active.max_tokens,
                )
            )
        lead = 0
        if self._steps_total and self._step_s_total > 0.0:
            per_step = self._admitted_total / self._steps_total
            lead = round(per_step * self._loop_latency_s * self._steps_total / self._step_s_total)
        waiting = list(self._waiting.values())[lead : lead + self._window]
        if not waiting:
            return
        step = BfioStepInput(
            step_index=self._next_step,
            now_s=now_s,
            waiting=waiting,
            ranks=[RankDoc(free_slots=max(0, self._slots_per_rank - len(a)), active=a) for a in ranks],
        )
        plan = decide_assignments(step, document, self._params)
        self.stats.plans += 1
        self.stats.planned += len(plan.assignments)
        self._pending.append((now_s + self._loop_latency_s, plan.assignments))

    def current(self, now_s: float) -> Mapping[str, BfioAssignment]:
        """Assignments published by ``now_s`` for requests still waiting, by request id."""
        while self._pending and self._pending[0][0] <= now_s:
            _, assignments = self._pending.popleft()
            for assignment in assignments:
                if assignment.request_id in self._waiting:
                    self._live[assignment.request_id] = assignment
                else:
                    self.stats.superseded += 1
        return self._live

    def considered(self, request_ids: Sequence[str], *, used: int, rejected: int) -> None:
        """Record the router's verdicts on the assignments it judged at one step; drop them."""
        for request_id in request_ids:
            self._live.pop(request_id, None)
        self.stats.used += used
        self.stats.rejected += rejected
