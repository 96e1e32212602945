"""The gateway's admin API as the local connector uses it: list, add, drain and remove upstreams.

The contract (docs/gateway.md): ``GET /admin/upstreams`` answers a JSON list of
``{"url", "pool", "dp_rank", "state": "active" | "draining", "in_flight"}``; ``POST /admin/upstreams``
with ``{"url", "pool"[, "model"]}`` adds one; ``POST /admin/upstreams/drain`` with ``{"url"}`` takes one out of
rotation (202) while its requests finish; ``DELETE /admin/upstreams?url=...`` removes a drained one
(409 while requests are still in flight). A bearer token is sent where the gateway needs one.

The client is synchronous (the scaler's loop is a thread) and every call has a timeout. Network
errors and unexpected answers become ``BackendUnavailableError``; a 409 on removal is an expected
outcome, returned as False.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from schemas.errors import BackendUnavailableError

UpstreamState = Literal["active", "draining"]


class AdminUpstream(BaseModel):
    """One upstream as ``GET /admin/upstreams`` lists it; fields the gateway adds later are ignored."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    url: str
    pool: str
    dp_rank: int | None = None
    state: UpstreamState
    in_flight: int = Field(ge=0)


@dataclass(frozen=True, slots=True, kw_only=True)
class AdminAnswer:
    """An admin call's HTTP status and body."""

    status: int
    body: bytes


class GatewayAdmin:
    """Calls one gateway's admin API."""

    def __init__(self, base_url: str, *, token: str | None = None, timeout_s: float = 5.0) -> None:
        """Talk to the gateway at ``base_url``, with ``token`` as the bearer where given."""
        self._base = base_url.rstrip("/")
        self._token = token
        self._timeout_s = timeout_s

    @property
    def base_url(self) -> str:
        """The gateway's base URL."""
        return self._base

    @property
    def token(self) -> str | None:
        """The bearer token sent, if any."""
        return self._token

    def upstreams(self) -> list[AdminUpstream]:
        """Every upstream the gateway routes to, with its state and its requests in flight.

        Raises:
            BackendUnavailableError: the gateway did not answer, or answered something else than the list.
        """
        answer = self._call("GET", "/admin/upstreams", None)
        try:
            rows = json.loads(answer.body)
            if not isinstance(rows, list):
                msg = f"expected a list, got {type(rows).__name__}"
                raise TypeError(msg)
            return [AdminUpstream.model_validate(row) for row in rows]
        except (ValueError, TypeError, ValidationError) as exc:
            msg = f"gateway {self._base}: GET /admin/upstreams answered an unreadable list: {exc}"
            raise BackendUnavailableError(msg, backend="gateway") from exc

    def add(self, url: str, pool: str, model: str | None = None) -> None:
        """Put the engine at ``url`` (serving ``model``, where given) in ``pool``'s rotation."""
        body = {"url": url, "pool": pool}
        if model is not None:
            body["model"] = model
        self._call("POST", "/admin/upstreams", body)

    def drain(self, url: str) -> None:
        """Take the engine at ``url`` out of rotation; its requests in flight go on. Unknown there (404) is fine."""
        self._call("POST", "/admin/upstreams/drain", {"url": url}, allowed=(404,))

    def remove(self, url: str) -> bool:
        """Forget the engine at ``url``; False while it still has requests in flight (409); unknown (404) is gone."""
        query = urllib.parse.urlencode({"url": url})
        return self._call("DELETE", f"/admin/upstreams?{query}", None, allowed=(404, 409)).status != 409

    def in_flight(self, url: str) -> int | None:
        """Requests the gateway has in flight on ``url``; None when it does not list it."""
        for upstream in self.upstreams():
            if upstream.url.rstrip("/") == url.rstrip("/"):
                return upstream.in_flight
        return None

    def _call(
        self, method: str, path: str, body: dict[str, str] | None, *, allowed: tuple[int, ...] = ()
    ) -> AdminAnswer:
        headers = {"accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["content-type"] = "application/json"
        if self._token is not None:
            headers["authorization"] = f"Bearer {self._token}"
        request = urllib.request.Request(f"{self._base}{path}", data=data, headers=headers, method=method)
        where = f"gateway {self._base}: {method} {path.split('?', maxsplit=1)[0]}"
        try:
            with urllib.request.urlopen(request, timeout=self._timeout_s) as response:
                return AdminAnswer(status=response.status, body=response.read())
        except urllib.error.HTTPError as exc:
            if exc.code in allowed:
                return AdminAnswer(status=exc.code, body=exc.read())
            msg = f"{where} answered HTTP {exc.code}: {exc.read()[:200]!r}"
            raise BackendUnavailableError(msg, backend="gateway") from exc
        except (urllib.error.URLError, OSError) as exc:
            msg = f"{where} failed: {exc}"
            raise BackendUnavailableError(msg, backend="gateway") from exc
