"""`carry` run in-process as `carry import`'s tests run it, on a local upstream whose branch
`feature` carries two commits to import: the fixtures `up` and `feature` and the commands."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.cli import main
from harness.gitrepo import RepoBuilder

BODY = "".join(f"value_{i} = compute({i})\n" for i in range(1, 31))
HELPER = "def helper(x):\n    return x + 1\n"
FIX = "Fix the frobnicator: keep the level"


def snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def up(make_repo) -> RepoBuilder:
    repo = make_repo("upstream")
    repo.commit("Base", {"mod.py": BODY, "other.py": "alpha = 1\n"})
    return repo


@pytest.fixture
def feature(up: RepoBuilder) -> RepoBuilder:
    """Two carried commits on branch `feature`; main is checked out again."""
    up.checkout("main", new_branch="feature")
    up.commit("Add the helper", {"helper.py": HELPER})
    up.commit(FIX, {"mod.py": BODY.replace("compute(3)", "compute(3, level=2)")})
    up.checkout("main")
    return up


def do_import(capsys, directory: Path, tmp_path: Path, *argv: str) -> tuple[int, str, str]:
    return run_cli(
        capsys,
        "import",
        "--series",
        str(directory),
        "--cache-dir",
        str(tmp_path / "cache"),
        *argv,
    )


def check_statuses(capsys, directory: Path, repo: Path, head: str, tmp_path: Path) -> list[str]:
    code, out, err = run_cli(
        capsys,
        "check",
        "--series",
        str(directory),
        "--repo",
        str(repo),
        "--head",
        head,
        "--json",
        "--cache-dir",
        str(tmp_path / "check-cache"),
    )
    assert code == 0, err
    return [p["status"] for p in json.loads(out)["patches"]]
