"""The ``governor gateway`` process: settings in, a serving gateway out, stopped cleanly by SIGINT or SIGTERM.

It reads the gateway file, connects the SDK's ``PolicyClient`` (Redis, cached, never waited on) and
``TelemetryPublisher`` (Kafka, non-blocking), follows the engines' registrations on ``gov.telemetry``
(services/gateway/registrations.py), and serves the aiohttp application with handler cancellation
on, so a client that disconnects cancels its upstream request. Neither backend needs to answer for the
gateway to start or to serve: without Redis it routes on the safe defaults, without Kafka its events are
dropped and counted.
"""

from __future__ import annotations

import asyncio
import signal

import structlog
from aiohttp import web

from services.gateway.app import Gateway
from services.gateway.config import read_gateway_config
from services.gateway.registrations import RegistrationFeed
from services.gateway.upstreams import UpstreamRegistry
from services.sdk.policy_client import PolicyClient
from services.sdk.publisher import TelemetryPublisher
from services.settings import Settings

log = structlog.get_logger(__name__)


async def serve(gateway: Gateway, host: str, port: int, stop: asyncio.Event) -> None:
    """Serve ``gateway`` on ``host:port`` until ``stop`` is set, then close it (its loops and connections)."""
    runner = web.AppRunner(gateway.application(), handler_cancellation=True, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        log.info("service_started", service="gateway", addresses=[str(a) for a in runner.addresses])
        await stop.wait()
    finally:
        await runner.cleanup()


def run_gateway(settings: Settings) -> int:
    """Run the gateway with ``settings`` until SIGINT or SIGTERM; return the exit code (0 on a clean stop).

    Raises:
        ConfigError: the gateway file is invalid, or the port is taken.
    """
    config = read_gateway_config(settings.gateway_config)
    registry = UpstreamRegistry()
    registry.add_static(config.upstreams)
    policies = PolicyClient(
        settings.redis_url,
        settings.deployment,
        timeout_s=settings.redis_timeout_s,
        security=settings.redis_security(),
        keyring=settings.policy_keyring(),
    )
    publisher = TelemetryPublisher(settings.kafka_bootstrap, security=settings.kafka_security())
    gateway = Gateway(
        config=config,
        registry=registry,
        policies=policies,
        sink=publisher,
        deployment=settings.deployment,
        gateway_id=settings.gateway_id,
        max_body_bytes=settings.gateway_max_body_bytes,
        upstream_timeout_s=settings.gateway_upstream_timeout_s,
        health_interval_s=settings.gateway_health_interval_s,
    )
    log.info("gateway_configured", static_upstreams=len(config.upstreams), models=registry.models())

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        feed = RegistrationFeed(
            settings.kafka_bootstrap,
            deployment=settings.deployment,
            deliver=lambda event: loop.call_soon_threadsafe(gateway.lifecycle, event),
            security=settings.kafka_security(),
            timeout_s=settings.kafka_timeout_s,
        )
        feed.start()
        try:
            await serve(gateway, settings.gateway_host, settings.gateway_port, stop)
        finally:
            feed.close()

    try:
        asyncio.run(main())
    finally:
        policies.close()
        publisher.close(timeout_s=5.0)
    log.info("service_stopped", service="gateway", published=str(publisher.stats()))
    return 0
