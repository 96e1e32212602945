"""Apache Kafka 4.x as the local stack's broker: KRaft combined mode in one JVM, its log under the state directory.

DESIGN section 7: the tests and a durable local stack run on the broker users run. The broker's
jars come from Maven Central (ops/kafka/pom.xml), copied by ``bash ops/install.sh --kafka`` (or
``--dev``) into ``.governor/kafka/lib`` of the checkout; the JVM runs ``kafka.Kafka`` on that
classpath. One node is both broker and controller (``process.roles=broker,controller``), so no
ZooKeeper and no second process. The log directory is ``{state_dir}/kafka/log``: formatted once
(``kafka.tools.StorageTool format``, what ``kafka-storage.sh format`` runs), then reused by every
later start, so records survive ``stack down``/``up`` and a SIGKILL.
"""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import structlog

from schemas.errors import BackendUnavailableError, ConfigError
from services.stack.processes import free_port, spawn, wait_for_port

log = structlog.get_logger(__name__)

KAFKA_LIB_DIR = Path(__file__).resolve().parents[2] / ".governor" / "kafka" / "lib"
KAFKA_MAIN_CLASS = "kafka.Kafka"
STORAGE_TOOL_CLASS = "kafka.tools.StorageTool"
# A small heap: the local broker holds a few topics of one deployment (docs/performance.md has its RSS).
KAFKA_JVM_OPTIONS = ("-Xms64m", "-Xmx512m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-Djava.awt.headless=true")
KAFKA_START_TIMEOUT_S = 180.0  # a JVM start on two cores at load average 40 took more than 90 s
KAFKA_STOP_TIMEOUT_S = 30.0
FORMAT_TIMEOUT_S = KAFKA_START_TIMEOUT_S  # the storage tool is a JVM start too
NODE_ID = 1
_JAAS_SAFE = re.compile(r"[A-Za-z0-9_.-]+")

# broker.log gets warnings and errors, and the line that says the server started (INFO everywhere is
# some 2,500 lines per start).
LOG4J_CONFIG = """\
status = warn
appender.stdout.type = Console
appender.stdout.name = STDOUT
appender.stdout.layout.type = PatternLayout
appender.stdout.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.stdout.ref = STDOUT
logger.started.name = kafka.server.KafkaRaftServer
logger.started.level = INFO
"""


