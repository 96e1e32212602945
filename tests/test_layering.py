"""The layers and the pure core hold, read from every module's source; each check is proven to fail on an injection.

``layering_violations(root)`` reads a tree (the repository, or a temporary copy of it):

- the layers schemas <- estimators <- fold, policies <- decide <- services: a package imports its own layer or
  those left of it (the fold and the policies are side by side: neither imports the other);
- the pure core (estimators/, fold/, policies/, decide/) does no I/O, reads no clock and draws no unseeded random
  number: no I/O, clock, process, thread, logging or dynamic-import module, no ``open()`` or ``__import__()``, and
  random numbers only from generators built with a seed (``random.Random(seed)``,
  ``np.random.default_rng(seed)``), never from the modules' global state (``random.random()``,
  ``np.random.rand()``, ``np.random.default_rng()``);
- only services/settings.py reads the environment;
- no two subpackages of services import each other, directly or through others.

``TestInjections`` copies the tree, injects each forbidden thing into one module and expects a violation.
"""

from __future__ import annotations

import ast
import functools
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("schemas", "estimators", "fold", "policies", "decide", "services")
PURE = ("estimators", "fold", "policies", "decide")
ALLOWED: dict[str, set[str]] = {
    "schemas": {"schemas"},
    "estimators": {"schemas", "estimators"},
    "fold": {"schemas", "estimators", "fold"},
    "policies": {"schemas", "estimators", "policies"},
    "decide": {"schemas", "estimators", "fold", "policies", "decide"},
    "services": {"schemas", "estimators", "fold", "policies", "decide", "services"},
}
FORBIDDEN_IN_PURE = {
    "aiokafka",
    "asyncio",
    "datetime",
    "faust",
    "importlib",
    "kafka",
    "logging",
    "mode",
    "multiprocessing",
    "os",
    "redis",
    "socket",
    "structlog",
    "subprocess",
    "threading",
    "time",
}
FORBIDDEN_CALLS_IN_PURE = {"open", "__import__"}
RANDOM_MODULES = {"random", "numpy.random"}
SEEDED_CONSTRUCTORS = {
    "Random",
    "default_rng",
    "Generator",
    "RandomState",
    "SeedSequence",
    "PCG64",
    "Philox",
    "MT19937",
}


@functools.cache
def _parse(text: str) -> ast.Module:
    """The syntax tree of a module's source (parsed once per distinct source: the injection tests re-read the tree)."""
    return ast.parse(text)


def _modules(root: Path, package: str) -> list[Path]:
    return sorted(path for path in (root / package).rglob("*.py") if "__pycache__" not in path.parts)


def _imports(tree: ast.AST) -> Iterator[str]:
    """Every absolute module name a module imports (``from a.b import c`` yields ``a.b`` and ``a.b.c``)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def _random_names(tree: ast.AST) -> tuple[set[str], dict[str, str]]:
    """Local names bound to a random module, and names bound to a random module's attribute (name -> attribute)."""
    modules: set[str] = set()
    attributes: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in RANDOM_MODULES:
                    modules.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                if node.module in RANDOM_MODULES:
                    attributes[alias.asname or alias.name] = alias.name
                elif f"{node.module}.{alias.name}" in RANDOM_MODULES:
                    modules.add(alias.asname or alias.name)
    return modules, attributes


def _random_attribute(func: ast.expr, modules: set[str], attributes: dict[str, str], numpy: set[str]) -> str | None:
    """The random-module attribute a call's target names (``np.random.rand`` -> ``rand``), or None."""
    if isinstance(func, ast.Name):
        return attributes.get(func.id)
    if not isinstance(func, ast.Attribute):
        return None
    owner = func.value
    if isinstance(owner, ast.Name) and owner.id in modules:
        return func.attr
    if isinstance(owner, ast.Attribute) and owner.attr == "random" and isinstance(owner.value, ast.Name):
        return func.attr if owner.value.id in numpy else None
    return None


def _seeded(call: ast.Call) -> bool:
    """True when a generator constructor is given a seed (a first argument or ``seed=`` that is not None)."""
    given = [*call.args[:1], *(k.value for k in call.keywords if k.arg in {"seed", "x", "bit_generator"})]
    return any(not (isinstance(arg, ast.Constant) and arg.value is None) for arg in given)


