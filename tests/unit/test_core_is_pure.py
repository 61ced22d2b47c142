"""The core decides, adapters act: nothing under bot/core may import an outside system."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.paths import REPO_ROOT

FORBIDDEN = {
    "fastapi",
    "starlette",
    "celery",
    "kombu",
    "redis",
    "github",
    "git",
    "subprocess",
    "httpx",
    "bot.git",
    "bot.github",
    "bot.store",
    "bot.web",
    "workers",
}
CORE = sorted((REPO_ROOT / "bot" / "core").glob("*.py"))


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", CORE, ids=lambda p: p.name)
def test_core_module_imports_no_outside_system(path: Path):
    bad = {
        m for m in imported_modules(path) if any(m == f or m.startswith(f + ".") for f in FORBIDDEN)
    }
    assert not bad, f"{path.name} imports {sorted(bad)}"


def test_the_core_is_not_empty():
    assert {p.name for p in CORE} >= {"planner.py", "classify.py", "patchfile.py", "events.py"}
