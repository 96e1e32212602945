"""``governor scale``: the scaler service that carries FleetOpt's pool sizes to the pools (docs/scaler.md).

It reads its pools from ``--config`` (TOML), the FleetOpt document through the SDK's ``PolicyClient``
(a background-refreshed cache: a pass never waits on Redis), and appends every action to
``gov.scaling``; at start it reads its own earlier actions there, so a restart keeps each pool's
cool-down. It serves ``/healthz`` and ``/metrics`` like the other services, and the KEDA external
scaler over gRPC where a pool uses it, except in advisory mode, which records actions without
performing them (``--advisory`` forces it whatever the file's ``mode``) and so has no count to tell
KEDA. Stops cleanly on SIGINT or SIGTERM.
"""

from __future__ import annotations

import argparse
import signal
from pathlib import Path

import structlog

from schemas.errors import ConfigError
from schemas.scaling import ScalerConfig, ScalerPoolConfig
from services.backends import wait_for_backends
from services.cli.options import add_settings_flags, settings_from_args
from services.health import HealthServer, ServiceMetrics
from services.scaler.actions import KafkaActionSink, read_actions
from services.scaler.config import read_scaler_config
from services.scaler.connector import MemoryConnector, ScaleConnector
from services.scaler.external_scaler import DesiredReplicas, ExternalScalerServer, KedaConnector
from services.scaler.gateway_admin import GatewayAdmin
from services.scaler.local_engines import LocalEngineConnector
from services.scaler.scale_subresource import KubernetesScaleConnector, kubernetes_api
from services.scaler.service import ScalerMetrics, ScalerService
from services.sdk.policy_client import PolicyClient
from services.settings import Settings

log = structlog.get_logger(__name__)

