"""The installed package is the product: carry's wheel, installed into a fresh virtual
environment with only its declared dependencies (requirements.lock as constraints, no dev
extras), runs from a directory outside the checkout: every module imports, `tests` is not
importable, the GitHub emulator serves, and `carry demo` plays its whole storyline with its
web, worker, beat and both runners.

The Dockerfile installs the same way (the two pip commands below); a test checks it says so.
An undeclared import (kombu's Redis transport imports `packaging` without declaring it) stops
every Celery process of an installed carry, and the dev extras of the test virtualenv hid it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from shutil import copy2, copytree, ignore_patterns

import httpx
import pytest

from bot.local_redis import free_port
from tests.support.paths import PACKAGES, REPO_ROOT

LOCK = REPO_ROOT / "requirements.lock"
OFFLINE = ("No matching distribution found", "Could not find a version")
# How the wheel is built and installed, here and in the Dockerfile.
BUILD = ("pip", "wheel", "--no-deps", "--wheel-dir")
INSTALL = ("pip", "install", "-c", "requirements.lock")


@dataclass(frozen=True)
class Installed:
    venv: Path  # a fresh virtual environment holding carry and its declared dependencies
    outside: Path  # a directory outside the checkout to run from

    def bin(self, name: str) -> str:
        return str(self.venv / "bin" / name)

    def env(self) -> dict[str, str]:
        keep = ("PATH", "LANG", "TMPDIR")
        env = {k: os.environ[k] for k in keep if k in os.environ}
        env.update(HOME=str(self.outside), PYTHONNOUSERSITE="1")
        return env

    def run(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv),
            cwd=self.outside,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def pip(python: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [python, "-m", "pip", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
        timeout=600,
    )


def offline(result: subprocess.CompletedProcess[str]) -> bool:
    return result.returncode != 0 and any(o in result.stdout + result.stderr for o in OFFLINE)


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
    wheels = root / "wheels"
    build = pip(sys.executable, *BUILD[1:], str(wheels), f"{root / 'src'}{os.sep}")
    if offline(build):
        pytest.skip("no package index to fetch the build backend (setuptools) from")
    assert build.returncode == 0, build.stdout + build.stderr
    (wheel,) = wheels.glob("carry-*.whl")
    venv = root / "venv"
    made = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    python = str(venv / "bin" / "python")
    upgrade = pip(python, "install", "-c", str(LOCK), "--upgrade", "pip")
    assert upgrade.returncode == 0, upgrade.stdout + upgrade.stderr
    install = pip(python, *INSTALL[1:3], str(LOCK), str(wheel))
    if offline(install):
        pytest.skip("no package index to install carry's dependencies from")
    assert install.returncode == 0, install.stdout + install.stderr
    outside = root / "elsewhere"
    outside.mkdir()
    return Installed(venv, outside)


def test_the_fresh_environment_holds_no_dev_extra(installed: Installed) -> None:
    """What the test venv has and an installed carry does not: the dev extras. Their absence
    is what makes the tests below catch an undeclared import."""
    listed = installed.run(installed.bin("python"), "-m", "pip", "list", "--format=json")
    names = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert "carry" in names
    assert not names & {"pytest", "ruff", "mypy", "hypothesis", "playwright", "jsonschema"}
    check = installed.run(installed.bin("python"), "-m", "pip", "check")
    assert check.returncode == 0, check.stdout + check.stderr


EVERY_MODULE = """
import importlib, importlib.resources, importlib.util, json, pkgutil
import bot, runner, vllm_checks, workers
failed, files = {}, []
for package in (bot, workers, runner, vllm_checks):
    files.append(package.__file__)
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        try:
            files.append(importlib.import_module(info.name).__file__)
        except Exception as err:  # every failure is reported, not only the first
            failed[info.name] = repr(err)
print(json.dumps({
    "failed": failed,
    "files": files,
    "tests": importlib.util.find_spec("tests") is not None,
    "emulator_readme": importlib.resources.files("bot.emulator").joinpath("README.md").is_file(),
    "templates": importlib.resources.files("bot.web").joinpath("templates").is_dir(),
}))
"""


def test_every_module_imports_from_the_installed_copy_and_never_from_tests(
    installed: Installed,
) -> None:
    result = installed.run(installed.bin("python"), "-c", EVERY_MODULE)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["failed"] == {}, "imports that the declared dependencies do not cover"
    assert len(found["files"]) > 50
    for module in found["files"]:
        assert Path(module).is_relative_to(installed.venv), module
    assert found["tests"] is False, "the checkout's tests package is importable"
    assert found["emulator_readme"] and found["templates"]


def test_installed_carry_plays_the_whole_demo_from_outside_the_checkout(
    installed: Installed,
) -> None:
    """`carry demo` starts web, worker, beat and a runner per kind from the installed copy; a
    Celery process that cannot import its transport ends the demo with its log named."""
    argv = [installed.bin("carry"), "demo", "--no-wait", "--dir", str(installed.outside / "demo")]
    argv += ["--port", str(free_port()), "--timeout", "60"]
    result = installed.run(*argv, timeout=240)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "Storyline complete" in output, output
    # carry's dashboard issue (on by default where the token can write issues) may take #1
    assert re.search(r"PR #[12] opened on downstream-org/calc-carry", output), output
    for kind in ("gaudi", "gb10"):
        assert f"carry/{kind}/divide-by-zero: success" in output, output


@pytest.fixture
def emulator(installed: Installed) -> Iterator[str]:
    """`python -m bot.emulator` from the installed copy; yields its base URL."""
    argv = [installed.bin("python"), "-m", "bot.emulator", "--port", "0", "--repo", "acme/widget"]
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


def test_the_dockerfile_installs_as_this_test_does() -> None:
    """The image builds carry's wheel alone and installs it with the lock as constraints: the
    same two steps as the fixture above, so what passes here is what the image runs."""
    text = (REPO_ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    runs = " ".join(line[4:] for line in text.splitlines() if line.startswith("RUN "))
    assert " ".join(BUILD) in runs, runs
    assert " ".join(INSTALL) in runs, runs
    assert "[dev]" not in runs and "--find-links" not in runs
