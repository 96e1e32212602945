"""What signing costs: microseconds to sign a policy document (policy service) and to parse and verify it (engine).

Usage: ``python ops/bench/bench_signing.py [--n 20000] [--out out/bench/signing.json]``.
Prints one line per operation on an admission document (8 source offsets) and writes the figures as
JSON. The engine SDK verifies in its refresh thread, never in ``current``, so an engine's step loop
does not pay the verify figure; the policy service pays the sign figure once per decision.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

from schemas.policy_docs import AdmissionPolicy
from schemas.policy_docs.base import PolicyDocument, SourceOffset
from schemas.records import EstimateSnapshot
from schemas.signing import PolicyKeyring, SigningKey, sign, signature_problem
from services.policy.runner import decide_from_snapshot
from services.policy.specs import default_registry

KEY = SigningKey("bench", b"a-benchmark-signing-key-of-32-bytes")
SUMMARY = {
    "last_step": {"num_waiting": 40.0, "num_running": 20.0, "kv_use_frac": 0.5, "kv_capacity_tokens": 1e6},
    "arrival_rate_short_per_s": 2.0,
    "completion_rate_short_per_s": 2.0,
}


def _admission_document() -> PolicyDocument:
    snapshot = EstimateSnapshot(
        deployment="bench",
        scope="eng-0",
        snapshot_id="sha256:bench",
        version=1,
        ts=10.0,
        trigger="admission:every 5s",
        offsets=[SourceOffset(topic="gov.telemetry", partition=p, offset=1000 + p) for p in range(8)],
        estimates=SUMMARY,
    )
    document = decide_from_snapshot(default_registry().get("admission"), snapshot, None).document
    assert document is not None
    return document


def _microseconds(n: int, operation: Callable[[], object]) -> float:
    start = time.perf_counter()
    for _ in range(n):
        operation()
    return (time.perf_counter() - start) / n * 1e6


def main() -> None:
    """Time signing, and parsing with and without verifying, then write the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--out", type=Path, default=Path("out/bench/signing.json"))
    args = parser.parse_args()
    keyring = PolicyKeyring(signing=KEY)
    document = _admission_document()
    raw = sign(document, KEY).model_dump_json()

    def parse_and_verify() -> object:
        return signature_problem(AdmissionPolicy.model_validate_json(raw), keyring)

    figures = {
        "document_bytes": len(raw),
        "sign_us": _microseconds(args.n, lambda: sign(document, KEY)),
        "parse_us": _microseconds(args.n, lambda: AdmissionPolicy.model_validate_json(raw)),
        "parse_and_verify_us": _microseconds(args.n, parse_and_verify),
    }
    for name, value in figures.items():
        print(f"{name:>22}: {value:,.1f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"n": args.n, **figures}, indent=2) + "\n")


if __name__ == "__main__":
    main()
