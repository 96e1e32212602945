"""Reading estimate summaries: the typed summary a snapshot carries, and binding params.

Each policy's wiring builds its inputs from the snapshot's summary alone (schemas/estimates.py,
built by fold/engine_estimates.py and fold/fleet.py), through its attributes, so a
renamed field fails mypy and the schema rather than silently switching a policy off, and a snapshot
replayed from ``gov.estimates`` decides exactly as it did live.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from policies.decision import Decision
from schemas.errors import InvalidInputError
from schemas.estimates import EngineSummary, FleetSummary
from schemas.records import EstimateSnapshot

InputsT = TypeVar("InputsT")
ParamsT = TypeVar("ParamsT")


def engine_summary(snapshot: EstimateSnapshot) -> EngineSummary:
    """The engine summary of an engine-scope snapshot.

    Raises:
        InvalidInputError: the snapshot carries another summary (a fleet one).
    """
    summary = snapshot.estimates
    if not isinstance(summary, EngineSummary):
        msg = f"snapshot {str(snapshot.trigger)!r} of {snapshot.scope} carries a {summary.summary_type} summary"
        raise InvalidInputError(msg, field="estimates.summary_type", value=summary.summary_type)
    return summary


def fleet_summary(snapshot: EstimateSnapshot) -> FleetSummary:
    """The fleet summary of a fleet-scope snapshot.

    Raises:
        InvalidInputError: the snapshot carries another summary (an engine's or a slot contribution).
    """
    summary = snapshot.estimates
    if not isinstance(summary, FleetSummary):
        trigger = str(snapshot.trigger)
        msg = f"snapshot {trigger!r} of {snapshot.scope} carries a {summary.summary_type} summary, not a fleet's"
        raise InvalidInputError(msg, field="estimates.summary_type", value=summary.summary_type)
    return summary


def bind_params(
    decide: Callable[[InputsT, Any, ParamsT, float], Decision[Any, Any]], params: ParamsT
) -> Callable[[InputsT, Any, float], Decision[Any, Any]]:
    """Bind a paper's ``decide(inputs, previous, params, now_s)`` to its params for the registry."""

    def bound(inputs: InputsT, previous: Any, now_s: float) -> Decision[Any, Any]:
        return decide(inputs, previous, params, now_s)

    return bound
