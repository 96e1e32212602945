"""One consumer-group member's loop over its partitions: the shell the kafka-python services run in.

The stream processor (services/stream/processor.py) and the policy service
(services/policy/service.py) each read one topic as a member of their group and keep what they
derive in Redis at applied offsets. Everything about being a member is the same for both and lives
here; what a service does with its records is its ``PartitionWork``, and where they come from is a
``RecordSource`` (services/runtime/source.py: kafka-python, or partitions in memory for tests). Each
turn of the loop:

1. positions the partitions assigned while Redis was down (``PartitionWork.position``), then lets the
   work finish what a failure left half done (``finish_pending``);
2. polls, with a ``BatchSizer`` as many records as the last batches show the work handles within a
   quarter of the poll interval (services/runtime/batch_size.py);
3. rejoins the group as a new member when the topic's layout changed and held still
   (services/log_reset.py, ``LayoutWatch``) or the source is wedged (services/membership.py): the
   records of that poll are dropped unprocessed, the next owner reads them again from the applied
   offsets;
4. checks every assigned partition against the log its applied offset came from
   (services/log_reset.py): one on a new log is rebuilt by the work (``rebuild``) and read again from
   its beginning, and its records of this poll are dropped;
5. tells the work the time (``polled``), exports the lag, then hands the records to ``process``, or
   with none calls ``idle`` and, when asked to, exits once nothing is pending (``settled``), every
   partition is assigned and read to its end, and ``idle_exit_s`` has passed without records.

Redis and broker outages of any length are waited out, never raised: a turn that raised
``BackendUnavailableError`` or a ``KafkaError`` pauses the partitions and waits, keeping the group
membership, with ``BackendOutage``'s pacing (one log line when an outage starts, one when it ends);
what the work does with its half-done batch is its own (it discards and rewinds, or keeps it for
``finish_pending``). Partitions assigned while Redis is down stay paused until ``position`` succeeds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

import structlog
from kafka.errors import KafkaError

from schemas.errors import BackendUnavailableError
from schemas.names import Partition
from services.backends import BackendOutage
from services.health import ServiceMetrics
from services.kafka_clients import ConsumedRecord
from services.log_reset import LayoutWatch, LogReset, LogWatch, TopicLayout
from services.runtime.batch_size import BatchSizer
from services.runtime.source import RecordSource
from services.store.protocol import Store

log = structlog.get_logger(__name__)


class PartitionWork(Protocol):
    """What a service does with its partitions' records; ``PartitionLoop`` calls it and owns the source."""

    def position(self, partitions: list[Partition]) -> dict[Partition, int]:
        """Load the state of newly assigned ``partitions``; return the offset to read each from (absent: the group's).

        Raises:
            BackendUnavailableError: Redis did not answer; the loop keeps the partitions paused and asks again.
        """
        ...

    def revoked(self, partitions: list[Partition]) -> None:
        """The ``partitions`` go to another member (a rebalance, or this member's rejoin): commit and forget them."""
        ...

    def finish_pending(self) -> None:
        """Before each poll: finish what a failed turn left half done (nothing when there is none)."""
        ...

    def next_offsets(self, assigned: list[Partition]) -> dict[Partition, int]:
        """The next offset to apply of each of the ``assigned`` partitions that has an applied offset."""
        ...

    def rebuild(self, reset: LogReset, partition_count: int) -> None:
        """The partition is on a new log: forget what came from the old one (the loop reads it from its start)."""
        ...

    def polled(self, now_s: float) -> None:
        """After each poll that kept the member, at ``now_s`` of the loop's clock (wall-clock waits live here)."""
        ...

    def process(self, records: list[ConsumedRecord]) -> None:
        """Handle one poll's records (several partitions, each in offset order)."""
        ...

    def idle(self) -> None:
        """A poll brought no record."""
        ...

    def settled(self) -> bool:
        """Whether nothing is pending: an idle exit may happen now."""
        ...

    def after_turn(self) -> None:
        """After every turn, a failed one included."""
        ...


