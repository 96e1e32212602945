"""SASL/SCRAM against a real Apache Kafka: the services connect with their credentials, a wrong password is refused.

The test starts its own Kafka whose listener is SASL_PLAINTEXT with SCRAM-SHA-256
(services/stack/kafka_broker.py, ``BrokerSasl``), users made here with random passwords, and runs
the client side docs/security.md describes: the engine's publisher, the stream processor and the
policy service with the deployment's ``KafkaSecurity``. A client given a wrong password fails at
its start with a ``ConfigError`` that names the user and the mechanism, not a bootstrap timeout.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka.errors import KafkaTimeoutError
from pydantic import SecretStr

from schemas.errors import ConfigError
from services.cli.shadow import read_decisions
from services.kafka_factory import PLAINTEXT, kafka_admin
from services.policy.service import PolicyService
from services.policy.specs import default_registry
from services.sdk.publisher import TelemetryPublisher
from services.settings import KafkaSecurity
from services.stack.kafka_broker import BrokerSasl, locate_kafka, start_kafka
from services.stack.launcher import StackState, create_topics
from services.stack.processes import free_port, stop
from services.store.redis_store import RedisStore
from services.stream.processor import StreamProcessor
from tests.unit.stream.synthetic import synthetic_stream

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MECHANISM = "SCRAM-SHA-256"
USER = "governor"


def _security(password: str) -> KafkaSecurity:
    return KafkaSecurity(
        protocol="SASL_PLAINTEXT", sasl_mechanism=MECHANISM, sasl_username=USER, sasl_password=SecretStr(password)
    )


@pytest.fixture(scope="module")
def sasl_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """A Kafka that requires SCRAM-SHA-256, with its topics; yields its bootstrap and the user's password."""
    try:
        install = locate_kafka()
    except ConfigError as exc:
        pytest.skip(f"Apache Kafka is not installed: {exc}")
    password = secrets.token_hex(16)
    sasl = BrokerSasl(mechanism=MECHANISM, users={"broker": secrets.token_hex(16), USER: password})
    state_dir: Path = tmp_path_factory.mktemp("kafka-sasl")
    port = free_port()
    pid = start_kafka(state_dir, port, install, sasl=sasl)
    bootstrap = f"127.0.0.1:{port}"
    try:
        create_topics(bootstrap, 60.0, security=_security(password))
        yield bootstrap, password
    finally:
        stop(pid, 30.0)


def test_the_services_connect_with_their_credentials_and_decide(
    sasl_kafka: tuple[str, str], stack: StackState, deployment: str
) -> None:
    bootstrap, password = sasl_kafka
    security = _security(password)
    events = synthetic_stream(engines=2, requests=300, deployment=deployment)
    publisher = TelemetryPublisher(bootstrap, block_when_full=True, security=security)
    try:
        for event in events:
            publisher.publish(event)
        assert publisher.flush(120.0)
    finally:
        publisher.close()
    assert publisher.stats().dropped == 0
    store = RedisStore.from_url(stack.redis_url, deployment, 5.0)
    processor = StreamProcessor(
        deployment=deployment, bootstrap=bootstrap, store=store, registry=default_registry(), security=security
    )
    try:
        processor.run(idle_exit_s=4.0)
    finally:
        processor.close()
    assert processor.counters.folded == len(events)
    policy = PolicyService(
        deployment=deployment, bootstrap=bootstrap, store=store, registry=default_registry(), security=security
    )
    try:
        policy.run(idle_exit_s=4.0)
    finally:
        policy.close()
        store.close()
    assert policy.counters.decisions > 0
    decided = read_decisions(bootstrap, deployment, security)
    assert len({(record.kind, record.scope, record.version) for record in decided}) == policy.counters.decisions


def test_a_wrong_password_is_refused_at_start_naming_the_user_and_mechanism(
    sasl_kafka: tuple[str, str], stack: StackState, deployment: str
) -> None:
    bootstrap, _ = sasl_kafka
    store = RedisStore.from_url(stack.redis_url, deployment, 5.0)
    try:
        with pytest.raises(ConfigError, match=f"the {MECHANISM} credentials of user .{USER}."):
            StreamProcessor(
                deployment=deployment,
                bootstrap=bootstrap,
                store=store,
                registry=default_registry(),
                security=_security("not-the-password"),
            )
    finally:
        store.close()


def test_a_client_without_sasl_gets_nothing_from_the_listener(sasl_kafka: tuple[str, str]) -> None:
    """A plaintext client cannot even bootstrap: the listener speaks SASL first."""
    bootstrap, _ = sasl_kafka
    with pytest.raises(KafkaTimeoutError):
        kafka_admin(bootstrap, PLAINTEXT, bootstrap_timeout_ms=5000)
