"""Aligned plain-text tables for the inspection commands (``governor status``, ``governor explain``)."""

from __future__ import annotations

from collections.abc import Sequence

MISSING = "-"


def aligned(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Return ``header`` and ``rows`` as lines whose columns line up (two spaces apart, last one unpadded)."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]


def number(value: float | None, digits: int = 1) -> str:
    """A float with ``digits`` decimals, or ``-`` when there is none."""
    return MISSING if value is None else f"{value:.{digits}f}"


def version(value: int | None) -> str:
    """``v7``, or ``-`` when there is none."""
    return MISSING if value is None else f"v{value}"
