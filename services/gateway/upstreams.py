"""The upstream engines the gateway routes to: where they are, what they serve, whether they are in rotation.

Three sources fill the ``UpstreamRegistry``: the static list of the gateway file (engines that do not run
Governor's plugin), ``engine.registered`` events that carry an ``endpoint_url``, and the admin API
(services/gateway/admin.py: the scaler's local connector adds the engines it starts). An upstream is in
rotation while it passes its health checks, is not draining and, for a registered one, while it keeps
sending events (registration or heartbeat) within ``silent_after_s``; it comes back on its next passing
check or event. A draining upstream gets no new request and keeps its in-flight ones until they finish;
it leaves the registry only when removed with none in flight.

Each upstream also keeps the requests the gateway has in flight on it, with their prompt tokens and the
tokens counted from their streamed chunks: that is the per-rank load BF-IO and JSQ-by-load balance on, plus
what the engine's own ``step`` telemetry shows it runs for other clients (services/gateway/reported_load.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from yarl import URL

from schemas.engines import EngineRegistered, Heartbeat
from schemas.envelope import MAX_ID_CHARS
from schemas.gateway import UpstreamEntry
from schemas.steps import StepReport
from services.gateway.config import DEFAULT_MAX_MODEL_LEN, DEFAULT_MAX_NUM_SEQS, StaticUpstream
from services.gateway.reported_load import ExternalLoad, ReportedLoad

UpstreamSource = Literal["static", "registered", "admin"]


@dataclass(slots=True, kw_only=True)
class InFlight:
    """One request the gateway has sent to an upstream and not yet seen finish.

    Attributes:
        request_id: the gateway's request id.
        prompt_tokens: prompt size counted by the upstream's tokenizer (0 when not counted).
        generated_tokens: output tokens seen so far (one per streamed SSE event).
        max_tokens: the request's output cap, None when it named none.
        output_tokens_hint: the output length its client predicted, None when it gave none.
    """

    request_id: str
    prompt_tokens: int
    generated_tokens: int = 0
    max_tokens: int | None = None
    output_tokens_hint: int | None = None


@dataclass(slots=True, kw_only=True)
class Upstream:
    """One engine endpoint, its limits, its health and its in-flight requests.

    ``model`` is None for an upstream added through the admin API without one, until its first passing
    health check reads it from the endpoint's ``/v1/models``; no request is routed there before.
    """

    engine_id: str
    url: str
    model: str | None
    pool: str
    source: UpstreamSource
    dp_group: str | None = None
    dp_rank: int | None = None
    max_num_seqs: int
    max_model_len: int
    healthy: bool = True
    consecutive_failures: int = 0
    last_seen_s: float | None = None
    draining: bool = False
    in_flight: dict[str, InFlight] = field(default_factory=dict)
    reported: ReportedLoad = field(default_factory=ReportedLoad)
    _endpoints: dict[str, URL] = field(default_factory=dict, init=False, repr=False, compare=False)

    def endpoint(self, path: str) -> URL:
        """``url`` + ``path`` as a parsed URL, parsed once per path: the client would parse the text per request."""
        endpoint = self._endpoints.get(path)
        if endpoint is None:
            endpoint = self._endpoints[path] = URL(f"{self.url}{path}")
        return endpoint

    def load_tokens(self) -> int:
        """L_g: summed prompt and generated tokens of the requests in flight here (BF-IO Eq. 1)."""
        return sum(f.prompt_tokens + f.generated_tokens for f in self.in_flight.values())

    def free_slots(self) -> int:
        """Slots left under ``max_num_seqs`` (never negative)."""
        return max(0, self.max_num_seqs - len(self.in_flight))

    def external(self, now_s: float) -> ExternalLoad:
        """What the engine's last step showed it runs beyond the gateway's requests (none once stale)."""
        return self.reported.external_at(now_s)

    def start(self, flight: InFlight, now_s: float) -> None:
        """Count ``flight`` in flight here from ``now_s``."""
        self.in_flight[flight.request_id] = flight
        self.reported.sent(flight.request_id, now_s)

    def finish(self, request_id: str, now_s: float) -> None:
        """Stop counting ``request_id`` (answered, failed, cancelled or never sent) from ``now_s``."""
        self.in_flight.pop(request_id, None)
        self.reported.finished_at(request_id, now_s)

    def entry(self) -> UpstreamEntry:
        """How the admin API lists this upstream."""
        return UpstreamEntry(
            url=self.url,
            pool=self.pool,
            dp_rank=self.dp_rank,
            state="draining" if self.draining else "active",
            in_flight=len(self.in_flight),
        )


class UpstreamRegistry:
    """Every known upstream by engine id, and which are in rotation."""

    def __init__(self, *, failures_to_eject: int = 2, silent_after_s: float = 30.0) -> None:
        """Args:
        failures_to_eject: consecutive failed health checks that take an upstream out of rotation.
        silent_after_s: a registered upstream silent for longer leaves rotation until its next event.
        """
        self._upstreams: dict[str, Upstream] = {}
        self._by_id: tuple[Upstream, ...] | None = None
        self._failures_to_eject = failures_to_eject
        self._silent_after_s = silent_after_s

    def add_static(self, entries: Iterable[StaticUpstream]) -> None:
        """Add the gateway file's upstreams."""
        for entry in entries:
            self._upstreams[entry.engine_id] = Upstream(
                engine_id=entry.engine_id,
                url=entry.url.rstrip("/"),
                model=entry.model,
                pool=entry.pool,
                source="static",
                dp_group=entry.dp_group,
                dp_rank=entry.dp_rank,
                max_num_seqs=entry.max_num_seqs,
                max_model_len=entry.max_model_len,
            )
        self._by_id = None

    def register(self, event: EngineRegistered) -> Upstream | None:
        """Add or refresh an engine from its registration; one without ``endpoint_url`` is not an upstream.

        A re-registration (an engine restart) keeps the requests the gateway still has in flight there, and
        a draining engine stays draining.
        """
        if event.endpoint_url is None:
            return None
        previous = self._upstreams.get(event.engine_id)
        upstream = Upstream(
            engine_id=event.engine_id,
            url=event.endpoint_url.rstrip("/"),
            model=event.model,
            pool=event.pool,
            source="registered",
            dp_group=event.dp_group,
            dp_rank=event.dp_rank if event.dp_group is not None else None,
            max_num_seqs=event.max_num_seqs,
            max_model_len=event.max_model_len or DEFAULT_MAX_MODEL_LEN,
            last_seen_s=event.ts,
            draining=previous is not None and previous.draining,
            in_flight={} if previous is None else previous.in_flight,
            reported=ReportedLoad() if previous is None else previous.reported,
        )
        self._upstreams[event.engine_id] = upstream
        self._by_id = None
        return upstream

    def add_url(self, url: str, *, pool: str, model: str | None) -> Upstream:
        """Add the endpoint at ``url`` to ``pool`` (the admin API), out of rotation until its first passing check.

        Its engine id is made from the URL's host and port, so events and logs name it.
        """
        base = url.rstrip("/")
        host_port = base.split("://", 1)[1].split("/", 1)[0]
        ascii_id = "".join(c if c.isascii() and (c.isalnum() or c in "_@-") else "-" for c in host_port)
        # Room for a "-<n>" suffix within the contract's id length.
        stem = ascii_id.strip("-")[: MAX_ID_CHARS - 8].strip("-") or "upstream"
        engine_id, n = stem, 1
        while engine_id in self._upstreams:
            n += 1
            engine_id = f"{stem}-{n}"
        upstream = Upstream(
            engine_id=engine_id,
            url=base,
            model=model,
            pool=pool,
            source="admin",
            max_num_seqs=DEFAULT_MAX_NUM_SEQS,
            max_model_len=DEFAULT_MAX_MODEL_LEN,
            healthy=False,
        )
        self._upstreams[engine_id] = upstream
        self._by_id = None
        return upstream

    def by_url(self, url: str) -> Upstream | None:
        """The upstream whose base URL is ``url`` (a trailing ``/`` aside), if known."""
        base = url.rstrip("/")
        return next((u for u in self._upstreams.values() if u.url == base), None)

    def remove(self, upstream: Upstream) -> None:
        """Forget ``upstream``; the caller checks that nothing is in flight there."""
        self._upstreams.pop(upstream.engine_id, None)
        self._by_id = None

    def heartbeat(self, event: Heartbeat) -> None:
        """Note that a registered engine is alive."""
        upstream = self._upstreams.get(event.engine_id)
        if upstream is not None:
            upstream.last_seen_s = event.ts

    def step(self, event: StepReport) -> None:
        """Reconcile a known upstream's load with its step telemetry (services/gateway/reported_load.py).

        A step is also a sign of life, as a heartbeat is.
        """
        upstream = self._upstreams.get(event.engine_id)
        if upstream is not None:
            upstream.reported.reconcile(event)
            upstream.last_seen_s = max(event.ts, upstream.last_seen_s or event.ts)

    def get(self, engine_id: str) -> Upstream | None:
        """The upstream of ``engine_id``, if known."""
        return self._upstreams.get(engine_id)

    def all(self) -> tuple[Upstream, ...]:
        """Every known upstream, in rotation or not, by engine id.

        Kept between changes of the registry: every request reads it, upstreams change rarely.
        """
        if self._by_id is None:
            self._by_id = tuple(self._upstreams[k] for k in sorted(self._upstreams))
        return self._by_id

    def in_rotation(self, upstream: Upstream, now_s: float) -> bool:
        """Healthy, not draining, serving a known model, and (registered) heard from within ``silent_after_s``."""
        if not upstream.healthy or upstream.draining or upstream.model is None:
            return False
        if upstream.source == "registered":
            return upstream.last_seen_s is not None and now_s - upstream.last_seen_s <= self._silent_after_s
        return True

    def serving(self, model: str, now_s: float) -> list[Upstream]:
        """Upstreams in rotation that serve ``model``."""
        return [u for u in self.all() if u.model == model and self.in_rotation(u, now_s)]

    def serves(self, model: str) -> bool:
        """Whether some upstream, in rotation or not, serves ``model``."""
        return any(u.model == model for u in self.all())

    def models(self) -> list[str]:
        """Every model name some upstream serves."""
        return sorted({u.model for u in self._upstreams.values() if u.model is not None})

    def check_passed(self, upstream: Upstream) -> bool:
        """Record a passing health check; True when it brings the upstream back into rotation."""
        upstream.consecutive_failures = 0
        back = not upstream.healthy
        upstream.healthy = True
        return back

    def check_failed(self, upstream: Upstream) -> bool:
        """Record a failed health check (or a refused connection); True when it takes the upstream out."""
        upstream.consecutive_failures += 1
        out = upstream.healthy and upstream.consecutive_failures >= self._failures_to_eject
        if out:
            upstream.healthy = False
        return out
