"""Every Kafka client of Governor (services, CLI, engine SDK) is built here, with the security settings.

``kafka_consumer``, ``kafka_producer`` and ``kafka_admin`` add the deployment's SASL credentials
and TLS files (``SecuritySettings.kafka_security``, docs/security.md) to the client's own
configuration, so no client reaches a broker without them. The service-specific clients
(services/kafka_clients.py) are built on these.

A broker that refuses the SASL credentials is a ``ConfigError`` naming the user and the mechanism,
and one whose TLS certificate does not verify is a ``ConfigError`` naming the CA file and the
handshake's reason: kafka-python itself only logs the refusal (or a lost connection, or a failed
handshake) and, once its bootstrap time is up (30 s), raises "Unable to bootstrap", which reads
like an unreachable broker and sends an operator after the network.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.errors import KafkaConnectionError, KafkaError, SaslAuthenticationFailedError

from schemas.errors import ConfigError
from services.settings import KafkaSecurity

PLAINTEXT = KafkaSecurity()
# The logger kafka-python's connection manager reports a failed bootstrap connection on, with the error.
CONNECTION_LOGGER = "kafka.net.manager"
MIN_LOST_LOGINS = 2  # one lost connection can be a broker going away; every one, at each retry, is the login
_HANDSHAKE_FAILED = "Handshake failed"  # how kafka-python 3.0.12 words a TLS handshake error (net/connection.py)

Client = TypeVar("Client")


class _BootstrapFailures(logging.Handler):
    """Keeps the errors kafka-python logs for its failed bootstrap connections (the error is a record argument)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.refusals: list[SaslAuthenticationFailedError] = []
        self.handshakes: list[KafkaConnectionError] = []
        self.lost = 0

    def emit(self, record: logging.LogRecord) -> None:
        """Keep each refusal and failed TLS handshake, and count connections lost after they were made."""
        args = record.args if isinstance(record.args, tuple) else ()
        for arg in args:
            if isinstance(arg, SaslAuthenticationFailedError):
                self.refusals.append(arg)
            elif isinstance(arg, KafkaConnectionError) and _HANDSHAKE_FAILED in str(arg):
                self.handshakes.append(arg)
            elif isinstance(arg, KafkaConnectionError):
                self.lost += 1


@contextmanager
def _login_failures_named(bootstrap: str, security: KafkaSecurity) -> Iterator[None]:
    """Turn a SASL or TLS client's failed start into ``ConfigError`` when the broker would not let it log in.

    A TLS handshake that failed (the broker's certificate does not verify against the CA file, or does not
    name the host) is reported with its reason. The broker answers a wrong password with an error and
    closes the connection. kafka-python reports the error when it reads it before the close; when both
    arrive together it drops the answer and sees only a lost connection (kafka-python 3.0.12,
    ``net/transport.py``). So a refusal it reports, or a broker that accepts connections and closes every
    one of them during the login (two or more), is a credentials problem; anything else stays the
    client's own error. The connection logger is opened to warnings for the duration (a logging setup
    that silences kafka-python must not hide the refusal from this check).

    Raises:
        ConfigError: the client failed to start and the broker would not let it log in.
    """
    if security.protocol == "PLAINTEXT":
        yield
        return
    logger = logging.getLogger(CONNECTION_LOGGER)
    failures = _BootstrapFailures()
    level = logger.level
    logger.addHandler(failures)
    if not logger.isEnabledFor(logging.WARNING):
        logger.setLevel(logging.WARNING)
    try:
        yield
    except KafkaError as exc:
        who = f"the {security.sasl_mechanism} credentials of user {security.sasl_username!r}"
        check = "check GOVERNOR_KAFKA_SASL_USERNAME, GOVERNOR_KAFKA_SASL_PASSWORD and GOVERNOR_KAFKA_SASL_MECHANISM"
        if failures.handshakes:
            msg = (
                f"kafka at {bootstrap}: the TLS handshake failed ({failures.handshakes[-1]}); check "
                f"GOVERNOR_KAFKA_TLS_CA_FILE ({security.tls_ca_file or 'unset: the system CAs'}) holds the CA that "
                "signed the broker's certificate, and that the certificate names the host in the bootstrap address"
            )
        elif failures.refusals:
            msg = f"kafka at {bootstrap} refused {who}: {failures.refusals[-1]} ({check})"
        elif (
            security.protocol.startswith("SASL_")
            and failures.lost >= MIN_LOST_LOGINS
            and _accepts_connections(bootstrap)
        ):
            msg = (
                f"kafka at {bootstrap} accepts connections but closed each of {failures.lost} logins with {who}: "
                f"a wrong user or password, or a mechanism its listener does not offer ({check})"
            )
        else:
            raise
        raise ConfigError(msg) from exc
    finally:
        logger.removeHandler(failures)
        logger.setLevel(level)


def _accepts_connections(bootstrap: str, timeout_s: float = 1.0) -> bool:
    """Whether a server of ``bootstrap`` accepts a TCP connection (services/backends.py asks the same
    before a service starts; that module sits above this one)."""
    for server in bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        if not port.isdigit():
            continue
        try:
            with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s):
                return True
        except OSError:
            continue
    return False


def _started(bootstrap: str, security: KafkaSecurity, start: Callable[[], Client]) -> Client:
    with _login_failures_named(bootstrap, security):
        return start()


def security_config(security: KafkaSecurity) -> dict[str, Any]:
    """The kafka-python configuration of ``security``: protocol, SASL mechanism and credentials, TLS files."""
    config: dict[str, Any] = {"security_protocol": security.protocol}
    if security.protocol.startswith("SASL_"):
        config["sasl_mechanism"] = security.sasl_mechanism
        config["sasl_plain_username"] = security.sasl_username
        config["sasl_plain_password"] = (
            security.sasl_password.get_secret_value() if security.sasl_password is not None else None
        )
    if security.protocol in ("SSL", "SASL_SSL"):
        config["ssl_check_hostname"] = True
        if security.tls_ca_file is not None:
            config["ssl_cafile"] = str(security.tls_ca_file)
        if security.tls_cert_file is not None and security.tls_key_file is not None:
            config["ssl_certfile"] = str(security.tls_cert_file)
            config["ssl_keyfile"] = str(security.tls_key_file)
    return config


def kafka_consumer(bootstrap: str, security: KafkaSecurity = PLAINTEXT, **config: Any) -> KafkaConsumer:
    """A ``KafkaConsumer`` of ``bootstrap`` with ``config`` and the security settings.

    Raises:
        ConfigError: the broker refused the SASL credentials.
    """
    options = {**config, **security_config(security)}
    return _started(bootstrap, security, lambda: KafkaConsumer(bootstrap_servers=bootstrap, **options))


def kafka_producer(bootstrap: str, security: KafkaSecurity = PLAINTEXT, **config: Any) -> KafkaProducer:
    """A ``KafkaProducer`` of ``bootstrap`` with ``config`` and the security settings.

    Raises:
        ConfigError: the broker refused the SASL credentials.
    """
    options = {**config, **security_config(security)}
    return _started(bootstrap, security, lambda: KafkaProducer(bootstrap_servers=bootstrap, **options))


def kafka_admin(bootstrap: str, security: KafkaSecurity = PLAINTEXT, **config: Any) -> KafkaAdminClient:
    """A ``KafkaAdminClient`` of ``bootstrap`` with ``config`` and the security settings.

    Raises:
        ConfigError: the broker refused the SASL credentials.
    """
    options = {**config, **security_config(security)}
    return _started(bootstrap, security, lambda: KafkaAdminClient(bootstrap_servers=bootstrap, **options))
