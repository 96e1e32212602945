"""The ``governor gateway`` process: settings in, a serving gateway out, stopped cleanly by SIGINT or SIGTERM.

It reads the gateway file, connects the SDK's ``PolicyClient`` (Redis, cached, never waited on) and
``TelemetryPublisher`` (Kafka, non-blocking), follows the engines' registrations on ``gov.telemetry``
(services/gateway/registrations.py), and serves the aiohttp application with handler cancellation
on, so a client that disconnects cancels its upstream request. Neither backend needs to answer for the
gateway to start or to serve: without Redis it routes on the safe defaults, without Kafka its events are
dropped and counted. Its admin API is protected by ``gateway_admin_token`` (a bearer token); without one the
gateway listens on loopback only (docs/security.md).
"""

from __future__ import annotations

import asyncio
import ipaddress
import signal

import structlog
from aiohttp import web

from schemas.errors import ConfigError
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


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (``localhost``, 127.0.0.0/8, ``::1``): only this host reaches it."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def admin_token_of(settings: Settings) -> str | None:
    """The admin API's bearer token; None only where the gateway listens on loopback.

    Raises:
        ConfigError: ``gateway_host`` reaches beyond loopback and no ``gateway_admin_token`` is set.
    """
    token = settings.gateway_admin_token
    if token is None and not is_loopback(settings.gateway_host):
        msg = (
            f"gateway_host={settings.gateway_host!r} listens beyond loopback: set GOVERNOR_GATEWAY_ADMIN_TOKEN "
            "(16 characters or more) to protect the admin API"
        )
        raise ConfigError(msg)
    return None if token is None else token.get_secret_value()


def run_gateway(settings: Settings) -> int:
    """Run the gateway with ``settings`` until SIGINT or SIGTERM; return the exit code (0 on a clean stop).

    Raises:
        ConfigError: the gateway file is invalid, the port is taken, or the admin API would be open beyond
            loopback.
    """
    admin_token = admin_token_of(settings)
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
        admin_token=admin_token,
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
