"""Fleet routers: which engine of a fleet receives an arriving request.

``LeastLoadedRouter`` joins the engine with the fewest requests (running plus waiting; first index
on ties). ``LengthRouter`` is FleetOpt's pool split (specs/seed-002-fleetopt.md section 1.2 without
compression): a request whose total length estimate prompt + max_tokens is within
``boundary_tokens`` goes to the short pool, otherwise to the long pool, then least-loaded inside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from schemas.errors import ConfigError
from services.sim.request import RequestSpec


class RoutedEngine(Protocol):
    """What a fleet router reads of an engine."""

    @property
    def pool(self) -> str: ...
    @property
    def load(self) -> int: ...


class FleetRouter(Protocol):
    """Picks the engine for an arriving request."""

    def route(self, spec: RequestSpec, engines: Sequence[RoutedEngine]) -> int:
        """Return the index of the chosen engine in ``engines``."""
        ...


def _least_loaded(engines: Sequence[RoutedEngine], indices: Sequence[int]) -> int:
    best = indices[0]
    best_load = engines[best].load
    for index in indices[1:]:
        load = engines[index].load
        if load < best_load:
            best, best_load = index, load
    return best


@dataclass(frozen=True, slots=True)
class LeastLoadedRouter:
    """Join the engine with the fewest requests (JSQ by count)."""

    def route(self, spec: RequestSpec, engines: Sequence[RoutedEngine]) -> int:
        """Index of the least-loaded engine."""
        del spec
        return _least_loaded(engines, range(len(engines)))


@dataclass(frozen=True, slots=True, kw_only=True)
class LengthRouter:
    """Short/long pools by total-length estimate (FleetOpt routing rule, gamma = 1).

    The estimate is prompt + max_tokens, or prompt + the natural output when ``max_tokens`` is
    unset (the simulator's oracle stands in for the gateway's estimate then).
    """

    boundary_tokens: int
    short_pool: str = "short"
    long_pool: str = "long"

    def route(self, spec: RequestSpec, engines: Sequence[RoutedEngine]) -> int:
        """Least-loaded engine of the request's pool.

        Raises:
            ConfigError: the fleet has no engine in that pool.
        """
        budget = spec.max_tokens if spec.max_tokens is not None else spec.output_tokens
        pool = self.short_pool if spec.prompt_tokens + budget <= self.boundary_tokens else self.long_pool
        indices = [i for i, engine in enumerate(engines) if engine.pool == pool]
        if not indices:
            msg = f"no engine in pool {pool!r} for request {spec.request_id}"
            raise ConfigError(msg)
        return _least_loaded(engines, indices)