# What the one-node broker sets beside its addresses (``broker_properties`` says why); docker-compose.yml
# passes the same settings (tests/unit/test_compose.py holds them together).
BROKER_SETTINGS: Mapping[str, str] = {
    "auto.create.topics.enable": "false",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class KafkaInstall:
    """Where the local Apache Kafka comes from: the ``java`` binary and the jars' folder.

    Attributes:
        java: absolute path of the ``java`` executable (the child runs with a bare PATH).
        lib_dir: the folder ops/install.sh filled with kafka_2.13 and its dependencies.
    """

    java: Path
    lib_dir: Path

    @property
    def classpath(self) -> str:
        """The JVM classpath: every jar of ``lib_dir`` (the JVM expands the wildcard)."""
        return f"{self.lib_dir}/*"


BrokerSaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerSasl:
    """SASL_PLAINTEXT in place of PLAINTEXT on the broker's listener: one mechanism and the users it knows.

    Every client, the broker's own connections to itself included, must then authenticate: the node
    logs in as ``broker_user``. PLAIN users live in the listener's JAAS configuration; SCRAM users are
    written into the metadata log when it is formatted (``kafka-storage.sh format --add-scram``), so a
    log formatted without them keeps refusing them. The controller listener stays plaintext on
    loopback (it serves the node itself). The passwords are written to ``server.properties``, which
    only its owner may read.

    Attributes:
        mechanism: the SASL mechanism the listener offers.
        users: user name to password, ``broker_user`` included.
        broker_user: the user the node authenticates to itself as.
    """

    mechanism: BrokerSaslMechanism
    users: Mapping[str, str] = field(default_factory=dict)
    broker_user: str = "broker"

    def __post_init__(self) -> None:
        """Refuse a user set without the broker's own user, or a name or password JAAS cannot quote."""
        if self.broker_user not in self.users:
            msg = f"broker_sasl users must include the broker's own user {self.broker_user!r}"
            raise ConfigError(msg)
        for name, password in self.users.items():
            if not _JAAS_SAFE.fullmatch(name) or any(c in password for c in '"\\\n=,[]'):
                msg = (
                    f"broker_sasl user {name!r}: names are letters, digits and _.-; passwords have no quotes, "
                    "backslashes, newlines, '=', ',' or brackets"
                )
                raise ConfigError(msg)

    def properties(self, listener: str) -> dict[str, str]:
        """The SASL properties of the client listener named ``listener`` (SASL_PLAINTEXT or SASL_SSL)."""
        if self.mechanism == "PLAIN":
            module = "org.apache.kafka.common.security.plain.PlainLoginModule"
            known = "".join(f' user_{name}="{password}"' for name, password in self.users.items())
        else:
            module = "org.apache.kafka.common.security.scram.ScramLoginModule"
            known = ""
        own = f'username="{self.broker_user}" password="{self.users[self.broker_user]}"'
        return {
            "sasl.enabled.mechanisms": self.mechanism,
            "sasl.mechanism.inter.broker.protocol": self.mechanism,
            f"listener.name.{listener.lower()}.{self.mechanism.lower()}.sasl.jaas.config": (
                f"{module} required {own}{known};"
            ),
        }

    def format_arguments(self) -> list[str]:
        """The storage tool's ``--add-scram`` arguments that create the SCRAM users (none for PLAIN)."""
        if self.mechanism == "PLAIN":
            return []
        return [
            argument
            for name, password in self.users.items()
            for argument in ("--add-scram", f"{self.mechanism}=[name={name},password={password}]")
        ]


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerTls:
    """TLS on the broker's client listener (SSL, or SASL_SSL with ``BrokerSasl``).

    Kafka reads PEM files itself (``ssl.keystore.type=PEM``): ``keystore`` holds the node's private key
    (PKCS#8, unencrypted) followed by its certificate chain, and ``truststore`` the CA certificates the
    node trusts when it connects to its own listener, which it does as every other client: the
    certificate must name 127.0.0.1 (Kafka verifies the host name). Clients do not present
    certificates; they authenticate with SASL where it is on.

    Attributes:
        keystore: the node's key and certificate chain, one PEM file readable only by its owner.
        truststore: the CA certificates, PEM.
    """

    keystore: Path
    truststore: Path

    def properties(self) -> dict[str, str]:
        """The listener's TLS properties."""
        return {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": f"{self.keystore}",
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": f"{self.truststore}",
        }


def listener_protocol(*, sasl: bool, tls: bool) -> str:
    """The client listener's security protocol (and name): PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL."""
    return {(False, False): "PLAINTEXT", (False, True): "SSL", (True, False): "SASL_PLAINTEXT"}.get(
        (sasl, tls), "SASL_SSL"
    )


def locate_kafka(lib_dir: Path = KAFKA_LIB_DIR) -> KafkaInstall:
    """Find ``java`` on the PATH and Kafka's jars in ``lib_dir``.

    Raises:
        ConfigError: one of them is missing; the message says how to install it.
    """
    java = shutil.which("java")
    if java is None:
        msg = "the kafka broker needs java (OpenJDK 17 or newer) on the PATH"
        raise ConfigError(msg)
    if not any(lib_dir.glob("kafka_2.13-*.jar")):
        msg = f"no Apache Kafka jars in {lib_dir}: run `bash ops/install.sh --kafka` (it needs mvn)"
        raise ConfigError(msg)
    return KafkaInstall(java=Path(java).resolve(), lib_dir=lib_dir)


def broker_properties(
    *,
    port: int,
    controller_port: int,
    log_dir: Path,
    overrides: Mapping[str, str] | None = None,
    sasl: BrokerSasl | None = None,
    tls: BrokerTls | None = None,
) -> str:
    """The ``server.properties`` of a one-node KRaft cluster on 127.0.0.1.

    Written on every start (ports may change between starts; the voter set names the node's
    controller listener, which a one-node quorum re-reads from here). What differs from Kafka's
    defaults, and why:

    - topic auto-creation off: every topic is created by ``create_topics`` with its partition count
      (schemas/names.py), as on a production cluster; a client asking for a missing topic gets an error.
    - replication factors and in-sync minimums of the internal topics at 1: there is one node.
    - ``offsets.topic.num.partitions=1``: the default 50 makes the first group join create 50
      partitions, seconds on a 2-core machine, for offsets that matter little here (services keep
      theirs in Redis).
    - ``group.initial.rebalance.delay.ms=0``: a group forms at its first join instead of 3 s later.

    The broker's own heartbeat and session (2 s and 9 s) stay Kafka's: a 3 s session made a restart
    after SIGKILL faster (the node cannot register again before its previous registration expires),
    but on a machine at load average 40 the node missed its own heartbeats, fenced itself, and
    clients got metadata with no broker in it.

    With ``sasl`` the client listener requires SASL (``BrokerSasl``), with ``tls`` it speaks TLS
    (``BrokerTls``), with both it is SASL_SSL. ``overrides`` replace or
    add properties (a test that needs the retention checks to run every second instead of every 5
    minutes).
    """
    listener = listener_protocol(sasl=sasl is not None, tls=tls is not None)
    properties = {
        "process.roles": "broker,controller",
        "node.id": f"{NODE_ID}",
        "controller.quorum.voters": f"{NODE_ID}@127.0.0.1:{controller_port}",
        "listeners": f"{listener}://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"{listener}://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": listener,
        "listener.security.protocol.map": f"CONTROLLER:PLAINTEXT,{listener}:{listener}",
        "log.dirs": f"{log_dir}",
        **BROKER_SETTINGS,
        **(sasl.properties(listener) if sasl is not None else {}),
        **(tls.properties() if tls is not None else {}),
    }
    properties.update(overrides or {})
    return "".join(f"{key}={value}\n" for key, value in properties.items())


def cluster_id() -> str:
    """A new cluster id in Kafka's form: 16 random bytes, URL-safe base64 without padding, not starting with ``-``.

    One id in 64 would start with ``-``, and the storage tool reads ``--cluster-id -...`` as an option
    without its value and refuses to format (seen twice in one test run); Kafka's own random ids
    skip those for the same reason.
    """
    while True:
        candidate = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not candidate.startswith("-"):
            return candidate


def format_storage(install: KafkaInstall, config: Path, log_dir: Path, sasl: BrokerSasl | None = None) -> bool:
    """Format ``log_dir`` for a new cluster unless it holds one already; return whether it formatted.

    A formatted directory has ``meta.properties``; formatting it again would be refused by the
    tool, and skipping the JVM saves a second or so on every later start.

    Raises:
        BackendUnavailableError: the storage tool failed (its output is in the message) or did not
            finish within ``FORMAT_TIMEOUT_S``.
    """
    if (log_dir / "meta.properties").exists():
        return False
    argv = [
        str(install.java),
        "-Xmx256m",
        "-cp",
        install.classpath,
        STORAGE_TOOL_CLASS,
        "format",
        "--cluster-id",
        cluster_id(),
        "--config",
        str(config),
        *(sasl.format_arguments() if sasl is not None else []),
    ]
    try:
        result = subprocess.run(  # the same bare environment as the broker's (processes.spawn)
            argv, capture_output=True, text=True, timeout=FORMAT_TIMEOUT_S, check=False, env={"PATH": "/usr/bin:/bin"}
        )
    except subprocess.TimeoutExpired as exc:
        msg = f"formatting the kafka log in {log_dir} did not finish within {FORMAT_TIMEOUT_S:g} s"
        raise BackendUnavailableError(msg, backend="kafka") from exc
    if result.returncode != 0:
        msg = f"formatting the kafka log in {log_dir} failed: {(result.stdout + result.stderr).strip()[-2000:]}"
        raise BackendUnavailableError(msg, backend="kafka")
    log.info("kafka_storage_formatted", log_dir=str(log_dir))
    return True


def start_kafka(
    state_dir: Path,
    port: int,
    install: KafkaInstall,
    *,
    overrides: Mapping[str, str] | None = None,
    sasl: BrokerSasl | None = None,
    tls: BrokerTls | None = None,
) -> int:
    """Start the one-node Kafka on 127.0.0.1:``port`` with its log in ``state_dir``; return its pid.

    With ``sasl`` its listener requires SASL (``BrokerSasl``), with ``tls`` it speaks TLS (``BrokerTls``).
    The broker's own output goes to ``{state_dir}/broker.log``. It returns once the broker's listener
    accepts connections: Kafka opens it only after the node has registered and been
    unfenced, so the admin client's next call is served.

    Raises:
        BackendUnavailableError: the log could not be formatted, or the broker exited or did not
            answer within ``KAFKA_START_TIMEOUT_S``.
    """
    kafka_dir = state_dir.resolve() / "kafka"
    log_dir = kafka_dir / "log"
    log_dir.mkdir(parents=True, exist_ok=True)
    config = kafka_dir / "server.properties"
    config.touch(mode=0o600)
    config.chmod(0o600)  # it may hold SASL passwords
    config.write_text(
        broker_properties(
            port=port, controller_port=free_port(), log_dir=log_dir, overrides=overrides, sasl=sasl, tls=tls
        )
    )
    log4j = kafka_dir / "log4j2.properties"
    log4j.write_text(LOG4J_CONFIG)
    format_storage(install, config, log_dir, sasl)
    argv = [
        str(install.java),
        *KAFKA_JVM_OPTIONS,
        f"-Dlog4j2.configurationFile={log4j}",
        "-cp",
        install.classpath,
        KAFKA_MAIN_CLASS,
        str(config),
    ]
    pid = spawn(argv, state_dir / "broker.log")
    wait_for_port("127.0.0.1", port, KAFKA_START_TIMEOUT_S, "kafka", pid=pid)
    log.info("broker_started", broker="kafka", port=port, pid=pid, log_dir=str(log_dir))
    return pid
