"""The engine-side BF-IO router: one call per decode step assigns waiting requests to DP ranks.

specs/seed-003-bfio.md section 6.2 (tier 0): the router holds the central waiting pool and a shadow of each
rank's active requests, and at every step solves (IO) with the fast solver under the bundle the control
plane pushed (section 6.5). It never blocks on the control plane:

- no bundle, or one past ``valid_until``: JSQ-by-load (the documented safe default, DESIGN principle 5);
- pushed central-pool assignments are used only while valid (step not past ``valid_until_step``, same
  bundle version, request still waiting, the rank still has a free slot); everything else is solved locally;
- starvation guard (spec section 8 item 8): a request that has waited ``aging_deadline_s`` or longer in
  the candidate window (counted from the first step that offered it to the solver, not from its arrival;
  see ``_in_window_since``) is admitted before any younger one, the oldest first. So a request is
  admitted at the first step at which it has waited at least the deadline in the window and fewer older
  overdue requests than free slots remain; with non-zero free capacity per step, its delay after
  entering the window is bounded by the deadline plus the steps needed to drain the overdue requests
  ahead of it (the wait before entering it is the FIFO queue's);
- the solver's budget counts from the start of the call, prediction included, and keeps back what
  the last call spent after its solve (writing the routing); past it the remaining slots are filled
  by JSQ-by-load. An exchange move starts only while the time left covers the costliest move of the
  last call that made one (``SolveBudget.move_reserve_s``), so the anytime phase ends within the
  budget.
- online self-check (policies/bfio/selfcheck.py): when the bundle carries ``self_check``
  the router also solves the other horizon on the same instance (H = 0 beside the lookahead, or the
  lookahead beside H = 0), after the applied routing is built and on its own budget, and returns it as
  ``Routing.shadow_rank_of`` for the engine to judge; the applied decision is unchanged by it.

Elapsed time comes from the ``clock`` the engine passes (time.perf_counter); event time is an argument.
Classes are mapped to stable integer ids (``class_id``) so the per-step batches are plain arrays.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from policies.bfio.baselines import fcfs_index_fill, jsq_load
from policies.bfio.greedy import FastSolution, SolveBudget, solve_fast
from policies.bfio.kernels import warm_up
from policies.bfio.lookahead import ClassPredictor, SurvivalCurve, rank_base_loads_by_offset
from policies.bfio.objective import fillable_slots
from policies.bfio.params import BfioMode, NewRequestModel
from schemas.errors import InvalidInputError
from schemas.policy_docs.bfio import BfioAssignment, BfioPayload, BfioPolicy, RankDoc, WaitingRequestDoc

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

NO_CLASS = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitingBatch:
    """The waiting pool in FIFO (arrival) order, as arrays of length N.

    Attributes:
        request_ids: the requests' ids.
        prompt_tokens: s_i.
        arrival_s: event time each request arrived, seconds.
        max_tokens: output cap, np.inf when none.
        class_id: ``BfioRouter.class_id`` of each request's class, ``NO_CLASS`` when unknown.
        output_tokens_hint: predicted output tokens o^_i per request, NaN where a request has none;
            None when no request has one (the lookahead then predicts from survival alone).
    """

    request_ids: tuple[str, ...]
    prompt_tokens: FloatArray
    arrival_s: FloatArray
    max_tokens: FloatArray
    class_id: IntArray
    output_tokens_hint: FloatArray | None = None

    def __post_init__(self) -> None:
        size = len(self.request_ids)
        names = ("prompt_tokens", "arrival_s", "max_tokens", "class_id")
        for name in (*names, "output_tokens_hint") if self.output_tokens_hint is not None else names:
            if getattr(self, name).shape != (size,):
                msg = f"waiting.{name} must have shape ({size},), got {getattr(self, name).shape}"
                raise InvalidInputError(msg, field=f"waiting.{name}", value=getattr(self, name).shape)


@dataclass(frozen=True, slots=True, kw_only=True)
class ActiveBatch:
    """Every rank's active requests, as arrays of length M.

    Attributes:
        rank: rank each request runs on, in [0, G).
        prompt_tokens: s_i.
        generated_tokens: a_i, tokens generated so far.
        max_tokens: output cap, np.inf when none.
        class_id: ``BfioRouter.class_id`` of each request's class, ``NO_CLASS`` when unknown.
        output_tokens_hint: predicted output tokens o^_i, NaN where none; None when no request has one.
    """

    rank: IntArray
    prompt_tokens: FloatArray
    generated_tokens: FloatArray
    max_tokens: FloatArray
    class_id: IntArray
    output_tokens_hint: FloatArray | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Routing:
    """One step's routing decision.

    Attributes:
        rank_of: shape (N,), rank of each waiting request, -1 when it keeps waiting.
        assignments: (request_id, rank) of every admitted request, in FIFO order.
        mode: what decided the step (bfio, jsq_load or fcfs).
        fallback_reason: why the router fell back to JSQ-by-load (no_bundle, bundle_expired, budget), or None.
        pushed_used: pushed assignments that were still valid and applied.
        pushed_rejected: pushed assignments for waiting requests that were no longer valid.
        forced: requests admitted by the starvation guard.
        objective_j_tokens: predicted J of the solved allocation, or None when BF-IO did not run.
        shadow_rank_of: shape (N,), the self-check's other decision on the same step (H = 0 beside the
            lookahead, or the lookahead beside H = 0), not applied; None without a self-check, when BF-IO
            did not run, or when either solve ran out of budget.
        shadow_s: the shadow solve's time on the router's clock (0 without one), which the engine pays.
    """

    rank_of: IntArray
    assignments: tuple[tuple[str, int], ...]
    mode: BfioMode
    fallback_reason: str | None
    pushed_used: int
    pushed_rejected: int
    forced: int
    objective_j_tokens: float | None
    shadow_rank_of: IntArray | None = None
    shadow_s: float = 0.0


@dataclass(frozen=True, slots=True)
class _Grid:
    """The offsets and weights one decision is solved on, with a ratio table per class for them."""

    offsets: FloatArray
    weights: FloatArray
    predictors: dict[int, ClassPredictor]
    default: ClassPredictor | None

    def predictor(self, cid: int) -> ClassPredictor:
        predictor = self.predictors.get(cid, self.default)
        if predictor is None:
            msg = "the router has no bundle to predict with"
            raise InvalidInputError(msg, field="policy", value=None)
        return predictor


@dataclass(frozen=True, slots=True, kw_only=True)
class _Problem:
    """One step's (IO) instance after the pushed placements: what both the applied and the shadow solve read."""

    waiting: WaitingBatch
    active: ActiveBatch
    rank_of: IntArray
    cap: IntArray
    candidates: IntArray
    forced: npt.NDArray[np.bool_]


