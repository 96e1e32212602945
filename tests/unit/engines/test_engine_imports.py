"""The engine side (services/engines) imports only the contract, the SDK and the pure rules an engine obeys.

An engine links Governor's schemas and SDK and runs the engine-side halves of the policies (EB+'s
phase machine, SLAI's deadlines and offset rule); the control plane's deciding code (decide/, the
policies' ``decide`` modules, the fold, the services) stays out of the engine's process.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
GOVERNOR_PACKAGES = ("schemas", "estimators", "fold", "policies", "decide", "services")
ALLOWED = (
    "schemas",
    "services.engines",
    "services.sdk",
    "services.settings",
    "policies.ebplus.phase_machine",
    "policies.slai.deadline",
    "policies.slai.offset_rule",
)


def foreign_imports(source: str) -> list[str]:
    """Governor modules ``source`` imports, at any depth, that an engine must not link."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            names = [node.module]
        for name in names:
            governor = name.split(".")[0] in GOVERNOR_PACKAGES
            allowed = any(name == prefix or name.startswith(f"{prefix}.") for prefix in ALLOWED)
            if governor and not allowed:
                found.append(name)
    return found


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from policies.slai.decide import offset_rule_of", ["policies.slai.decide"]),
        ("def f():\n    import decide.specs\n", ["decide.specs"]),
        ("from services.policy.service import PolicyService", ["services.policy.service"]),
        ("from policies.slai.offset_rule import offset_for_kv_use\nimport vllm", []),
    ],
)
def test_the_check_finds_what_an_engine_must_not_import(source: str, expected: list[str]) -> None:
    assert foreign_imports(source) == expected


@pytest.mark.parametrize(
    "module",
    sorted((ROOT / "services" / "engines").rglob("*.py")),
    ids=lambda path: str(path.relative_to(ROOT)),
)
def test_the_engine_side_links_only_the_contract_the_sdk_and_the_engine_rules(module: Path) -> None:
    assert foreign_imports(module.read_text()) == []
