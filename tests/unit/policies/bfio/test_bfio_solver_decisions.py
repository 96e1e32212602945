"""The fast solver's decisions are those of the solver before its rewrite.

``data/solve_fast_decisions.json`` holds, per instance below, a digest of ``rank_of`` and the number of
exchange moves that ``solve_fast`` returned at commit a24b0fc (before the incremental greedy state, the
vectorised pick loop and the one-table exchange); it was recorded by running ``_instances()`` through
that solver (``python -m tests.unit.policies.bfio.test_bfio_solver_decisions OUT.json`` on that tree).
Two rewrites since (the incremental numpy rounds, then the compiled kernels of policies/bfio/kernels.py)
changed how the work is done, not the algorithm, so every decision must match: small
integer instances full of ties (with and without forced requests) and production-size instances with
real-valued loads (G = 16 and 32, 64-128 waiting, the dyadic H = 20 grid), and instances whose
requests repeat a few prompt lengths (as the simulator's integer prompts do), where identical requests
tie exactly and only the scores' last bits order the ranks: an earlier draft of the rewrite summed the
score's matrix products in another memory order and broke such ties differently. The compiled
kernels sum each score in one fixed order, so identical requests score identically and the earliest
wins, which is the rule the digests record.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np

from policies.bfio.greedy import solve_fast

DATA = Path(__file__).parent / "data" / "solve_fast_decisions.json"
Instance = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]


def _instances() -> list[Instance]:
    rng = np.random.default_rng(20261123)
    out: list[Instance] = []
    for _ in range(2000):
        num_ranks, num_waiting, num_offsets = int(rng.integers(1, 5)), int(rng.integers(0, 9)), int(rng.integers(1, 4))
        base = rng.integers(0, 120, (num_ranks, num_offsets)).astype(np.float64)
        free = rng.integers(0, 4, num_ranks)
        v = rng.integers(1, 60, (num_waiting, num_offsets)).astype(np.float64)
        weights = rng.choice([0.5, 1.0, 2.0], num_offsets)
        forced = rng.random(num_waiting) < 0.2 if rng.random() < 0.3 else None
        out.append((base, free, v, weights, forced))
    grid_weights = np.array([1.0, 1.0, 2.0, 4.0, 8.0, 4.0, 1.0])
    growth = np.array([0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 20.0])
    for num_ranks, num_waiting in ((16, 64), (32, 128), (32, 100)):
        for _ in range(40):
            free = rng.binomial(72, min(0.5, num_waiting / (num_ranks * 72)), num_ranks)
            base = rng.uniform(60_000, 90_000, num_ranks)[:, None] * np.exp(-growth / rng.uniform(50, 400))[None, :]
            prompts = np.maximum(1.0, np.round(rng.lognormal(5.5, 1.0, num_waiting)))
            survival = np.exp(-growth / 300.0)
            v = (prompts[:, None] + growth[None, :]) * survival[None, :]
            forced = rng.random(num_waiting) < 0.05 if rng.random() < 0.3 else None
            out.append((base, free, v, grid_weights, forced))
    for _ in range(120):
        num_ranks = int(rng.choice([4, 16, 32]))
        num_waiting = int(rng.integers(4, 3 * num_ranks))
        free = rng.binomial(8, 0.4, num_ranks)
        survival = np.exp(-growth / rng.uniform(5, 400))
        base = np.round(rng.uniform(15_000, 20_000, num_ranks))[:, None] * survival[None, :]
        prompts = rng.choice([50.0, 192.0, 363.0, 1024.0], num_waiting)
        v = (prompts[:, None] + growth[None, :]) * survival[None, :]
        out.append((base, free, v, grid_weights, None))
    return out


def _digests(instances: list[Instance]) -> list[str]:
    digests = []
    for base, free, v, weights, forced in instances:
        solution = solve_fast(base, free, v, weights, forced=forced)
        key = solution.rank_of.astype(np.int64).tobytes() + str(solution.local_search_moves).encode()
        digests.append(hashlib.sha256(key).hexdigest()[:12])
    return digests


def test_decisions_match_the_solver_before_the_rewrite() -> None:
    expected = json.loads(DATA.read_text())["digests"]
    got = _digests(_instances())
    assert len(got) == len(expected)
    differing = [i for i, (a, b) in enumerate(zip(got, expected, strict=True)) if a != b]
    assert differing == []


if __name__ == "__main__":
    Path(sys.argv[1]).write_text(json.dumps({"commit": "a24b0fc", "digests": _digests(_instances())}) + "\n")
