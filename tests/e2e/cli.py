"""The ``governor`` command run as an operator runs it, and the one error line it must end with."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def governor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "services.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The last stderr line, after checking it is the only error line and that no traceback was printed."""
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("governor: ")]
    assert len(errors) == 1, result.stderr
    assert result.stderr.splitlines()[-1] == errors[0]
    return errors[0]