def _impure_calls(tree: ast.AST) -> Iterator[str]:
    modules, attributes = _random_names(tree)
    numpy = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
        if alias.name == "numpy"
    }
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        if isinstance(node.func, ast.Name) and node.func.id in FORBIDDEN_CALLS_IN_PURE:
            yield f"calls {node.func.id}() (line {node.lineno})"
            continue
        attribute = _random_attribute(node.func, modules, attributes, numpy)
        if attribute is None:
            continue
        if attribute not in SEEDED_CONSTRUCTORS:
            yield f"draws from a random module's global state: {attribute}() (line {node.lineno})"
        elif not _seeded(node):
            yield f"builds an unseeded generator: {attribute}() (line {node.lineno})"


def _services_graph(root: Path) -> dict[str, set[str]]:
    """services' subpackages (and top-level modules) -> the others they import."""
    graph: dict[str, set[str]] = {}
    for path in _modules(root, "services"):
        parts = path.relative_to(root / "services").with_suffix("").parts
        if parts == ("__init__",):
            continue
        node = parts[0]
        edges = graph.setdefault(node, set())
        for name in _imports(_parse(path.read_text())):
            pieces = name.split(".")
            if pieces[0] == "services" and len(pieces) > 1 and pieces[1] != node:
                edges.add(pieces[1])
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each cycle of the graph once, as the path that closes it (a depth-first search per node)."""
    found: list[list[str]] = []
    seen: set[frozenset[str]] = set()

    def visit(path: list[str]) -> None:
        for nxt in sorted(graph.get(path[-1], set())):
            if nxt == path[0]:
                key = frozenset(path)
                if key not in seen:
                    seen.add(key)
                    found.append([*path, nxt])
            elif nxt not in path and nxt > path[0]:
                visit([*path, nxt])

    for start in sorted(graph):
        visit([start])
    return found


def layer_violations(root: Path) -> list[str]:
    """Imports of a package right of the importing one."""
    violations = []
    for package in PACKAGES:
        for path in _modules(root, package):
            tree = _parse(path.read_text())
            bad = {name.split(".")[0] for name in _imports(tree)} & set(PACKAGES) - ALLOWED[package]
            if bad:
                violations.append(f"{path.relative_to(root)} imports {sorted(bad)}")
    return violations


def purity_violations(root: Path) -> list[str]:
    """I/O, clock, process, thread, logging and dynamic imports, and unseeded randomness, in the pure core."""
    violations = []
    for package in PURE:
        for path in _modules(root, package):
            tree = _parse(path.read_text())
            bad = {name.split(".")[0] for name in _imports(tree)} & FORBIDDEN_IN_PURE
            if bad:
                violations.append(f"{path.relative_to(root)} imports {sorted(bad)}")
            violations.extend(f"{path.relative_to(root)} {what}" for what in _impure_calls(tree))
    return violations


def environment_violations(root: Path) -> list[str]:
    """Modules other than services/settings.py that read the environment."""
    offenders = []
    for package in PACKAGES:
        for path in _modules(root, package):
            if path.relative_to(root).as_posix() == "services/settings.py":
                continue
            text = path.read_text()
            if "os.environ" in text or "getenv(" in text:
                offenders.append(f"{path.relative_to(root).as_posix()} reads the environment")
    return offenders


def cycle_violations(root: Path) -> list[str]:
    """Import cycles between services' subpackages."""
    return [f"services subpackages import each other: {' -> '.join(cycle)}" for cycle in _cycles(_services_graph(root))]


def layering_violations(root: Path) -> list[str]:
    """Every violation of the tree at ``root``."""
    return layer_violations(root) + purity_violations(root) + environment_violations(root) + cycle_violations(root)


@pytest.mark.parametrize(
    "check", [layer_violations, purity_violations, environment_violations, cycle_violations], ids=lambda f: f.__name__
)
def test_the_tree_holds(check: object) -> None:
    assert callable(check)
    assert check(ROOT) == []


