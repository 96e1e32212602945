"""Compiled per-length loops of the exact calibration (calibration.py): where l_out reaches a value, running sums.

Why compiled: a new input share (the fleet's windowed l_in / L) changes every per-length term, and
tabulating them in numpy (some 15 array passes and a sequential running sum over 9 rows of 65,536
lengths, with their temporaries) cost about 3 ms of a 4 ms sweep on a quiet machine and 9-17 ms on a
loaded one. One loop over the lengths that keeps the eight running sums in registers
and stores them only at the lengths a sweep reads does the same float operations, in the same order,
as numpy did: the sums are those of ``np.cumsum`` over the per-length rows, bit for bit.

Per length L (seed 002 Eqs. 3-4, with the reference's l_in = max(1, floor(f L)), spec seed-002 section
1.4): l_out = max(1, L - l_in), m = ceil(l_in / C_chunk) + l_out and total = l_in + l_out; the rows are
m, total m, m^2, total m^2, total^2 m^2, ceil(l_in / C_chunk), l_out and l_out^2 (calibration.py).

Importing ``policies.bfio.kernels`` runs its fix to llvmlite's FFI object, which any process that loads
numba needs before it builds a vLLM CPU engine (see ``_answer_vllm_module_scan`` there). numba
compiles these loops on their first call in a process and caches the machine code on disk:
``warm_up`` pays for that outside a decision.
"""

from __future__ import annotations

from collections.abc import Callable

import numba
import numpy as np
import numpy.typing as npt

import policies.bfio.kernels  # noqa: F401  # its import makes numba's llvmlite safe for vLLM's module scan

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def _output_tokens(input_frac: float, length: int) -> int:
    """l_out of one length (0 as for L = 1), as ``split_tokens`` gives it."""
    total = max(length, 1)
    l_in = max(1, int(np.floor(input_frac * total)))
    return max(1, total - l_in)


def _first_output_at_least(input_frac: float, top_tokens: int, values: IntArray, first: IntArray) -> None:
    """For each value v, the smallest L in 0..top with l_out(L) >= v into ``first`` (top + 1 when none).

    l_out is non-decreasing in L, so a bisection gives what ``np.searchsorted(l_out(0..top), v)`` gives,
    in O(log top) per value instead of a table of every length.
    """
    for k in range(values.size):
        lo, hi = 0, top_tokens + 1
        while lo < hi:
            mid = (lo + hi) // 2
            if output_tokens(input_frac, mid) >= values[k]:
                hi = mid
            else:
                lo = mid + 1
        first[k] = lo


def _running_sums(input_frac: float, chunk_tokens: int, x_tokens: IntArray, order: IntArray, out: FloatArray) -> None:
    """The rows 1..8 summed over L = 1..x into ``out[1:, i]`` for each x = ``x_tokens[i]`` >= 1.

    ``order`` sorts ``x_tokens`` (ascending; repeats allowed); columns with x <= 0 are left as they are
    (0). Row 0, the mass, is the caller's. The sums run from L = 1 upwards one length at a time, as
    ``np.cumsum`` does. Since f < 1, l_in grows by at most one token a length, so ceil(l_in / C) is kept
    by one comparison instead of a division (the same integer: a quotient of integers below 2^53 rounds
    to an integer only when it is one).
    """
    count = x_tokens.size
    q = 0
    while q < count and x_tokens[order[q]] <= 0:
        q += 1
    if q == count:
        return
    # L = 1: l_in = l_out = 1, total 2, one chunk, m = 2.
    s_m, s_lm, s_m2, s_lm2, s_l2m2, s_chunks, s_out, s_out2 = 2.0, 4.0, 4.0, 8.0, 16.0, 1.0, 1.0, 1.0
    chunks = 1.0
    chunk_end = float(chunk_tokens)
    length = 1
    while True:
        while x_tokens[order[q]] == length:
            column = order[q]
            out[1, column] = s_m
            out[2, column] = s_lm
            out[3, column] = s_m2
            out[4, column] = s_lm2
            out[5, column] = s_l2m2
            out[6, column] = s_chunks
            out[7, column] = s_out
            out[8, column] = s_out2
            q += 1
            if q == count:
                return
        length += 1
        total = float(length)  # l_in + l_out, as below, for every L >= 2 unless f rounds f L up to L
        l_in = max(1.0, np.floor(input_frac * total))
        l_out = max(1.0, total - l_in)
        total = l_in + l_out
        while l_in > chunk_end:
            chunks += 1.0
            chunk_end += chunk_tokens
        m = chunks + l_out
        lm = m * total
        lm2 = lm * m
        s_m += m
        s_lm += lm
        s_m2 += m * m
        s_lm2 += lm2
        s_l2m2 += lm2 * total
        s_chunks += chunks
        s_out += l_out
        s_out2 += l_out * l_out


output_tokens: Callable[[float, int], int] = numba.njit(cache=True, nogil=True)(_output_tokens)
first_output_at_least: Callable[[float, int, IntArray, IntArray], None] = numba.njit(cache=True, nogil=True)(
    _first_output_at_least
)
running_sums: Callable[[float, int, IntArray, IntArray, FloatArray], None] = numba.njit(cache=True, nogil=True)(
    _running_sums
)


def warm_up() -> None:
    """Compile the loops, or load them from numba's cache, now rather than inside a planner call.

    The first call in a process costs a few tenths of a second from the cache and about 2.5 s when it
    compiles (measured on the 2-core development machine); later calls cost their loop.
    """
    first_output_at_least(0.8, 1, np.ones(1, dtype=np.int64), np.zeros(1, dtype=np.int64))
    running_sums(0.8, 512, np.ones(1, dtype=np.int64), np.zeros(1, dtype=np.int64), np.zeros((9, 1)))
