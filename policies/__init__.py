"""Pure decision functions, one package per paper, and the shared guardrails."""

from policies.bounds import Bound, Clamp, clamp
from policies.decision import Decision

__all__ = ["Bound", "Clamp", "Decision", "clamp"]
