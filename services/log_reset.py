"""Log reset detection: a partition whose log is no longer the one its applied offsets refer to.

The applied offsets in Redis (DESIGN principle 3) mean something only on the log they were read
from. A broker without durable storage (the embedded Tansu broker keeps its log in memory) that
restarts, or a topic deleted and created again, gives a new, empty log under the same name: the
stored offsets are then ahead of it, and a consumer that trusted them would skip every new record
up to the old offset without a word. Two signs tell a new log, checked for every assigned
partition on every poll:

- ``topic_id_changed``: the topic id in the broker's metadata (Kafka 2.8+, Tansu) differs from
  the one recorded with the partition's applied offsets (``gov:{dep}:log-ids:{consumer}``);
- ``log_end_behind_applied``: the partition's high watermark, as the last fetch response gave it,
  is below the next offset to read (applied + 1). Fetch responses carry the true end on Tansu too,
  unlike its ListOffsets answer (the last batch's *base* offset + 1, services/replay/replay.py), so
  a healthy log never trips it.

The two signs can arrive in either order. A client's metadata is refreshed every few seconds, so a
fetch from the new log can show its end behind the applied offset while the metadata still names
the old topic id. That reset leaves the old id marked as superseded for the partition; the new id,
when the metadata shows it, is then recorded without a second reset (which would read the new log
from its beginning a second time).

What the services then do is the documented rule (docs/operations.md, "Log resets"): say so in one
error line naming topic, partition, offsets and topic ids, count it in ``governor_log_resets``, and
rebuild the partition from the new log: forget its applied offset, reset the state folded from it
(engines' estimates, fleet aggregators) and read it from its beginning. Policy documents are kept:
they stay valid until their ``valid_until`` or until a decision from the new log replaces them.
Nothing is ever skipped silently.

A recreated topic can also come back with another partition count (on a broker restarted without
its log, a client's metadata request may create a topic with the broker's default count before
``governor stack up`` recreates it with its own). The group's assignment must then be computed
again from the new layout; ``LayoutWatch`` tells a member when its topic's id or partitions changed
and then held still, and the member rejoins its group under a fresh member id
(services/stream/processor.py). A rejoin
under the same id is not enough on Tansu 0.6.0: its group coordinator answered the member's
SyncGroup with the member's earlier assignment instead of the one the leader had just sent (the
leader assigned the 8 partitions of the recreated topic, the member received partitions 0-3 of the
4-partition topic before it, rejoin after rejoin), so records on partitions 4-7 waited unread.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

import structlog

from schemas.names import Partition
from services.health import ServiceMetrics
from services.store.protocol import Store

log = structlog.get_logger(__name__)

TopicLayout = tuple[str | None, frozenset[int]]  # (topic id, partition numbers) in a client's metadata
ResetReason = Literal["topic_id_changed", "log_end_behind_applied"]
LAYOUT_SETTLE_S = 10.0  # one metadata refresh (services/kafka_clients.py, METADATA_MAX_AGE_MS) after the last change


class LogView(Protocol):
    """What the check needs of a consumer: a partition's high watermark and a topic's id."""

    def highwater(self, partition: Partition) -> int | None:
        """The partition's end offset as the last fetch response gave it, None before any."""
        ...

    def topic_id(self, topic: str) -> str | None:
        """The topic's id in the broker's metadata, None when the broker gives none."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class LogReset:
    """One partition found on a new log."""

    topic: str
    partition: int
    applied_offset: int
    log_end: int | None
    recorded_topic_id: str | None
    topic_id: str | None
    reason: ResetReason

    @property
    def field(self) -> str:
        """The partition's field in the applied-offsets hash."""
        return Partition(self.topic, self.partition).field


