"""The policy registry: each policy plugs in with its kind, scope, trigger, inputs and pure decide.

A ``PolicySpec`` is everything the runtime needs to run one policy: when to decide (every N events
of a type on an engine's stream, or every T seconds of event time), how to build the policy's
inputs from an estimate snapshot (None: not enough data yet), the pure decide function with its
parameters bound, and the document type it produces. The registry refuses duplicates.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from fold.triggers import Trigger
from policies.decision import Decision
from schemas.errors import ConfigError
from schemas.estimates import EngineRegistration
from schemas.policy_docs.base import PolicyDocument
from schemas.records import EstimateSnapshot


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicySpec:
    """One registered policy.

    Attributes:
        kind: the policy kind, as in its document's ``kind`` and the Redis key.
        scope: ``engine`` (one document per engine) or ``fleet`` (one per deployment).
        trigger: when the processor snapshots estimates for this policy.
        document_type: the pydantic document class.
        inputs_from_snapshot: builds the decide inputs from a snapshot; None when data is too thin.
        decide: the pure decide function with its parameters bound: (inputs, previous, now_s).
        applies_to: which engines the policy is for, judged on the engine's registration (None
            while the engine has not registered); None means every engine. Engines it does not
            apply to are never snapshotted for it.
        unchanged: whether a decision pushes nothing new over the previous document; such a
            decision is not published until the previous document is half way to its expiry
            (decide/from_snapshot.py). None: every decision is published.
    """

    kind: str
    scope: Literal["engine", "fleet"]
    trigger: Trigger
    document_type: type[PolicyDocument]
    inputs_from_snapshot: Callable[[EstimateSnapshot], Any]
    decide: Callable[[Any, Any, float], Decision[Any, Any]]
    applies_to: Callable[[EngineRegistration | None], bool] | None = None
    unchanged: Callable[[Any, Decision[Any, Any]], bool] | None = None


def engine_obeys(kind: str) -> Callable[[EngineRegistration | None], bool]:
    """An ``applies_to`` for a policy that an engine's scheduler or router must obey to be worth deciding.

    An engine whose registration lists the kinds it obeys (``obeys``) gets documents of those kinds only;
    one that declares nothing (an engine that predates the field, or one not registered yet) gets every
    kind, as before.
    """

    def applies(engine: EngineRegistration | None) -> bool:
        return engine is None or engine.obeys is None or kind in engine.obeys

    return applies


class PolicyRegistry:
    """The policies a deployment runs, by kind."""

    def __init__(self, specs: list[PolicySpec] | None = None) -> None:
        self._specs: dict[str, PolicySpec] = {}
        for spec in specs or []:
            self.register(spec)

    def register(self, spec: PolicySpec) -> None:
        """Add ``spec``.

        Raises:
            ConfigError: a policy of the same kind is already registered.
        """
        if spec.kind in self._specs:
            msg = f"policy kind {spec.kind!r} is already registered"
            raise ConfigError(msg)
        self._specs[spec.kind] = spec

    def get(self, kind: str) -> PolicySpec:
        """Return the spec of ``kind``.

        Raises:
            ConfigError: no policy of that kind is registered.
        """
        try:
            return self._specs[kind]
        except KeyError:
            msg = f"no policy of kind {kind!r} is registered (known: {sorted(self._specs)})"
            raise ConfigError(msg) from None

    def __iter__(self) -> Iterator[PolicySpec]:
        return iter(sorted(self._specs.values(), key=lambda s: s.kind))

    def kinds(self) -> list[str]:
        """Return the registered kinds, sorted."""
        return sorted(self._specs)