def _grid(
    payload: BfioPayload,
    curves: Mapping[int, SurvivalCurve],
    default_class: int | None,
    grid_steps: Sequence[int],
    weights: Sequence[float],
) -> _Grid:
    """Predictors of every class (and the default) on one grid of offsets."""
    offsets = np.asarray(grid_steps, dtype=np.float64)
    model = NewRequestModel(payload.new_request_model)
    drift = payload.drift_tokens_per_step
    predictors = {
        cid: ClassPredictor(curve, offsets_steps=offsets, drift=drift, model=model) for cid, curve in curves.items()
    }
    default = (
        ClassPredictor(None, offsets_steps=offsets, drift=drift, model=model)
        if default_class is None
        else predictors[default_class]
    )
    return _Grid(offsets=offsets, weights=np.asarray(weights, dtype=np.float64), predictors=predictors, default=default)


class BfioRouter:
    """Assigns waiting requests to DP ranks at each decode step under the last pushed BF-IO bundle.

    Building one loads the solver's compiled kernels (``kernels.warm_up``), so the engine pays for
    that at start-up and not in its first step.

    Args:
        clock: monotonic seconds for the solver budget (the engine passes time.perf_counter).
        policy: the bundle in force, or None until the first one arrives.
    """

    def __init__(self, *, clock: Callable[[], float], policy: BfioPolicy | None = None) -> None:
        self._clock = clock
        self._class_ids: dict[str, int] = {}
        self._policy: BfioPolicy | None = None
        self._grid: _Grid | None = None
        self._shadow_grid: _Grid | None = None
        self._window_since_s: dict[str, float] = {}
        self._move_reserve_s = 0.0
        self._shadow_move_reserve_s = 0.0
        self._finish_reserve_s = 0.0
        warm_up()
        if policy is not None:
            self.reload(policy)

    @property
    def policy(self) -> BfioPolicy | None:
        """The bundle in force."""
        return self._policy

    def class_id(self, traffic_class: str | None) -> int:
        """Stable integer id of a traffic class for the batches (ids never change for this router)."""
        if traffic_class is None:
            return NO_CLASS
        return self._class_ids.setdefault(traffic_class, len(self._class_ids))

    def reload(self, policy: BfioPolicy) -> None:
        """Adopt a newer bundle (hot reload); an older or equal version is ignored."""
        if self._policy is not None and policy.version <= self._policy.version:
            return
        payload = policy.payload
        curves = {
            self.class_id(t.traffic_class): SurvivalCurve(
                edges_tokens=np.asarray(t.edges_tokens, dtype=np.float64),
                survival_frac=np.asarray(t.survival_frac, dtype=np.float64),
            )
            for t in payload.survival_tables
        }
        default = None if payload.default_class is None else self.class_id(payload.default_class)
        self._grid = _grid(payload, curves, default, payload.horizon_grid_steps, payload.horizon_weights)
        check = payload.self_check
        self._shadow_grid = None
        if check is not None:
            shadow = ([0], [1.0]) if payload.horizon_steps > 0 else (check.horizon_grid_steps, check.horizon_weights)
            self._shadow_grid = _grid(payload, curves, default, *shadow)
        self._policy = policy

    def route(
        self,
        *,
        waiting: WaitingBatch,
        active: ActiveBatch,
        free_slots: IntArray,
        now_s: float,
        step_index: int,
        pushed: Mapping[str, BfioAssignment] | None = None,
    ) -> Routing:
        """Decide which waiting requests go to which rank at this step.

        Args:
            waiting: the waiting pool, FIFO order.
            active: every rank's active requests.
            free_slots: shape (G,), free slots per rank.
            now_s: event time of the step, seconds (bundle validity and request age).
            step_index: decode step number (pushed assignments' validity).
            pushed: central-pool assignments by request id, if the deployment uses them.

        Returns:
            At most one rank per request and never more requests on a rank than its free slots; exactly
            U(k) = min(N, sum free_slots) requests are admitted.
        """
        start_s = self._clock()
        num_waiting = len(waiting.request_ids)
        cap = free_slots.astype(np.int64, copy=True)
        num_ranks = cap.shape[0]
        if np.any(active.rank >= num_ranks) or np.any(active.rank < 0):
            msg = f"active.rank must be in [0, {num_ranks}), got {active.rank.min()}..{active.rank.max()}"
            raise InvalidInputError(msg, field="active.rank", value=(int(active.rank.min()), int(active.rank.max())))
        policy = self._policy
        reason = None
        if policy is None:
            reason = "no_bundle"
        elif now_s > policy.valid_until:
            reason = "bundle_expired"
        if policy is None or reason is not None or fillable_slots(num_waiting, cap) == 0:
            rank_of = jsq_load(waiting.prompt_tokens, cap, _current_loads(active, num_ranks))
            return _routing(waiting, rank_of, mode=BfioMode.JSQ_LOAD, reason=reason)
        payload = policy.payload
        if payload.mode == BfioMode.FCFS.value:
            return _routing(waiting, fcfs_index_fill(num_waiting, cap), mode=BfioMode.FCFS, reason=None)
        if payload.mode == BfioMode.JSQ_LOAD.value:
            rank_of = jsq_load(waiting.prompt_tokens, cap, _current_loads(active, num_ranks))
            return _routing(waiting, rank_of, mode=BfioMode.JSQ_LOAD, reason=None)
        return self._solve(
            waiting=waiting,
            active=active,
            cap=cap,
            now_s=now_s,
            step_index=step_index,
            pushed=pushed or {},
            policy=policy,
            start_s=start_s,
        )

    def _solve(
        self,
        *,
        waiting: WaitingBatch,
        active: ActiveBatch,
        cap: IntArray,
        now_s: float,
        step_index: int,
        pushed: Mapping[str, BfioAssignment],
        policy: BfioPolicy,
        start_s: float,
    ) -> Routing:
        payload = policy.payload
        grid = self._grid
        assert grid is not None
        num_ranks = cap.shape[0]
        rank_of = np.full(len(waiting.request_ids), -1, dtype=np.int64)
        pushed_used, pushed_rejected = 0, 0
        for index, request_id in enumerate(waiting.request_ids if pushed else ()):
            plan = pushed.get(request_id)
            if plan is None:
                continue
            valid = (
                step_index <= plan.valid_until_step
                and plan.bundle_version in (None, policy.version)
                and plan.rank < num_ranks
                and cap[plan.rank] > 0
            )
            if valid:
                rank_of[index] = plan.rank
                cap[plan.rank] -= 1
                pushed_used += 1
            else:
                pushed_rejected += 1
        candidates = np.flatnonzero(rank_of < 0)[: payload.candidate_window]
        overdue = (now_s - self._in_window_since(waiting, candidates, now_s)) >= payload.aging_deadline_s
        problem = _Problem(
            waiting=waiting, active=active, rank_of=rank_of, cap=cap, candidates=candidates, forced=overdue
        )
        solution = self._solve_grid(
            grid,
            problem,
            payload,
            start_s=start_s,
            reserve_s=self._finish_reserve_s,
            move_reserve_s=self._move_reserve_s,
        )
        solved_s = self._clock()
        if solution.costliest_move_s > 0.0:
            self._move_reserve_s = solution.costliest_move_s
        rank_of = rank_of.copy()
        rank_of[candidates] = solution.rank_of
        forced = int(np.count_nonzero(overdue & (solution.rank_of >= 0)))
        routing = _routing(
            waiting,
            rank_of,
            mode=BfioMode.BFIO,
            reason="budget" if solution.fallback_used else None,
            pushed_used=pushed_used,
            pushed_rejected=pushed_rejected,
            forced=forced,
            objective=solution.objective_j_tokens,
        )
        self._finish_reserve_s = self._clock() - solved_s
        if self._shadow_grid is None or solution.fallback_used:
            return routing
        shadow_start_s = self._clock()
        shadow_rank_of = self._shadow(self._shadow_grid, problem, payload)
        return replace(routing, shadow_rank_of=shadow_rank_of, shadow_s=self._clock() - shadow_start_s)

    def _shadow(self, grid: _Grid, problem: _Problem, payload: BfioPayload) -> IntArray | None:
        """The self-check's other decision on the same step (``policies.bfio.selfcheck``), None past its budget.

        It runs after the applied routing is built, on its own ``solver_budget_s``, so it never delays
        or changes the applied decision; the engine pays its time (the simulator charges the whole call).
        """
        solution = self._solve_grid(
            grid, problem, payload, start_s=self._clock(), reserve_s=0.0, move_reserve_s=self._shadow_move_reserve_s
        )
        if solution.costliest_move_s > 0.0:
            self._shadow_move_reserve_s = solution.costliest_move_s
        if solution.fallback_used:
            return None
        rank_of = problem.rank_of.copy()
        rank_of[problem.candidates] = solution.rank_of
        return rank_of

    def _solve_grid(
        self,
        grid: _Grid,
        problem: _Problem,
        payload: BfioPayload,
        *,
        start_s: float,
        reserve_s: float,
        move_reserve_s: float,
    ) -> FastSolution:
        """Solve (IO) for the candidates on ``grid``, the pushed placements already in the base loads."""
        num_ranks = problem.cap.shape[0]
        waiting, active = problem.waiting, problem.active
        base = rank_base_loads_by_offset(self._active_contributions(grid, active), active.rank, num_ranks)
        contributions_new = self._new_contributions(grid, waiting, problem.candidates)
        placed = np.flatnonzero(problem.rank_of >= 0)
        if placed.size:
            np.add.at(base, problem.rank_of[placed], self._new_contributions(grid, waiting, placed))
        remaining_s = payload.solver_budget_s - (self._clock() - start_s) - reserve_s
        return solve_fast(
            base,
            problem.cap,
            contributions_new,
            grid.weights,
            forced=problem.forced,
            local_search_rounds=payload.local_search_rounds,
            budget=SolveBudget(clock=self._clock, budget_s=remaining_s, move_reserve_s=move_reserve_s),
        )

    def _in_window_since(self, waiting: WaitingBatch, candidates: IntArray, now_s: float) -> FloatArray:
        """Since when each candidate has been in the candidate window (the FIFO front the solver chooses from).

        The starvation guard counts a request's wait from the later of its arrival and the first step that
        offered it to the solver: the queueing before that is FIFO, the same under every policy, and
        counting it would force FIFO admission whenever the queue is longer than the deadline (measured:
        most admissions forced on an overloaded setting). A request stays in the window until admitted
        (only requests before it leave), so the map is rebuilt from the window at each call.
        """
        ids = [waiting.request_ids[i] for i in candidates.tolist()]
        seen = self._window_since_s
        since = [seen.get(request_id, now_s) for request_id in ids]
        self._window_since_s = dict(zip(ids, since, strict=True))
        return np.maximum(waiting.arrival_s[candidates], np.asarray(since, dtype=np.float64))

    def _active_contributions(self, grid: _Grid, active: ActiveBatch) -> FloatArray:
        """w^_i(h) of every active request, offset-major (K, M), by class (one class: no copy)."""
        classes = _class_rows(active.class_id)
        hints = active.output_tokens_hint
        if len(classes) == 1 and isinstance(classes[0][1], slice):
            return grid.predictor(classes[0][0]).active_by_offset(
                prompt_tokens=active.prompt_tokens,
                generated_tokens=active.generated_tokens,
                max_tokens=active.max_tokens,
                hint_tokens=hints,
            )
        contributions = np.zeros((grid.offsets.shape[0], active.rank.shape[0]))
        for cid, rows in classes:
            contributions[:, rows] = grid.predictor(cid).active_by_offset(
                prompt_tokens=active.prompt_tokens[rows],
                generated_tokens=active.generated_tokens[rows],
                max_tokens=active.max_tokens[rows],
                hint_tokens=None if hints is None else hints[rows],
            )
        return contributions

    def _new_contributions(self, grid: _Grid, waiting: WaitingBatch, picked: IntArray) -> FloatArray:
        """v_j(h) of the waiting requests ``picked``, shape (len(picked), K), by class (one class: no copy)."""
        classes = _class_rows(waiting.class_id[picked])
        hints = waiting.output_tokens_hint
        if len(classes) == 1 and isinstance(classes[0][1], slice):
            return grid.predictor(classes[0][0]).new(
                prompt_tokens=waiting.prompt_tokens[picked],
                max_tokens=waiting.max_tokens[picked],
                hint_tokens=None if hints is None else hints[picked],
            )
        contributions = np.zeros((picked.shape[0], grid.offsets.shape[0]))
        for cid, rows in classes:
            chosen = picked[rows]
            contributions[rows] = grid.predictor(cid).new(
                prompt_tokens=waiting.prompt_tokens[chosen],
                max_tokens=waiting.max_tokens[chosen],
                hint_tokens=None if hints is None else hints[chosen],
            )
        return contributions

    def batches(
        self, waiting: Sequence[WaitingRequestDoc], ranks: Sequence[RankDoc]
    ) -> tuple[WaitingBatch, ActiveBatch, IntArray]:
        """Build the step's arrays from boundary documents (the what-if CLI and tests; engines build arrays).

        Returns:
            ``(waiting_batch, active_batch, free_slots)``.
        """
        active = [(g, a) for g, rank in enumerate(ranks) for a in rank.active]
        waiting_arrays = WaitingBatch(
            request_ids=tuple(r.request_id for r in waiting),
            prompt_tokens=np.asarray([r.prompt_tokens for r in waiting], dtype=np.float64),
            arrival_s=np.asarray([r.arrival_s for r in waiting], dtype=np.float64),
            max_tokens=np.asarray(
                [np.inf if r.max_tokens is None else r.max_tokens for r in waiting], dtype=np.float64
            ),
            class_id=np.asarray([self.class_id(r.traffic_class) for r in waiting], dtype=np.int64),
            output_tokens_hint=_hints([r.output_tokens_hint for r in waiting]),
        )
        active_arrays = ActiveBatch(
            rank=np.asarray([g for g, _ in active], dtype=np.int64),
            prompt_tokens=np.asarray([a.prompt_tokens for _, a in active], dtype=np.float64),
            generated_tokens=np.asarray([a.generated_tokens for _, a in active], dtype=np.float64),
            max_tokens=np.asarray(
                [np.inf if a.max_tokens is None else a.max_tokens for _, a in active], dtype=np.float64
            ),
            class_id=np.asarray([self.class_id(a.traffic_class) for _, a in active], dtype=np.int64),
            output_tokens_hint=_hints([a.output_tokens_hint for _, a in active]),
        )
        free_slots = np.asarray([rank.free_slots for rank in ranks], dtype=np.int64)
        return waiting_arrays, active_arrays, free_slots


