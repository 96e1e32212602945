"""Rank routers of a DP deployment: which waiting request joins which rank at a step.

specs/seed-003-bfio.md section 3. The router sees each rank as a ``RankView`` and returns
(index into the waiting queue, rank) pairs. The baselines are the pure assignments of
``policies.bfio.baselines`` on the simulator's state, so the simulator and the BF-IO policy compare
against the same code:

- ``FcfsRankRouter``: ``fcfs_index_fill``, the reference code's FCFS behind Table 1 (the queue head
  fills rank 0's free slots, then rank 1's, ...);
- ``JsqLoadRankRouter``: ``jsq_load``, each request in FIFO order to the rank of least token load
  L_g (the reference code's JSQ, also BF-IO's fallback);
- ``RoundRobinRankRouter``, ``JsqCountRankRouter``, ``PowerOfTwoRankRouter`` (power of d = 2, seeded)
  and ``VllmScoreRankRouter`` (vLLM's waiting + running with its 2026 KV-pressure weight on waiting): the
  other baselines of spec section 3.

``BfioRankRouter`` (services/sim/routers_bfio.py) is the paper's router on the same interface.

Deviation (every rank router): the paper has no KV limit; a DP rank here reserves prompt + output
tokens at admission, and ``kv_admissible`` drops an assignment whose request does not fit its rank's
remaining reservation room, so that request keeps waiting.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from policies.bfio import fcfs_index_fill, jsq_count, jsq_load, power_of_d, round_robin, vllm_dp_score
from schemas.errors import ConfigError
from schemas.policy_docs.base import PolicyDocument
from services.sim.request import SimRequest

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True, kw_only=True)
class RankView:
    """What a router sees of one rank: its load L_g (tokens), active requests, free slots and KV room.

    ``kv_free_tokens`` is the room left after every active request's reservation (prompt + output);
    ``kv_capacity_tokens`` is the rank's whole KV cache, so L_g / capacity is the KV use an engine reports
    (the blocks its requests' contexts fill, as vLLM's ``kv_cache_usage``). ``requests`` are the rank's
    active requests (read-only; BF-IO's lookahead needs each one's prompt and age); ``step_id`` and
    ``now_s`` are the decode step and event time the view is taken at (validity of pushed assignments and
    of the bundle, request ages).
    """

    rank: int
    load_tokens: int
    active: int
    free_slots: int
    kv_free_tokens: int
    kv_capacity_tokens: int
    requests: tuple[SimRequest, ...] = ()
    step_id: int = 0
    now_s: float = 0.0


class RankRouter(Protocol):
    """Assigns waiting requests to ranks at a step (BF-IO's decision point)."""

    @property
    def policy_kind(self) -> str | None:
        """The policy-document kind the router obeys (fetched per DP deployment), or None."""
        ...

    def assign(
        self, waiting: Sequence[SimRequest], ranks: Sequence[RankView], policy: PolicyDocument | None
    ) -> list[tuple[int, int]]:
        """Return (index into ``waiting``, rank) pairs; each rank gets at most its free slots."""
        ...


def kv_admissible(
    waiting: Sequence[SimRequest], ranks: Sequence[RankView], rank_of: IntArray
) -> tuple[list[tuple[int, int]], list[int]]:
    """Keep the assignments whose request fits its rank's KV room, in FIFO order.

    Args:
        waiting: the requests ``rank_of`` indexes.
        ranks: the views ``rank_of`` points into (position, not ``RankView.rank``).
        rank_of: shape (len(waiting),), a position in ``ranks`` per request or -1 (keeps waiting).

    Returns:
        (index into ``waiting``, rank) pairs admitted, and the indices dropped for KV room.
    """
    kv_free = [view.kv_free_tokens for view in ranks]
    admitted: list[tuple[int, int]] = []
    dropped: list[int] = []
    for index in np.flatnonzero(rank_of >= 0).tolist():
        position = int(rank_of[index])
        request = waiting[index]
        need = request.spec.prompt_tokens + request.target_output_tokens
        if need > kv_free[position]:
            dropped.append(index)
            continue
        kv_free[position] -= need
        admitted.append((index, ranks[position].rank))
    return admitted, dropped


class BaselineRankRouter(ABC):
    """A ``policies.bfio.baselines`` assignment on the simulator's state; it obeys no policy.

    A baseline admits from the FIFO front only, at most the free slots (U(k), spec section 2.1), so
    only that front is handed to ``rank_of``; ``kv_admissible`` then checks each rank's KV room.
    """

    @property
    def policy_kind(self) -> str | None:
        """The baseline obeys no policy."""
        return None

    @abstractmethod
    def rank_of(self, front: Sequence[SimRequest], ranks: Sequence[RankView], free_slots: IntArray) -> IntArray:
        """The baseline's rank position per request of ``front`` (-1: keeps waiting)."""

    def assign(
        self, waiting: Sequence[SimRequest], ranks: Sequence[RankView], policy: PolicyDocument | None
    ) -> list[tuple[int, int]]:
        """The FIFO front assigned by ``rank_of``, less what does not fit a rank's KV room."""
        del policy
        free = np.fromiter((view.free_slots for view in ranks), dtype=np.int64, count=len(ranks))
        front = waiting[: int(free.sum())]
        return kv_admissible(front, ranks, self.rank_of(front, ranks, free))[0]


class FcfsRankRouter(BaselineRankRouter):
    """FCFS index fill (seed 003 section 3, reference ``strategy_FCFS``): oldest requests fill rank 0, then 1..."""

    def rank_of(self, front: Sequence[SimRequest], ranks: Sequence[RankView], free_slots: IntArray) -> IntArray:
        """``policies.bfio.fcfs_index_fill``."""
        del ranks
        return fcfs_index_fill(len(front), free_slots)


class JsqLoadRankRouter(BaselineRankRouter):
    """JSQ by load (seed 003 section 3, reference ``strategy_join_shortest_queue``): FIFO, each to argmin L_g."""

    def rank_of(self, front: Sequence[SimRequest], ranks: Sequence[RankView], free_slots: IntArray) -> IntArray:
        """``policies.bfio.jsq_load``: each request to the least-loaded rank with a slot (lowest index on ties)."""
        prompts = np.fromiter((r.spec.prompt_tokens for r in front), dtype=np.float64, count=len(front))
        loads = np.fromiter((view.load_tokens for view in ranks), dtype=np.float64, count=len(ranks))
        return jsq_load(prompts, free_slots, loads)


class RoundRobinRankRouter(BaselineRankRouter):
    """Round robin (seed 003 section 3, reference code): a pointer from rank 0 each step, skipping full ranks."""

    def rank_of(self, front: Sequence[SimRequest], ranks: Sequence[RankView], free_slots: IntArray) -> IntArray:
        """``policies.bfio.round_robin``."""
        del ranks
        return round_robin(len(front), free_slots)


class JsqCountRankRouter(BaselineRankRouter):
    """JSQ by request count (the paper's JSQ, seed 003 section 3): each request to the fewest active requests."""

    def rank_of(self, front: Sequence[SimRequest], ranks: Sequence[RankView], free_slots: IntArray) -> IntArray:
        """``policies.bfio.jsq_count``."""
        return jsq_count(len(front), free_slots, _active_counts(ranks))


class PowerOfTwoRankRouter(BaselineRankRouter):
    """Power of two choices (seed 003 section 3): two open ranks sampled, the one with fewer requests wins.

    Args:
        seed: seeds the sampling, so a run stays a pure function of its seeds.
    """

    def __init__(self, seed: int = 0) -> None:
        self._rng = np.random.default_rng(seed)

    def rank_of(self, front: Sequence[SimRequest], ranks: Sequence[RankView], free_slots: IntArray) -> IntArray:
        """``policies.bfio.power_of_d`` with d = 2."""
        return power_of_d(len(front), free_slots, _active_counts(ranks), d=2, rng=self._rng)


class VllmScoreRankRouter(BaselineRankRouter):
    """vLLM's internal DP balancing (seed 003 section 3, vLLM PR #49204): least waiting + running, the waiting
    count weighted up by KV pressure, ties taken in turn.

    The router keeps vLLM's rotating scan start across steps: it moves one rank on per request placed.
    """

    def __init__(self) -> None:
        self._start_rank = 0

    def rank_of(self, front: Sequence[SimRequest], ranks: Sequence[RankView], free_slots: IntArray) -> IntArray:
        """``policies.bfio.vllm_dp_score`` with each rank's KV use L_g / capacity, then the scan start advanced."""
        kv_use = np.fromiter(
            (view.load_tokens / view.kv_capacity_tokens for view in ranks), dtype=np.float64, count=len(ranks)
        )
        rank_of = vllm_dp_score(len(front), free_slots, _active_counts(ranks), kv_use, start_rank=self._start_rank)
        self._start_rank = (self._start_rank + int(np.count_nonzero(rank_of >= 0))) % len(ranks)
        return rank_of


def _active_counts(ranks: Sequence[RankView]) -> IntArray:
    return np.fromiter((view.active for view in ranks), dtype=np.int64, count=len(ranks))


BASELINE_RANK_ROUTERS = ("fcfs", "jsq-load", "round-robin", "jsq-count", "power-of-two", "vllm-score")


def baseline_rank_router(name: str, *, seed: int = 0) -> RankRouter:
    """The baseline rank router called ``name`` (one of ``BASELINE_RANK_ROUTERS``); ``seed`` seeds power of two.

    Raises:
        ConfigError: any other name.
    """
    routers: dict[str, type[BaselineRankRouter]] = {
        "fcfs": FcfsRankRouter,
        "jsq-load": JsqLoadRankRouter,
        "round-robin": RoundRobinRankRouter,
        "jsq-count": JsqCountRankRouter,
        "vllm-score": VllmScoreRankRouter,
    }
    if name == "power-of-two":
        return PowerOfTwoRankRouter(seed)
    if name in routers:
        return routers[name]()
    msg = f"no baseline rank router {name!r}; choose one of {', '.join(BASELINE_RANK_ROUTERS)}"
    raise ConfigError(msg)
