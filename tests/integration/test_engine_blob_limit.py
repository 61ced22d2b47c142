"""Bounded work per head (issue 33): an upstream head can hold a file of tens of megabytes that
its pack compresses to kilobytes, and carry checks every head, approved or not. A 150 MB file
cost 99.6 s and 3.3 GB for one `carry check` of one patch. Files a patch touches are sized from
their object headers first (CARRY_MAX_BLOB_BYTES); a patch touching a larger one is invalid,
naming the file, its size and the limit, and the patches next to it are checked as before.
Failed before: the big file was read, applied to and searched line by line."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bot.core.classify import Decision, Status
from bot.git.engine import Engine, PatchInput
from bot.git.mirror import Mirror
from bot.git.runner import DEFAULT_MAX_BLOB_BYTES
from harness.gitrepo import RepoBuilder
from tests.support.paths import REPO_ROOT

BODY = "".join(f"value_{i} = compute({i})\n" for i in range(1, 41))
TABLE = "".join(f"row_{i} = {i}\n" for i in range(1, 41))
# 24 MiB of lines, over the 16 MiB default: its pack holds it in well under a megabyte.
BOMB = TABLE + "x = 0\n" * (4 * 1024 * 1024)
QUICK_S = 5.0  # a check of both patches; reading the bomb took about 6 s here (32 s at 150 MB)


@pytest.fixture
def up(make_repo) -> RepoBuilder:
    """main: mod.py and table.py; the series edits each; the head turns table.py into BOMB."""
    repo = make_repo("upstream")
    repo.commit("base", {"mod.py": BODY, "table.py": TABLE})
    return repo


def series(up: RepoBuilder, out: Path) -> list[PatchInput]:
    up.checkout("main", new_branch="carried")
    up.commit("Grow the table", {"table.py": TABLE.replace("row_5 = 5", "row_5 = 50")})
    up.commit("Fix value 10", {"mod.py": BODY.replace("compute(10)", "compute(10, safe=True)")})
    paths = up.format_patch("main..carried", out)
    up.checkout("main")
    return [PatchInput(str(p), p.read_bytes()) for p in paths]


def bomb(up: RepoBuilder) -> str:
    up.commit("Upstream grows the table", {"table.py": BOMB})
    return up.git("rev-parse", "HEAD")


def test_a_patch_touching_a_file_over_the_limit_is_invalid_and_the_next_still_applies(
    up: RepoBuilder, tmp_path: Path
) -> None:
    patches = series(up, tmp_path / "patches")
    base = up.git("rev-parse", "main")
    head = bomb(up)
    packed = up.git("count-objects", "-v")
    assert len(BOMB) > DEFAULT_MAX_BLOB_BYTES, packed
    engine = Engine(Mirror(str(up.path), tmp_path / "cache"))
    try:
        started = time.perf_counter()
        grow, fix = engine.check(head, patches, base=base).patches
        elapsed = time.perf_counter() - started
    finally:
        engine.close()
    assert (grow.status, grow.decision) == (Status.INVALID, Decision.REVIEW)
    assert grow.reason == (
        f"{patches[0].name}: table.py is {len(BOMB):,} bytes in the head, over the limit of "
        f"{DEFAULT_MAX_BLOB_BYTES:,} bytes (CARRY_MAX_BLOB_BYTES); carry did not read it"
    )
    assert grow.subject == "Grow the table"
    (evidence,) = grow.evidence
    assert evidence == {
        "signal": "blob-size",
        "result": "over-limit",
        "path": "table.py",
        "size": len(BOMB),
        "limit": DEFAULT_MAX_BLOB_BYTES,
        "where": "the head",
    }
    assert grow.refreshed is None  # nothing of it is written into the result
    assert (fix.status, fix.decision) == (Status.APPLIES, Decision.KEEP)
    assert elapsed < QUICK_S


def test_a_file_an_earlier_patch_took_over_the_limit_is_caught_too(
    up: RepoBuilder, tmp_path: Path
) -> None:
    """The limit is checked where each patch applies (the head plus the patches before it),
    before the in-memory applier or `git apply` reads anything."""
    grown = TABLE + "".join(f"extra_{i} = {i}\n" for i in range(100))
    up.checkout("main", new_branch="carried")
    up.commit("Grow the table", {"table.py": grown})
    up.commit("Edit the grown table", {"table.py": grown.replace("extra_50 = 50", "extra_50 = 5")})
    up.commit("Fix value 10", {"mod.py": BODY.replace("compute(10)", "compute(10, safe=True)")})
    paths = up.format_patch("main..carried", tmp_path / "patches")
    up.checkout("main")
    patches = [PatchInput(str(p), p.read_bytes()) for p in paths]
    limit = len(BODY) + 100  # every file of the head is under it; the grown table is not
    assert len(TABLE) < limit < len(grown)
    engine = Engine(Mirror(str(up.path), tmp_path / "cache", max_blob_bytes=limit))
    try:
        grow, edit, fix = engine.check(up.git("rev-parse", "main"), patches).patches
    finally:
        engine.close()
    assert grow.status == Status.APPLIES
    assert edit.status == Status.INVALID
    assert edit.reason == (
        f"{patches[1].name}: table.py is {len(grown):,} bytes in the head with the patches "
        f"before it, over the limit of {limit:,} bytes (CARRY_MAX_BLOB_BYTES); carry did not "
        "read it"
    )
    assert fix.status == Status.APPLIES


def test_git_treats_files_over_the_limit_as_binary(up: RepoBuilder, tmp_path: Path) -> None:
    """core.bigFileThreshold: git neither looks for deltas in nor diffs the lines of a file over
    the limit, so a diff of the bomb is one line, not 24 MiB of them."""
    base = up.git("rev-parse", "main")
    head = bomb(up)
    mirror = Mirror(str(up.path), tmp_path / "cache")
    mirror.ensure()
    mirror.resolve(head)
    out = mirror.git.run("diff", base, head, "--", "table.py").text
    assert "Binary files a/table.py and b/table.py differ" in out
    assert len(out) < 1000


def carry_check(up: RepoBuilder, tmp_path: Path, head: str, *patches: PatchInput, **env: str):
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", "check", "--repo", str(up.path), "--head", head]
        + ["--cache-dir", str(tmp_path / "cli-cache"), "--exit-code", "--patch"]
        + [p.name for p in patches],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), **env},
        timeout=60,
        check=False,
    )


def test_carry_check_answers_quickly_with_the_reason(up: RepoBuilder, tmp_path: Path) -> None:
    patches = series(up, tmp_path / "patches")
    head = bomb(up)
    started = time.perf_counter()
    done = carry_check(up, tmp_path, head, *patches)
    elapsed = time.perf_counter() - started
    assert done.returncode == 1, done.stderr  # --exit-code: a patch needs a human
    lines = done.stdout.splitlines()
    (grow,) = [line for line in lines if "0001-" in line]
    assert "invalid" in grow and "review" in grow
    assert f"table.py is {len(BOMB):,} bytes in the head" in grow
    assert "(CARRY_MAX_BLOB_BYTES); carry did not read it" in grow
    (fix,) = [line for line in lines if "0002-" in line]
    assert " applies " in fix
    assert elapsed < QUICK_S + 5  # a process start and a mirror's first fetch


def test_carry_check_takes_the_limit_from_the_environment(up: RepoBuilder, tmp_path: Path) -> None:
    patches = series(up, tmp_path / "patches")
    head = up.git("rev-parse", "main")
    limit = len(TABLE) - 1
    done = carry_check(up, tmp_path, head, *patches, CARRY_MAX_BLOB_BYTES=str(limit))
    assert done.returncode == 1, done.stderr
    assert f"table.py is {len(TABLE):,} bytes in the head, over the limit of {limit:,}" in (
        done.stdout
    )
    bad = carry_check(up, tmp_path, head, *patches, CARRY_MAX_BLOB_BYTES="lots")
    assert bad.returncode == 2
    assert "CARRY_MAX_BLOB_BYTES: expected a whole number (got 'lots')" in bad.stderr


def test_a_pre_image_the_mirror_fetches_during_the_check_is_sized_too(
    up: RepoBuilder, tmp_path: Path
) -> None:
    """The patch's pre-image is on an upstream branch the mirror has not fetched: the check
    sizes the pre-images in one batch, which must come after the mirror is widened (an answer
    of "missing" from before would be stale, and the limit not checked: a conflict)."""
    grown = TABLE + "".join(f"extra_{i} = {i}\n" for i in range(100))
    up.checkout("main", new_branch="side")
    up.commit("Grow the table", {"table.py": grown})
    up.checkout("side", new_branch="carried")
    up.commit("Edit the grown table", {"table.py": grown.replace("extra_50 = 50", "extra_50 = 5")})
    (path,) = up.format_patch("side..carried", tmp_path / "patches")
    up.checkout("main")
    up.git("branch", "-D", "carried")  # the patch's own commit is nowhere upstream
    patches = [PatchInput(str(path), path.read_bytes())]
    limit = len(BODY) + 100
    assert len(TABLE) < limit < len(grown)
    # A URL: the mirror fetches what it is asked for (a local path would link every object).
    mirror = Mirror(f"file://{up.path}", tmp_path / "cache", max_blob_bytes=limit)
    head = mirror.resolve("main").sha
    pre_image = up.git("rev-parse", "side:table.py")
    assert not mirror.has_objects(pre_image)
    engine = Engine(mirror)
    try:
        (edit,) = engine.check(head, patches).patches
    finally:
        engine.close()
    assert mirror.widened
    assert edit.status == Status.INVALID, edit.reason
    (evidence,) = edit.evidence
    assert evidence["size"] == len(grown)
    assert evidence["where"].startswith("the patch's pre-image ")
