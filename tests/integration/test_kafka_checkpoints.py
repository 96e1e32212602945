"""State checkpoints on Apache Kafka: a rebuild after the telemetry has expired gives the live estimates and decisions.

The telemetry of the first half of a run is gone from the log (its records deleted up to the second
half, as retention deletes them: the log's start moves past them) and Redis is wiped. The stream
processor and the policy service then resume from their last checkpoints on ``gov.checkpoints``,
taken after the first half, and read the second half from the log: every engine's estimates and
every policy decision equal those of the live run over both halves. Without the checkpoints the
same rebuild folds the second half alone and its estimates differ, which is what checkpoints are for.
The faust runtime of the stream processor writes and reads the same checkpoints.
"""

from __future__ import annotations

from functools import partial

import pytest
import redis
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition

from decide.specs import default_registry
from schemas.names import POLICY_CONSUMER, STREAM_CONSUMER, TELEMETRY_TOPIC, estimate_key
from services.checkpoints import CheckpointSource
from services.cli.shadow import read_decisions
from services.kafka_security import PLAINTEXT
from services.policy.service import PolicyService
from services.replay.checkpoints import read_checkpoints
from services.stack.launcher import StackState
from services.store.redis_store import RedisStore
from services.stream.faust_runtime import FaustStreamProcessor
from services.stream.processor import StreamProcessor
from services.testing.streams import synthetic_stream
from tests.integration.decision_streams import logged_decisions
from tests.integration.publishing import publish_all

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EVERY_COMMIT_S = 1e-6  # an interval every commit has passed: each commit is followed by checkpoints
ENGINES = 3


@pytest.fixture(scope="module")
def stack(kafka_stack: StackState) -> StackState:
    """This module's stack is the Kafka one, whatever ``GOVERNOR_BROKER`` says (deleting records needs it)."""
    return kafka_stack


FAUST = "faust"  # the stream processor on its faust runtime
SERVICES: dict[str, type[StreamProcessor] | type[PolicyService] | type[FaustStreamProcessor]] = {
    STREAM_CONSUMER: StreamProcessor,
    POLICY_CONSUMER: PolicyService,
    FAUST: FaustStreamProcessor,
}


def _run(
    stack: StackState, deployment: str, service_name: str, *, interval_s: float, source: CheckpointSource | None
) -> None:
    """Run the service ``service_name`` names until it idles out, with those checkpoint settings."""
    store = RedisStore.from_url(stack.redis_url, deployment, 5.0)
    service = SERVICES[service_name](
        deployment=deployment,
        bootstrap=stack.kafka_bootstrap,
        store=store,
        registry=default_registry(),
        checkpoint_interval_s=interval_s,
        checkpoint_source=source,
    )
    try:
        service.run(idle_exit_s=4.0)
    finally:
        service.close()
        store.close()


def _source(stack: StackState, deployment: str, consumer: str) -> CheckpointSource:
    return partial(
        read_checkpoints, stack.kafka_bootstrap, deployment=deployment, consumer=consumer, security=PLAINTEXT
    )


def _summaries(client: redis.Redis, deployment: str) -> dict[str, bytes | None]:
    return {
        engine: client.get(estimate_key(deployment, engine, "summary"))
        for engine in (f"eng-{i}" for i in range(ENGINES))
    }


def _telemetry_bounds(bootstrap: str) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
    """Each telemetry partition's log start and end offsets."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        parts = [TopicPartition(TELEMETRY_TOPIC, p) for p in range(len(consumer.partitions_for_topic(TELEMETRY_TOPIC)))]
        return dict(consumer.beginning_offsets(parts)), dict(consumer.end_offsets(parts))
    finally:
        consumer.close()


def _wipe(client: redis.Redis, deployment: str) -> None:
    keys = list(client.scan_iter(match=f"gov:{deployment}:*", count=1000))
    if keys:
        client.delete(*keys)


def _expire_up_to(bootstrap: str, ends: dict[TopicPartition, int]) -> None:
    """Delete the telemetry before ``ends``, as retention would: the log's start moves to them."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.delete_records({tp: offset for tp, offset in ends.items() if offset > 0})
    finally:
        admin.close()
    starts, _ = _telemetry_bounds(bootstrap)
    assert all(starts[tp] == offset for tp, offset in ends.items()), "the telemetry before them is gone"


