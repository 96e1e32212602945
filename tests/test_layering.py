"""The layers schemas <- estimators <- policies <- services hold, read from every module's imports."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("schemas", "estimators", "policies", "services")
ALLOWED: dict[str, set[str]] = {
    "schemas": {"schemas"},
    "estimators": {"schemas", "estimators"},
    "policies": {"schemas", "estimators", "policies"},
    "services": {"schemas", "estimators", "policies", "services"},
}
FORBIDDEN_IN_PURE = {"faust", "redis", "kafka", "aiokafka", "asyncio", "structlog", "mode", "time", "datetime"}


def _modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("package", PACKAGES)
def test_package_imports_only_its_own_layer_or_those_left_of_it(package: str) -> None:
    violations = []
    for path in _modules(package):
        ours = _imported_roots(path) & set(PACKAGES)
        bad = ours - ALLOWED[package]
        if bad:
            violations.append(f"{path.relative_to(ROOT)} imports {sorted(bad)}")
    assert violations == []


@pytest.mark.parametrize("package", ["estimators", "policies"])
def test_pure_core_imports_no_io_clock_or_randomness_module(package: str) -> None:
    violations = []
    for path in _modules(package):
        bad = _imported_roots(path) & FORBIDDEN_IN_PURE
        if bad:
            violations.append(f"{path.relative_to(ROOT)} imports {sorted(bad)}")
    assert violations == []


def test_only_settings_reads_the_environment() -> None:
    offenders = []
    for package in PACKAGES:
        for path in _modules(package):
            if path.relative_to(ROOT).as_posix() == "services/settings.py":
                continue
            text = path.read_text()
            if "os.environ" in text or "getenv(" in text:
                offenders.append(path.relative_to(ROOT).as_posix())
    assert offenders == []
