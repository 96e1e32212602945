"""The shape every paper's pure ``decide`` function returns.

A policy decides from an estimate snapshot and its own previous document alone (DESIGN
principle 2), so everything that must carry over between decisions (smoothed values,
hysteresis counters, cooldowns) lives in the document's ``state``. The runtime adds the
envelope (version, times, inputs digest) and publishes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from policies.bounds import Clamp

PayloadT = TypeVar("PayloadT")
StateT = TypeVar("StateT")

DiagnosticValue = float | int | str | bool | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision(Generic[PayloadT, StateT]):
    """One policy decision before the runtime versions and publishes it.

    Attributes:
        payload: what engines read and obey (a pydantic model of schemas/policy_docs).
        state: what the next decision needs from this one (a pydantic model of schemas/policy_docs).
        diagnostics: the numbers that explain the decision (DESIGN principle 6).
        clamps: parameters the guardrails moved into bounds (DESIGN principle 7).
        valid_for_s: event-time seconds the document stays valid after it is computed.
    """

    payload: PayloadT
    state: StateT
    diagnostics: Mapping[str, DiagnosticValue] = field(default_factory=dict)
    clamps: tuple[Clamp, ...] = ()
    valid_for_s: float = 60.0
