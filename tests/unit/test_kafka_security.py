"""services/kafka_security.py: a broker that refuses the SASL credentials is a ConfigError naming them."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from kafka.errors import KafkaConnectionError, KafkaTimeoutError, SaslAuthenticationFailedError
from pydantic import SecretStr

from schemas.errors import ConfigError
from services import kafka_security
from services.kafka_security import CONNECTION_LOGGER, PLAINTEXT, kafka_admin, kafka_consumer, kafka_producer
from services.settings import KafkaSecurity
from services.stack.processes import free_port

SCRAM = KafkaSecurity(
    protocol="SASL_PLAINTEXT",
    sasl_mechanism="SCRAM-SHA-256",
    sasl_username="governor",
    sasl_password=SecretStr("s3cret"),
)


def _refused(**_config: Any) -> None:
    """What kafka-python does with refused credentials: log the refusal, then time out bootstrapping."""
    refusal = SaslAuthenticationFailedError("Authentication failed during authentication due to invalid credentials")
    logging.getLogger(CONNECTION_LOGGER).warning(
        "Bootstrap connection to %s failed: %s (backoff %.2f secs)", "b-0", refusal, 0.1
    )
    msg = "Unable to bootstrap from 127.0.0.1:9"
    raise KafkaTimeoutError(msg)


def _closed_at_login(**_config: Any) -> None:
    """What kafka-python sees when the broker's refusal and its close arrive together: lost connections."""
    for _ in range(3):
        lost = KafkaConnectionError("socket disconnected")
        logging.getLogger(CONNECTION_LOGGER).warning("Bootstrap connection to %s failed: %s", "bootstrap-0", lost)
    msg = "Unable to bootstrap"
    raise KafkaTimeoutError(msg)


@pytest.fixture
def listening() -> Iterator[str]:
    """A bootstrap address that accepts TCP connections."""
    server = socket.create_server(("127.0.0.1", 0))
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        server.close()


def _unreachable(**_config: Any) -> None:
    msg = "Unable to bootstrap from 127.0.0.1:9"
    raise KafkaTimeoutError(msg)


class TestRefusedCredentials:
    @pytest.mark.parametrize(
        ("client", "build"),
        [("KafkaAdminClient", kafka_admin), ("KafkaConsumer", kafka_consumer), ("KafkaProducer", kafka_producer)],
    )
    def test_a_refusal_is_a_config_error_naming_the_user_and_mechanism(
        self, monkeypatch: pytest.MonkeyPatch, client: str, build: Any
    ) -> None:
        monkeypatch.setattr(kafka_security, client, _refused)
        with pytest.raises(ConfigError, match="refused the SCRAM-SHA-256 credentials of user 'governor'") as caught:
            build("127.0.0.1:9", SCRAM)
        assert isinstance(caught.value.__cause__, KafkaTimeoutError)
        assert "s3cret" not in str(caught.value)

    def test_a_refusal_is_seen_when_the_application_silenced_kafka_python(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        logger = logging.getLogger(CONNECTION_LOGGER)
        monkeypatch.setattr(logger, "level", logging.CRITICAL)
        monkeypatch.setattr(kafka_security, "KafkaAdminClient", _refused)
        with pytest.raises(ConfigError):
            kafka_admin("127.0.0.1:9", SCRAM)
        assert logger.level == logging.CRITICAL
        assert not any(isinstance(handler, kafka_security._BootstrapFailures) for handler in logger.handlers)

    def test_a_broker_that_does_not_answer_stays_a_kafka_error(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(kafka_security, "KafkaAdminClient", _unreachable)
        with pytest.raises(KafkaTimeoutError):
            kafka_admin("127.0.0.1:9", SCRAM)

    def test_every_login_closed_by_a_broker_that_accepts_connections_is_a_config_error(
        self, monkeypatch: pytest.MonkeyPatch, listening: str
    ) -> None:
        monkeypatch.setattr(kafka_security, "KafkaConsumer", _closed_at_login)
        with pytest.raises(ConfigError, match="closed each of 3 logins with the SCRAM-SHA-256 credentials of user"):
            kafka_consumer(listening, SCRAM)

    def test_lost_connections_to_a_gone_broker_stay_a_kafka_error(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(kafka_security, "KafkaConsumer", _closed_at_login)
        with pytest.raises(KafkaTimeoutError):
            kafka_consumer(f"127.0.0.1:{free_port()}", SCRAM)

    def test_without_sasl_nothing_is_translated(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(kafka_security, "KafkaAdminClient", _refused)
        with pytest.raises(KafkaTimeoutError):
            kafka_admin("127.0.0.1:9", PLAINTEXT)
