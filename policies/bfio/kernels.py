"""Compiled inner loops of the fast BF-IO solver (policies/bfio/greedy.py): one greedy round, one exchange move.

Why compiled: at the paper's sizes (G = 32, B = 72, about 123 admissions from 128 waiting) the numpy
solver spent its time in some 35 array calls per greedy round, about 8 rounds a call, not in arithmetic,
and missed its 1.5 ms budget on 21% of calls on a quiet machine and 76% on a loaded one. numba compiles
these loops on their first call in a process and caches the machine code on disk, so a round costs
its arithmetic.

Both kernels work in place on the solver's arrays (loads, envelope, free slots, ``rank_of``) and use
the score of specs/seed-003-bfio.md section 2.5, F_{r,g} = sum_h omega_h [v_r(h) - G (v_r(h) - m_g(h))^+],
and J of (IO). Every sum over the offsets runs in one fixed order for every (rank, request) pair, so
identical requests score identically and ties go by the rules greedy.py states, never by rounding.

The functions are compiled by ``numba.njit`` below rather than decorated: numba ships no type
information, and a decorator without it would make strict mypy reject the module.
"""

from __future__ import annotations

from collections.abc import Callable

import llvmlite.binding.ffi
import numba
import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


def _answer_vllm_module_scan() -> None:
    """Give llvmlite's FFI library object a mapping for ``__dict__``, so a vLLM CPU worker can start beside us.

    vLLM's CPU platform (0.32, ``register_triton_kernel_overrides``) rebinds Triton kernels by scanning
    every loaded module and calling ``vars(value).get("kernel")`` on each attribute that has a
    ``__dict__``. llvmlite's ``ffi.lib`` (loaded with numba) resolves unknown attributes to wrapped C
    functions, ``__dict__`` included, so ``vars`` returns a function wrapper and the worker fails with
    "'_lib_fn_wrapper' object has no attribute 'get'": any process that ran the BF-IO solver and then
    builds a vLLM CPU engine (the adapter's tests do) could not start it. The wrapper caches what it
    resolves in ``_fntab``; an empty mapping cached under ``__dict__`` is what ``vars`` then returns.
    Measured: that attribute is the only one of all loaded modules that ``vars`` turns into a non-mapping.
    """
    table = getattr(llvmlite.binding.ffi.lib, "_fntab", None)
    if isinstance(table, dict):
        table.setdefault("__dict__", {})


_answer_vllm_module_scan()


