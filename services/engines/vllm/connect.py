"""``EngineLink``: how a vLLM engine joins Governor (registration, publisher, policy client, heartbeat).

Both the stat-logger plugin and the schedulers open one link from the engine's environment
(``VllmEngineSettings``: ``GOVERNOR_ENGINE_ID``, ``GOVERNOR_DEPLOYMENT``, ``GOVERNOR_KAFKA_BOOTSTRAP``,
``REDIS_URL``...). This module reads vLLM objects by attribute only and imports nothing of vLLM, so
it loads in any process of the engine.

An engine that takes requests through ``governor gateway`` says so in its registration: its
``GOVERNOR_ENDPOINT_URL`` (the base URL of its OpenAI-compatible server, as the gateway reaches it) and, for a
server that is one rank of a data-parallel deployment of separate servers (vLLM's external load-balancing
mode, or independent servers), ``GOVERNOR_DP_GROUP`` and its rank. The rank is ``GOVERNOR_DP_RANK`` or else
vLLM's own ``--data-parallel-rank``, and it is stamped on every event of the engine, so its telemetry reads
as that rank's. The engine never learns its own address (it binds to whatever ``--host`` says, and a proxy
or a container may stand between), so the URL is the operator's to give.

An engine core that is one rank of vLLM's internal data parallelism (``--data-parallel-size N`` behind one
API server, which balances requests over the ranks) is one rank of one Governor engine: it registers the
engine with ``dp_size`` N and the engine's limits (its own times N, the ranks being alike), stamps its rank
on every event, follows each step with the rank's ``rank.step``, and is a producer of its own (its
``seq`` and ``source_epoch``; its event ids carry the rank), so the stream processor follows each rank's
``seq`` apart (fold/event_guard.py). ``internal_dp_rank`` reads rank and size from vLLM's
parallel config.

Per request, vLLM carries no tier: a client names one in the sampling parameters' ``extra_args``
(``{"governor_tier": "paid", "governor_tbt_slo_s": 0.1}``; over the OpenAI API, ``vllm_xargs``),
and a request that names none gets the engine's ``GOVERNOR_TIER`` and ``GOVERNOR_TBT_SLO_S``.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog
from prometheus_client import REGISTRY
from pydantic import Field, model_validator

from schemas.envelope import MAX_ID_CHARS
from schemas.errors import ConfigError
from schemas.names import IDENTIFIER_PATTERN
from schemas.policy_docs.base import PolicyDocument
from services.engines.stream import EngineStream, RankSlots, RequestTrack
from services.sdk.engine_events import Announcement, FinishReasonName, Registration
from services.sdk.envelope import EnvelopeFields, EnvelopeStamper
from services.sdk.policy_client import PolicyClient
from services.sdk.publisher import TelemetryPublisher
from services.sdk.publisher_metrics import PublisherCollector, PublisherCounters, multiprocess_mode
from services.settings import EngineSettings

log = structlog.get_logger(__name__)

TIER_ARG = "governor_tier"
TBT_SLO_ARG = "governor_tbt_slo_s"
_NOT_IDENTIFIER = re.compile(r"[^A-Za-z0-9_.:/@-]+")

# vLLM's finish reasons (vllm.v1.engine.FINISH_REASON_STRINGS) to Governor's. ``repetition`` is vLLM
# cutting a looping output short: its natural length is unknown, so it is right-censored like abort.
FINISH_REASONS: dict[str, FinishReasonName] = {
    "stop": "stop",
    "length": "length",
    "abort": "abort",
    "error": "error",
    "repetition": "abort",
}


class VllmEngineSettings(EngineSettings):
    """A vLLM engine's Governor settings: ``EngineSettings`` and how ``governor gateway`` reaches it."""

    endpoint_url: str | None = Field(
        default=None,
        max_length=2048,
        pattern=r"^https?://[^\s]+$",
        description="base URL of the engine's OpenAI-compatible server for `governor gateway`; None: not an upstream",
    )
    dp_group: str | None = Field(
        default=None,
        min_length=1,
        max_length=128,
        pattern=IDENTIFIER_PATTERN,
        description="the data-parallel deployment of separate servers this engine is a rank of",
    )
    dp_rank: int | None = Field(
        default=None, ge=0, le=4096, description="its rank in dp_group (default: vLLM's --data-parallel-rank)"
    )

    @model_validator(mode="after")
    def _rank_needs_group(self) -> VllmEngineSettings:
        """A rank without a group would be stamped on events that no gateway reads as a rank's."""
        if self.dp_rank is not None and self.dp_group is None:
            msg = "GOVERNOR_DP_RANK is set without GOVERNOR_DP_GROUP"
            raise ValueError(msg)
        return self