INJECTIONS = {
    "random_module_call": ("policies/injected.py", "import random\n\nJITTER = random.random()\n"),
    "random_unseeded_generator": ("estimators/injected.py", "import random\n\nRNG = random.Random()\n"),
    "random_from_import": ("estimators/injected.py", "from random import randint\n\nN = randint(1, 6)\n"),
    "os": ("policies/injected.py", "import os\n\nCWD = os.getcwd\n"),
    "os_path": ("estimators/injected.py", "import os.path\n"),
    "open": ("policies/injected.py", "def read(path: str) -> str:\n    return open(path).read()\n"),
    "socket": ("estimators/injected.py", "import socket\n"),
    "subprocess": ("policies/injected.py", "from subprocess import run\n"),
    "threading": ("estimators/injected.py", "import threading\n"),
    "logging": ("policies/injected.py", "import logging\n\nlog = logging.getLogger(__name__)\n"),
    "importlib": ("estimators/injected.py", "import importlib\n"),
    "dunder_import": ("policies/injected.py", "OS = __import__('o' + 's')\n"),
    "numpy_unseeded_default_rng": ("policies/injected.py", "import numpy as np\n\nRNG = np.random.default_rng()\n"),
    "numpy_seed_none": ("estimators/injected.py", "import numpy\n\nRNG = numpy.random.default_rng(seed=None)\n"),
    "numpy_module_call": ("estimators/injected.py", "import numpy as np\n\nX = np.random.rand(3)\n"),
    "numpy_module_seed": ("policies/injected.py", "import numpy as np\n\nnp.random.seed(1)\n"),
    "numpy_random_alias": ("policies/injected.py", "import numpy.random as npr\n\nX = npr.normal()\n"),
    "numpy_from_random": ("estimators/injected.py", "from numpy import random\n\nX = random.uniform()\n"),
    "numpy_from_default_rng": ("estimators/injected.py", "from numpy.random import default_rng\n\nR = default_rng()\n"),
    "time": ("policies/injected.py", "import time\n"),
    "datetime": ("estimators/injected.py", "from datetime import datetime\n"),
    "services_import": ("policies/injected.py", "from services import settings\n"),
    "fold_settings_import": ("fold/injected.py", "from services.settings import Settings\n"),
    "fold_policies_import": ("fold/injected.py", "from policies.ebplus import decide\n"),
    "fold_clock": ("fold/injected.py", "import time\n\nNOW = time.time\n"),
    "policies_fold_import": ("policies/injected.py", "from fold import Folder\n"),
    "decide_services_import": ("decide/injected.py", "from services.store.redis_store import RedisStore\n"),
    "decide_logging": ("decide/injected.py", "import structlog\n\nlog = structlog.get_logger()\n"),
    "fold_decide_import": ("fold/injected.py", "from decide import default_registry\n"),
    "environment": ("services/injected.py", "import os\n\nHOME = os.environ['HOME']\n"),
    "services_cycle": ("services/store/injected.py", "from services.stream import processor\n"),
}


@pytest.fixture(scope="module")
def tree_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the six packages, clean (checked by ``test_the_copy_holds``)."""
    root = tmp_path_factory.mktemp("tree")
    for package in PACKAGES:
        shutil.copytree(ROOT / package, root / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return root


class TestInjections:
    def test_the_copy_holds(self, tree_copy: Path) -> None:
        assert layering_violations(tree_copy) == []

    def test_seeded_generators_pass(self, tree_copy: Path) -> None:
        path = tree_copy / "policies" / "injected.py"
        path.write_text(
            "import random\n\nimport numpy as np\n\n"
            "A = random.Random(42)\nB = np.random.default_rng(7)\nC = np.random.default_rng(seed=7)\n"
            "def draw(rng: np.random.Generator) -> float:\n    return float(rng.random())\n"
        )
        try:
            assert layering_violations(tree_copy) == []
        finally:
            path.unlink()

    @pytest.mark.parametrize("name", sorted(INJECTIONS))
    def test_each_injection_is_caught(self, tree_copy: Path, name: str) -> None:
        relative, source = INJECTIONS[name]
        path = tree_copy / relative
        path.write_text(source)
        try:
            violations = layering_violations(tree_copy)
        finally:
            path.unlink()
        assert violations != []
        assert all(relative.split("/")[0] in v for v in violations), violations
