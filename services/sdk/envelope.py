"""``EnvelopeStamper``: the envelope of every event one producer emits (schemas/envelope.py).

An engine's producer stamps each event with a fresh ``event_id``, its event time, the next ``seq`` and
the policy versions in effect. ``source_epoch`` tells a restarted producer apart from the one before
it: its ``seq`` starts again at 0 under a new epoch, so a consumer never mistakes a restart for
duplicates or a gap.
"""

from __future__ import annotations

from typing import TypedDict


class EnvelopeFields(TypedDict):
    """The envelope fields every event takes (schemas/envelope.py)."""

    event_id: str
    ts: float
    deployment: str
    engine_id: str
    dp_rank: int | None
    seq: int
    source_epoch: int
    policy_versions: dict[str, int]


class EnvelopeStamper:
    """Per-producer envelope state: ids, ``seq``, epoch and the policy versions in effect."""

    def __init__(self, *, engine_id: str, deployment: str, source_epoch: int = 0) -> None:
        self.engine_id = engine_id
        self.deployment = deployment
        self.source_epoch = source_epoch
        self.seq = 0
        self.policy_versions: dict[str, int] = {}

    def next(self, now_s: float, dp_rank: int | None = None) -> EnvelopeFields:
        """The next event's envelope: a fresh id and ``seq``, and the policy versions in effect."""
        seq = self.seq
        self.seq = seq + 1
        return EnvelopeFields(
            event_id=f"{self.engine_id}-{self.source_epoch}-{seq}",
            ts=now_s,
            deployment=self.deployment,
            engine_id=self.engine_id,
            dp_rank=dp_rank,
            seq=seq,
            source_epoch=self.source_epoch,
            policy_versions=self.policy_versions,
        )

    def applied(self, kind: str, version: int) -> None:
        """Record ``version`` of ``kind`` as in effect for every later event."""
        self.policy_versions = {**self.policy_versions, kind: version}