class RankStamper(EnvelopeStamper):
    """An envelope stamper that stamps the engine's DP rank on every event it does not stamp otherwise.

    A rank of vLLM's internal data parallelism (``rank_producer``) shares its engine id with the other
    ranks, each a producer of its own: its event ids carry the rank, so two ranks started in the same
    millisecond (the same ``source_epoch``) never repeat each other's ids.
    """

    def __init__(
        self, *, engine_id: str, deployment: str, source_epoch: int, dp_rank: int | None, rank_producer: bool = False
    ) -> None:
        super().__init__(engine_id=engine_id, deployment=deployment, source_epoch=source_epoch)
        self.dp_rank = dp_rank
        self.rank_producer = rank_producer

    def next(self, now_s: float, dp_rank: int | None = None) -> EnvelopeFields:
        """The next envelope, on ``dp_rank`` when given, else on the engine's own rank."""
        fields = super().next(now_s, self.dp_rank if dp_rank is None else dp_rank)
        if self.rank_producer:
            fields["event_id"] = f"{self.engine_id}-r{self.dp_rank}-{self.source_epoch}-{fields['seq']}"
        return fields


@dataclass(frozen=True, slots=True)
class InternalDpRank:
    """One engine core of vLLM's internal data parallelism: its rank and the number of ranks."""

    dp_rank: int
    dp_size: int


def internal_dp_rank(vllm_config: Any) -> InternalDpRank | None:
    """The rank and size of an engine core of vLLM's internal data parallelism, or None for any other engine.

    vLLM's external and hybrid load-balancing modes (a server per rank or per node, balanced from
    outside) are not internal: each server is its own engine (``GOVERNOR_DP_GROUP``). vLLM rewrites the
    parallel config of a dense model's rank to a single rank (``reconfigure_for_independent_dp_rank``:
    size 1, rank 0) before the scheduler is built; the rank survives in ``data_parallel_index`` and the
    size in ``elastic_ep_max_dp_size``, which vLLM sets to the data-parallel size whenever elastic EP is
    off (``ParallelConfig.__post_init__``). A MoE model's ranks keep both fields.
    """
    parallel = getattr(vllm_config, "parallel_config", None)
    if parallel is None or getattr(parallel, "data_parallel_external_lb", False) is not False:
        return None
    if getattr(parallel, "data_parallel_hybrid_lb", False) is not False:
        return None
    size = getattr(parallel, "data_parallel_size", 1)
    if size == 1 and getattr(parallel, "enable_elastic_ep", False) is False:
        size = getattr(parallel, "elastic_ep_max_dp_size", 1)
    rank = getattr(parallel, "data_parallel_index", getattr(parallel, "data_parallel_rank", 0))
    if not isinstance(size, int) or not isinstance(rank, int) or size <= 1 or not 0 <= rank < size:
        return None
    return InternalDpRank(dp_rank=rank, dp_size=size)


def gateway_dp_rank(vllm_config: Any, settings: VllmEngineSettings) -> int | None:
    """The engine's rank in its gateway data-parallel group (``GOVERNOR_DP_GROUP``); None for an engine in none.

    The rank is the operator's ``GOVERNOR_DP_RANK``, else vLLM's ``--data-parallel-rank`` (each server of
    vLLM's external load-balancing mode is started with its own).
    """
    if settings.dp_group is None:
        return None
    if settings.dp_rank is not None:
        return settings.dp_rank
    # A dense model's engine core reads rank 0 in data_parallel_rank (internal_dp_rank says why).
    parallel = getattr(vllm_config, "parallel_config", None)
    vllm_rank = getattr(parallel, "data_parallel_index", getattr(parallel, "data_parallel_rank", 0))
    return vllm_rank if isinstance(vllm_rank, int) and vllm_rank >= 0 else 0


def finish_reason_name(vllm_reason: str) -> FinishReasonName:
    """Governor's finish reason for vLLM's (``length``, ``abort`` and ``repetition`` are censored)."""
    return FINISH_REASONS.get(vllm_reason, "error")


def identifier(text: str) -> str:
    """``text`` made a valid schema identifier (model paths, served names)."""
    cleaned = _NOT_IDENTIFIER.sub("-", text).strip("-") or "unknown"
    return cleaned[-MAX_ID_CHARS:]


