"""The one error tree of Governor.

Everything Governor raises derives from ``GovernorError``, so one ``except`` catches it all::

    GovernorError
      InvalidInputError(GovernorError, ValueError)   bad event, field, file line or CLI argument
        LateEventError                                event time older than the allowed lateness
        FutureEventError                              event time further ahead than allowed
      ConfigError                                     settings that cannot work together
      StaleVersionError                               compare-and-set refused a policy write
      BackendUnavailableError                         Kafka or Redis unreachable or timed out
      UnreadableValueError                            a value in Redis of the wrong type (reported, replaced)

Errors keep their inputs as attributes and their message names the field, the value and where
it came from. Expected outcomes (a fit without enough data, a clamped decision, an offset already
applied) are return values, never exceptions.
"""

from __future__ import annotations

from typing import Literal

InputErrorCode = Literal[
    "no_value", "not_json", "oversized", "contract", "event_time_ahead", "event_time_behind", "stale_epoch"
]
"""What kind of bad input an ``InvalidInputError`` is, one word each; a dead letter carries it:

- ``no_value``: a record without a value (a tombstone);
- ``not_json``: the value is not JSON text (not UTF-8, truncated, another type);
- ``oversized``: the value is longer than ``schemas.events.MAX_EVENT_BYTES``;
- ``contract``: JSON that fails the contract (a wrong type, a missing field, another schema);
- ``event_time_ahead`` / ``event_time_behind``: an event whose time lies further from its engine's
  watermark than allowed (fold/event_guard.py);
- ``stale_epoch``: an event of an older producer generation than one already folded.
"""


class GovernorError(Exception):
    """Root of every error Governor raises."""


class InvalidInputError(GovernorError, ValueError):
    """A bad event, field, file line or argument.

    Attributes:
        field: dotted path of the offending field, or None when the whole input is bad.
        value: the offending value, when there is one.
        source: where the input came from (``line 17``, ``event_id=...``), or None.
        code: what kind of bad input it is, one word (``contract`` unless said otherwise); a dead
            letter carries it as its ``code`` (schemas/records.py lists them).
    """

    def __init__(
        self,
        message: str,
        *,
        field: str | None = None,
        value: object = None,
        source: str | None = None,
        code: InputErrorCode = "contract",
    ) -> None:
        super().__init__(message)
        self.field = field
        self.value = value
        self.source = source
        self.code = code


class LateEventError(InvalidInputError):
    """An event whose event time lies further behind the watermark than the allowed lateness."""

    def __init__(self, message: str, *, ts: float, watermark_s: float, allowed_lateness_s: float) -> None:
        super().__init__(message, field="ts", value=ts, code="event_time_behind")
        self.ts = ts
        self.watermark_s = watermark_s
        self.allowed_lateness_s = allowed_lateness_s


class FutureEventError(InvalidInputError):
    """An event whose event time lies further ahead of the watermark than the allowed lead."""

    def __init__(self, message: str, *, ts: float, watermark_s: float, allowed_lead_s: float) -> None:
        super().__init__(message, field="ts", value=ts, code="event_time_ahead")
        self.ts = ts
        self.watermark_s = watermark_s
        self.allowed_lead_s = allowed_lead_s


class ConfigError(GovernorError):
    """Settings that cannot work together."""


class StaleVersionError(GovernorError):
    """A compare-and-set refused a policy write because a newer or equal version is stored."""

    def __init__(self, message: str, *, key: str, offered_version: int, stored_version: int) -> None:
        super().__init__(message)
        self.key = key
        self.offered_version = offered_version
        self.stored_version = stored_version


class BackendUnavailableError(GovernorError):
    """Kafka or Redis could not be reached or timed out."""

    def __init__(self, message: str, *, backend: str) -> None:
        super().__init__(message)
        self.backend = backend


class UnreadableValueError(GovernorError):
    """A key in Redis holds a value of the wrong type (a list where a document belongs: Redis ``WRONGTYPE``).

    Not an outage: retrying reads the same value for ever. The caller reports it and replaces or
    skips the value (docs/contracts.md, "Failure behaviour").
    """

    def __init__(self, message: str, *, key: str) -> None:
        super().__init__(message)
        self.key = key
