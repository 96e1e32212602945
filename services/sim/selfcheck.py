"""The simulated DP engine's side of BF-IO's online self-check: judge each step's two decisions, report per period.

See docs/policies/bfio.md, "Online self-check"; the judge is ``policies.bfio.selfcheck.realised_objective``.
At a step the router applies one decision and shadows the other (``Routing.shadow_rank_of``). ``ShadowJudge``
keeps the step's requests (the active ones, at their age then, and those either decision placed) and judges
both decisions once every one of them has either finished or run past the lookahead's H: only then is its
realised remaining length over the horizon known. What it reads is what the router host learns anyway: a
request's tokens so far, and that it left the ranks (it finished). A request only the shadow placed keeps
waiting in reality; its step is judged once it has been admitted and run that far, and dropped (``expired``)
if that takes more than ``MAX_PENDING_STEPS``.

Every ``period_s`` of event time (the bundle's ``SelfCheckDoc.period_s``) the judged steps are summed
into one ``SelfCheckReport``, which the engine publishes as a ``bfio.self_check`` event.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from policies.bfio.selfcheck import realised_objective
from services.sdk.engine_events import SelfCheckReport
from services.sim.request import SimRequest

IntArray = npt.NDArray[np.int64]
MAX_PENDING_STEPS = 512  # a step whose shadow-only placements are not resolved within this many steps is dropped


@dataclass(frozen=True, slots=True, kw_only=True)
class StepDecisions:
    """What one router call decided, for the judge.

    Attributes:
        step_id: the decode step.
        ranks: every rank's active requests at the call, by rank index.
        waiting: the requests the router chose from (``rank_of`` indexes them).
        applied_rank_of: the applied decision, -1 for a request left waiting.
        shadow_rank_of: the shadowed decision, the same shape.
        lookahead_applied: True when the applied decision is the lookahead's (H = 0 is the shadow).
        horizon_steps: the lookahead's H, the horizon both decisions are judged over.
        offsets_steps: the lookahead's grid h_k (0 ... H).
        weights: its omega_k.
    """

    step_id: int
    ranks: Sequence[Sequence[SimRequest]]
    waiting: Sequence[SimRequest]
    applied_rank_of: IntArray
    shadow_rank_of: IntArray
    lookahead_applied: bool
    horizon_steps: int
    offsets_steps: npt.NDArray[np.float64]
    weights: npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True, kw_only=True)
class _Pending:
    step_id: int
    horizon_steps: int
    offsets_steps: npt.NDArray[np.float64]
    weights: npt.NDArray[np.float64]
    lookahead_applied: bool
    requests: tuple[SimRequest, ...]
    generated_tokens: IntArray
    context_tokens: npt.NDArray[np.float64]
    applied_rank: IntArray
    shadow_rank: IntArray


class ShadowJudge:
    """Pending judgements of the steps' two decisions, resolved as the requests' real progress comes in."""

    def __init__(self, *, num_ranks: int, drift_tokens_per_step: float = 1.0) -> None:
        self._num_ranks = num_ranks
        self._drift = drift_tokens_per_step
        self._pending: deque[_Pending] = deque()
        self._report_since_s: float | None = None
        self._first_step: int | None = None
        self._last_step = 0
        self._judged = 0
        self._differing = 0
        self._expired = 0
        self._horizon = 0
        self._lookahead_in_force = False
        self._myopic_sum = 0.0
        self._lookahead_sum = 0.0
        self._squared_difference = 0.0
        self._shadow_s = 0.0

    def observe(self, *, step_id: int, ranks: Sequence[Sequence[SimRequest]], now_s: float) -> None:
        """Resolve every pending step whose requests' outcomes over its horizon are known at this call."""
        if self._report_since_s is None:
            self._report_since_s = now_s
        active = {request for rank in ranks for request in rank}
        still: deque[_Pending] = deque()
        for pending in self._pending:
            if step_id <= pending.step_id + pending.horizon_steps:
                still.append(pending)
            elif not self._resolve(pending, active):
                if step_id - pending.step_id > MAX_PENDING_STEPS:
                    self._expired += 1
                else:
                    still.append(pending)
        self._pending = still

    def record(self, decisions: StepDecisions, *, shadow_compute_s: float) -> None:
        """Keep one step's two decisions until their outcomes are known."""
        d = decisions
        active = [(g, request) for g, rank in enumerate(d.ranks) for request in rank]
        applied, shadow = d.applied_rank_of, d.shadow_rank_of
        placed = np.flatnonzero((applied >= 0) | (shadow >= 0))
        requests = tuple(request for _, request in active) + tuple(d.waiting[i] for i in placed.tolist())
        active_rank = np.fromiter((g for g, _ in active), dtype=np.int64, count=len(active))
        generated = np.fromiter((r.generated_tokens for r in requests), dtype=np.int64, count=len(requests))
        context = np.fromiter(
            (r.spec.prompt_tokens + r.generated_tokens for r in requests), dtype=np.float64, count=len(requests)
        )
        self._pending.append(
            _Pending(
                step_id=d.step_id,
                horizon_steps=d.horizon_steps,
                offsets_steps=d.offsets_steps,
                weights=d.weights,
                lookahead_applied=d.lookahead_applied,
                requests=requests,
                generated_tokens=generated,
                context_tokens=context,
                applied_rank=np.concatenate((active_rank, applied[placed])),
                shadow_rank=np.concatenate((active_rank, shadow[placed])),
            )
        )
        self._shadow_s += shadow_compute_s
        if not np.array_equal(applied, shadow):
            self._differing += 1

    def report(self, now_s: float, period_s: float) -> SelfCheckReport | None:
        """The period's sums once ``period_s`` of event time has passed with a judged step; then start anew."""
        since = self._report_since_s
        if since is None or now_s - since < period_s or self._first_step is None:
            return None
        report = SelfCheckReport(
            first_step_id=self._first_step,
            last_step_id=self._last_step,
            judged_steps=self._judged,
            differing_steps=self._differing,
            expired_steps=self._expired,
            lookahead_horizon_steps=self._horizon,
            lookahead_in_force=self._lookahead_in_force,
            myopic_imbalance_tokens=self._myopic_sum,
            lookahead_imbalance_tokens=self._lookahead_sum,
            squared_difference_tokens2=self._squared_difference,
            shadow_compute_s=self._shadow_s,
        )
        self._report_since_s = now_s
        self._first_step = None
        self._judged = self._differing = self._expired = 0
        self._myopic_sum = self._lookahead_sum = self._squared_difference = self._shadow_s = 0.0
        return report

    def _resolve(self, pending: _Pending, active: set[SimRequest]) -> bool:
        """Judge ``pending`` if every request has finished or run past its horizon; False to wait."""
        horizon = pending.horizon_steps
        now_generated = np.fromiter(
            (r.generated_tokens for r in pending.requests), dtype=np.int64, count=len(pending.requests)
        )
        running = np.fromiter((r in active for r in pending.requests), dtype=np.bool_, count=len(pending.requests))
        progress = now_generated - pending.generated_tokens
        finished = ~running & (now_generated > 0)
        if not bool(np.all(finished | (progress > horizon))):
            return False
        remaining = np.where(finished, progress, horizon + 1).astype(np.float64)
        applied = self._realised(pending, pending.applied_rank, remaining)
        shadow = self._realised(pending, pending.shadow_rank, remaining)
        lookahead, myopic = (applied, shadow) if pending.lookahead_applied else (shadow, applied)
        if self._first_step is None:
            self._first_step = pending.step_id
        self._last_step = max(self._last_step, pending.step_id)
        self._judged += 1
        self._horizon = horizon
        self._lookahead_in_force = pending.lookahead_applied
        self._myopic_sum += myopic
        self._lookahead_sum += lookahead
        self._squared_difference += (lookahead - myopic) ** 2
        return True

    def _realised(self, pending: _Pending, rank: IntArray, remaining: npt.NDArray[np.float64]) -> float:
        """R of one decision: the step's requests on the ranks it gave them (those it left waiting do not count)."""
        on = rank >= 0
        return realised_objective(
            rank[on],
            pending.context_tokens[on],
            remaining[on],
            num_ranks=self._num_ranks,
            offsets_steps=pending.offsets_steps,
            weights=pending.weights,
            drift_tokens_per_step=self._drift,
        )
