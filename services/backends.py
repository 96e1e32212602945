"""Waiting for Kafka and Redis at a service's start, and riding out their outages later, with backoff.

In docker-compose (and after a host reboot) the services often start before the broker or Redis
answers. Rather than die with a connection traceback and rely on a restart loop, a service waits:
it probes each backend, logs ``backend_waiting`` with the backend, its address and the next retry,
doubles the pause up to ``MAX_BACKOFF_S``, and gives up after ``wait_s`` with one clear error.
Once running, a service never gives up: ``BackendOutage`` paces its retries and logs the outage
once when it starts and once when it ends.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import redis
import structlog

from schemas.errors import BackendUnavailableError, ConfigError
from services.settings import RedisSecurity
from services.stack.processes import port_open
from services.store.redis_store import redis_client

log = structlog.get_logger(__name__)

FIRST_BACKOFF_S = 0.5
MAX_BACKOFF_S = 5.0
OUTAGE_MAX_BACKOFF_S = (
    2.0  # a running service polls between retries: 2 s + a 2 s Redis timeout stays in the local 5 s poll interval
)


def kafka_answers(bootstrap: str, timeout_s: float = 1.0) -> bool:
    """True when any ``host:port`` of the bootstrap list accepts a TCP connection."""
    for server in bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        if port.isdigit() and port_open(host or "127.0.0.1", int(port), timeout_s):
            return True
    return False


def redis_answers(url: str, timeout_s: float = 1.0, security: RedisSecurity | None = None) -> bool:
    """True when the Redis at ``url`` answers PING.

    Raises:
        ConfigError: Redis answers but refuses the credentials (waiting would not change that).
    """
    client = redis_client(url, timeout_s, security)
    try:
        return bool(client.ping())
    except redis.AuthenticationError as exc:
        msg = f"redis refused the credentials: {exc} (set GOVERNOR_REDIS_USERNAME / GOVERNOR_REDIS_PASSWORD)"
        raise ConfigError(msg) from exc
    except redis.RedisError:
        return False
    finally:
        client.close()


def wait_for(
    backend: str,
    address: str,
    answers: Callable[[], bool],
    *,
    wait_s: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Return once ``answers()`` is true; retry with doubling pauses, logging each wait.

    Raises:
        BackendUnavailableError: it did not answer within ``wait_s`` seconds.
    """
    started = clock()
    backoff_s = FIRST_BACKOFF_S
    while not answers():
        waited_s = clock() - started
        if waited_s >= wait_s:
            msg = f"{backend} at {address} did not answer within {wait_s:g} s"
            raise BackendUnavailableError(msg, backend=backend)
        pause_s = min(backoff_s, MAX_BACKOFF_S, max(0.0, wait_s - waited_s))
        log.warning(
            "backend_waiting", backend=backend, address=address, waited_s=round(waited_s, 1), retry_in_s=pause_s
        )
        sleep(pause_s)
        backoff_s *= 2
    log.info("backend_answered", backend=backend, address=address)


def wait_for_backends(
    kafka_bootstrap: str,
    redis_url: str,
    *,
    wait_s: float,
    redis_shown: str,
    redis_security: RedisSecurity | None = None,
) -> None:
    """Wait for the broker, then Redis (``redis_shown`` is the URL with credentials hidden).

    Raises:
        BackendUnavailableError: one of them did not answer within ``wait_s`` seconds.
    """
    wait_for("kafka", kafka_bootstrap, lambda: kafka_answers(kafka_bootstrap), wait_s=wait_s)
    wait_for("redis", redis_shown, lambda: redis_answers(redis_url, security=redis_security), wait_s=wait_s)


class BackendOutage:
    """A running service's view of one outage: retry with doubling pauses, log once when it starts and once at recovery.

    Services keep running through Kafka and Redis outages of any length: the failed step
    is retried after ``pause_s()`` (``FIRST_BACKOFF_S`` doubling up to ``max_backoff_s``). One
    ``backend_unavailable`` warning marks the start, one ``backend_recovered`` the end with how
    long it lasted and how many tries failed, so an outage reads as two lines, not a traceback per try.
    """

    def __init__(
        self, service: str, *, max_backoff_s: float = OUTAGE_MAX_BACKOFF_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._service = service
        self._max_backoff_s = max_backoff_s
        self._clock = clock
        self._since_s: float | None = None
        self._failures = 0
        self._backend = ""
        self.outages = 0

    @property
    def ongoing(self) -> bool:
        """True between a failure and the next success."""
        return self._since_s is not None

    @property
    def redis_down(self) -> bool:
        """True during an outage whose first failure was Redis's (the service then rereads records on purpose)."""
        return self._since_s is not None and self._backend == "redis"

    def failed(self, exc: Exception, backend: str) -> float:
        """Note a failed try of ``backend``; return how long to pause before the next one, seconds."""
        if self._since_s is None:
            self._since_s = self._clock()
            self._failures = 0
            self._backend = backend
            self.outages += 1
            log.warning(
                "backend_unavailable", service=self._service, backend=backend, error=str(exc)[:300], retrying=True
            )
        self._failures += 1
        pause_s: float = min(FIRST_BACKOFF_S * 2.0 ** (self._failures - 1), self._max_backoff_s)
        return pause_s

    def succeeded(self, backend: str) -> None:
        """Note a step that used ``backend`` and worked; log the recovery when it ends an outage of that backend."""
        if self._since_s is None or backend != self._backend:
            return
        log.info(
            "backend_recovered",
            service=self._service,
            backend=self._backend,
            outage_s=round(self._clock() - self._since_s, 1),
            failed_tries=self._failures,
        )
        self._since_s = None
