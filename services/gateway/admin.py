"""The gateway's admin API: list, add, drain and remove upstreams while it serves (docs/gateway.md, Admin).

The scaler's local connector calls it to put the engines it starts into rotation and to take out the ones it
is about to stop without cutting a request short:

- ``GET /admin/upstreams``: 200, a JSON list of ``UpstreamEntry`` (url, pool, dp_rank, state, in_flight);
- ``POST /admin/upstreams`` ``{"url", "pool"[, "model"]}``: 200 with the entry. Adding a URL already known
  in the same pool changes nothing (and makes a draining upstream active again); in another pool, 409;
- ``POST /admin/upstreams/drain`` ``{"url"}``: 202 with the entry. The upstream gets no new request; those in
  flight, streaming ones included, run to their end. An unknown URL is 404;
- ``DELETE /admin/upstreams?url=...``: 200 once nothing is in flight there, 409 while something is, 404 if
  unknown.

Bad input (not JSON, a field missing or invalid) is 400; every error is an OpenAI-style JSON error body.
With an admin token set, each call needs ``Authorization: Bearer <token>`` (401 otherwise); the service
refuses to listen beyond loopback without one (services/gateway/service.py, docs/security.md).
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable
from typing import TypeVar

import structlog
from aiohttp import web
from pydantic import ValidationError

from schemas.errors import GovernorError
from schemas.gateway import UpstreamAdd, UpstreamDrain
from schemas.policy_docs.base import ContractModel
from services.gateway.forwarding import error_response
from services.gateway.inbound import RequestIds
from services.gateway.upstreams import Upstream, UpstreamRegistry

log = structlog.get_logger(__name__)

ADMIN_PATH = "/admin/upstreams"
_Body = TypeVar("_Body", bound=ContractModel)


class AdminError(GovernorError):
    """An admin call answered with an error status; carries what the JSON error body says."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


class AdminApi:
    """The ``/admin/upstreams`` routes over the gateway's upstream registry."""

    def __init__(
        self,
        registry: UpstreamRegistry,
        *,
        token: str | None,
        on_added: Callable[[Upstream], None],
        on_change: Callable[[], None],
    ) -> None:
        """Args:
        registry: the upstreams the gateway routes to.
        token: the bearer token every call must carry; None: calls are not authenticated (loopback only).
        on_added: told of a new upstream (the gateway health-checks it at once).
        on_change: told when rotation changed (the gateway wakes its waiting requests).
        """
        self._registry = registry
        self._token = None if token is None else token.encode()
        self._on_added = on_added
        self._on_change = on_change
        self._ids = RequestIds()

    def add_routes(self, app: web.Application) -> None:
        """Mount the admin routes on ``app``."""
        app.router.add_get(ADMIN_PATH, self._guarded(self._list))
        app.router.add_post(ADMIN_PATH, self._guarded(self._add))
        app.router.add_post(f"{ADMIN_PATH}/drain", self._guarded(self._drain))
        app.router.add_delete(ADMIN_PATH, self._guarded(self._remove))

    def _guarded(
        self, handler: Callable[[web.Request], Awaitable[web.Response]]
    ) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def guarded(request: web.Request) -> web.Response:
            try:
                self._authenticate(request)
                return await handler(request)
            except AdminError as exc:
                log.info("admin_refused", path=request.path, method=request.method, status=exc.status, code=exc.code)
                return error_response(exc.status, exc.code, str(exc), self._ids.of(request.headers))

        return guarded

    def _authenticate(self, request: web.Request) -> None:
        if self._token is None:
            return
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self._token):
            raise AdminError(401, "unauthorized", "the admin API needs Authorization: Bearer <gateway_admin_token>")

    async def _list(self, request: web.Request) -> web.Response:
        entries = [u.entry().model_dump(mode="json") for u in self._registry.all()]
        return web.json_response(entries)

    async def _add(self, request: web.Request) -> web.Response:
        body = await _read(request, UpstreamAdd)
        upstream = self._registry.by_url(body.url)
        if upstream is not None and upstream.pool != body.pool:
            msg = f"{upstream.url} is already an upstream of pool {upstream.pool!r}, not {body.pool!r}"
            raise AdminError(409, "pool_conflict", msg)
        if upstream is None:
            upstream = self._registry.add_url(body.url, pool=body.pool, model=body.model)
            log.info("upstream_added", upstream=upstream.engine_id, url=upstream.url, pool=upstream.pool)
            self._on_added(upstream)
        elif upstream.draining:
            upstream.draining = False
            log.info("upstream_reactivated", upstream=upstream.engine_id, url=upstream.url)
            self._on_change()
        return web.json_response(upstream.entry().model_dump(mode="json"))

    async def _drain(self, request: web.Request) -> web.Response:
        body = await _read(request, UpstreamDrain)
        upstream = self._known(body.url)
        if not upstream.draining:
            upstream.draining = True
            log.info(
                "upstream_draining", upstream=upstream.engine_id, url=upstream.url, in_flight=len(upstream.in_flight)
            )
            self._on_change()
        return web.json_response(upstream.entry().model_dump(mode="json"), status=202)

    async def _remove(self, request: web.Request) -> web.Response:
        url = request.query.get("url")
        if not url:
            raise AdminError(400, "invalid_value", "the url query parameter is required")
        upstream = self._known(url)
        if upstream.in_flight:
            msg = f"{upstream.url} has {len(upstream.in_flight)} requests in flight; drain it and wait"
            raise AdminError(409, "in_flight", msg)
        self._registry.remove(upstream)
        log.info("upstream_removed", upstream=upstream.engine_id, url=upstream.url)
        self._on_change()
        return web.json_response(upstream.entry().model_dump(mode="json"))

    def _known(self, url: str) -> Upstream:
        upstream = self._registry.by_url(url)
        if upstream is None:
            raise AdminError(404, "unknown_upstream", f"no upstream has the url {url!r}")
        return upstream


async def _read(request: web.Request, model: type[_Body]) -> _Body:
    """The JSON body of an admin call as ``model``; AdminError 400 naming the field when it is not one."""
    try:
        raw = json.loads(await request.read())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AdminError(400, "invalid_json", f"the body is not valid JSON: {exc}") from exc
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "body"
        raise AdminError(400, "invalid_value", f"{where}: {first['msg']}") from exc
