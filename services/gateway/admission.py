"""Admission documents acting on the request path (schemas/policy_docs/admission.py, policies/admission).

Each upstream has its own admission document (kind ``admission``, scope its engine id). At each routing
decision an upstream whose level is ``ok`` takes the request, a ``busy`` one takes it with probability
``admit_fraction`` (a seeded draw, so it gets that share of the requests offered to it), an ``overloaded``
one takes none. A DP rank under BF-IO (services/gateway/ranks.py) has each of its free slots offered to an
assignment round with that probability instead. Without a valid document (none yet, control plane down past
``valid_until``) the safe default is ``ok``: the gateway keeps serving. Every document version acted on is acknowledged.
"""

from __future__ import annotations

import random

from schemas.policy_docs.admission import AdmissionLevel, AdmissionPolicy
from services.gateway.telemetry import GatewayTelemetry
from services.sdk.protocol import PolicySource


class AdmissionGate:
    """Reads each upstream's admission document and draws the busy admissions."""

    def __init__(self, policies: PolicySource, telemetry: GatewayTelemetry, *, seed: int) -> None:
        self._policies = policies
        self._telemetry = telemetry
        self._rng = random.Random(seed)

    def level(self, engine_id: str, now_s: float) -> tuple[AdmissionLevel, float]:
        """(level, admit_fraction) of ``engine_id`` at ``now_s``; ``("ok", 1.0)`` without a valid document."""
        document = self._policies.current("admission", engine_id, now_s)
        if not isinstance(document, AdmissionPolicy):
            return "ok", 1.0
        self._telemetry.applied(document)
        return document.payload.level, document.payload.admit_fraction

    def admits(self, engine_id: str, now_s: float) -> bool:
        """Whether ``engine_id`` takes one more request now (ok: yes; busy: a draw; overloaded: no)."""
        level, fraction = self.level(engine_id, now_s)
        if level == "ok":
            return True
        if level == "overloaded":
            return False
        return self._rng.random() < fraction

    def offered_slots(self, engine_id: str, free_slots: int, now_s: float) -> int:
        """How many of a DP rank's ``free_slots`` a BF-IO round may fill (ok: all; busy: each with a draw; overloaded:
        none): the central pool assigns several requests a round, so a busy rank gets ``admit_fraction`` of its
        slots offered instead of that share of single requests."""
        level, fraction = self.level(engine_id, now_s)
        if level == "ok":
            return free_slots
        if level == "overloaded":
            return 0
        return sum(self._rng.random() < fraction for _ in range(free_slots))
