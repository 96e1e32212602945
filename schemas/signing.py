"""HMAC-SHA256 signatures of policy documents and estimate snapshots: only a holder of the key is obeyed.

The policy service signs every document it stores; the engine SDK's ``PolicyClient`` verifies the
signature before it caches a document. The MAC covers a canonical encoding of the document (its
JSON form without the ``signature`` field, keys sorted, no whitespace), so it survives any JSON
re-encoding of the same values and breaks on any changed value. The signature names its key by id,
so keys rotate without a gap: engines accept every key of their keyring while the policy service
moves from the old key to the new one (docs/security.md).

Estimate snapshots on ``gov.estimates`` are signed the same way, with the same key, by the service
that took them (``producer``: the stream processor for engines' snapshots and fleet contributions,
the policy service for the fleet snapshots it closes); the policy service decides from no other.
The producer is under the MAC, so a snapshot cannot be passed off as another
service's.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass, field
from typing import TypeVar

from schemas.policy_docs.base import DocumentSignature, PolicyDocument
from schemas.records import EstimateSnapshot, SnapshotProducer

DocumentT = TypeVar("DocumentT", bound=PolicyDocument)


@dataclass(frozen=True, slots=True)
class SigningKey:
    """One HMAC key and the id documents name it by (the secret never shows in a repr)."""

    key_id: str
    secret: bytes = field(repr=False)


@dataclass(frozen=True, slots=True)
class PolicyKeyring:
    """The key the policy service signs with, and every key an engine accepts (it included)."""

    signing: SigningKey
    previous: SigningKey | None = None

    def accepted(self, key_id: str) -> SigningKey | None:
        """Return the accepted key named ``key_id``, or None."""
        for key in (self.signing, self.previous):
            if key is not None and key.key_id == key_id:
                return key
        return None


def canonical_bytes(document: PolicyDocument) -> bytes:
    """The bytes a signature covers: the document's JSON values without ``signature``, keys sorted."""
    body = document.model_dump(mode="json", exclude={"signature"})
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()


def _mac(key: SigningKey, document: PolicyDocument) -> str:
    return hmac.new(key.secret, canonical_bytes(document), hashlib.sha256).hexdigest()


def sign(document: DocumentT, key: SigningKey) -> DocumentT:
    """Return ``document`` with its ``signature`` (HMAC-SHA256 under ``key``) set."""
    signature = DocumentSignature(key_id=key.key_id, hmac_sha256=_mac(key, document))
    return document.model_copy(update={"signature": signature})


def signature_problem(document: PolicyDocument, keyring: PolicyKeyring) -> str | None:
    """Why ``document`` is not validly signed by ``keyring``: ``unsigned``, ``unknown_key``, ``bad_mac``; or None."""
    signature = document.signature
    if signature is None:
        return "unsigned"
    key = keyring.accepted(signature.key_id)
    if key is None:
        return "unknown_key"
    if not hmac.compare_digest(signature.hmac_sha256, _mac(key, document)):
        return "bad_mac"
    return None


def _snapshot_mac(key: SigningKey, snapshot: EstimateSnapshot) -> str:
    """HMAC of the snapshot's JSON without ``signature``, as pydantic writes it (fields in declaration order).

    Unlike documents, which other tools may re-encode, a snapshot is written and read only by
    Governor's own models, so their JSON is canonical already, and several times cheaper to make
    than sorted ``json.dumps`` of a dumped dict for a summary of a few kB.
    """
    return hmac.new(key.secret, snapshot.model_dump_json(exclude={"signature"}).encode(), hashlib.sha256).hexdigest()


def sign_snapshot(snapshot: EstimateSnapshot, key: SigningKey, producer: SnapshotProducer) -> EstimateSnapshot:
    """Return ``snapshot`` naming its ``producer``, signed (HMAC-SHA256 under ``key``, the producer included)."""
    named = snapshot.model_copy(update={"producer": producer, "signature": None})
    signature = DocumentSignature(key_id=key.key_id, hmac_sha256=_snapshot_mac(key, named))
    return named.model_copy(update={"signature": signature})


def snapshot_signature_problem(
    snapshot: EstimateSnapshot, keyring: PolicyKeyring, producer: SnapshotProducer
) -> str | None:
    """Why ``snapshot`` is not a validly signed snapshot of ``producer``; or None.

    Returns ``unsigned``, ``foreign_producer`` (signed, but naming another producer or none),
    ``unknown_key`` or ``bad_mac``.
    """
    signature = snapshot.signature
    if signature is None:
        return "unsigned"
    if snapshot.producer != producer:
        return "foreign_producer"
    key = keyring.accepted(signature.key_id)
    if key is None:
        return "unknown_key"
    if not hmac.compare_digest(signature.hmac_sha256, _snapshot_mac(key, snapshot)):
        return "bad_mac"
    return None
