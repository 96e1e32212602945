"""Active health checks: every ``interval_s`` each upstream's ``GET /health`` (vLLM's liveness endpoint).

A 200 within the timeout passes; anything else fails. ``UpstreamRegistry`` decides when failures take an
upstream out of rotation and when a pass brings it back; this loop only probes and tells the gateway, which
wakes the requests waiting for capacity. An upstream added through the admin API without a model passes
only once its ``/v1/models`` names one: the first model served there, with its ``max_model_len`` when
vLLM gives it, becomes the upstream's.
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
            changed = self._record(upstream, passed=passed) or changed
        if changed:
            self._on_change()

    async def check(self, upstream: Upstream) -> None:
        """Probe one upstream now (one just added, so it need not wait for the next round)."""
        if self._record(upstream, passed=await self._probe(upstream)):
            self._on_change()

    def _record(self, upstream: Upstream, *, passed: bool) -> bool:
        if passed and self._registry.check_passed(upstream):
            log.info("upstream_restored", upstream=upstream.engine_id, model=upstream.model)
            return True
        if not passed and self._registry.check_failed(upstream):
            log.warning("upstream_ejected", upstream=upstream.engine_id, failures=upstream.consecutive_failures)
            return True
        return False

    async def _probe(self, upstream: Upstream) -> bool:
        try:
            async with self._session.get(f"{upstream.url}/health", timeout=self._timeout) as response:
                if response.status != 200:
                    return False
            return upstream.model is not None or await self._learn_model(upstream)
        except (aiohttp.ClientError, TimeoutError, OSError):
            return False

    async def _learn_model(self, upstream: Upstream) -> bool:
        """Read the upstream's model (and context window) from its ``/v1/models``; False if it names none."""
        async with self._session.get(f"{upstream.url}/v1/models", timeout=self._timeout) as response:
            if response.status != 200:
                return False
            try:
                card = (await response.json())["data"][0]
                model = card["id"]
            except (ValueError, KeyError, IndexError, TypeError):
                return False
        if not isinstance(model, str) or not model:
            return False
        max_model_len = card.get("max_model_len")
        if isinstance(max_model_len, int) and not isinstance(max_model_len, bool) and max_model_len > 0:
            upstream.max_model_len = max_model_len
        upstream.model = model
        return True