def test_a_rebuild_after_the_telemetry_expired_resumes_from_checkpoints_and_matches_the_live_run(
    stack: StackState, deployment: str, redis_client: redis.Redis
) -> None:
    events = synthetic_stream(engines=ENGINES, requests=400, deployment=deployment)
    first, second = events[: len(events) // 2], events[len(events) // 2 :]

    publish_all(stack.kafka_bootstrap, first)
    _run(stack, deployment, STREAM_CONSUMER, interval_s=EVERY_COMMIT_S, source=None)
    _run(stack, deployment, POLICY_CONSUMER, interval_s=EVERY_COMMIT_S, source=None)
    _, first_ends = _telemetry_bounds(stack.kafka_bootstrap)
    written = _source(stack, deployment, STREAM_CONSUMER)()
    assert written, "the stream processor wrote checkpoints"
    assert {engine for checkpoint in written.values() for engine in checkpoint.states} == {
        f"eng-{i}" for i in range(ENGINES)
    }
    assert all(checkpoint.offset == first_ends[TopicPartition(*tp)] - 1 for tp, checkpoint in written.items())
    assert _source(stack, deployment, POLICY_CONSUMER)(), "the policy service wrote checkpoints"

    publish_all(stack.kafka_bootstrap, second)
    _run(stack, deployment, STREAM_CONSUMER, interval_s=0.0, source=None)
    _run(stack, deployment, POLICY_CONSUMER, interval_s=0.0, source=None)
    live_summaries = _summaries(redis_client, deployment)
    live_decisions = logged_decisions(stack.kafka_bootstrap, deployment)
    live_records = len(read_decisions(stack.kafka_bootstrap, deployment))
    assert all(live_summaries.values())
    assert live_decisions

    _expire_up_to(stack.kafka_bootstrap, first_ends)
    _wipe(redis_client, deployment)
    _run(stack, deployment, STREAM_CONSUMER, interval_s=0.0, source=None)
    assert _summaries(redis_client, deployment) != live_summaries, "the second half alone folds other estimates"

    _wipe(redis_client, deployment)
    _run(stack, deployment, STREAM_CONSUMER, interval_s=0.0, source=_source(stack, deployment, STREAM_CONSUMER))
    _run(stack, deployment, POLICY_CONSUMER, interval_s=0.0, source=_source(stack, deployment, POLICY_CONSUMER))
    assert _summaries(redis_client, deployment) == live_summaries
    assert len(read_decisions(stack.kafka_bootstrap, deployment)) > live_records, "the rebuild decided again"
    assert logged_decisions(stack.kafka_bootstrap, deployment) == live_decisions


def test_the_faust_runtime_writes_checkpoints_and_a_rebuild_from_them_matches_the_live_estimates(
    stack: StackState, deployment: str, redis_client: redis.Redis
) -> None:
    """The faust worker checkpoints the first half; after it expired, a faust rebuild equals the live fold."""
    events = synthetic_stream(engines=ENGINES, requests=400, deployment=deployment, seed=3)
    first, second = events[: len(events) // 2], events[len(events) // 2 :]

    publish_all(stack.kafka_bootstrap, first)
    _run(stack, deployment, FAUST, interval_s=EVERY_COMMIT_S, source=None)
    _, first_ends = _telemetry_bounds(stack.kafka_bootstrap)
    written = _source(stack, deployment, STREAM_CONSUMER)()
    assert {engine for checkpoint in written.values() for engine in checkpoint.states} == {
        f"eng-{i}" for i in range(ENGINES)
    }
    assert all(checkpoint.topic_id is None for checkpoint in written.values()), "aiokafka gives no topic ids"

    publish_all(stack.kafka_bootstrap, second)
    _run(stack, deployment, FAUST, interval_s=0.0, source=None)
    live_summaries = _summaries(redis_client, deployment)
    assert all(live_summaries.values())

    _expire_up_to(stack.kafka_bootstrap, first_ends)
    _wipe(redis_client, deployment)
    _run(stack, deployment, FAUST, interval_s=0.0, source=_source(stack, deployment, STREAM_CONSUMER))
    assert _summaries(redis_client, deployment) == live_summaries
