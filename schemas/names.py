"""Topic names and Redis key builders: the names are part of the product (DESIGN section 5).

Every Redis key of a deployment starts with ``gov:{deployment}:``; only these builders spell them.
"""

from __future__ import annotations

from dataclasses import dataclass

TELEMETRY_TOPIC = "gov.telemetry"
ESTIMATES_TOPIC = "gov.estimates"
DECISIONS_TOPIC = "gov.policy.decisions"
DEADLETTER_TOPIC = "gov.deadletter"


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicSpec:
    """A topic and the partition count the stack creates it with."""

    name: str
    partitions: int


TOPICS: tuple[TopicSpec, ...] = (
    TopicSpec(name=TELEMETRY_TOPIC, partitions=8),
    TopicSpec(name=ESTIMATES_TOPIC, partitions=1),
    TopicSpec(name=DECISIONS_TOPIC, partitions=1),
    TopicSpec(name=DEADLETTER_TOPIC, partitions=1),
)


def estimate_key(deployment: str, scope: str, name: str) -> str:
    """Key of one estimate: ``gov:{deployment}:est:{scope}:{name}``."""
    return f"gov:{deployment}:est:{scope}:{name}"


def policy_key(deployment: str, kind: str, scope: str) -> str:
    """Key of the current policy document: ``gov:{deployment}:policy:{kind}:{scope}``."""
    return f"gov:{deployment}:policy:{kind}:{scope}"


def policy_history_key(deployment: str, kind: str, scope: str) -> str:
    """Key of the capped history list of a policy: ``gov:{deployment}:policy:{kind}:{scope}:history``."""
    return f"{policy_key(deployment, kind, scope)}:history"


def policy_channel(deployment: str) -> str:
    """Pub/sub channel announcing new policy versions: ``gov:{deployment}:policy-updates``."""
    return f"gov:{deployment}:policy-updates"


def pin_key(deployment: str, kind: str, scope: str) -> str:
    """Key of an operator's pin on a policy, expiring with it: ``gov:{deployment}:pin:{kind}:{scope}``."""
    return f"gov:{deployment}:pin:{kind}:{scope}"


def ack_key(deployment: str, kind: str, engine_id: str) -> str:
    """Key of an engine's last acknowledgement: ``gov:{deployment}:ack:{kind}:{engine_id}``."""
    return f"gov:{deployment}:ack:{kind}:{engine_id}"


def offsets_key(deployment: str, consumer: str) -> str:
    """Hash of applied Kafka offsets per ``topic:partition``: ``gov:{deployment}:offsets:{consumer}``."""
    return f"gov:{deployment}:offsets:{consumer}"


def log_ids_key(deployment: str, consumer: str) -> str:
    """Hash of the topic id of the log each applied offset refers to, per ``topic:partition``.

    ``gov:{deployment}:log-ids:{consumer}``: a partition whose topic id changed (the topic was
    recreated, or a broker without durable storage restarted) is a new log, and its applied offset
    means nothing there (docs/operations.md, "Log resets").
    """
    return f"gov:{deployment}:log-ids:{consumer}"