def request_tier(request: Any, settings: EngineSettings) -> tuple[str, float | None]:
    """The request's tier and TBT SLO from its ``extra_args``, else the engine's defaults."""
    extra = getattr(getattr(request, "sampling_params", None), "extra_args", None)
    tier, tbt_slo_s = settings.tier, settings.tbt_slo_s
    if isinstance(extra, dict):
        named = extra.get(TIER_ARG)
        if isinstance(named, str) and named:
            tier = identifier(named)
        slo = extra.get(TBT_SLO_ARG)
        if isinstance(slo, int | float) and 0.0 < float(slo) <= 60.0:
            tbt_slo_s = float(slo)
    return tier, tbt_slo_s


def request_track(request: Any, settings: EngineSettings) -> RequestTrack:
    """A ``RequestTrack`` of a vLLM ``Request`` as it is queued."""
    tier, tbt_slo_s = request_tier(request, settings)
    max_tokens = getattr(request, "max_tokens", None)
    return RequestTrack(
        request_id=identifier(str(request.request_id)),
        arrived_s=float(request.arrival_time),
        prompt_tokens=int(request.num_prompt_tokens),
        max_tokens=max_tokens if isinstance(max_tokens, int) and max_tokens >= 1 else None,
        tier=tier,
        tbt_slo_s=tbt_slo_s,
    )


def _export(collector: PublisherCollector) -> PublisherCollector | None:
    """Register the publisher's counters on the default registry, which vLLM's ``/metrics`` serves.

    A second link in the same process (scheduler and stat logger side by side) finds the series
    taken and exports nothing: the first link's publisher is the one shown.
    """
    try:
        REGISTRY.register(collector)
    except ValueError:
        log.info("publisher_metrics_already_exported")
        return None
    return collector