def _greedy_round(
    *,
    loads: FloatArray,
    envelope: FloatArray,
    cap: IntArray,
    rank_of: IntArray,
    contributions: FloatArray,
    weights: FloatArray,
    must: BoolArray,
    forced_round: bool,
    limit: int,
) -> int:
    """One greedy round: each rank with a free slot, in order of its best F, takes its best remaining request.

    The requests are the unassigned ones (only the forced ones in a forced round, which places one),
    in FIFO order; ranks are ordered by their best F, then lowest current load, then lowest weighted
    projected load, then index; each takes its argmax among the requests not yet taken this round (the
    earliest on ties). The round ends after the first assignment that raises the envelope
    max_j L_j(h), because that moves every rank's margin, or after ``limit`` assignments. Updates
    ``loads``, ``envelope``, ``cap`` and ``rank_of`` in place and returns how many it placed.
    """
    num_ranks, num_offsets = loads.shape
    num_requests = contributions.shape[0]
    rows = np.empty(num_requests, np.int64)
    num_rows = 0
    for i in range(num_requests):
        if rank_of[i] < 0 and (must[i] or not forced_round):
            rows[num_rows] = i
            num_rows += 1
    ranks = np.empty(num_ranks, np.int64)
    num_open = 0
    for g in range(num_ranks):
        if cap[g] > 0:
            ranks[num_open] = g
            num_open += 1
    if num_rows == 0 or num_open == 0 or limit <= 0:
        return 0
    worth = np.zeros(num_rows)
    for c in range(num_rows):
        for k in range(num_offsets):
            worth[c] += weights[k] * contributions[rows[c], k]
    scores = np.empty((num_open, num_rows))
    best = np.empty(num_open, np.int64)
    top = np.empty(num_open)
    load_now = np.empty(num_open)
    projected = np.zeros(num_open)
    margin = np.empty(num_offsets)
    for j in range(num_open):
        g = ranks[j]
        for k in range(num_offsets):
            margin[k] = envelope[k] - loads[g, k]
            projected[j] += loads[g, k] * weights[k]
        load_now[j] = loads[g, 0]
        best_column = 0
        best_score = -np.inf
        for c in range(num_rows):
            penalty = 0.0
            for k in range(num_offsets):
                excess = contributions[rows[c], k] - margin[k]
                if excess > 0.0:
                    penalty += weights[k] * excess
            score = worth[c] - num_ranks * penalty
            scores[j, c] = score
            if score > best_score:
                best_score = score
                best_column = c
        best[j] = best_column
        top[j] = best_score
    order = np.arange(num_open)
    for a in range(1, num_open):
        x = order[a]
        b = a - 1
        while b >= 0:
            y = order[b]
            if top[x] > top[y] or (
                top[x] == top[y]
                and (load_now[x] < load_now[y] or (load_now[x] == load_now[y] and projected[x] < projected[y]))
            ):
                order[b + 1] = y
                b -= 1
            else:
                break
        order[b + 1] = x
    most = 1 if forced_round else limit
    taken = np.zeros(num_rows, np.bool_)
    picked_rank = np.empty(num_open, np.int64)
    picked_request = np.empty(num_open, np.int64)
    num_picked = 0
    for a in range(num_open):
        j = order[a]
        column = best[j]
        if taken[column]:
            column = -1
            best_score = -np.inf
            for c in range(num_rows):
                if not taken[c] and scores[j, c] > best_score:
                    best_score = scores[j, c]
                    column = c
            if column < 0:
                continue
        taken[column] = True
        picked_rank[num_picked] = ranks[j]
        picked_request[num_picked] = rows[column]
        num_picked += 1
        if num_picked == most:
            break
    placed = 0
    for p in range(num_picked):
        g = picked_rank[p]
        i = picked_request[p]
        raised = False
        for k in range(num_offsets):
            loads[g, k] = loads[g, k] + contributions[i, k]
            if loads[g, k] > envelope[k]:
                raised = True
        rank_of[i] = g
        cap[g] -= 1
        placed += 1
        if raised:
            for k in range(num_offsets):
                envelope[k] = max(envelope[k], loads[g, k])
            break
    return placed


