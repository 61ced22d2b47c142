"""tests/unit holds pure tests: no Redis, no processes, no sockets, no git repositories. A test
that needs one of those belongs in tests/integration (or tests/e2e), where it is run as such."""

from __future__ import annotations

import ast
from pathlib import Path

UNIT = Path(__file__).parent
# Modules whose import means a test talks to something outside the process.
IMPURE_MODULES = frozenset(
    {"redis", "subprocess", "socket", "httpx", "celery", "multiprocessing", "playwright"}
    | {"bot.queue.celery_app", "bot.emulator", "fastapi.testclient", "starlette.testclient"}
    | {"harness.redis_server", "harness.gitrepo", "harness.carry_env"}
    | {"tests.support.deployment", "tests.support.carry_services", "tests.support.asgi"}
)
# Fixtures (tests/conftest.py) that hand a test a Redis or a repository.
IMPURE_FIXTURES = frozenset({"redis_url", "redis_base_url", "private_redis", "make_repo", "sink"})


def _impurities(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        for name in names:
            if any(name == m or name.startswith(f"{m}.") for m in IMPURE_MODULES):
                found.append(f"{path.name}:{node.lineno} imports {name}")
        if isinstance(node, ast.FunctionDef):
            for arg in node.args.args:
                if arg.arg in IMPURE_FIXTURES:
                    found.append(f"{path.name}:{node.lineno} takes the {arg.arg} fixture")
    return found


def test_unit_tests_touch_nothing_outside_the_process() -> None:
    files = sorted(UNIT.glob("test_*.py"))
    assert len(files) > 40
    assert [hit for path in files for hit in _impurities(path)] == []


def test_the_rule_sees_an_impure_test(tmp_path: Path) -> None:
    sample = tmp_path / "test_sample.py"
    sample.write_text("import redis\n\ndef test_x(redis_url):\n    pass\n")
    assert _impurities(sample) == [
        "test_sample.py:1 imports redis",
        "test_sample.py:3 takes the redis_url fixture",
    ]