@dataclass(slots=True, kw_only=True)
class EngineLink:
    """An engine's live connection to Governor: its event stream, its policies and its heartbeat.

    Attributes:
        settings: the engine's Governor settings.
        stream: the engine's event stream (registration first).
        publisher: the non-blocking Kafka producer behind ``stream``.
        policies: the policy client, or None for an engine that obeys no policy.
        collector: the publisher's series on this process's default registry, or None.
        counters: the same series in prometheus_client's multiprocess directory, where it is set
            (services/sdk/publisher_metrics.py): the way a scheduler's publisher, in vLLM's engine-core
            process, reaches the front end's ``/metrics``; refreshed on every heartbeat.
    """

    settings: VllmEngineSettings
    stream: EngineStream
    publisher: TelemetryPublisher
    policies: PolicyClient | None
    collector: PublisherCollector | None = None
    counters: PublisherCounters | None = None
    _stopped: threading.Event = field(default_factory=threading.Event)
    _tiers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def open(
        cls,
        vllm_config: Any,
        *,
        block_size_tokens: int,
        kv_blocks_total: int,
        scheduler: str,
        obeys: list[str],
        load: Callable[[], tuple[int, int]],
        settings: VllmEngineSettings | None = None,
        engine_index: int | None = None,
    ) -> EngineLink:
        """Connect (never blocking on the broker or Redis), register the engine and start its heartbeat.

        Args:
            vllm_config: the engine's ``VllmConfig`` (model, scheduler and cache settings are read).
            block_size_tokens: tokens per KV block.
            kv_blocks_total: usable KV blocks.
            scheduler: what the engine runs (``vllm``, ``ebplus``, ``slai``).
            obeys: the policy kinds it obeys (registered, so the control plane sends only those).
            load: returns (running, waiting) for the heartbeat.
            settings: the engine's settings (default: ``VllmEngineSettings`` from the environment).
            engine_index: the engine core a front-end stat logger reports for (vLLM builds one per DP
                rank, all in the front end, whose config names rank 0): under internal data parallelism
                it is the rank, and the stream has no ``rank.step`` (a stat logger does not see the
                rank's requests' context). None: the caller is the engine core itself (a scheduler).

        Raises:
            ConfigError: ``GOVERNOR_DP_GROUP`` set on a server of vLLM's internal data parallelism.
        """
        settings = settings if settings is not None else VllmEngineSettings.load()
        engine_id = settings.engine_id or identifier(f"vllm-{socket.gethostname()}")
        internal = internal_dp_rank(vllm_config)
        if internal is not None and settings.dp_group is not None:
            msg = (
                f"GOVERNOR_DP_GROUP={settings.dp_group} names a group of separate servers, but this server runs "
                f"vLLM's internal data parallelism (--data-parallel-size {internal.dp_size}): its ranks are one engine"
            )
            raise ConfigError(msg)
        dp_rank = gateway_dp_rank(vllm_config, settings)
        model_config, scheduler_config = vllm_config.model_config, vllm_config.scheduler_config
        max_num_seqs, dp_size = int(scheduler_config.max_num_seqs), 1
        rank: RankSlots | None = None
        if internal is not None:
            dp_rank, dp_size = internal.dp_rank if engine_index is None else engine_index, internal.dp_size
            rank = RankSlots(dp_rank=dp_rank, max_num_seqs=max_num_seqs) if engine_index is None else None
        publisher = TelemetryPublisher(settings.kafka_bootstrap, security=settings.kafka_security())
        stamper = RankStamper(
            engine_id=engine_id,
            deployment=settings.deployment,
            source_epoch=time.time_ns() // 1_000_000,
            dp_rank=dp_rank,
            rank_producer=internal is not None,
        )
        # Deferred: the engine's calls only record raw numbers; the publisher's thread builds the events.
        stream = EngineStream(
            stamper=stamper, sink=publisher, block_size_tokens=block_size_tokens, deferred=True, rank=rank
        )
        publisher.attach(stream)
        policies = (
            PolicyClient(
                settings.redis_url,
                settings.deployment,
                poll_interval_s=settings.policy_poll_s,
                security=settings.redis_security(),
                keyring=settings.policy_keyring(),
            )
            if obeys
            else None
        )
        # A collector is served only by the process it is registered in; with prometheus_client's
        # multiprocess directory set, the series go to the directory's files instead, which vLLM's
        # /metrics reads whichever process (engine core or front end) wrote them.
        shared, series = multiprocess_mode(), {"deployment": settings.deployment, "engine": engine_id}
        link = cls(
            settings=settings,
            stream=stream,
            publisher=publisher,
            policies=policies,
            collector=None if shared else _export(PublisherCollector(publisher, **series)),
            counters=PublisherCounters(publisher, **series) if shared else None,
        )
        served = getattr(model_config, "served_model_name", None) or model_config.model
        # A DP engine registers its ranks' limits summed, as the simulator's DP deployment does; every
        # rank registers the same engine, its own limits being alike.
        stream.registered(
            time.time(),
            Registration(
                model=identifier(str(served[0] if isinstance(served, list | tuple) else served)),
                gpu=identifier(settings.gpu),
                hardware_profile=settings.hardware_profile,
                max_num_seqs=max_num_seqs * dp_size,
                max_num_batched_tokens=int(scheduler_config.max_num_batched_tokens) * dp_size,
                max_model_len=int(model_config.max_model_len),
                kv_blocks_total=kv_blocks_total * dp_size,
                block_size_tokens=block_size_tokens,
                dp_size=dp_size,
            ),
            Announcement(
                pool=identifier(settings.pool),
                obeys=obeys,
                scheduler=scheduler,
                endpoint_url=settings.endpoint_url,
                dp_group=settings.dp_group,
            ),
        )
        for kind in obeys:
            if policies is not None:
                policies.watch(kind, engine_id)
        threading.Thread(target=link._beat, args=(load,), name="governor-heartbeat", daemon=True).start()
        log.info(
            "governor_engine_linked",
            engine_id=engine_id,
            scheduler=scheduler,
            obeys=obeys,
            endpoint_url=settings.endpoint_url,
            dp_group=settings.dp_group,
            dp_rank=dp_rank,
            dp_size=dp_size,
        )
        return link

    def document(self, kind: str | None, now_s: float) -> PolicyDocument | None:
        """The live document of ``kind`` for this engine (from the cache), acknowledging each new version."""
        if kind is None or self.policies is None:
            return None
        document = self.policies.current(kind, self.stream.engine_id, now_s)
        if document is not None and self.stream.policy_versions.get(kind) != document.version:
            self.stream.applied(now_s, document)
        return document

    def tier_of(self, request: Any) -> str:
        """The Governor tier of a vLLM request (memoised per request id)."""
        request_id = str(request.request_id)
        tier = self._tiers.get(request_id)
        if tier is None:
            tier = self._tiers[request_id] = request_tier(request, self.settings)[0]
            if len(self._tiers) > 100_000:
                self._tiers.clear()
        return tier

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the heartbeat and the policy client, and send what is queued (up to ``timeout_s``)."""
        self._stopped.set()
        if self.policies is not None:
            self.policies.close()
        if self.collector is not None:
            REGISTRY.unregister(self.collector)
        self.publisher.close(timeout_s)
        if self.counters is not None:
            self.counters.refresh()

    def _beat(self, load: Callable[[], tuple[int, int]]) -> None:
        while not self._stopped.wait(self.settings.heartbeat_s):
            running, waiting = load()
            self.stream.heartbeat(time.time(), num_running=running, num_waiting=waiting)
            if self.counters is not None:
                self.counters.refresh()
