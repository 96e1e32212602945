"""``governor run stream`` and ``governor run policy``: the two long-running services.

Each connects to Kafka and Redis from flags or environment, serves ``/healthz`` and ``/metrics``,
logs JSON lines by default, and stops cleanly on SIGINT or SIGTERM. ``--config FILE`` gives the
policy configuration (docs/operations.md): the stream processor takes its triggers from it at start;
the policy service appends it (and each ``--shadow NAME=CONFIG``) to ``gov.estimates`` before it
starts, and applies it in log order.
"""

from __future__ import annotations

import argparse
import signal
from functools import partial
from pathlib import Path
from typing import Protocol

import structlog

from decide.registry import PolicyRegistry
from decide.specs import default_registry
from fold.event_guard import GuardLimits
from schemas.errors import ConfigError
from schemas.names import POLICY_CONSUMER, STREAM_CONSUMER
from services.backends import wait_for_backends
from services.checkpoints import CheckpointSource
from services.cli.options import add_settings_flags, settings_from_args
from services.health import HealthServer, ServiceMetrics
from services.policy.config import policy_set, read_config
from services.policy.config_records import LIVE, file_record, publish_configs, shadow_assignment
from services.policy.pins import RedisPins
from services.policy.service import PolicyService
from services.replay.checkpoints import read_checkpoints
from services.settings import Settings
from services.store.redis_store import RedisStore
from services.stream.runtimes import RUNTIMES, stream_processor

log = structlog.get_logger(__name__)

FLAGS = [
    "deployment",
    "kafka_bootstrap",
    "redis_url",
    "metrics_port",
    "metrics_host",
    "log_format",
    "log_level",
    "fleet_slot_s",
    "backend_wait_s",
    "stall_after_s",
]


