"""A test module imports no other test module: what two test files share lives once, in
tests/conftest.py (fixtures used widely) or in a module of tests/support/ named for what it holds.
And a fixture of a conftest.py is not declared a second time, under its name, in a test module.

Importing a test module runs its module-level code, a fixture or test it imports is collected
again in the importing module, and a helper found in test_x.py reads as belonging to test_x.
This test only parses the files (`ast`): it imports none of them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.paths import REPO_ROOT

TESTS = REPO_ROOT / "tests"


def is_test_module(module: str) -> bool:
    """`tests.<anything>.test_<name>`: a module pytest collects tests from."""
    parts = module.split(".")
    return parts[0] == "tests" and len(parts) > 1 and parts[-1].startswith("test_")


def package_of(path: Path) -> str:
    """The dotted package a module of tests/ lives in (tests.integration for one of its files)."""
    return ".".join(path.relative_to(REPO_ROOT).parent.parts)


def imported_modules(tree: ast.AST, package: str) -> list[tuple[int, str]]:
    """(line, module) of every import anywhere in the module, a function's included; a relative
    import is resolved against `package`, and `from package import name` names package.name too
    (it may be a module)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = parts[: len(parts) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.append((node.lineno, module))
            if (REPO_ROOT / module.replace(".", "/")).is_dir():  # a package: names may be modules
                found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    return found


def imports_of_test_modules(source: str, name: str, package: str) -> list[str]:
    """The imports of test modules in one module of tests/."""
    tree = ast.parse(source, name)
    return [
        f"{name}:{line} imports {module}"
        for line, module in imported_modules(tree, package)
        if is_test_module(module)
    ]


def modules_of_tests() -> list[Path]:
    return sorted(TESTS.rglob("*.py"))


def test_no_module_of_the_tests_imports_a_test_module() -> None:
    paths = modules_of_tests()
    assert len(paths) > 100, "the tests were not found"
    bad = [
        found
        for path in paths
        for found in imports_of_test_modules(
            path.read_text(), str(path.relative_to(REPO_ROOT)), package_of(path)
        )
    ]
    assert bad == []


# -- a fixture of a conftest.py is declared there only --------------------------------------


def fixtures_of(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, name) of the module's fixtures: its functions under @pytest.fixture (or
    @pytest.fixture(...), whose name= names it)."""
    found: list[tuple[int, str]] = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for decorator in node.decorator_list:
            call = decorator if isinstance(decorator, ast.Call) else None
            target = call.func if call else decorator
            if not (
                (isinstance(target, ast.Attribute) and target.attr == "fixture")
                or (isinstance(target, ast.Name) and target.id == "fixture")
            ):
                continue
            named = [k.value for k in (call.keywords if call else []) if k.arg == "name"]
            given = named[0].value if named and isinstance(named[0], ast.Constant) else None
            found.append((node.lineno, given if isinstance(given, str) else node.name))
    return found


def redeclared_fixtures(
    conftests: dict[Path, str], modules: dict[Path, str], root: Path = REPO_ROOT
) -> list[str]:
    """The fixtures a module declares again under the name of a fixture of a conftest.py above
    it: two fixtures of one name, the nearer one silently winning."""
    shared = {
        path.parent: {name for _, name in fixtures_of(ast.parse(source))}
        for path, source in conftests.items()
    }
    return [
        f"{path.relative_to(root)}:{line} declares {name}, a fixture of "
        f"{(folder / 'conftest.py').relative_to(root)}"
        for path, source in modules.items()
        for line, name in fixtures_of(ast.parse(source, str(path)))
        for folder, names in shared.items()
        if name in names and folder in path.parents
    ]


def test_no_module_of_the_tests_declares_a_conftest_fixture_again() -> None:
    paths = modules_of_tests()
    conftests = {p: p.read_text() for p in paths if p.name == "conftest.py"}
    modules = {p: p.read_text() for p in paths if p.name != "conftest.py"}
    assert TESTS / "conftest.py" in conftests
    assert redeclared_fixtures(conftests, modules) == []


def test_a_second_client_fixture_is_caught() -> None:
    conftest = {TESTS / "conftest.py": "@pytest.fixture\ndef client(redis_url):\n    pass\n"}
    planted = TESTS / "integration" / "test_planted.py"
    for source in (
        "@pytest.fixture(scope='module')\ndef client(url):\n    pass\n",
        "@fixture\ndef client(url):\n    pass\n",
        "@pytest.fixture(name='client')\ndef ci_client(url):\n    pass\n",
    ):
        assert redeclared_fixtures(conftest, {planted: source}) != []
    for source in (
        "@pytest.fixture\ndef ci_client(url):\n    pass\n",
        "def client(gh):\n    pass\n",  # a helper of the same name is no fixture
    ):
        assert redeclared_fixtures(conftest, {planted: source}) == []


# -- the checks catch what they are for ------------------------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        "from tests.integration.test_engine import BODY, check\n",
        "import tests.integration.test_memory_limit\n",
        "import tests.unit.test_state_schema as schema\n",
        "from tests.integration import test_dashboard_api\n",
        "from .test_replay import build_upstream\n",
        "from . import test_cli\n",
        "from ..integration.test_import import up\n",
        "def later():\n    from tests.e2e.test_demo import demo_env\n",
    ],
)
def test_a_test_module_importing_another_is_caught(source: str) -> None:
    assert imports_of_test_modules(source, "tests/e2e/test_planted.py", "tests.e2e") != []


@pytest.mark.parametrize(
    "source",
    [
        "from tests.support.engine import BODY, check\n",
        "from tests.e2e import screenshots as docs\n",
        "from tests.vllm import harness\n",
        "from .conftest import REDIS_URL\n",
        "import pytest\n",
    ],
)
def test_importing_shared_modules_is_allowed(source: str) -> None:
    assert imports_of_test_modules(source, "tests/e2e/test_planted.py", "tests.e2e") == []
