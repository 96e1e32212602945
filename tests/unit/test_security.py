"""Security without a network: document signatures, security settings and the client configuration they build."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import structlog
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from pydantic import SecretStr

from decide.from_snapshot import decide_from_snapshot
from decide.specs import default_registry
from schemas.errors import ConfigError
from schemas.policy_docs import AdmissionPolicy
from schemas.records import EstimateSnapshot
from schemas.signing import PolicyKeyring, SigningKey, canonical_bytes, sign, signature_problem
from services import kafka_security
from services.health import HealthServer, ServiceMetrics
from services.kafka_clients import group_consumer, record_producer
from services.kafka_security import kafka_admin, security_config
from services.policy.decisions import DecisionMaker
from services.policy.pins import pinned_document
from services.sdk.publisher import TelemetryPublisher
from services.settings import EngineSettings, KafkaSecurity, RedisSecurity, Settings
from services.store.memory_store import MemoryStore
from services.store.redis_store import redis_client
from services.testing.models import changed
from tests.fixtures import admission_snapshot, synthetic_engine_summary

KEY = SigningKey("k2", b"a-signing-key-of-the-policy-service")
OLD = SigningKey("k1", b"the-key-it-replaces-in-rotation")


def _snapshot(version: int, ts: float) -> EstimateSnapshot:
    return admission_snapshot(synthetic_engine_summary(), version=version, ts=ts)


def _document() -> AdmissionPolicy:
    document = decide_from_snapshot(default_registry().get("admission"), _snapshot(1, 10.0), None).document
    assert isinstance(document, AdmissionPolicy)
    return document


class TestSignatures:
    def test_a_signed_document_verifies_after_a_round_trip_through_json(self) -> None:
        signed = sign(_document(), KEY)
        assert signed.signature is not None
        assert signed.signature.key_id == "k2"
        read_back = AdmissionPolicy.model_validate_json(signed.model_dump_json())
        assert signature_problem(read_back, PolicyKeyring(signing=KEY)) is None

    def test_the_signature_does_not_cover_itself_but_covers_every_other_field(self) -> None:
        document = _document()
        assert canonical_bytes(sign(document, KEY)) == canonical_bytes(document)
        tampered = changed(sign(document, KEY), valid_until=1e9)
        assert signature_problem(tampered, PolicyKeyring(signing=KEY)) == "bad_mac"

    def test_unsigned_unknown_key_and_wrong_secret_are_each_refused(self) -> None:
        keyring = PolicyKeyring(signing=KEY)
        assert signature_problem(_document(), keyring) == "unsigned"
        assert signature_problem(sign(_document(), OLD), keyring) == "unknown_key"
        forged = sign(_document(), SigningKey("k2", b"a-guess-at-the-key-that-is-wrong"))
        assert signature_problem(forged, keyring) == "bad_mac"

    def test_during_rotation_both_keys_are_accepted_and_the_new_one_signs(self) -> None:
        keyring = PolicyKeyring(signing=KEY, previous=OLD)
        assert signature_problem(sign(_document(), OLD), keyring) is None
        assert signature_problem(sign(_document(), KEY), keyring) is None
        assert "secret" not in repr(keyring)
        assert "policy-service" not in repr(keyring)


class TestSignedDecisions:
    def test_every_stored_document_is_signed_and_the_next_builds_on_it(self) -> None:
        store = MemoryStore()
        keyring = PolicyKeyring(signing=KEY)
        maker = DecisionMaker(default_registry(), store, keyring=keyring)
        maker.on_snapshot(_snapshot(1, 10.0))
        handled = maker.on_snapshot(_snapshot(2, 15.0))
        assert [record.version for record in handled.records] == [2]
        stored = AdmissionPolicy.model_validate_json(store.get_policy("admission", "eng-0") or "")
        assert stored.version == 2
        assert signature_problem(stored, keyring) is None
        assert handled.records[0].document["signature"] == stored.model_dump(mode="json")["signature"]

    def test_a_previous_document_someone_else_wrote_is_not_built_upon_but_replaced(self) -> None:
        """An unsigned document in the key is reported once and overwritten by a signed one numbered above it."""
        store = MemoryStore()
        forged = changed(_document(), version=7)
        store.put_policy("admission", "eng-0", 7, forged.model_dump_json())
        keyring = PolicyKeyring(signing=KEY)
        maker = DecisionMaker(default_registry(), store, keyring=keyring)
        with structlog.testing.capture_logs() as logs:
            handled = maker.on_snapshot(_snapshot(2, 15.0))
        assert [(r.version, r.accepted) for r in handled.records] == [(8, True)]
        stored = AdmissionPolicy.model_validate_json(store.get_policy("admission", "eng-0") or "")
        assert (stored.version, stored.previous_version) == (8, None)
        assert signature_problem(stored, keyring) is None
        unreadable = [e for e in logs if e["event"] == "policy_key_unreadable"]
        assert [(e["kind"], e["scope"], e["reason"]) for e in unreadable] == [
            ("admission", "eng-0", "not validly signed (unsigned)")
        ]

    def test_a_pin_of_a_signed_document_carries_no_stale_signature_and_verifies_once_signed(self) -> None:
        store = MemoryStore()
        keyring = PolicyKeyring(signing=KEY)
        DecisionMaker(default_registry(), store, keyring=keyring).on_snapshot(_snapshot(1, 10.0))
        current = AdmissionPolicy.model_validate_json(store.get_policy("admission", "eng-0") or "")
        pinned = pinned_document(current, AdmissionPolicy, {"admit_fraction": 0.25}, event_time_s=10.0, for_s=60.0)
        assert pinned.signature is None
        assert signature_problem(sign(pinned, KEY), keyring) is None

    def test_without_a_keyring_documents_stay_unsigned(self) -> None:
        store = MemoryStore()
        DecisionMaker(default_registry(), store).on_snapshot(_snapshot(1, 10.0))
        stored = AdmissionPolicy.model_validate_json(store.get_policy("admission", "eng-0") or "")
        assert stored.signature is None


ENVIRON = {
    "GOVERNOR_REDIS_USERNAME": "governor",
    "GOVERNOR_REDIS_PASSWORD": "redis-secret-value",
    "GOVERNOR_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
    "GOVERNOR_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
    "GOVERNOR_KAFKA_SASL_USERNAME": "governor",
    "GOVERNOR_KAFKA_SASL_PASSWORD": "kafka-secret-value",
    "GOVERNOR_POLICY_SIGNING_KEY": "signing-secret-value",
    "GOVERNOR_POLICY_SIGNING_KEY_ID": "2026-11",
    "GOVERNOR_POLICY_PREVIOUS_SIGNING_KEY": "retired-secret-value",
    "GOVERNOR_POLICY_PREVIOUS_SIGNING_KEY_ID": "2026-10",
    "REDIS_URL": "rediss://user:url-secret-value@redis.internal:6380/0",
}


class TestSecuritySettings:
    @pytest.mark.parametrize("settings_type", [Settings, EngineSettings])
    def test_no_secret_shows_in_a_repr_or_the_settings_log_line(self, settings_type: type[Settings]) -> None:
        settings = settings_type.load({}, ENVIRON)
        shown = repr(settings) + str(settings)
        if isinstance(settings, Settings):
            shown += str(settings.redacted())
        shown += repr(settings.redis_security()) + repr(settings.kafka_security()) + repr(settings.policy_keyring())
        for secret in ("redis-secret", "kafka-secret", "signing-secret", "retired-secret"):
            assert secret not in shown
        assert "url-secret" not in str(Settings.load({}, ENVIRON).redacted())

    def test_the_keyring_signs_with_the_current_key_and_accepts_the_retired_one(self) -> None:
        keyring = Settings.load({}, ENVIRON).policy_keyring()
        assert keyring is not None
        assert keyring.signing == SigningKey("2026-11", b"signing-secret-value")
        assert keyring.accepted("2026-10") == SigningKey("2026-10", b"retired-secret-value")
        assert keyring.accepted("2026-09") is None

    def test_without_a_key_or_with_an_empty_one_nothing_is_signed(self) -> None:
        assert Settings.load({}, {}).policy_keyring() is None
        assert (
            Settings.load({}, {"GOVERNOR_POLICY_SIGNING_KEY": "", "GOVERNOR_REDIS_PASSWORD": ""}).policy_keyring()
            is None
        )

    def test_a_short_key_is_refused_without_echoing_it(self) -> None:
        with pytest.raises(ConfigError, match=r"policy_signing_key='\*+' from environment") as caught:
            Settings.load({}, {"GOVERNOR_POLICY_SIGNING_KEY": "tooshort"})
        assert "tooshort" not in str(caught.value)

    @pytest.mark.parametrize(
        ("environ", "message"),
        [
            ({"GOVERNOR_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT"}, "needs a SASL mechanism, user and password"),
            ({"GOVERNOR_REDIS_TLS_CERT_FILE": "/c.pem"}, "redis_tls_cert_file and redis_tls_key_file go together"),
            ({"GOVERNOR_KAFKA_TLS_KEY_FILE": "/k.pem"}, "kafka_tls_cert_file and kafka_tls_key_file go together"),
            ({"GOVERNOR_POLICY_PREVIOUS_SIGNING_KEY": "x" * 16}, "go together"),
            ({"GOVERNOR_KAFKA_SASL_MECHANISM": "GSSAPI"}, "kafka_sasl_mechanism='GSSAPI'"),
        ],
    )
    def test_incomplete_security_settings_are_refused_in_one_line(self, environ: dict[str, str], message: str) -> None:
        with pytest.raises(ConfigError, match=message):
            Settings.load({}, environ)


def _sasl(mechanism: str, protocol: str = "SASL_SSL") -> KafkaSecurity:
    return KafkaSecurity(
        protocol=protocol,  # type: ignore[arg-type]
        sasl_mechanism=mechanism,  # type: ignore[arg-type]
        sasl_username="governor",
        sasl_password=SecretStr("kafka-secret-value"),
        tls_ca_file=Path("/etc/governor/ca.pem"),
        tls_cert_file=Path("/etc/governor/client.pem"),
        tls_key_file=Path("/etc/governor/client.key"),
    )


class TestKafkaClientConfiguration:
    @pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
    def test_sasl_over_tls_sets_mechanism_credentials_and_verified_tls(self, mechanism: str) -> None:
        assert security_config(_sasl(mechanism)) == {
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": mechanism,
            "sasl_plain_username": "governor",
            "sasl_plain_password": "kafka-secret-value",
            "ssl_check_hostname": True,
            "ssl_cafile": "/etc/governor/ca.pem",
            "ssl_certfile": "/etc/governor/client.pem",
            "ssl_keyfile": "/etc/governor/client.key",
        }

    def test_sasl_without_tls_sends_no_tls_files_and_plaintext_adds_nothing(self) -> None:
        config = security_config(_sasl("SCRAM-SHA-256", "SASL_PLAINTEXT"))
        assert not any(name.startswith("ssl_") for name in config)
        assert security_config(KafkaSecurity()) == {"security_protocol": "PLAINTEXT"}

    @pytest.mark.parametrize("client", [KafkaConsumer, KafkaProducer, KafkaAdminClient])
    def test_every_key_is_one_kafka_python_knows(self, client: Any) -> None:
        assert set(security_config(_sasl("SCRAM-SHA-512"))) <= set(client.DEFAULT_CONFIG)

    def test_the_services_and_the_sdk_hand_the_security_to_kafka_python(self, monkeypatch: pytest.MonkeyPatch) -> None:
        built: list[tuple[str, dict[str, Any]]] = []

        def recorder(name: str) -> Any:
            def build(**config: Any) -> object:
                built.append((name, config))
                return object()

            return build

        for name in ("KafkaConsumer", "KafkaProducer", "KafkaAdminClient"):
            monkeypatch.setattr(kafka_security, name, recorder(name))
        security = _sasl("SCRAM-SHA-256")
        group_consumer("kafka:9093", "governor-stream-dep", security=security)
        record_producer("kafka:9093", security=security)
        kafka_admin("kafka:9093", security)
        publisher = TelemetryPublisher("kafka:9093", security=security)
        publisher._connect()
        publisher.close(timeout_s=1.0)
        assert [name for name, _ in built] == ["KafkaConsumer", "KafkaProducer", "KafkaAdminClient", "KafkaProducer"]
        for _, config in built:
            assert config["bootstrap_servers"] == "kafka:9093"
            assert config["security_protocol"] == "SASL_SSL"
            assert config["sasl_mechanism"] == "SCRAM-SHA-256"
            assert config["sasl_plain_password"] == "kafka-secret-value"
            assert config["ssl_cafile"] == "/etc/governor/ca.pem"


class TestRedisClientConfiguration:
    def test_credentials_and_tls_files_reach_the_connection_pool(self, tmp_path: Path) -> None:
        ca = tmp_path / "ca.pem"
        ca.write_text("not read until a connection is made")
        security = RedisSecurity(username="governor", password=SecretStr("redis-secret-value"), tls_ca_file=ca)
        client = redis_client("rediss://redis.internal:6380/0", 0.5, security)
        options = client.connection_pool.connection_kwargs
        client.close()
        assert (options["username"], options["password"]) == ("governor", "redis-secret-value")
        assert (options["ssl_ca_certs"], options["ssl_cert_reqs"], options["ssl_check_hostname"]) == (
            str(ca),
            "required",
            True,
        )

    def test_tls_files_for_a_plain_url_or_missing_files_are_refused(self, tmp_path: Path) -> None:
        with pytest.raises(ConfigError, match="not a rediss:// URL"):
            redis_client("redis://127.0.0.1:6379/0", 0.5, RedisSecurity(tls_ca_file=tmp_path / "ca.pem"))
        with pytest.raises(ConfigError, match=r"ca\.pem does not exist"):
            redis_client("rediss://127.0.0.1:6379/0", 0.5, RedisSecurity(tls_ca_file=tmp_path / "ca.pem"))


def test_health_and_metrics_listen_on_localhost_unless_configured() -> None:
    settings = Settings.load({}, {})
    assert settings.metrics_host == "127.0.0.1"
    server = HealthServer(ServiceMetrics("probe", "local"), 0, settings.metrics_host)
    server.start()
    try:
        assert server._server.server_address[0] == "127.0.0.1"
    finally:
        server.close()
    assert Settings.load({}, {"GOVERNOR_METRICS_HOST": "0.0.0.0"}).metrics_host == "0.0.0.0"
