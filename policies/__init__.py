"""Pure decision functions, one package per paper, and the shared guardrails."""

from policies.bounds import Bound, Clamp, clamp

__all__ = ["Bound", "Clamp", "clamp"]
