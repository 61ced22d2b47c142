"""What a fetch of the downstream repository costs does not grow with the series (issue 37).

The downstream repository holds three of carry's branches a series (its PR branch, the tree
it verified, the last good one), and carry's copy of it took them all in. Every fetch then
extended a touch index over every ref of that copy (a `for-each-ref` of all of them and a
`git log` from each), although no engine reads that copy: at 200 series that was the part of
a series-head's git work that grew with the number of series (bench/scale.py, `git lane CPU a
series-head` 1.45x of 10 series). And a fetch of a branch that had not moved still ran `git
fetch`."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from bot.git.downstream import Downstream
from harness.gitrepo import RepoBuilder, git

BRANCHES = 60


def _downstream(tmp_path: Path) -> tuple[RepoBuilder, str]:
    """A downstream repository with main and carry's three branches for BRANCHES / 3 series;
    returns it and its file:// URL (git's own transport, as over HTTPS: no local shortcut)."""
    repo = RepoBuilder(tmp_path / "downstream")
    main = repo.commit("series", {"patches/s0/series": "0001-fix.patch\n"})
    for n in range(BRANCHES // 3):
        for branch in (f"carry/s{n}", f"carry/tree/s{n}", f"carry/good/s{n}"):
            git(repo.path, "branch", branch, main)
    return repo, f"file://{repo.path}"


def _git_commands(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The git sub-commands carry ran, from its git adapter's log."""
    said = [r.getMessage() for r in caplog.records if r.name == "carry.git"]
    return [m.group(1) for line in said if (m := re.match(r"git (\S+)", line))]


def test_a_fetch_of_the_downstream_indexes_nothing_and_a_branch_that_did_not_move_is_not_fetched(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    repo, url = _downstream(tmp_path)
    downstream = Downstream(url, tmp_path / "cache")
    # every branch once, as the series' publishes, tree and good refs bring them in
    every = [
        "main",
        *(f"carry/{k}s{n}" for n in range(BRANCHES // 3) for k in ("", "tree/", "good/")),
    ]
    heads = downstream.fetch(*every)
    assert len(heads) == BRANCHES + 1

    caplog.set_level(logging.DEBUG, logger="carry.git")
    caplog.clear()
    assert downstream.fetch("main", "carry/s1") == {
        "main": heads["main"],
        "carry/s1": heads["carry/s1"],
    }
    ran = _git_commands(caplog)
    # Nothing walks the copy's refs (the touch index), and nothing moved, so nothing is fetched.
    assert "for-each-ref" not in ran and "log" not in ran, ran
    assert "fetch" not in ran, ran

    moved = repo.commit("more series", {"patches/s1/series": "0001-fix.patch\n"})
    caplog.clear()
    assert downstream.fetch("main", "carry/s1")["main"] == moved
    ran = _git_commands(caplog)
    assert ran.count("fetch") == 1 and "for-each-ref" not in ran and "log" not in ran, ran
    # the moved branch's commit is in the copy, readable
    assert downstream.git.run("cat-file", "-t", moved).text == "commit"


def test_a_branch_whose_commit_the_copy_lacks_is_fetched_again(tmp_path: Path) -> None:
    """The ref says the branch has not moved, but its commit is not in the copy (a damaged
    copy): it is fetched again, as `git fetch` would, not skipped."""
    repo, url = _downstream(tmp_path)
    downstream = Downstream(url, tmp_path / "cache")
    downstream.fetch("main")
    moved = repo.commit("more series", {"patches/s1/series": "0001-fix.patch\n"})
    (downstream.mirror.path / "refs/carry/heads/main").write_text(moved + "\n")
    assert downstream.fetch("main") == {"main": moved}
    assert downstream.git.run("cat-file", "-t", moved).text == "commit"
