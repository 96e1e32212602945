"""A ``RecordSource`` over partitions kept in lists: the partition loop driven without a broker.

One member of a group of one: at its first poll it is assigned every partition of the topic, and a
test can take them away or hand them back (``reassign``), stop the broker (``down``), recreate the
topic on a new log (``recreate``), or wedge the member (``wedged``). Assignment callbacks run inside
``poll``, as kafka-python's do, and a partition assigned without a seek is read from the group's
committed offset, else from its beginning.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kafka.errors import KafkaConnectionError

from schemas.names import Partition
from services.kafka_clients import ConsumedRecord
from services.log_reset import TopicLayout
from services.runtime.source import Assignment


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """One record of a partition."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


@dataclass(slots=True)
class MemorySource:
    """A topic's partitions in memory, read as the only member of a consumer group.

    Attributes:
        topic: the topic's name.
        logs: each partition's records, by partition number.
        log_id: the topic id of its current log (``recreate`` gives a new one).
        down: while True every poll raises ``KafkaConnectionError`` (a broker outage).
        wedged: while True ``stalled`` says so (a member whose client stopped fetching).
        waits: every pause the loop waited out, seconds.
        rejoins: how often the member rejoined its group.
        polls: how many polls were asked (failed ones included).
    """

    topic: str
    logs: dict[int, list[MemoryRecord]]
    log_id: str = "log-1"
    down: bool = False
    wedged: bool = False
    waits: list[float] = field(default_factory=list)
    rejoins: int = 0
    polls: int = 0
    _positions: dict[Partition, int] = field(default_factory=dict)
    _committed: dict[Partition, int] = field(default_factory=dict)
    _paused: set[Partition] = field(default_factory=set)
    _assigned: list[Partition] = field(default_factory=list)
    _next_assignment: list[Partition] | None = None
    _callbacks: tuple[Assignment, Assignment] | None = None

    @classmethod
    def empty(cls, topic: str, partitions: int) -> MemorySource:
        """A topic of ``partitions`` empty partitions."""
        return cls(topic=topic, logs={number: [] for number in range(partitions)})

    def append(self, partition: int, value: bytes, key: bytes | None = None) -> int:
        """Append a record to ``partition``; return its offset."""
        log = self.logs[partition]
        log.append(MemoryRecord(self.topic, partition, len(log), key, value))
        return len(log) - 1

    def reassign(self, partitions: list[int]) -> None:
        """At the next poll, revoke what the member holds and assign ``partitions`` (a rebalance)."""
        self._next_assignment = [Partition(self.topic, number) for number in partitions]

    def recreate(self, log_id: str, partitions: int) -> None:
        """Delete the topic and create it again, empty, on a new log with ``partitions`` partitions."""
        self.log_id = log_id
        self.logs = {number: [] for number in range(partitions)}

    def subscribe(self, on_assigned: Assignment, on_revoked: Assignment) -> None:
        """Join: the next poll assigns every partition."""
        self._callbacks = (on_assigned, on_revoked)
        self._next_assignment = [Partition(self.topic, number) for number in sorted(self.logs)]

    def poll(self, max_records: int | None) -> list[ConsumedRecord]:
        """Run a pending rebalance, then return records from the positions of the unpaused partitions."""
        self.polls += 1
        if self.down:
            msg = "the broker is down"
            raise KafkaConnectionError(msg)
        self._rebalance()
        records: list[ConsumedRecord] = []
        for partition in self._assigned:
            if partition in self._paused:
                continue
            position = self._position(partition)
            taken = self.logs.get(partition.partition, [])[position:]
            if max_records is not None:
                taken = taken[: max(0, max_records - len(records))]
            records.extend(taken)
            self._positions[partition] = position + len(taken)
        return records

    def assigned(self) -> list[Partition]:
        """The partitions held now."""
        return list(self._assigned)

    def partition_count(self) -> int:
        """The topic's partitions."""
        return len(self.logs)

    def layout(self) -> TopicLayout | None:
        """The topic's id and partition numbers."""
        return self.log_id, frozenset(self.logs)

    def highwater(self, partition: Partition) -> int | None:
        """The partition's end; None when it is behind the position (as ``KafkaLogView.highwater``)."""
        end = self.end_offset(partition)
        return None if end is None or self._position(partition) > end else end

    def end_offset(self, partition: Partition) -> int | None:
        """The partition's end; None for a partition the topic does not have."""
        log = self.logs.get(partition.partition)
        return None if log is None else len(log)

    def topic_id(self, topic: str) -> str | None:
        """The current log's id."""
        return self.log_id if topic == self.topic else None

    def seek(self, partition: Partition, offset: int) -> None:
        """Read ``partition`` from ``offset``."""
        self._positions[partition] = offset

    def seek_to_beginning(self, partition: Partition) -> None:
        """Read ``partition`` from offset 0."""
        self._positions[partition] = 0

    def pause(self, partitions: list[Partition]) -> None:
        """Pause ``partitions``."""
        self._paused.update(partitions)

    def resume(self, partitions: list[Partition]) -> None:
        """Resume ``partitions``."""
        self._paused.difference_update(partitions)

    def wait(self, seconds: float) -> None:
        """Record the wait, nothing sleeps; a pending rebalance runs in it, as in a client that polls through a wait.

        Records the rebalance made fetchable are left where they are, for the next poll.
        """
        self.waits.append(seconds)
        if not self.down:
            self._rebalance()

    def stalled(self, now_s: float, *, waiting: bool) -> bool:
        """``wedged``, unless the service is waiting out Redis."""
        return self.wedged and not waiting

    def caught_up(self) -> bool:
        """Whether every assigned partition is read to its end."""
        return all(self._position(partition) >= (self.end_offset(partition) or 0) for partition in self._assigned)

    def lag(self) -> int:
        """Records between the positions and the ends."""
        return sum(max(0, (self.end_offset(p) or 0) - self._position(p)) for p in self._assigned)

    def commit(self) -> None:
        """Keep the positions as the group's offsets."""
        self._committed.update({partition: self._position(partition) for partition in self._assigned})

    def rejoin(self) -> None:
        """Join again as a new member: nothing held, positions forgotten, everything assigned at the next poll."""
        self.rejoins += 1
        self.wedged = False
        self._assigned = []
        self._positions = {}
        self._paused = set()
        self._next_assignment = [Partition(self.topic, number) for number in sorted(self.logs)]

    def close(self) -> None:
        """Leave the group."""
        self._assigned = []

    def _position(self, partition: Partition) -> int:
        return self._positions.get(partition, self._committed.get(partition, 0))

    def _rebalance(self) -> None:
        if self._next_assignment is None or self._callbacks is None:
            return
        on_assigned, on_revoked = self._callbacks
        assignment, self._next_assignment = self._next_assignment, None
        if self._assigned:
            on_revoked(list(self._assigned))
        for partition in self._assigned:
            self._positions.pop(partition, None)
            self._paused.discard(partition)
        self._assigned = assignment
        on_assigned(list(assignment))