class PartitionLoop:
    """A consumer-group member of one topic driving a ``PartitionWork``; see the module docstring for a turn."""

    def __init__(
        self,
        *,
        consumer_name: str,
        source: RecordSource,
        work: PartitionWork,
        store: Store,
        outage: BackendOutage,
        clock: Callable[[], float] = time.monotonic,
        metrics: ServiceMetrics | None = None,
        sizer: BatchSizer | None = None,
    ) -> None:
        """Subscribe ``source``; nothing is read until ``run``.

        ``consumer_name`` names the member's applied offsets and log ids in Redis.
        """
        self.source = source
        self._work = work
        self._clock = clock
        self._metrics = metrics
        self._sizer = sizer
        self.outage = outage
        self._log_watch = LogWatch(consumer=consumer_name, store=store, metrics=metrics)
        self._layout_watch = LayoutWatch(source.topic)
        self._unpositioned: list[Partition] = []
        self._stopped = False
        source.subscribe(self._assigned, self._work.revoked)

    def reposition(self) -> None:
        """Pause every partition until ``position`` runs again (the work found Redis ahead of its own state)."""
        self._unpositioned = self.source.assigned()
        self.source.pause(self._unpositioned)

    def stop(self) -> None:
        """Ask ``run`` to return after the current turn."""
        self._stopped = True

    def close(self) -> None:
        """Leave the group."""
        self.source.close()

    def run(self, *, idle_exit_s: float | None = None) -> None:
        """Turn until ``stop`` (or ``idle_exit_s`` without records while assigned, settled and caught up)."""
        idle_since = self._clock()
        while not self._stopped:
            try:
                if self._unpositioned:
                    self._position(self._unpositioned)
                self._work.finish_pending()
                records = self._poll()
                if records:
                    idle_since = self._clock()
                    self._process(records)
                elif records is not None:
                    self._work.idle()
                    if not self.source.assigned():
                        idle_since = self._clock()
                    elif idle_exit_s is not None and self._clock() - idle_since > idle_exit_s and self._exit_ready():
                        break
            except BackendUnavailableError as exc:
                self._failed()
                self._pause(self.outage.failed(exc, exc.backend))
                idle_since = self._clock()
            except KafkaError as exc:
                self._failed()
                self._pause(self.outage.failed(exc, "kafka"))
                idle_since = self._clock()
            self._work.after_turn()

    def _poll(self) -> list[ConsumedRecord] | None:
        """One poll's records on current logs, or None when the member rejoined instead."""
        polled = self.source.poll(None if self._sizer is None else self._sizer.records)
        layout = self.source.layout()
        now_s = self._clock()
        if self._layout_watch.rejoin_due(layout, now_s) or self.source.stalled(now_s, waiting=self.outage.redis_down):
            self._rejoin()
            return None
        records = self._on_current_logs(polled, layout)
        self._work.polled(now_s)
        if self._metrics is not None:
            self._metrics.lag_measured(self.source.lag(), len(self.source.assigned()))
        return records

    def _process(self, records: list[ConsumedRecord]) -> None:
        """Hand ``records`` to the work, timed for the sizer on real time (the client's poll deadline runs on it)."""
        started = time.monotonic()
        self._work.process(records)
        if self._sizer is not None:
            self._sizer.observe(len(records), time.monotonic() - started)

    def _exit_ready(self) -> bool:
        return not self._unpositioned and self._work.settled() and self.source.caught_up()

    def _assigned(self, partitions: list[Partition]) -> None:
        """Position every newly assigned partition (paused until Redis answers)."""
        try:
            self._position(partitions)
        except BackendUnavailableError as exc:
            self._unpositioned = list(partitions)
            self.source.pause(partitions)
            self.outage.failed(exc, exc.backend)

    def _position(self, partitions: list[Partition]) -> None:
        """Let the work load ``partitions`` and seek where it says, then record their logs and resume them."""
        for partition, offset in self._work.position(partitions).items():
            self.source.seek(partition, offset)
        self._log_watch.assigned(self.source, partitions)
        self.source.resume(partitions)
        self._unpositioned = []
        self.outage.succeeded("redis")

    def _rejoin(self) -> None:
        """Give the assigned partitions back (the work commits them) and rejoin the group as a new member.

        Done when the topic's layout changed and held still, or the source is wedged. The records of
        the poll that saw it are dropped unprocessed: the partitions' next owner reads them again from
        the applied offsets.
        """
        self._work.revoked(self.source.assigned())
        self._unpositioned = []
        self.source.rejoin()

    def _failed(self) -> None:
        """Tell health a turn failed and is retried: the loop turning is no progress then."""
        if self._metrics is not None:
            self._metrics.batch_failed()

    def _on_current_logs(self, records: list[ConsumedRecord], layout: TopicLayout | None) -> list[ConsumedRecord]:
        """Rebuild every partition found on a new log (read again from its beginning); keep the others' records.

        Only partitions the topic has now are checked: one missing from a short-lived topic with fewer
        partitions (auto-created after a broker restart) is on no log, and recording that topic's id
        for it made the real topic's log look new again once it was back, so its records were read twice.
        """
        next_offsets = self._work.next_offsets(self.source.assigned())
        if layout is not None:
            next_offsets = {tp: offset for tp, offset in next_offsets.items() if tp[1] in layout[1]}
        resets = self._log_watch.check(self.source, next_offsets)
        for reset in resets:
            self._work.rebuild(reset, self.source.partition_count())
            self.source.seek_to_beginning(Partition(reset.topic, reset.partition))
        rebuilt = {(reset.topic, reset.partition) for reset in resets}
        return [record for record in records if (record.topic, record.partition) not in rebuilt]

    def _pause(self, pause_s: float) -> None:
        """Wait ``pause_s`` with the partitions paused, keeping the group membership."""
        self.source.pause(self.source.assigned())
        self.source.wait(pause_s)
        self.source.resume([tp for tp in self.source.assigned() if tp not in self._unpositioned])
