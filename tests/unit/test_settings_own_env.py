"""Every environment variable carry reads is read by its settings (bot/config/settings.py), so a
bad value is one clear ConfigError, never a crash deep in a worker: no other module reads a
variable by name. Copying the whole environment for a child process is not a read."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.paths import PACKAGES

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = ROOT / "bot" / "config" / "settings.py"
# Code that does not run in a carry process: the probe runs inside vLLM's server, the emulator
# and the demo play GitHub and the people around carry.
ELSEWHERE = (
    ROOT / "vllm_checks" / "vllm_probe.py",
    ROOT / "bot" / "emulator",
    ROOT / "bot" / "demo.py",
)
# The resident engine's client decides whether a server answers before it imports anything, the
# settings machinery included (not importing it is what it is for): it reads its own opt-out,
# CARRY_NO_RESIDENT (any value), by name, and nothing else. The cache directory it finds the
# socket in is the settings' CARRY_CACHE_DIR, read again by the settings on either path.
RAW_READS = {"bot/resident.py": {"os.environ.get(OPT_OUT_VARIABLE)"}}


def carry_modules() -> list[Path]:
    paths = [p for package in PACKAGES for p in (ROOT / package).rglob("*.py")]
    return sorted(
        p for p in paths if p != SETTINGS and not any(p == e or e in p.parents for e in ELSEWHERE)
    )


def _is_environ(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ"


def named_reads(source: str, name: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source, name)):
        where = f"{name}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            target, method = node.func.value, node.func.attr
            if (_is_environ(target) and method == "get") or (
                isinstance(target, ast.Name) and target.id == "os" and method == "getenv"
            ):
                found.append(f"{where}: {ast.unparse(node)}")
        elif (
            isinstance(node, ast.Subscript)
            and _is_environ(node.value)
            and isinstance(node.ctx, ast.Load)
        ):
            found.append(f"{where}: {ast.unparse(node)}")
    return found


def test_no_module_but_the_settings_reads_a_variable():
    found = [
        use
        for path in carry_modules()
        for use in named_reads(path.read_text(), str(path.relative_to(ROOT)))
        if use.split(": ", 1)[1] not in RAW_READS.get(str(path.relative_to(ROOT)), set())
    ]
    assert found == []


@pytest.mark.parametrize(
    ("source", "caught"),
    [
        ('import os\nos.environ.get("CARRY_X")', True),
        ('import os\nos.environ["CARRY_X"]', True),
        ('import os\nos.getenv("CARRY_X", "1")', True),
        ('import os\nos.environ["CARRY_X"] = "1"', False),  # setting one for a child
        ("import os\nenv = {**os.environ}", False),
    ],
)
def test_each_kind_of_read_is_caught(source, caught):
    assert bool(named_reads(source, "x.py")) is caught
