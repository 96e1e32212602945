"""Every package lists its public names in a sorted ``__all__`` of strings that all resolve."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIRS = sorted(
    p.parent for top in ("schemas", "estimators", "policies", "services") for p in (ROOT / top).rglob("__init__.py")
)
PACKAGES = [".".join(p.relative_to(ROOT).parts) for p in PACKAGE_DIRS]


def _isort_style(name: str) -> tuple[int, str]:
    """Sort key of ruff's RUF022: CONSTANTS, then Classes, then functions, each alphabetical."""
    if name.isupper():
        return 0, name
    return (1, name) if name[0].isupper() else (2, name)


@pytest.mark.parametrize("package", PACKAGES)
def test_all_is_a_sorted_list_of_resolvable_strings(package: str) -> None:
    module = importlib.import_module(package)
    exported = module.__all__
    assert all(isinstance(name, str) for name in exported)
    assert list(exported) == sorted(exported, key=_isort_style)
    missing = [name for name in exported if not hasattr(module, name)]
    assert missing == []