def _class_rows(class_id: IntArray) -> list[tuple[int, slice | npt.NDArray[np.bool_]]]:
    """(class id, rows) per distinct class; the common single-class case is one slice, no mask or sort."""
    if class_id.size == 0:
        return []
    if bool((class_id == class_id[0]).all()):
        return [(int(class_id[0]), slice(None))]
    return [(int(c), class_id == c) for c in np.unique(class_id)]


def _hints(values: Sequence[int | None]) -> FloatArray | None:
    """Output-length hints of boundary documents as an array (NaN where none), None when none has one."""
    if all(v is None for v in values):
        return None
    return np.asarray([np.nan if v is None else v for v in values], dtype=np.float64)


def _current_loads(active: ActiveBatch, num_ranks: int) -> FloatArray:
    """L_g(k) = sum of s_i + a_i over each rank's active requests (Eq. 1)."""
    context = active.prompt_tokens + active.generated_tokens
    return np.bincount(active.rank, weights=context, minlength=num_ranks).astype(np.float64)


def _routing(
    waiting: WaitingBatch,
    rank_of: IntArray,
    *,
    mode: BfioMode,
    reason: str | None,
    pushed_used: int = 0,
    pushed_rejected: int = 0,
    forced: int = 0,
    objective: float | None = None,
) -> Routing:
    ids, ranks = waiting.request_ids, rank_of.tolist()
    return Routing(
        rank_of=rank_of,
        assignments=tuple((ids[i], ranks[i]) for i in np.flatnonzero(rank_of >= 0).tolist()),
        mode=mode,
        fallback_reason=reason,
        pushed_used=pushed_used,
        pushed_rejected=pushed_rejected,
        forced=forced,
        objective_j_tokens=objective,
    )
