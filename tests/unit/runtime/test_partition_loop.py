"""services/runtime/partition_loop.py without a broker: outages, rewinds, refused commits, log resets and rejoins.

The loop reads a ``MemorySource`` (services/testing/memory_source.py) and drives ``Ledger``, a
``PartitionWork`` that applies each record at most once against offsets it keeps as a service keeps
them in Redis, and records every violation instead of raising it (the loop would take a raise for an
outage). A script of actions, keyed by turn, plays the outages and the broker's changes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import count

import pytest

from schemas.errors import BackendUnavailableError
from schemas.names import Partition
from services.backends import BackendOutage
from services.kafka_clients import ConsumedRecord
from services.log_reset import LogReset
from services.runtime.partition_loop import PartitionLoop
from services.store.memory_store import MemoryStore
from services.testing.memory_source import MemorySource

TOPIC = "gov.test"
CONSUMER = "test"
MAX_TURNS = 400


@dataclass
class Ledger:
    """A ``PartitionWork`` that applies each record once, in order, and remembers what the loop asked of it."""

    source: MemorySource
    store: MemoryStore = field(default_factory=MemoryStore)
    applied: dict[Partition, int] = field(default_factory=dict)
    values: list[bytes] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    positioned: list[list[Partition]] = field(default_factory=list)
    revocations: list[list[Partition]] = field(default_factory=list)
    applied_at_revocation: list[int] = field(default_factory=list)
    resets: list[LogReset] = field(default_factory=list)
    redis_down: bool = False
    failing_batches: int = 0
    unsettled_turns: int = 0
    refuse_next_commit: dict[Partition, int] | None = None
    script: dict[int, Callable[[], None]] = field(default_factory=dict)
    turns: int = 0
    stop: Callable[[], None] | None = None
    reposition: Callable[[], None] | None = None

    def position(self, partitions: list[Partition]) -> dict[Partition, int]:
        if self.redis_down:
            raise BackendUnavailableError("redis is down", backend="redis")
        self.positioned.append(partitions)
        return self.next_offsets(partitions)

    def revoked(self, partitions: list[Partition]) -> None:
        self.revocations.append(partitions)
        self.applied_at_revocation.append(len(self.values))

    def finish_pending(self) -> None:
        return None

    def next_offsets(self, assigned: list[Partition]) -> dict[Partition, int]:
        return {partition: self.applied[partition] + 1 for partition in assigned if partition in self.applied}

    def rebuild(self, reset: LogReset, partition_count: int) -> None:
        self.resets.append(reset)
        self.applied.pop(Partition(reset.topic, reset.partition), None)
        self.store.reset_partition(CONSUMER, reset.field, reset.topic_id, {}, [])

    def polled(self, now_s: float) -> None:
        return None

    def process(self, records: list[ConsumedRecord]) -> None:
        positioned = {partition for partitions in self.positioned for partition in partitions}
        unpositioned = {Partition(r.topic, r.partition) for r in records} - positioned
        if unpositioned:
            self.violations.append(f"records of {sorted(unpositioned)} before their position was loaded")
        if self.redis_down or self.failing_batches:
            self.failing_batches = max(0, self.failing_batches - 1)
            starts: dict[Partition, int] = {}
            for record in records:
                starts.setdefault(Partition(record.topic, record.partition), record.offset)
            for partition, offset in starts.items():
                self.source.seek(partition, offset)
            raise BackendUnavailableError("redis is down", backend="redis")
        if self.refuse_next_commit is not None:
            self.applied.update(self.refuse_next_commit)
            self.refuse_next_commit = None
            assert self.reposition is not None
            self.reposition()
            return
        for record in records:
            partition = Partition(record.topic, record.partition)
            expected = self.applied.get(partition, -1) + 1
            if record.offset != expected:
                self.violations.append(f"{partition}: offset {record.offset}, expected {expected}")
            self.applied[partition] = record.offset
            assert record.value is not None
            self.values.append(record.value)

    def idle(self) -> None:
        return None

    def settled(self) -> bool:
        return self.turns >= self.unsettled_turns

    def after_turn(self) -> None:
        self.turns += 1
        action = self.script.get(self.turns)
        if action is not None:
            action()
        if self.turns >= MAX_TURNS and self.stop is not None:
            self.stop()


def _fill(source: MemorySource, partition: int, values: list[str]) -> None:
    for value in values:
        source.append(partition, value.encode())


def _run(source: MemorySource, ledger: Ledger, *, idle_exit_s: float = 3.0) -> PartitionLoop:
    """Run the loop to its idle exit on a clock that moves one second per reading; fail if it ran out of turns."""
    ticks = count()
    outage = BackendOutage("test", clock=lambda: float(next(ticks)))
    loop = PartitionLoop(
        consumer_name=CONSUMER,
        source=source,
        work=ledger,
        store=ledger.store,
        outage=outage,
        clock=lambda: float(next(ticks)),
    )
    ledger.stop, ledger.reposition = loop.stop, loop.reposition
    loop.run(idle_exit_s=idle_exit_s)
    assert ledger.turns < MAX_TURNS, "the loop never exited"
    assert ledger.violations == []
    return loop


def _values(*names: str) -> list[bytes]:
    return [name.encode() for name in names]


def test_every_record_is_applied_once_in_order_and_the_loop_exits_only_when_settled() -> None:
    source = MemorySource.empty(TOPIC, 2)
    _fill(source, 0, ["a0", "a1", "a2"])
    _fill(source, 1, ["b0", "b1"])
    ledger = Ledger(source, unsettled_turns=40)
    _run(source, ledger)
    assert sorted(ledger.values) == _values("a0", "a1", "a2", "b0", "b1")
    assert ledger.positioned == [[Partition(TOPIC, 0), Partition(TOPIC, 1)]]
    assert ledger.turns >= 40


def test_records_appended_while_running_are_read() -> None:
    source = MemorySource.empty(TOPIC, 1)
    _fill(source, 0, ["v0"])
    ledger = Ledger(source, script={2: lambda: _fill(source, 0, ["v1", "v2"])})
    _run(source, ledger)
    assert ledger.values == _values("v0", "v1", "v2")


def test_a_broker_outage_pauses_and_loses_nothing() -> None:
    source = MemorySource.empty(TOPIC, 1)
    _fill(source, 0, ["v0", "v1"])

    def broker_down() -> None:
        source.down = True
        _fill(source, 0, ["v2"])

    def broker_back() -> None:
        source.down = False

    ledger = Ledger(source, script={1: broker_down, 6: broker_back})
    loop = _run(source, ledger)
    assert ledger.values == _values("v0", "v1", "v2")
    assert len(source.waits) == 5  # one pause per failed turn, each at least as long as the last
    assert source.waits == sorted(source.waits)
    assert source.waits[0] < source.waits[-1]
    assert loop.outage.outages == 1


def test_a_failed_batch_is_rewound_and_applied_once_after_the_outage() -> None:
    source = MemorySource.empty(TOPIC, 1)
    _fill(source, 0, ["v0", "v1", "v2"])
    ledger = Ledger(source, failing_batches=3)
    loop = _run(source, ledger)
    assert ledger.values == _values("v0", "v1", "v2")
    assert len(source.waits) == 3
    assert loop.outage.outages == 1


def test_partitions_assigned_while_redis_is_down_stay_paused_until_positioned() -> None:
    source = MemorySource.empty(TOPIC, 1)
    _fill(source, 0, ["v0", "v1"])
    ledger = Ledger(source, redis_down=True, applied={Partition(TOPIC, 0): 0})
    read_while_down: list[int] = []

    def redis_back() -> None:
        read_while_down.append(len(ledger.values))
        ledger.redis_down = False

    ledger.script = {4: redis_back}
    _run(source, ledger)
    assert read_while_down == [0]
    assert ledger.positioned == [[Partition(TOPIC, 0)]]
    assert ledger.values == _values("v1")  # from the applied offset + 1, not the group's or the log's start


def test_a_refused_commit_repositions_from_the_truth_in_redis() -> None:
    source = MemorySource.empty(TOPIC, 1)
    _fill(source, 0, ["v0", "v1", "v2", "v3"])
    ledger = Ledger(source, refuse_next_commit={Partition(TOPIC, 0): 2})
    _run(source, ledger)
    assert ledger.values == _values("v3")
    assert len(ledger.positioned) == 2


def test_a_new_log_is_rebuilt_from_its_beginning_and_the_member_rejoins_once_the_layout_settles() -> None:
    source = MemorySource.empty(TOPIC, 1)
    _fill(source, 0, ["old0", "old1", "old2"])

    def recreated() -> None:
        source.recreate("log-2", 1)
        _fill(source, 0, ["new0", "new1"])

    ledger = Ledger(source, script={3: recreated}, unsettled_turns=30)
    _run(source, ledger)
    assert ledger.values == _values("old0", "old1", "old2", "new0", "new1")
    assert [(reset.partition, reset.applied_offset, reset.reason) for reset in ledger.resets] == [
        (0, 2, "topic_id_changed")
    ]
    assert source.rejoins == 1
    assert ledger.revocations == [[Partition(TOPIC, 0)]]
    assert ledger.applied_at_revocation == [5]  # the new log was read before the rejoin, not because of it


def test_a_partition_added_to_the_topic_is_read_after_the_rejoin() -> None:
    source = MemorySource.empty(TOPIC, 1)
    _fill(source, 0, ["a0"])

    def grown() -> None:
        source.logs[1] = []
        _fill(source, 1, ["b0"])

    ledger = Ledger(source, script={2: grown}, unsettled_turns=30)
    _run(source, ledger)
    assert sorted(ledger.values) == _values("a0", "b0")
    assert source.rejoins == 1
    assert ledger.positioned[-1] == [Partition(TOPIC, 0), Partition(TOPIC, 1)]


@pytest.mark.parametrize("redis_down", [False, True])
def test_a_wedged_member_rejoins_unless_it_waits_for_redis(redis_down: bool) -> None:
    source = MemorySource.empty(TOPIC, 1)
    _fill(source, 0, ["v0"])

    def more() -> None:
        ledger.redis_down = redis_down
        _fill(source, 0, ["v1"])

    def wedge() -> None:
        source.wedged = True

    def unwedge() -> None:
        source.wedged = False
        ledger.redis_down = False

    ledger = Ledger(source, script={2: more, 4: wedge, 8: unwedge})
    _run(source, ledger)
    assert ledger.values == _values("v0", "v1")
    assert source.rejoins == (0 if redis_down else 1)
