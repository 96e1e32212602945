"""What the policy service takes from ``gov.estimates``: any record shape read safely, and a ledger of snapshots.

``read_record`` turns the raw value of a record into a snapshot or a configuration record, or says
why it cannot: a null value (a tombstone), bytes that are not UTF-8 JSON, an oversized value, a
record of another shape. It never raises, so one bad record cannot stop the service; the service
dead-letters what it refuses, with this reason.

``SnapshotLedger`` is the trust boundary inside: a record that parses can still
be inconsistent, and one forged snapshot with a high version used to freeze its engine's policy,
because every genuine snapshot after it looked like an old duplicate. The stream processor numbers
an engine's snapshots 1, 2, 3, ... (one counter over all its engine-scope triggers) and takes each
at a position of the engine's telemetry partition, so the ledger keeps, per engine scope, the last version it
accepted, its snapshot id and position, and refuses:

- a version gap (a jump past last + 1);
- a new version at a position behind the last one's on the same partition;
- a replay (a version at or below the last) with another snapshot id than the one seen at that
  version, or at a position past the last one's.

A genuine replay (the processor re-producing snapshots after a restart: same versions, same ids,
earlier positions) passes to the decider, which skips it as a duplicate. A refused snapshot never
moves the ledger, so one forged record costs at most the decision of the version it imitated.
If a run of ``RESYNC_RUN`` snapshots numbered one after another is refused in a row, the ledger
follows it (``snapshot_ledger_resynced``): a lost snapshot cannot freeze an engine either.

Fleet contributions are not the ledger's: they are numbered by their slot, travel on the fleet
partition after the engine's other snapshots, and the fleet aggregator skips a second one for an
(engine, slot) (fold/fleet.py).

Deviation: the first snapshot the ledger sees of an engine is trusted, whatever its version; the
ledger is committed with the service's offsets, so "first" means the first since the deployment's
state was created. Authenticating the producer (a signed snapshot) would close that gap.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated

from pydantic import Field, TypeAdapter, ValidationError

from schemas.records import EstimateSnapshot, PolicyConfigRecord

MAX_RECORD_BYTES = 4 * 1024 * 1024
RESYNC_RUN = 3  # consecutive refused snapshots, numbered one after another, that the ledger follows
LEDGER_FORMAT = 1

LogRecord = EstimateSnapshot | PolicyConfigRecord
_LOG_RECORD: TypeAdapter[LogRecord] = TypeAdapter(Annotated[LogRecord, Field(discriminator="record_type")])


@dataclass(frozen=True, slots=True, kw_only=True)
class Refusal:
    """Why a record of ``gov.estimates`` is not taken: the reason, and the field at fault when one is."""

    reason: str
    field: str | None = None


def read_record(value: bytes | None) -> LogRecord | Refusal:
    """Parse one record value of ``gov.estimates``; never raises."""
    if value is None:
        return Refusal(reason="null value (a tombstone): nothing to read")
    if len(value) > MAX_RECORD_BYTES:
        return Refusal(reason=f"record of {len(value)} bytes is over the {MAX_RECORD_BYTES} byte limit")
    try:
        return _LOG_RECORD.validate_json(value)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or None
        return Refusal(reason=f"invalid record: {first['msg']}" + (f" at {where}" if where else ""), field=where)
    except ValueError as exc:
        return Refusal(reason=f"invalid record: {exc}")


@dataclass(slots=True)
class _Entry:
    """The last accepted snapshot of one scope, and the run of refused ones that may follow it."""

    version: int
    snapshot_id: str
    partition: int | None
    offset: int | None
    run_version: int | None = None
    run_count: int = 0


def _position(snapshot: EstimateSnapshot) -> tuple[int | None, int | None]:
    if not snapshot.offsets:
        return None, None
    last = snapshot.offsets[-1]
    return last.partition, last.offset


@dataclass(frozen=True, slots=True, kw_only=True)
class LedgerVerdict:
    """What the ledger made of a snapshot: refused (with the reason), or taken (``resynced`` after a run)."""

    refused: str | None
    resynced: bool = False


class SnapshotLedger:
    """Per engine scope, the last snapshot version taken; refuses snapshots inconsistent with it."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def scopes(self) -> list[str]:
        """The scopes it has taken snapshots of."""
        return sorted(self._entries)

    def check(self, snapshot: EstimateSnapshot) -> LedgerVerdict:
        """Take ``snapshot`` (moving the ledger when it is new) or say why not."""
        partition, offset = _position(snapshot)
        entry = self._entries.get(snapshot.scope)
        if entry is None:
            self._entries[snapshot.scope] = _Entry(snapshot.version, snapshot.snapshot_id, partition, offset)
            return LedgerVerdict(refused=None)
        problem = self._problem(entry, snapshot, partition, offset)
        if problem is None:
            if snapshot.version > entry.version:
                self._entries[snapshot.scope] = _Entry(snapshot.version, snapshot.snapshot_id, partition, offset)
            else:
                entry.run_version, entry.run_count = None, 0
            return LedgerVerdict(refused=None)
        if entry.run_version is not None and snapshot.version == entry.run_version + 1:
            entry.run_count += 1
        else:
            entry.run_count = 1
        entry.run_version = snapshot.version
        if entry.run_count >= RESYNC_RUN:
            self._entries[snapshot.scope] = _Entry(snapshot.version, snapshot.snapshot_id, partition, offset)
            return LedgerVerdict(refused=None, resynced=True)
        return LedgerVerdict(refused=problem)

    @staticmethod
    def _problem(entry: _Entry, snapshot: EstimateSnapshot, partition: int | None, offset: int | None) -> str | None:
        same_partition = partition is not None and partition == entry.partition and entry.offset is not None
        scope, version = snapshot.scope, snapshot.version
        if version > entry.version + 1:
            return f"snapshot version gap for {scope}: {version} after {entry.version}"
        if version == entry.version + 1:
            if same_partition and offset is not None and entry.offset is not None and offset < entry.offset:
                return f"snapshot {version} of {scope} is at offset {offset}, behind {entry.offset} of {entry.version}"
            return None
        if version == entry.version and snapshot.snapshot_id != entry.snapshot_id:
            return f"snapshot {version} of {scope} differs from the one already taken at that version"
        if same_partition and offset is not None and entry.offset is not None and offset > entry.offset:
            return f"old snapshot {version} of {scope} claims offset {offset}, past {entry.offset} of {entry.version}"
        return None

    def to_json(self) -> str:
        """The ledger as JSON, for the commit beside the service's offsets."""
        entries = {
            scope: [e.version, e.snapshot_id, e.partition, e.offset, e.run_version, e.run_count]
            for scope, e in sorted(self._entries.items())
        }
        return json.dumps({"format": LEDGER_FORMAT, "entries": entries}, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> SnapshotLedger:
        """Rebuild a ledger from ``to_json``'s output."""
        ledger = cls()
        for scope, (version, snapshot_id, partition, offset, run_version, run_count) in json.loads(text)[
            "entries"
        ].items():
            ledger._entries[scope] = _Entry(version, snapshot_id, partition, offset, run_version, run_count)
        return ledger