class _Service(Protocol):
    def run(self, *, idle_exit_s: float | None = None) -> object: ...
    def stop(self) -> None: ...
    def close(self) -> None: ...


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``run`` command group."""
    run = commands.add_parser("run", help="run a control-plane service (stream processor or policy service)")
    sub = run.add_subparsers(dest="service", metavar="SERVICE", required=True)
    stream = sub.add_parser("stream", help="fold gov.telemetry into estimates in Redis and snapshots")
    add_settings_flags(stream, FLAGS)
    stream.add_argument(
        "--runtime",
        dest="stream_runtime",
        choices=RUNTIMES,
        default=None,
        help=f"{Settings.model_fields['stream_runtime'].description} (env GOVERNOR_STREAM_RUNTIME; default kafka)",
    )
    stream.add_argument("--idle-exit-s", type=float, default=None, help="stop after this long without records")
    stream.add_argument("--config", type=Path, default=None, help="policy config (TOML): the policies' triggers")
    stream.set_defaults(handler=run_stream)
    policy = sub.add_parser("policy", help="decide policies from gov.estimates into Redis and gov.policy.decisions")
    add_settings_flags(policy, FLAGS)
    policy.add_argument("--idle-exit-s", type=float, default=None, help="stop after this long without records")
    policy.add_argument(
        "--config",
        type=Path,
        default=None,
        help="policy config (TOML, docs/operations.md), appended to gov.estimates and applied in log order "
        "(default: the last one applied, else the built-in defaults)",
    )
    policy.add_argument(
        "--shadow",
        action="append",
        default=[],
        metavar="NAME=CONFIG",
        help="also decide the config CONFIG as shadow policy NAME: recorded on gov.policy.decisions, never "
        "written to the keys engines read (repeatable; compare with `governor shadow report`)",
    )
    policy.set_defaults(handler=run_policy)


def _service_settings(args: argparse.Namespace) -> Settings:
    if getattr(args, "log_format", None) is None:
        args.log_format = "json"
    settings = settings_from_args(args)
    log.info("settings_loaded", **settings.redacted())
    shown = str(settings.redacted()["redis_url"])
    wait_for_backends(
        settings.kafka_bootstrap,
        settings.redis_url,
        wait_s=settings.backend_wait_s,
        redis_shown=shown,
        redis_security=settings.redis_security(),
    )
    return settings


def _serve(name: str, service: _Service, metrics: ServiceMetrics, settings: Settings, idle_exit_s: float | None) -> int:
    try:
        health = HealthServer(
            metrics, settings.metrics_port, settings.metrics_host, stall_after_s=settings.stall_after_s
        )
    except ConfigError:
        service.close()
        raise
    health.start()
    log.info("service_started", service=name, health_port=health.port)

    def _stop(signum: int, frame: object) -> None:
        log.info("service_stopping", service=name, signal=signum)
        service.stop()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        counters = service.run(idle_exit_s=idle_exit_s)
    finally:
        service.close()
        health.close()
    log.info("service_stopped", service=name, counters=str(counters))
    return 0


def config_registry(config: Path | None, fleet_slot_s: float) -> PolicyRegistry:
    """The registry of ``config`` (its triggers and params), or the defaults without one."""
    if config is None:
        return default_registry(fleet_slot_s=fleet_slot_s)
    parsed, _ = read_config(config)
    return policy_set(parsed, source=str(config), fleet_slot_s=fleet_slot_s).registry


def run_stream(args: argparse.Namespace) -> int:
    """Run the stream processor until stopped."""
    settings = _service_settings(args)
    registry = config_registry(args.config, settings.fleet_slot_s)
    store = RedisStore.from_url(
        settings.redis_url, settings.deployment, settings.redis_timeout_s, settings.redis_security()
    )
    metrics = ServiceMetrics("stream", settings.deployment)
    processor = stream_processor(
        settings.stream_runtime,
        deployment=settings.deployment,
        bootstrap=settings.kafka_bootstrap,
        store=store,
        registry=registry,
        metrics=metrics,
        lifecycle=settings.engine_lifecycle(),
        kafka_timeouts=settings.kafka_client_timeouts(),
        security=settings.kafka_security(),
        limits=GuardLimits(
            dedup_window=settings.dedup_window_events,
            max_ahead_s=settings.max_event_ahead_s,
            max_behind_s=settings.max_event_behind_s,
            reanchor_after=settings.event_time_reanchor_events,
        ),
        commit_interval_s=settings.stream_commit_interval_s,
        keyring=settings.policy_keyring(),
        checkpoint_interval_s=settings.checkpoint_interval_s,
        checkpoint_source=_checkpoint_source(settings, STREAM_CONSUMER),
    )
    log.info("stream_runtime", runtime=settings.stream_runtime)
    return _serve("stream", processor, metrics, settings, args.idle_exit_s)


def run_policy(args: argparse.Namespace) -> int:
    """Run the policy service until stopped, after appending its ``--config`` and ``--shadow`` records."""
    settings = _service_settings(args)
    records = [] if args.config is None else [file_record(settings.deployment, LIVE, args.config)]
    for assignment in args.shadow:
        name, path = shadow_assignment(assignment)
        records.append(file_record(settings.deployment, name, path))
    if records:
        publish_configs(settings.kafka_bootstrap, records, settings.kafka_timeout_s, settings.kafka_security())
        for record in records:
            log.info("config_published", name=record.name, digest=record.digest, source=record.source)
    store = RedisStore.from_url(
        settings.redis_url, settings.deployment, settings.redis_timeout_s, settings.redis_security()
    )
    metrics = ServiceMetrics("policy", settings.deployment)
    service = PolicyService(
        deployment=settings.deployment,
        bootstrap=settings.kafka_bootstrap,
        store=store,
        registry=default_registry(fleet_slot_s=settings.fleet_slot_s),
        metrics=metrics,
        pins=RedisPins.from_url(
            settings.redis_url, settings.deployment, settings.redis_timeout_s, settings.redis_security()
        ),
        fleet_slot_s=settings.fleet_slot_s,
        fleet_silence_wait_s=settings.fleet_silence_wait_s,
        kafka_timeouts=settings.kafka_client_timeouts(),
        security=settings.kafka_security(),
        keyring=settings.policy_keyring(),
        checkpoint_interval_s=settings.checkpoint_interval_s,
        checkpoint_source=_checkpoint_source(settings, POLICY_CONSUMER),
    )
    return _serve("policy", service, metrics, settings, args.idle_exit_s)


def _checkpoint_source(settings: Settings, consumer: str) -> CheckpointSource | None:
    """Where a service finds its partitions' checkpoints: ``gov.checkpoints``, unless checkpoints are off."""
    if settings.checkpoint_interval_s <= 0:
        return None
    return partial(
        read_checkpoints,
        settings.kafka_bootstrap,
        deployment=settings.deployment,
        consumer=consumer,
        security=settings.kafka_security(),
    )
