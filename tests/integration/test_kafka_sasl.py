"""SASL/SCRAM, with and without TLS, against a real Apache Kafka: the services connect with their credentials.

The module starts its own Kafka twice: a SASL_PLAINTEXT listener and a SASL_SSL one, both with SCRAM-SHA-256
(services/stack/kafka_broker.py, ``BrokerSasl`` and ``BrokerTls``), users made here with random passwords
and, for TLS, a throw-away CA and a certificate for 127.0.0.1 (tests/integration/certificates.py). Each runs
the client side docs/security.md describes: the engine's publisher, the stream processor and the policy
service with the deployment's ``KafkaSecurity``. A client given a wrong password fails at its start with a
``ConfigError`` that names the user and the mechanism, not a bootstrap timeout; on TLS a client that does
not trust the CA fails with one naming the handshake's reason and the CA setting; a plaintext client gets
nothing from the listener.
"""

from __future__ import annotations

import secrets
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from kafka.errors import KafkaTimeoutError
from pydantic import SecretStr

from decide.specs import default_registry
from schemas.errors import ConfigError
from services.cli.shadow import read_decisions
from services.kafka_security import PLAINTEXT, kafka_admin
from services.policy.service import PolicyService
from services.sdk.publisher import TelemetryPublisher
from services.settings import KafkaSecurity
from services.stack.kafka_broker import BrokerSasl, BrokerTls, locate_kafka, start_kafka
from services.stack.launcher import StackState, create_topics
from services.stack.processes import free_port, stop
from services.store.redis_store import RedisStore
from services.stream.processor import StreamProcessor
from services.testing.streams import synthetic_stream
from tests.integration.certificates import make_certificates

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MECHANISM = "SCRAM-SHA-256"
USER = "governor"


@dataclass(frozen=True, slots=True, kw_only=True)
class SaslKafka:
    """A running Kafka that requires SASL, and what its user connects with."""

    bootstrap: str
    security: KafkaSecurity


@pytest.fixture(scope="module", params=["SASL_PLAINTEXT", "SASL_SSL"])
def sasl_kafka(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslKafka]:
    """A Kafka that requires SCRAM-SHA-256 (over TLS for SASL_SSL), with its topics."""
    try:
        install = locate_kafka()
    except ConfigError as exc:
        pytest.skip(f"Apache Kafka is not installed: {exc}")
    password = secrets.token_hex(16)
    sasl = BrokerSasl(mechanism=MECHANISM, users={"broker": secrets.token_hex(16), USER: password})
    state_dir: Path = tmp_path_factory.mktemp("kafka-sasl")
    security = KafkaSecurity(
        protocol=request.param, sasl_mechanism=MECHANISM, sasl_username=USER, sasl_password=SecretStr(password)
    )
    tls = None
    if request.param == "SASL_SSL":
        if shutil.which("openssl") is None:
            pytest.skip("needs openssl on the PATH")
        made = make_certificates(state_dir, USER)
        keystore = state_dir / "keystore.pem"
        keystore.touch(mode=0o600)
        keystore.write_text(made.server_key.read_text() + made.server_cert.read_text())
        tls = BrokerTls(keystore=keystore, truststore=made.ca)
        security = replace(security, tls_ca_file=made.ca)
    port = free_port()
    pid = start_kafka(state_dir, port, install, sasl=sasl, tls=tls)
    bootstrap = f"127.0.0.1:{port}"
    try:
        create_topics(bootstrap, 60.0, security=security)
        yield SaslKafka(bootstrap=bootstrap, security=security)
    finally:
        stop(pid, 30.0)


def test_the_services_connect_with_their_credentials_and_decide(
    sasl_kafka: SaslKafka, stack: StackState, deployment: str
) -> None:
    bootstrap, security = sasl_kafka.bootstrap, sasl_kafka.security
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
    sasl_kafka: SaslKafka, stack: StackState, deployment: str
) -> None:
    store = RedisStore.from_url(stack.redis_url, deployment, 5.0)
    try:
        with pytest.raises(ConfigError, match=f"the {MECHANISM} credentials of user .{USER}."):
            StreamProcessor(
                deployment=deployment,
                bootstrap=sasl_kafka.bootstrap,
                store=store,
                registry=default_registry(),
                security=replace(sasl_kafka.security, sasl_password=SecretStr("not-the-password")),
            )
    finally:
        store.close()


def test_a_client_without_sasl_gets_nothing_from_the_listener(sasl_kafka: SaslKafka) -> None:
    """A plaintext client cannot even bootstrap: the listener speaks SASL (or TLS) first."""
    with pytest.raises(KafkaTimeoutError):
        kafka_admin(sasl_kafka.bootstrap, PLAINTEXT, bootstrap_timeout_ms=5000)


@pytest.mark.parametrize("sasl_kafka", ["SASL_SSL"], indirect=True)
def test_over_tls_a_client_that_does_not_trust_the_ca_gets_nothing(sasl_kafka: SaslKafka) -> None:
    """The right credentials are not enough: the broker's certificate must verify."""
    with pytest.raises(
        ConfigError, match=r"the TLS handshake failed .*CERTIFICATE_VERIFY_FAILED.*GOVERNOR_KAFKA_TLS_CA_FILE"
    ):
        kafka_admin(sasl_kafka.bootstrap, replace(sasl_kafka.security, tls_ca_file=None), bootstrap_timeout_ms=5000)
