"""Reading estimate summaries: typed access to the JSON a snapshot carries, and binding params.

Each policy's wiring builds its inputs from the snapshot's summary alone (services/stream/estimates.py),
so a snapshot replayed from ``gov.estimates`` decides exactly as it did live.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from policies.decision import Decision

InputsT = TypeVar("InputsT")
ParamsT = TypeVar("ParamsT")


def number_at(data: Any, *path: str) -> float | None:
    """The number at ``path`` in a summary, or None when absent, null or not a number."""
    for key in path:
        if not isinstance(data, dict) or data.get(key) is None:
            return None
        data = data[key]
    return float(data) if isinstance(data, int | float) and not isinstance(data, bool) else None


def bind_params(
    decide: Callable[[InputsT, Any, ParamsT, float], Decision[Any, Any]], params: ParamsT
) -> Callable[[InputsT, Any, float], Decision[Any, Any]]:
    """Bind a paper's ``decide(inputs, previous, params, now_s)`` to its params for the registry."""

    def bound(inputs: InputsT, previous: Any, now_s: float) -> Decision[Any, Any]:
        return decide(inputs, previous, params, now_s)

    return bound
