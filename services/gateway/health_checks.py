"""Active health checks: every ``interval_s`` each upstream's ``GET /health`` (vLLM's liveness endpoint).

A 200 within the timeout passes; anything else fails. ``UpstreamRegistry`` decides when failures take an
upstream out of rotation and when a pass brings it back; this loop only probes and tells the gateway, which
wakes the requests waiting for capacity.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import aiohttp
import structlog

from services.gateway.upstreams import Upstream, UpstreamRegistry

log = structlog.get_logger(__name__)


class HealthChecker:
    """Probes every upstream on a period and updates the registry."""

    def __init__(
        self,
        registry: UpstreamRegistry,
        session: aiohttp.ClientSession,
        *,
        interval_s: float,
        timeout_s: float,
        on_change: Callable[[], None],
    ) -> None:
        self._registry = registry
        self._session = session
        self._interval_s = interval_s
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._on_change = on_change

    async def run(self) -> None:
        """Check every upstream, then sleep ``interval_s``, until cancelled."""
        while True:
            await self.check_all()
            await asyncio.sleep(self._interval_s)

    async def check_all(self) -> None:
        """One round: probe every known upstream concurrently."""
        upstreams = self._registry.all()
        results = await asyncio.gather(*(self._probe(u) for u in upstreams))
        changed = False
        for upstream, passed in zip(upstreams, results, strict=True):
            if passed and self._registry.check_passed(upstream):
                log.info("upstream_restored", upstream=upstream.engine_id)
                changed = True
            elif not passed and self._registry.check_failed(upstream):
                log.warning("upstream_ejected", upstream=upstream.engine_id, failures=upstream.consecutive_failures)
                changed = True
        if changed:
            self._on_change()

    async def _probe(self, upstream: Upstream) -> bool:
        try:
            async with self._session.get(f"{upstream.url}/health", timeout=self._timeout) as response:
                return response.status == 200
        except (aiohttp.ClientError, TimeoutError, OSError):
            return False
