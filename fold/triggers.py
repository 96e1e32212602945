"""When the stream processor snapshots estimates: the triggers, and what the fold needs of a policy.

Both the fold (services/stream) and the policy registry (services/policy) need these, so they live
here, in neither: the stream processor takes trigger specs, not the policy service, and the two
subpackages do not import each other (tests/test_layering.py checks that no services subpackages
import each other in a cycle).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from schemas.estimates import EngineRegistration


@dataclass(frozen=True, slots=True, kw_only=True)
class EveryEvents:
    """Fire at every ``n``-th event of ``event_type`` on an engine's stream."""

    event_type: str
    n: int

    def describe(self) -> str:
        """Return e.g. ``every 100 request.finished``."""
        return f"every {self.n} {self.event_type}"


@dataclass(frozen=True, slots=True, kw_only=True)
class EverySeconds:
    """Fire when event time has advanced ``seconds`` past the last firing on a scope."""

    seconds: float

    def describe(self) -> str:
        """Return e.g. ``every 10s``."""
        return f"every {self.seconds:g}s"


Trigger = EveryEvents | EverySeconds


class TriggerSpec(Protocol):
    """What the fold reads of a registered policy (``PolicySpec`` is one): its kind, scope and trigger.

    ``applies_to`` judges an engine on its registration (None when it has not registered yet); an
    ``applies_to`` of None means every engine.
    """

    @property
    def kind(self) -> str: ...

    @property
    def scope(self) -> Literal["engine", "fleet"]: ...

    @property
    def trigger(self) -> Trigger: ...

    @property
    def applies_to(self) -> Callable[[EngineRegistration | None], bool] | None: ...