def _best_exchange(
    *,
    loads: FloatArray,
    cap: IntArray,
    rank_of: IntArray,
    contributions: FloatArray,
    weights: FloatArray,
    must: BoolArray,
    rel_tol: float,
) -> bool:
    """Apply the best J-decreasing exchange that touches a rank on the envelope; return whether one existed.

    Only a change to a rank that attains max_g L_g(h) at an offset of positive weight can lower J, so
    the movers are the admitted requests on those ranks, by (rank, request). Each mover m on rank a is
    tried against every candidate, in this order: a swap with an admitted request p on another rank
    (by request), a move to another rank with a free slot (by rank), a replace by a waiting request q
    (by request; not for a forced mover, which must stay admitted). J after the exchange is the
    weighted sum over offsets of G times the new peak, the largest of (the ranks it leaves alone,
    a's new load, b's new load), minus the total; a replace also changes the total by v_q - v_m. The
    first pair with the lowest J wins, and is applied only if it lowers J by more than ``rel_tol``
    relative.
    """
    num_ranks, num_offsets = loads.shape
    num_requests = contributions.shape[0]
    envelope = np.full(num_offsets, -np.inf)
    total = np.zeros(num_offsets)
    for g in range(num_ranks):
        for k in range(num_offsets):
            envelope[k] = max(envelope[k], loads[g, k])
            total[k] += loads[g, k]
    current_j = 0.0
    for k in range(num_offsets):
        current_j += weights[k] * (num_ranks * envelope[k] - total[k])
    critical = np.zeros(num_ranks, np.bool_)
    for g in range(num_ranks):
        for k in range(num_offsets):
            if loads[g, k] >= envelope[k] and weights[k] > 0.0:
                critical[g] = True
    worth = np.zeros(num_requests)
    for i in range(num_requests):
        for k in range(num_offsets):
            worth[i] += contributions[i, k] * weights[k]
    top_value = np.full((3, num_offsets), -np.inf)
    top_rank = np.full((3, num_offsets), -1, np.int64)
    for k in range(num_offsets):
        for g in range(num_ranks):
            value = loads[g, k]
            for depth in range(3):
                if value > top_value[depth, k]:
                    for shift in range(2, depth, -1):
                        top_value[shift, k] = top_value[shift - 1, k]
                        top_rank[shift, k] = top_rank[shift - 1, k]
                    top_value[depth, k] = value
                    top_rank[depth, k] = g
                    break
    others = np.empty(num_offsets)
    others_rank = np.empty(num_offsets, np.int64)
    others_second = np.empty(num_offsets)
    left = np.empty(num_offsets)
    best_j = np.inf
    best_mover = -1
    best_kind = -1
    best_target = -1
    for a in range(num_ranks):
        if not critical[a]:
            continue
        for k in range(num_offsets):
            first = 1 if top_rank[0, k] == a else 0
            others[k] = top_value[first, k]
            others_rank[k] = top_rank[first, k]
            others_second[k] = top_value[2, k] if top_rank[0, k] == a or top_rank[1, k] == a else top_value[1, k]
        for m in range(num_requests):
            if rank_of[m] != a:
                continue
            for k in range(num_offsets):
                left[k] = loads[a, k] - contributions[m, k]
            for kind in range(3):
                count = num_requests if kind != 1 else num_ranks
                for t in range(count):
                    if kind == 0:
                        b = rank_of[t]
                        if b < 0 or b == a:
                            continue
                    elif kind == 1:
                        b = t
                        if b == a or cap[b] <= 0:
                            continue
                    else:
                        if rank_of[t] >= 0 or must[m]:
                            continue
                        b = -1
                    candidate_j = 0.0
                    for k in range(num_offsets):
                        peak = others_second[k] if others_rank[k] == b else others[k]
                        incoming = contributions[t, k] if kind != 1 else 0.0
                        peak = max(peak, left[k] + incoming)
                        if kind == 0:
                            peak = max(peak, loads[b, k] - contributions[t, k] + contributions[m, k])
                        elif kind == 1:
                            peak = max(peak, loads[b, k] + contributions[m, k])
                        candidate_j += weights[k] * (num_ranks * peak - total[k])
                    if kind == 2:
                        candidate_j -= worth[t] - worth[m]
                    if candidate_j < best_j:
                        best_j = candidate_j
                        best_mover = m
                        best_kind = kind
                        best_target = t
    if best_mover < 0 or not best_j < current_j - rel_tol * max(1.0, abs(current_j)):
        return False
    moved = best_mover
    from_rank = rank_of[moved]
    if best_kind == 0:
        partner = best_target
        to_rank = rank_of[partner]
        for k in range(num_offsets):
            loads[from_rank, k] += contributions[partner, k] - contributions[moved, k]
            loads[to_rank, k] += contributions[moved, k] - contributions[partner, k]
        rank_of[moved] = to_rank
        rank_of[partner] = from_rank
    elif best_kind == 1:
        to_rank = best_target
        for k in range(num_offsets):
            loads[from_rank, k] -= contributions[moved, k]
            loads[to_rank, k] += contributions[moved, k]
        cap[from_rank] += 1
        cap[to_rank] -= 1
        rank_of[moved] = to_rank
    else:
        partner = best_target
        for k in range(num_offsets):
            loads[from_rank, k] += contributions[partner, k] - contributions[moved, k]
        rank_of[moved] = -1
        rank_of[partner] = from_rank
    return True


greedy_round: Callable[..., int] = numba.njit(cache=True, nogil=True)(_greedy_round)
best_exchange: Callable[..., bool] = numba.njit(cache=True, nogil=True)(_best_exchange)


def warm_up() -> None:
    """Compile both kernels, or load them from numba's cache, now rather than inside a step's budget.

    The first call in a process costs 0.3-0.5 s from the cache and about 5 s when it compiles (measured
    here), far past any step's budget; the router calls this when it is built. Later calls cost microseconds.
    """
    loads = np.zeros((2, 1))
    envelope = np.zeros(1)
    cap = np.ones(2, np.int64)
    rank_of = np.full(2, -1, np.int64)
    contributions = np.ones((2, 1))
    weights = np.ones(1)
    must = np.zeros(2, np.bool_)
    arrays = {"loads": loads, "cap": cap, "rank_of": rank_of, "contributions": contributions, "weights": weights}
    greedy_round(**arrays, envelope=envelope, must=must, forced_round=False, limit=2)
    best_exchange(**arrays, must=must, rel_tol=0.0)
