"""One package per place it runs, and no import runs back up:

  bot/          the library both sides share (config, core, git, github, store, web, the job
                contract bot/ci, the queue bot/queue): imports neither workers nor runner
  workers/      the service (web, worker, beat): bot, never runner
  runner/       a runner host (`carry runner`): bot, never workers
  vllm_checks/  checks and a probe that run in vLLM's world: the standard library, httpx, vLLM

The one exception is bot/cli.py, the `carry` command: its sub-commands start the service and
the runner, so it imports each inside the sub-command that starts it, never at module level
(importing bot.cli loads neither)."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

from tests.support.paths import PACKAGES, REPO_ROOT

FORBIDDEN = {
    "bot": ("workers", "runner", "vllm_checks"),
    "workers": ("runner", "vllm_checks"),
    "runner": ("workers", "vllm_checks"),
    "vllm_checks": ("bot", "workers", "runner"),
}
ENTRY_POINT = REPO_ROOT / "bot" / "cli.py"
# What the vLLM checks may import besides the standard library and each other.
CHECKS_MAY_IMPORT = {"httpx", "vllm"}


def modules_of(package: str) -> list[Path]:
    return sorted((REPO_ROOT / package).rglob("*.py"))


def imports(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) of every absolute import; a relative one stays in its own package."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def eager_imports(tree: ast.AST) -> set[int]:
    """The lines of imports that run when the module is imported (not inside a function)."""
    lines: set[int] = set()
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, ast.Import | ast.ImportFrom):
            lines.add(child.lineno)
        elif not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            lines |= eager_imports(child)
    return lines


# A module named in a string is imported all the same: Celery's include, a kombu transport,
# `python -m` in a child's argv.
MODULE_NAME = re.compile(r"^([a-z_]+)(?:\.[a-z_0-9]+)+(?::\w+)?$")


def named_modules(tree: ast.AST) -> list[tuple[int, str]]:
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and MODULE_NAME.match(node.value)
    ]


def crossings(source: str, name: str, package: str, *, entry_point: bool = False) -> list[str]:
    """The imports of one module of `package` (and the modules its strings name) that reach a
    package it must not import."""
    tree = ast.parse(source, name)
    eager = eager_imports(tree)
    found = [
        f"{name}:{line} imports {module}"
        for line, module in imports(tree)
        if module.partition(".")[0] in FORBIDDEN[package]
        and not (entry_point and line not in eager)  # a sub-command starting a process
    ]
    return found + [
        f"{name}:{line} names {module}"
        for line, module in named_modules(tree)
        if module.partition(".")[0] in FORBIDDEN[package]
    ]


@pytest.mark.parametrize("package", PACKAGES)
def test_no_package_imports_a_place_it_does_not_run_in(package: str) -> None:
    paths = modules_of(package)
    assert paths, f"{package} has no modules"
    bad = [
        found
        for path in paths
        for found in crossings(
            path.read_text(),
            str(path.relative_to(REPO_ROOT)),
            package,
            entry_point=path == ENTRY_POINT,
        )
    ]
    assert bad == []


def test_the_vllm_checks_import_only_what_runs_beside_vllm() -> None:
    allowed = set(sys.stdlib_module_names) | CHECKS_MAY_IMPORT | {"vllm_checks", "__future__"}
    bad = [
        f"{path.relative_to(REPO_ROOT)}:{line} imports {module}"
        for path in modules_of("vllm_checks")
        for line, module in imports(ast.parse(path.read_text()))
        if module.partition(".")[0] not in allowed
    ]
    assert bad == []


def test_the_entry_point_starts_both_sides_only_from_its_sub_commands() -> None:
    """bot/cli.py does import workers and runner (so its exemption is not vacuous), and only
    inside functions."""
    tree = ast.parse(ENTRY_POINT.read_text())
    eager = eager_imports(tree)
    roots = {line: module.partition(".")[0] for line, module in imports(tree)}
    assert {"workers", "runner"} <= {root for line, root in roots.items() if line not in eager}
    assert not {root for line, root in roots.items() if line in eager} & set(FORBIDDEN["bot"])


@pytest.mark.parametrize(
    "source",
    [
        "from workers.ci import requests\n",
        "import workers.tasks as tasks\n",
        "try:\n    from workers import service\nexcept ImportError:\n    pass\n",
        "def job():\n    from workers.runtime import runtime\n",
        'def job():\n    return Celery("carry", include=["workers.tasks"])\n',
    ],
)
def test_a_runner_module_that_imports_the_service_is_caught(source: str) -> None:
    assert crossings(source, "runner/planted.py", "runner") != []
    lazy_import = source.startswith("def") and "import" in source
    assert crossings(source, "bot/cli.py", "bot", entry_point=True) == (
        [] if lazy_import else crossings(source, "bot/cli.py", "bot")
    )


# -- the tests and the benchmarks share one harness, and neither runs back into the other -----

# What may not import what, beyond the deployables: the harness (harness/) is what tests/ and
# bench/ share; bench/ runs without the tests (tests/ may run a benchmark at a quick size).
HARNESS_FORBIDDEN = {"harness": ("tests", "bench"), "bench": ("tests",)}


@pytest.mark.parametrize("package", sorted(HARNESS_FORBIDDEN))
def test_the_harness_and_the_benchmarks_import_nothing_of_the_tests(package: str) -> None:
    paths = modules_of(package)
    assert paths, f"{package} has no modules"
    bad = [
        f"{path.relative_to(REPO_ROOT)}:{line} imports {module}"
        for path in paths
        for line, module in imports(ast.parse(path.read_text()))
        if module.partition(".")[0] in HARNESS_FORBIDDEN[package]
    ]
    assert bad == []


def test_a_benchmark_importing_the_tests_is_caught() -> None:
    tree = ast.parse("from tests.support.deployment import deployments\n")
    assert [m for _, m in imports(tree) if m.partition(".")[0] in HARNESS_FORBIDDEN["bench"]]
