"""Where a partition loop reads from: one topic as a consumer-group member sees it.

``RecordSource`` is the seam between the loop (services/runtime/partition_loop.py) and the client:
``KafkaSource`` is kafka-python's consumer, with the pacing and the wedge watches that only that
client needs; services/testing/memory_source.py keeps partitions in lists, so that outages, rewinds,
log resets and rejoins can be driven without a broker, as httpx's ``MockTransport`` stands in for
the network.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Protocol

import structlog
from kafka import TopicPartition
from kafka.errors import KafkaError

from schemas.names import Partition
from services.kafka_clients import (
    ConsumedRecord,
    IdlePace,
    KafkaLogView,
    PartitionEnds,
    Rebalance,
    caught_up,
    consumer_lag,
    group_consumer,
    subscribe,
)
from services.log_reset import TopicLayout
from services.membership import FetchStallWatch, ReadStallWatch, stall_bound_s, unfetched
from services.settings import KafkaClientTimeouts, KafkaSecurity

log = structlog.get_logger(__name__)

# What a source calls back when the group hands it partitions or takes them away.
Assignment = Callable[[list[Partition]], None]


class RecordSource(Protocol):
    """One topic read as a member of a consumer group; assignment callbacks run inside ``poll``."""

    @property
    def topic(self) -> str:
        """The topic read."""
        ...

    def subscribe(self, on_assigned: Assignment, on_revoked: Assignment) -> None:
        """Join the group; the callbacks are called from ``poll`` whenever the assignment changes."""
        ...

    def poll(self, max_records: int | None) -> list[ConsumedRecord]:
        """Records of the unpaused assigned partitions from their positions (each partition in offset order).

        The source paces its own waits: a poll returns as soon as records come, or after a wait of its choosing.

        Raises:
            KafkaError: the broker did not answer.
        """
        ...

    def assigned(self) -> list[Partition]:
        """The partitions held now."""
        ...

    def partition_count(self) -> int:
        """The topic's partitions as the source knows them (0 when it knows none)."""
        ...

    def layout(self) -> TopicLayout | None:
        """The topic's id and partition numbers, without a request; None when unknown."""
        ...

    def highwater(self, partition: Partition) -> int | None:
        """The end of the partition's log as last seen; None when unknown or behind the position (a log view)."""
        ...

    def end_offset(self, partition: Partition) -> int | None:
        """The partition's end for an event-time watermark: the last seen, else asked; never held back."""
        ...

    def topic_id(self, topic: str) -> str | None:
        """The topic's id; None when unknown."""
        ...

    def seek(self, partition: Partition, offset: int) -> None:
        """Read ``partition`` from ``offset`` at the next poll."""
        ...

    def seek_to_beginning(self, partition: Partition) -> None:
        """Read ``partition`` from the start of its log at the next poll."""
        ...

    def pause(self, partitions: list[Partition]) -> None:
        """Fetch nothing from ``partitions`` until resumed (they stay assigned)."""
        ...

    def resume(self, partitions: list[Partition]) -> None:
        """Fetch from ``partitions`` again."""
        ...

    def wait(self, seconds: float) -> None:
        """Wait ``seconds`` with every partition paused, keeping the group membership (polling if the client must).

        A rebalance may run inside the wait (its callbacks resume the partitions they position); any
        record fetched then is left to be read again by the next poll, never consumed unseen.
        """
        ...

    def stalled(self, now_s: float, *, waiting: bool) -> bool:
        """Whether the member is wedged (partitions neither fetched nor read past any rebalance): rejoin then.

        ``waiting``: the service is waiting out a Redis outage and rereads the same records on purpose.
        """
        ...

    def caught_up(self) -> bool:
        """Whether every assigned partition has been read to its end."""
        ...

    def lag(self) -> int:
        """Records between the positions and the ends of the assigned partitions (0 when unknown)."""
        ...

    def commit(self) -> None:
        """Store the positions as the group's offsets (they inform lag tools; Redis holds the ones that count)."""
        ...

    def rejoin(self) -> None:
        """Leave the group and join it again as a new member, with the same callbacks."""
        ...

    def close(self) -> None:
        """Leave the group."""
        ...