FLAGS = [
    "deployment",
    "kafka_bootstrap",
    "redis_url",
    "redis_timeout_s",
    "kafka_timeout_s",
    "metrics_port",
    "metrics_host",
    "log_format",
    "log_level",
    "backend_wait_s",
]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``scale`` command."""
    parser = commands.add_parser(
        "scale", help="resize the pools to FleetOpt's plan through KEDA, Kubernetes, local engines or in memory"
    )
    add_settings_flags(parser, FLAGS)
    parser.add_argument("--config", type=Path, required=True, help="the scaler's pools (TOML, docs/scaler.md)")
    parser.add_argument(
        "--advisory", action="store_true", help="compute and record actions on gov.scaling, perform none"
    )
    parser.add_argument("--scaler-id", default="scaler", help="this scaler's name in its action events")
    parser.add_argument(
        "--kubeconfig", type=Path, default=None, help="kubeconfig for Kubernetes pools outside a cluster"
    )
    parser.add_argument("--keda-host", default="0.0.0.0", help="address the KEDA external scaler binds")
    parser.add_argument("--idle-exit-s", type=float, default=None, help="stop after this long without an action")
    parser.set_defaults(handler=run)


def gateway_admin(config: ScalerConfig) -> GatewayAdmin | None:
    """The gateway's admin client of the ``[gateway]`` table, with its bearer token read from ``token_file``.

    Raises:
        ConfigError: the token file cannot be read or is empty.
    """
    table = config.gateway
    if table is None:
        return None
    token = None
    if table.token_file is not None:
        try:
            token = Path(table.token_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            msg = f"gateway.token_file {table.token_file}: cannot read it: {exc.strerror or exc}"
            raise ConfigError(msg) from None
        if not token:
            msg = f"gateway.token_file {table.token_file} is empty"
            raise ConfigError(msg)
    return GatewayAdmin(table.url, token=token, timeout_s=table.timeout_s)


def build_connectors(
    config: ScalerConfig, board: DesiredReplicas, kubeconfig: Path | None
) -> dict[str, ScaleConnector]:
    """One connector per pool, as its ``connector`` key says.

    A KEDA pool with a ``kubernetes`` table reads its live count from that workload's scale subresource;
    a local pool registers its replicas with the ``[gateway]`` where there is one.

    Raises:
        ConfigError: Kubernetes credentials are missing, or the gateway's token file cannot be read.
    """
    connectors: dict[str, ScaleConnector] = {}
    api = None
    gateway = gateway_admin(config)
    for name, pool in config.pools.items():
        start = pool.initial_replicas if pool.initial_replicas is not None else pool.min_replicas
        workload = None
        if pool.kubernetes is not None and pool.connector in ("keda", "kubernetes"):
            api = api or kubernetes_api(kubeconfig)
            workload = KubernetesScaleConnector(pool.kubernetes, api)
        if pool.connector == "keda":
            connectors[name] = KedaConnector(name, board, reader=workload)
        elif pool.connector == "memory":
            connectors[name] = MemoryConnector(name, start)
        elif pool.connector == "local" and pool.local is not None:
            connectors[name] = LocalEngineConnector(name, pool.local, gateway=gateway)
        elif workload is not None:
            connectors[name] = workload
    return connectors


def run(args: argparse.Namespace) -> int:
    """Run the scaler until SIGINT or SIGTERM."""
    if args.log_format is None:
        args.log_format = "json"
    settings = settings_from_args(args)
    config = read_scaler_config(args.config)
    if args.advisory:
        config = config.model_copy(update={"mode": "advisory"})
    log.info("settings_loaded", **settings.redacted(), mode=config.mode, pools=sorted(config.pools))
    wait_for_backends(
        settings.kafka_bootstrap,
        settings.redis_url,
        wait_s=settings.backend_wait_s,
        redis_shown=str(settings.redacted()["redis_url"]),
        redis_security=settings.redis_security(),
    )
    board = DesiredReplicas([name for name, pool in config.pools.items() if pool.connector == "keda"])
    connectors = build_connectors(config, board, args.kubeconfig)
    return _serve(args, settings, config, board, connectors)


def _longest_local_change_s(pool: ScalerPoolConfig) -> float:
    """How long one pass may block on a local pool (starting, or draining and stopping, its replicas)."""
    if pool.local is None:
        return 0.0
    return pool.local.start_timeout_s + pool.local.drain_timeout_s + pool.local.stop_timeout_s


def _serve(
    args: argparse.Namespace,
    settings: Settings,
    config: ScalerConfig,
    board: DesiredReplicas,
    connectors: dict[str, ScaleConnector],
) -> int:
    keda = None
    if board.pools() and config.mode == "advisory":
        log.warning("keda_not_served", pools=board.pools(), rule="advisory mode posts no count; KEDA holds the pools")
    elif board.pools():
        if config.keda_port is None:
            msg = f"{args.config}: pools {', '.join(board.pools())} use KEDA: set keda_port"
            raise ConfigError(msg)
        keda = ExternalScalerServer(board, config.keda_port, args.keda_host)
    plans = PolicyClient(
        settings.redis_url,
        settings.deployment,
        timeout_s=settings.redis_timeout_s,
        security=settings.redis_security(),
        keyring=settings.policy_keyring(),
    )
    sink = KafkaActionSink(
        settings.kafka_bootstrap, timeout_s=settings.kafka_timeout_s, security=settings.kafka_security()
    )
    metrics = ServiceMetrics("scaler", settings.deployment)
    service = ScalerService(
        config=config,
        deployment=settings.deployment,
        scaler_id=args.scaler_id,
        plans=plans,
        connectors=connectors,
        sink=sink,
        metrics=ScalerMetrics(metrics),
    )
    earlier = read_actions(
        settings.kafka_bootstrap,
        settings.deployment,
        timeout_s=settings.kafka_timeout_s,
        security=settings.kafka_security(),
    )
    log.info("scaler_resumed", actions_used=service.resume(earlier), actions_read=len(earlier))
    health = HealthServer(
        metrics,
        settings.metrics_port,
        settings.metrics_host,
        stale_after_s=max(
            30.0, 3 * config.interval_s, *(_longest_local_change_s(pool) for pool in config.pools.values())
        ),
        details=lambda: {"mode": config.mode, "replicas": service.replicas()},
    )
    health.start()
    if keda is not None:
        keda.start()
    log.info("service_started", service="scaler", health_port=health.port, keda_port=keda and keda.port)

    def _stop(signum: int, frame: object) -> None:
        log.info("service_stopping", service="scaler", signal=signum)
        service.stop()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        counters = service.run(idle_exit_s=args.idle_exit_s)
    finally:
        service.close()
        plans.close()
        health.close()
        if keda is not None:
            keda.close()
    log.info("service_stopped", service="scaler", counters=str(counters))
    return 0
