"""Every Kafka client of Governor (services, CLI, engine SDK) is built here, with the security settings.

``kafka_consumer``, ``kafka_producer`` and ``kafka_admin`` add the deployment's SASL credentials
and TLS files (``SecuritySettings.kafka_security``, docs/security.md) to the client's own
configuration, so no client reaches a broker without them. The service-specific clients
(services/kafka_clients.py) are built on these.
"""

from __future__ import annotations

from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer

from services.settings import KafkaSecurity

PLAINTEXT = KafkaSecurity()


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
    """A ``KafkaConsumer`` of ``bootstrap`` with ``config`` and the security settings."""
    return KafkaConsumer(bootstrap_servers=bootstrap, **config, **security_config(security))


def kafka_producer(bootstrap: str, security: KafkaSecurity = PLAINTEXT, **config: Any) -> KafkaProducer:
    """A ``KafkaProducer`` of ``bootstrap`` with ``config`` and the security settings."""
    return KafkaProducer(bootstrap_servers=bootstrap, **config, **security_config(security))


def kafka_admin(bootstrap: str, security: KafkaSecurity = PLAINTEXT, **config: Any) -> KafkaAdminClient:
    """A ``KafkaAdminClient`` of ``bootstrap`` with ``config`` and the security settings."""
    return KafkaAdminClient(bootstrap_servers=bootstrap, **config, **security_config(security))
