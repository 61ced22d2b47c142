"""Ports passed in (issue 31): the settings are read where a process starts, and library code
gets them (or what it needs of them: a JobIssuer, a Runtime) from its caller. A module that
calls load_settings() deep inside reads the environment again on every call, and a test or a
second deployment in one process cannot give it other settings."""

from __future__ import annotations

import ast

from tests.support.paths import REPO_ROOT

# (module, function): where a process starts and reads its settings once
ENTRY_POINTS = {
    ("bot/cli.py", "*"),  # the `carry` command: each sub-command starts a process
    ("workers/runtime.py", "runtime"),  # a service process's Runtime, built once
    ("workers/service.py", "settings"),  # checked before `carry web|worker|beat` starts
    ("workers/tasks.py", "_limit_pool_process"),  # a service worker's pool process starts
    ("runner/runtime.py", "runner_runtime"),  # a runner process's RunnerRuntime, built once
    ("runner/cli.py", "main"),  # `carry runner` starts
    # `celery -A workers.tasks worker` starts (no carry entry point handed the app settings)
    ("bot/queue/celery_app.py", "celery_command_settings"),
}


def readers(source: str, name: str) -> set[tuple[str, str]]:
    """(module, enclosing top-level function) of each load_settings() call in `source`."""
    found: set[tuple[str, str]] = set()

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = function
            top = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
            if isinstance(child, top) and function == "<module>":
                inner = child.name
            if isinstance(child, ast.Call):
                callee = child.func
                called = getattr(callee, "id", None) or getattr(callee, "attr", None)
                if called == "load_settings":
                    found.add((name, function))
            visit(child, inner)

    visit(ast.parse(source, name), "<module>")
    return found


def test_the_settings_are_read_where_a_process_starts() -> None:
    paths = [p for top in ("bot", "workers", "runner") for p in (REPO_ROOT / top).rglob("*.py")]
    assert len(paths) > 100
    calls = {
        call
        for path in paths
        for call in readers(path.read_text(), str(path.relative_to(REPO_ROOT)))
    }
    assert calls, "no load_settings() call found at all: the walk is broken"
    stray = sorted(c for c in calls if c not in ENTRY_POINTS and (c[0], "*") not in ENTRY_POINTS)
    assert stray == []


def test_each_kind_of_call_is_found() -> None:
    source = (
        "import bot.config\nfrom bot.config import load_settings\n\n"
        "def f():\n    def g():\n        return load_settings().x\n    return g\n\n"
        "class C:\n    def m(self):\n        return bot.config.load_settings()\n\n"
        "S = load_settings()\n"
    )
    assert readers(source, "x.py") == {("x.py", "f"), ("x.py", "C"), ("x.py", "<module>")}
