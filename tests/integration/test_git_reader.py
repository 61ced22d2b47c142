"""bot.git.reader: GitPython reads a series directory and walks a commit range, as the
subprocess calls it replaced did (real repositories)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.git.reader import Reader
from bot.git.runner import Git, GitError
from harness.gitrepo import RepoBuilder


@pytest.fixture
def repo(tmp_path: Path) -> RepoBuilder:
    repo = RepoBuilder(tmp_path / "r")
    repo.commit("Start", {"patches/series": "0001-a.patch\n", "patches/0001-a.patch": b"a\r\n\xff"})
    repo.commit("Add a second patch\n\nWith a body.", {"patches/0002-b.patch": "b\n"})
    repo.commit(
        "Nested files are not the directory's", {"patches/sub/x": "x\n"}, author="Bo <bo@x>"
    )
    return repo


def test_a_directory_is_read_as_bytes_and_a_missing_one_is_empty(repo: RepoBuilder) -> None:
    with Reader(Git(cwd=repo.path)) as reader:
        files = reader.read_dir(repo.head(), "patches")
        assert files == {
            "series": b"0001-a.patch\n",
            "0001-a.patch": b"a\r\n\xff",  # bytes as stored: CRLF and non-UTF-8 kept
            "0002-b.patch": b"b\n",
        }
        assert reader.read_dir(repo.head(), "nothing-here") == {}
        assert reader.read_dir(repo.head(), "patches/series") == {}  # a file, not a directory
        assert reader.read_dir("0" * 40, "patches") == {}


def test_a_range_is_walked_oldest_first_and_a_bad_one_says_why(repo: RepoBuilder) -> None:
    first = repo.head("HEAD~2")
    with Reader(Git(cwd=repo.path)) as reader:
        walked = reader.commits(f"{first}..HEAD", topo_order=True)
        assert [c.subject for c in walked] == [
            "Add a second patch",
            "Nested files are not the directory's",
        ]
        assert walked[1].author == "Bo" and walked[0].parents == (first,)
        assert walked[0].committer_email == "ada@upstream.example"
        with pytest.raises(GitError, match="no-such-rev"):
            reader.commits("no-such-rev..HEAD")
