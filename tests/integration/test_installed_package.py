"""carry installed from its wheel works without the checkout.

The wheel is built from the checkout's sources and installed into an empty directory; then
Python runs outside the checkout with only that directory on PYTHONPATH (this virtualenv still
supplies the dependencies). The imports must come from the installed copy, `tests` must not be
importable at all, and the demo and the GitHub emulator must start from there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from shutil import copy2, copytree, ignore_patterns

import httpx
import pytest

from tests.support.paths import REPO_ROOT

PACKAGES = ("bot", "workers")
OFFLINE = "No matching distribution found for setuptools"


@dataclass(frozen=True)
class Installed:
    site: Path  # what `pip install --target` wrote
    outside: Path  # a directory outside the checkout to run from

    def env(self) -> dict[str, str]:
        return {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(self.outside),
            "PYTHONPATH": str(self.site),
            "PYTHONNOUSERSITE": "1",
        }

    def python(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, *args],
            cwd=self.outside,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def pip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def copy_sources(src: Path) -> None:
    """A copy of what the wheel is built from: pip builds in the source tree, and must not
    leave build/ or egg-info behind in the checkout."""
    src.mkdir()
    copy2(REPO_ROOT / "pyproject.toml", src)
    for package in PACKAGES:
        copytree(REPO_ROOT / package, src / package, ignore=ignore_patterns("__pycache__"))


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("installed")
    copy_sources(root / "src")
    build = pip("wheel", "--no-deps", "--wheel-dir", str(root / "wheels"), str(root / "src"))
    if build.returncode != 0 and OFFLINE in build.stdout + build.stderr:
        pytest.skip("no package index to fetch the build backend (setuptools) from")
    assert build.returncode == 0, build.stdout + build.stderr
    (wheel,) = (root / "wheels").glob("carry-*.whl")
    install = pip(
        "install", "--no-deps", "--no-compile", "--target", str(root / "site"), str(wheel)
    )
    assert install.returncode == 0, install.stdout + install.stderr
    outside = root / "elsewhere"
    outside.mkdir()
    return Installed(root / "site", outside)


IMPORTS = """
import importlib.resources, importlib.util, json
import bot, bot.demo, bot.emulator, bot.web, workers
print(json.dumps({
    "modules": [m.__file__ for m in (bot, bot.demo, bot.emulator, workers)],
    "tests": importlib.util.find_spec("tests") is not None,
    "emulator_readme": importlib.resources.files("bot.emulator").joinpath("README.md").is_file(),
    "templates": importlib.resources.files("bot.web").joinpath("templates").is_dir(),
}))
"""


def test_carry_imports_from_the_installed_copy_and_never_from_tests(installed: Installed) -> None:
    result = installed.python("-c", IMPORTS)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    for module in found["modules"]:
        assert Path(module).is_relative_to(installed.site), module
    assert found["tests"] is False, "the checkout's tests package is importable"
    assert found["emulator_readme"] and found["templates"]


def test_the_demo_starts_from_the_installed_copy(installed: Installed) -> None:
    result = installed.python("-m", "bot.demo", "--help")
    assert result.returncode == 0, result.stderr
    assert "--redis-url" in result.stdout and "--redis-flush" in result.stdout


@pytest.fixture
def emulator(installed: Installed) -> Iterator[str]:
    """`python -m bot.emulator` from the installed copy; yields its base URL."""
    argv = [sys.executable, "-m", "bot.emulator", "--port", "0", "--repo", "acme/widget"]
    argv += ["--root", str(installed.outside / "github")]
    proc = subprocess.Popen(
        argv, cwd=installed.outside, env=installed.env(), stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("GitHub emulator on http://127.0.0.1:"), first
        yield first.split()[3]
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_the_installed_emulator_serves_a_repository(emulator: str) -> None:
    reply = httpx.get(f"{emulator}/repos/acme/widget", timeout=10)
    assert reply.status_code == 200, reply.text
    assert reply.json()["full_name"] == "acme/widget"