class LogWatch:
    """Checks a service's assigned partitions against the logs their applied offsets came from."""

    def __init__(self, *, consumer: str, store: Store, metrics: ServiceMetrics | None = None) -> None:
        self._consumer = consumer
        self._store = store
        self._metrics = metrics
        self._recorded: dict[str, str] = {}
        self._superseded: dict[str, str] = {}

    def assigned(self, view: LogView, partitions: Iterable[Partition]) -> None:
        """Load the recorded topic ids; record the current one of partitions that have none yet."""
        self._recorded = self._store.log_ids(self._consumer)
        first_seen: dict[str, str] = {}
        for topic, partition in partitions:
            field = Partition(topic, partition).field
            topic_id = view.topic_id(topic)
            if field not in self._recorded and topic_id is not None:
                first_seen[field] = topic_id
        if first_seen:
            self._store.record_log_ids(self._consumer, first_seen)
            self._recorded.update(first_seen)

    def check(self, view: LogView, next_offsets: Mapping[Partition, int]) -> list[LogReset]:
        """Return the partitions (with an applied offset: ``next_offsets`` = applied + 1) now on a new log.

        Each one is logged as an error and counted; the caller rebuilds it (and records its new
        topic id with the reset, ``Store.reset_partition``).
        """
        resets: list[LogReset] = []
        first_seen: dict[str, str] = {}
        for (topic, partition), next_offset in sorted(next_offsets.items()):
            field = Partition(topic, partition).field
            topic_id = view.topic_id(topic)
            recorded = self._recorded.get(field)
            high = view.highwater(Partition(topic, partition))
            reason: ResetReason | None = None
            awaiting_id = recorded is None or self._superseded.get(field) == recorded
            if topic_id is not None and topic_id != recorded:
                if awaiting_id:
                    first_seen[field] = topic_id
                    self._superseded.pop(field, None)
                else:
                    reason = "topic_id_changed"
            if reason is None and high is not None and high < next_offset:
                reason = "log_end_behind_applied"
            if reason is None:
                continue
            reset = LogReset(
                topic=topic,
                partition=partition,
                applied_offset=next_offset - 1,
                log_end=high,
                recorded_topic_id=recorded,
                topic_id=topic_id,
                reason=reason,
            )
            resets.append(reset)
            if reason == "log_end_behind_applied" and topic_id is not None and topic_id == recorded:
                self._superseded[field] = topic_id
            elif topic_id is not None:
                self._recorded[field] = topic_id
            self._report(reset)
        if first_seen:
            self._store.record_log_ids(self._consumer, first_seen)
            self._recorded.update(first_seen)
        return resets

    def _report(self, reset: LogReset) -> None:
        log.error(
            "log_reset_detected",
            consumer=self._consumer,
            topic=reset.topic,
            partition=reset.partition,
            applied_offset=reset.applied_offset,
            log_end=reset.log_end,
            recorded_topic_id=reset.recorded_topic_id,
            topic_id=reset.topic_id,
            reason=reset.reason,
            rule="rebuild the partition from the new log's beginning; policy documents kept until replaced",
        )
        if self._metrics is not None:
            self._metrics.log_reset(reset.topic, reset.partition, reset.reason)


class LayoutWatch:
    """Tells a group member when to rejoin its group: once its topic's layout changed and then held still.

    The layout is the topic's id and partition numbers in the member's metadata. After a broker
    restart it can change several times within seconds (the topic auto-created with the default
    count, deleted, created again with its own); rejoining at each change only churns the group,
    and on Tansu a member closed while its join was pending left the group without any assignment
    for minutes. So the member rejoins once, ``settle_s`` after the last change. The first layout
    seen is only recorded; an unknown or empty layout (a topic missing from the metadata for a
    moment) is ignored.
    """

    def __init__(self, topic: str, settle_s: float = LAYOUT_SETTLE_S) -> None:
        self.topic = topic
        self._settle_s = settle_s
        self._seen: TopicLayout | None = None
        self._changed_at_s: float | None = None

    def rejoin_due(self, layout: TopicLayout | None, now_s: float) -> bool:
        """Record ``layout`` as seen at ``now_s``; True once, when a changed layout has held for ``settle_s``."""
        if layout is not None and layout[1]:
            previous, self._seen = self._seen, layout
            if previous is not None and previous != layout:
                self._changed_at_s = now_s
                log.warning(
                    "topic_layout_changed",
                    topic=self.topic,
                    topic_id=layout[0],
                    partitions=len(layout[1]),
                    previous_topic_id=previous[0],
                    previous_partitions=len(previous[1]),
                    rule="rejoin the group under a fresh member id once the layout holds still",
                )
        if self._changed_at_s is not None and now_s - self._changed_at_s >= self._settle_s:
            self._changed_at_s = None
            return True
        return False