class KafkaSource:
    """A ``RecordSource`` on kafka-python: fetches paced by ``IdlePace``, and the client's wedges watched.

    kafka-python 3.0 can stop fetching a partition it holds (services/membership.py), and a member
    closed and built again is the cure: ``stalled`` reports both wedges, ``rejoin`` builds a fresh
    member of the same group.
    """

    def __init__(
        self,
        *,
        service: str,
        topic: str,
        bootstrap: str,
        group_id: str,
        timeouts: KafkaClientTimeouts,
        security: KafkaSecurity,
        poll_timeout_ms: int,
        max_poll_records: int = 500,
        commit_timeout_ms: int = 2000,
    ) -> None:
        """Build the first member of ``group_id``; a poll waits ``poll_timeout_ms`` while records flow, longer idle.

        ``service`` names the member in the wedge watches' logs.
        """
        self.topic = topic
        self._new_consumer = partial(
            group_consumer,
            bootstrap,
            group_id,
            max_poll_records=max_poll_records,
            timeouts=timeouts,
            security=security,
        )
        self._commit_timeout_ms = commit_timeout_ms
        self._consumer = self._new_consumer()
        self._view = KafkaLogView(self._consumer)
        self._ends = PartitionEnds(self._consumer)
        self._pace = IdlePace(self._consumer, fetch_wait_ms=timeouts.fetch_max_wait_ms, poll_timeout_ms=poll_timeout_ms)
        self._stall_watch = FetchStallWatch(service, stall_bound_s(timeouts))
        self._read_watch = ReadStallWatch(service, stall_bound_s(timeouts))
        self._callbacks: tuple[Assignment, Assignment] | None = None

    def subscribe(self, on_assigned: Assignment, on_revoked: Assignment) -> None:
        """Join the group with the topic's metadata fetched first (``services.kafka_clients.subscribe``)."""
        self._callbacks = (on_assigned, on_revoked)
        subscribe(self._consumer, self.topic, Rebalance(self._assigned, self._revoked))

    def poll(self, max_records: int | None) -> list[ConsumedRecord]:
        """One poll, waiting ``poll_timeout_ms`` for records while they flow and longer once idle (``IdlePace``)."""
        batch = self._consumer.poll(timeout_ms=self._pace.poll_timeout_ms, max_records=max_records)
        records: list[ConsumedRecord] = [record for part in batch.values() for record in part]
        self._pace.polled(len(records))
        return records

    def assigned(self) -> list[Partition]:
        """The partitions held now."""
        return [Partition(tp.topic, tp.partition) for tp in self._consumer.assignment()]

    def partition_count(self) -> int:
        """The topic's partitions in the client's metadata (fetched when unknown)."""
        return len(self._consumer.partitions_for_topic(self.topic) or ())

    def layout(self) -> TopicLayout | None:
        """The topic's id and partitions in the client's metadata (``KafkaLogView.layout``)."""
        return self._view.layout(self.topic)

    def highwater(self, partition: Partition) -> int | None:
        """The last fetch's end, None when behind the position (``KafkaLogView.highwater``)."""
        return self._view.highwater(partition)

    def end_offset(self, partition: Partition) -> int | None:
        """The last fetch's end, else the broker's (``PartitionEnds``)."""
        return self._ends.highwater(TopicPartition(*partition))

    def topic_id(self, topic: str) -> str | None:
        """The topic's id in the client's metadata."""
        return self._view.topic_id(topic)

    def seek(self, partition: Partition, offset: int) -> None:
        """Read ``partition`` from ``offset``."""
        self._consumer.seek(TopicPartition(*partition), offset)

    def seek_to_beginning(self, partition: Partition) -> None:
        """Read ``partition`` from its log's beginning."""
        self._consumer.seek_to_beginning(TopicPartition(*partition))

    def pause(self, partitions: list[Partition]) -> None:
        """Pause ``partitions``."""
        self._consumer.pause(*(TopicPartition(*partition) for partition in partitions))

    def resume(self, partitions: list[Partition]) -> None:
        """Resume ``partitions``."""
        self._consumer.resume(*(TopicPartition(*partition) for partition in partitions))

    def wait(self, seconds: float) -> None:
        """Poll through the wait so that the group keeps this member; whatever that poll fetched is read again.

        The partitions are paused, but a rebalance inside this poll assigns them afresh and the loop's
        assignment callback resumes each once it is positioned, so the same poll can return records.
        Each partition is sought back to the first of them: dropped here, they were consumed and never
        processed (a broker paused past the member's poll interval lost 1,416 events of one engine so).
        """
        batch = self._consumer.poll(timeout_ms=int(seconds * 1000))
        for tp, records in batch.items():
            if records:
                self._consumer.seek(tp, records[0].offset)

    def stalled(self, now_s: float, *, waiting: bool) -> bool:
        """A positioned partition not fetched, or not read past its end, for longer than any rebalance takes."""
        return self._stall_watch.rejoin_due(unfetched(self._consumer), now_s) or self._read_watch.rejoin_due(
            self._consumer, now_s, waiting=waiting
        )

    def caught_up(self) -> bool:
        """``services.kafka_clients.caught_up``."""
        return caught_up(self._consumer)

    def lag(self) -> int:
        """``services.kafka_clients.consumer_lag``: local to the client, no request."""
        return consumer_lag(self._consumer)

    def commit(self) -> None:
        """Commit the positions as the group's offsets; a failure is only logged (they inform lag tools)."""
        try:
            self._consumer.commit(timeout_ms=self._commit_timeout_ms)
        except KafkaError as exc:
            log.debug("kafka_offset_commit_skipped", error=str(exc))

    def rejoin(self) -> None:
        """Close the consumer and subscribe a fresh one (a new member id) with the same callbacks.

        Unsubscribing and subscribing again on the same client during a rebalance left it without
        partitions for the rest of a 3-minute test on Tansu, and Tansu kept handing the same member
        its earlier assignment however often it rejoined: a new consumer is what works on both brokers.
        """
        self._read_watch.rejoined()
        self._consumer.close()
        self._consumer = self._new_consumer()
        self._pace.replaced(self._consumer)
        self._view = KafkaLogView(self._consumer)
        self._ends = PartitionEnds(self._consumer)
        if self._callbacks is not None:
            subscribe(self._consumer, self.topic, Rebalance(self._assigned, self._revoked))

    def close(self) -> None:
        """Leave the group and close the consumer."""
        self._consumer.close()

    def _assigned(self, partitions: list[TopicPartition]) -> None:
        self._ends.assigned()
        if self._callbacks is not None:
            self._callbacks[0]([Partition(tp.topic, tp.partition) for tp in partitions])

    def _revoked(self, partitions: list[TopicPartition]) -> None:
        if self._callbacks is not None:
            self._callbacks[1]([Partition(tp.topic, tp.partition) for tp in partitions])
