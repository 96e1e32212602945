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
from schemas.policy_docs.admission import AdmissionPayload, AdmissionState
from schemas.policy_docs.base import InputsDigest, PolicyDocument, SourceOffset
from schemas.signing import PolicyKeyring, SigningKey, sign, signature_problem

KEY = SigningKey("bench", b"a-benchmark-signing-key-of-32-bytes")


def _admission_document() -> PolicyDocument:
    """An admission document of the size the policy service writes (8 source offsets, diagnostics)."""
    return AdmissionPolicy(
        scope="eng-0",
        deployment="bench",
        version=12,
        computed_at=600.0,
        valid_until=630.0,
        inputs=InputsDigest(
            snapshot_id="sha256:" + "ab" * 32,
            estimate_versions={"eng-0": 12},
            offsets=[SourceOffset(topic="gov.telemetry", partition=p, offset=1000 + p) for p in range(8)],
            engines=["eng-0"],
        ),
        diagnostics={"pressure_raw": 0.83, "queue_depth": 40, "kv_use_frac": 0.5},
        previous_version=11,
        payload=AdmissionPayload(pressure=0.8, level="busy", admit_fraction=0.6),
        state=AdmissionState(smoothed_pressure=0.8, level="busy"),
    )


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
