"""The retention and clean-up each of Governor's topics is created with (``create_topics``, compose's ``topics``).

A broker's defaults are no design: Apache Kafka deletes every record after 7 days
(``log.retention.hours=168``), whatever the record is. Each topic here says what it keeps, and why:

- ``gov.telemetry`` and ``gov.deadletter``: deleted after ``telemetry_ms`` (7 days by default, the
  engine retention of services/settings.py: an engine's estimates outlive its last event by as long
  as its events stay on the log). No size bound: deleting by size would drop records the stream
  processor has not folded yet after a long outage; size the disk for a week of telemetry instead.
- ``gov.policy.decisions``: the audit trail ``governor explain`` and ``governor shadow`` read, kept
  ``decisions_ms`` (30 days): longer than the telemetry the decisions came from, still bounded.
- ``gov.estimates``: compacted, never deleted by age. Every record on it is keyed (a snapshot by its
  scope, a policy configuration by its name, services/policy/config_records.py), and compaction only
  removes a record once it is ``telemetry_ms`` old and a newer one of its key exists
  (``min.compaction.lag.ms``). So while the telemetry is on the log every snapshot is too (a replay
  of the window decides as live did), and after it the last snapshot of every scope and the last
  configuration of every name stay for good: the policy configuration never expires.

- ``gov.checkpoints``: compacted, never deleted by age, and nothing to wait for: only the last checkpoint
  of each partition of each service is ever read (services/checkpoints.py). Its records hold a
  partition's whole state, so they may be up to ``CHECKPOINT_MAX_BYTES`` (16 MiB) where Kafka's
  default is 1 MiB.

Segments roll every ``segment_ms`` (1 day; Kafka's default is 7): retention and compaction act on
closed segments only, so a quiet topic would otherwise keep records up to twice its retention.
"""

from __future__ import annotations

from dataclasses import dataclass

from schemas.names import (
    CHECKPOINT_MAX_BYTES,
    CHECKPOINTS_TOPIC,
    DEADLETTER_TOPIC,
    DECISIONS_TOPIC,
    ESTIMATES_TOPIC,
    TELEMETRY_TOPIC,
)

DAY_MS = 86_400_000


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicRetention:
    """How long the topics keep their records, milliseconds.

    Attributes:
        telemetry_ms: retention of ``gov.telemetry`` and ``gov.deadletter``, and the age before a
            snapshot or configuration on ``gov.estimates`` may be compacted away.
        decisions_ms: retention of ``gov.policy.decisions``.
        segment_ms: how often a segment rolls, so that retention and compaction reach quiet topics.
    """

    telemetry_ms: int = 7 * DAY_MS
    decisions_ms: int = 30 * DAY_MS
    segment_ms: int = DAY_MS


DEFAULT_RETENTION = TopicRetention()


def topic_configs(topic: str, retention: TopicRetention = DEFAULT_RETENTION) -> dict[str, str]:
    """The topic-level configuration ``topic`` is created with (Kafka's names and string values).

    A topic not of Governor's gets an empty configuration: the broker's defaults.
    """
    segment = {"segment.ms": str(retention.segment_ms)}
    if topic in (TELEMETRY_TOPIC, DEADLETTER_TOPIC):
        return _deleted_after(retention.telemetry_ms) | segment
    if topic == DECISIONS_TOPIC:
        return _deleted_after(retention.decisions_ms) | segment
    if topic == ESTIMATES_TOPIC:
        return {"cleanup.policy": "compact", "min.compaction.lag.ms": str(retention.telemetry_ms)} | segment
    if topic == CHECKPOINTS_TOPIC:
        return {"cleanup.policy": "compact", "max.message.bytes": str(CHECKPOINT_MAX_BYTES)} | segment
    return {}


def _deleted_after(retention_ms: int) -> dict[str, str]:
    """Records deleted once ``retention_ms`` old, never by the partition's size."""
    return {"cleanup.policy": "delete", "retention.ms": str(retention_ms), "retention.bytes": "-1"}
