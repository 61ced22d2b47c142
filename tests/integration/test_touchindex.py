"""The touch index (bot/git/touchindex.py) against git itself, on mirrors of real repositories
built in tmp_path."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path

import pytest

from bot.git import touchindex
from bot.git.mirror import Mirror
from bot.git.touchindex import TouchIndex
from tests.support.gitrepo import RepoBuilder, git

CORE = "src/core.py"
UTIL = "src/util.py"
SPACED = "docs/read me.md"
ACCENTED = "données/résumé.txt"
OLD_NAME = "old/name.txt"
NEW_NAME = "new/name.txt"
GONE = "gone.txt"

PATH_SETS = [
    {CORE},
    {UTIL},
    {SPACED},
    {ACCENTED},
    {OLD_NAME},
    {NEW_NAME},
    {GONE},
    {SPACED, ACCENTED, GONE},
    {UTIL, "notes/n3.txt", "notes/n18.txt"},
    {"not/there.txt"},
]


def grow(repo: RepoBuilder, start: int, count: int) -> str:
    """Commits `count` changes, cycling through edits of several files, with a rename at 7, a
    deletion at 12 and an empty commit at 20; returns the last commit."""
    for i in range(start, start + count):
        files: Mapping[str, str | None] = {
            0: {CORE: f"core {i}\n"},
            1: {SPACED: f"read me {i}\n", UTIL: f"util {i}\n"},
            2: {ACCENTED: f"résumé {i}\n"},
            3: {f"notes/n{i}.txt": f"note {i}\n"},
            4: {CORE: f"core {i}\n", ACCENTED: f"résumé {i}\n"},
        }[i % 5]
        if i == 7:
            files = {OLD_NAME: None, NEW_NAME: "the name\n"}
        elif i == 12:
            files = {GONE: None}
        elif i == 20:
            files = {}
        elif i == 25:
            files = {NEW_NAME: "the name, edited\n"}
        repo.commit(f"change {i}", files)
    return repo.head()


@pytest.fixture(scope="module")
def upstream_template(tmp_path_factory: pytest.TempPathFactory) -> RepoBuilder:
    """Built once per module; every test gets its own copy (tests add commits to it)."""
    repo = RepoBuilder(tmp_path_factory.mktemp("template") / "upstream")
    repo.commit("root", {"README": "readme\n"})
    repo.commit(
        "base",
        {
            CORE: "core\n",
            UTIL: "util\n",
            SPACED: "read me\n",
            ACCENTED: "résumé\n",
            OLD_NAME: "the name\n",
            GONE: "going\n",
        },
    )
    repo.git("tag", "base")
    grow(repo, 0, 30)
    return repo


@pytest.fixture
def up(upstream_template: RepoBuilder, tmp_path: Path) -> RepoBuilder:
    shutil.copytree(upstream_template.path, tmp_path / "upstream", symlinks=True)
    return RepoBuilder(tmp_path / "upstream", clock=upstream_template.clock)


@pytest.fixture
def mirror(up: RepoBuilder, tmp_path: Path) -> Mirror:
    return Mirror(str(up.path), tmp_path / "cache")


def rebuilt(up: RepoBuilder, tmp_path: Path) -> Mirror:
    """Another mirror of main, indexed from scratch in one go."""
    other = Mirror(str(up.path), tmp_path / "other-cache")
    other.resolve("main")
    return other


def rev_list(repo: RepoBuilder, fork: str, head: str) -> tuple[str, ...]:
    return tuple(git(repo.path, "rev-list", f"{fork}..{head}").split())


def log_touching(repo: RepoBuilder, fork: str, head: str, paths: set[str]) -> list[str]:
    out = git(repo.path, "log", "--format=%H", "--no-renames", f"{fork}..{head}", "--", *paths)
    return out.split()


def loaded(mirror: Mirror) -> TouchIndex:
    index = TouchIndex(mirror.path)
    index.refresh()
    return index


def index_file(mirror: Mirror) -> Path:
    return mirror.path / touchindex.FILE_NAME


def assert_answers_like_git(index: TouchIndex, repo: RepoBuilder, fork: str, head: str) -> None:
    walked = index.linear_range(fork, head)
    assert walked == rev_list(repo, fork, head)
    for paths in PATH_SETS:
        assert index.touching(walked, paths) == log_touching(repo, fork, head, paths), paths


def test_linear_range_and_touching_match_git(up, mirror):
    head = mirror.resolve("main").sha
    base = up.head("base")
    index = loaded(mirror)
    assert len(rev_list(up, base, head)) == 30
    assert_answers_like_git(index, up, base, head)
    # Any fork on the line works, and so does an empty range.
    middle = up.head("main~11")
    assert_answers_like_git(index, up, middle, head)
    assert_answers_like_git(index, up, base, middle)
    assert index.linear_range(head, head) == ()
    # The rename counts for both names, the empty commit for no path (oldest is change 0).
    by_age = rev_list(up, base, head)[::-1]
    assert index.commits[by_age[7]].paths == {OLD_NAME, NEW_NAME}
    assert index.commits[by_age[20]].paths == frozenset()
    assert index.touching(by_age[::-1], {GONE}) == [by_age[12]]


def test_merges_unknown_commits_and_foreign_forks_give_none(up, mirror):
    base = up.head("base")
    before_merge = up.head()
    up.checkout("main~20", new_branch="side")
    side_first = up.commit("side one", {"side.txt": "one\n"})
    side_tip = up.commit("side two", {"side.txt": "two\n"})
    up.checkout("main")
    up.git("merge", "--no-ff", "-q", "-m", "merge side", "side")
    merge = up.head()
    after = up.commit("after the merge", {CORE: "after\n"})
    assert mirror.resolve("main").sha == after
    index = loaded(mirror)

    assert index.commits[merge].parents == (before_merge, side_tip)
    assert index.linear_range(base, after) is None  # the merge is inside the range
    assert index.linear_range(base, merge) is None
    assert index.linear_range(side_tip, after) is None
    assert index.linear_range(merge, after) == (after,)  # a merge at the fork is fine
    assert index.linear_range(side_first, side_tip) == (side_tip,)
    # Forks that head does not reach.
    assert index.linear_range(side_first, before_merge) is None
    assert index.linear_range(after, base) is None
    # Heads the index does not hold.
    up.checkout("main", new_branch="never-fetched")
    unfetched = up.commit("not in the mirror", {CORE: "elsewhere\n"})
    assert index.linear_range(after, unfetched) is None
    assert index.linear_range(base, "0" * 40) is None


def test_incremental_refresh_equals_a_fresh_load(up, mirror):
    base = up.head("base")
    first = mirror.resolve("main").sha
    index = loaded(mirror)
    assert index.linear_range(base, first) == rev_list(up, base, first)

    second = grow(up, 30, 12)
    assert mirror.resolve("main").sha == second
    index.refresh()
    fresh = loaded(mirror)
    assert index.commits == fresh.commits
    assert set(rev_list(up, base, second)) <= index.commits.keys()

    # Asked again for the same fork with a newer head (the walk stops at the previous head),
    # the same head, an older head, and the newer one again.
    assert_answers_like_git(index, up, base, second)
    assert index.linear_range(base, second) == rev_list(up, base, second)
    assert index.linear_range(base, first) == rev_list(up, base, first)
    assert index.linear_range(base, second) == rev_list(up, base, second)
    assert_answers_like_git(fresh, up, up.head("main~3"), second)
    # The reuse is real: a walk that stops at `first` no longer needs the commits below it.
    oldest = rev_list(up, base, first)[-1]
    fresh.linear_range(base, first)
    del fresh.commits[oldest]
    assert fresh.linear_range(base, second) == rev_list(up, base, second)
    unwalked = loaded(mirror)
    del unwalked.commits[oldest]
    assert unwalked.linear_range(base, second) is None

    third = grow(up, 42, 3)
    mirror.resolve("main")
    index.refresh()
    assert index.commits == loaded(mirror).commits
    assert index.linear_range(base, third) == rev_list(up, base, third)


def test_update_without_news_appends_nothing(up, mirror):
    mirror.resolve("main")
    before = index_file(mirror).read_bytes()
    assert touchindex.update(mirror.git, mirror.path) == 0
    mirror.resolve("main")  # fetches again: nothing new
    mirror.fetch("+refs/heads/main:refs/carry/heads/main")
    assert index_file(mirror).read_bytes() == before
    # A new commit is one record and one tips record more.
    up.commit("one more", {CORE: "more\n"})
    mirror.resolve("main")
    grown = index_file(mirror).read_bytes()
    assert grown.startswith(before) and grown.count(b"\0\0") == before.count(b"\0\0") + 2


def tear_next_append(up: RepoBuilder, mirror: Mirror, records_kept: int, extra: int) -> None:
    """A fetch of new commits whose append is cut after `records_kept` whole commit records
    plus `extra` bytes, as a crash mid-write leaves it."""
    size = index_file(mirror).stat().st_size
    grow(up, 30, 5)
    mirror.resolve("main")
    data = index_file(mirror).read_bytes()
    cut = size
    for _ in range(records_kept):
        cut = data.index(b"\0\0", cut) + 2
    assert data[cut : cut + 2] == b"C "
    with open(index_file(mirror), "r+b") as handle:
        handle.truncate(cut + extra)


def test_torn_append_is_ignored_and_the_next_fetch_completes_it(up, mirror):
    base = up.head("base")
    first = mirror.resolve("main").sha
    stale = loaded(mirror)
    at_first = dict(stale.commits)
    tear_next_append(up, mirror, records_kept=2, extra=0)

    stale.refresh()  # reads the torn records, keeps none of them
    assert loaded(mirror).commits == at_first == stale.commits
    assert loaded(mirror).linear_range(base, up.head()) is None
    assert loaded(mirror).linear_range(base, first) == rev_list(up, base, first)

    head = grow(up, 35, 4)
    mirror.resolve("main")
    stale.refresh()
    fresh = loaded(mirror)
    assert stale.commits == fresh.commits
    assert_answers_like_git(fresh, up, base, head)
    assert_answers_like_git(stale, up, base, head)


def test_torn_append_cut_mid_record_keeps_every_later_commit(up, mirror, tmp_path):
    base = up.head("base")
    mirror.resolve("main")
    tear_next_append(up, mirror, records_kept=1, extra=50)
    head = grow(up, 35, 4)
    mirror.resolve("main")
    assert loaded(mirror).linear_range(base, head) == rev_list(up, base, head)
    assert loaded(mirror).commits == loaded(rebuilt(up, tmp_path)).commits


def test_torn_tips_record_keeps_the_complete_records(up, mirror, tmp_path):
    base = up.head("base")
    head = mirror.resolve("main").sha
    complete = loaded(mirror).commits
    with open(index_file(mirror), "ab") as handle:
        handle.write(b"C " + head.encode() + b"\0\0T " + head[:20].encode())
    assert loaded(mirror).commits == complete
    assert loaded(mirror).linear_range(base, head) == rev_list(up, base, head)
    # The next fetch indexes only what is new, and every commit loads.
    size = index_file(mirror).stat().st_size
    newer = grow(up, 30, 2)
    mirror.resolve("main")
    assert index_file(mirror).stat().st_size - size < 1000
    assert_answers_like_git(loaded(mirror), up, base, newer)
    assert loaded(mirror).commits == loaded(rebuilt(up, tmp_path)).commits


@pytest.mark.parametrize("removed", ["index file", "mirror"])
def test_recreated_index_is_read_from_the_start(up, mirror, removed):
    base = up.head("base")
    mirror.resolve("main")
    grow(up, 30, 3)
    head = mirror.resolve("main").sha  # two appends, two tips records
    index = loaded(mirror)
    assert index.linear_range(base, head) == rev_list(up, base, head)
    old_size = index_file(mirror).stat().st_size

    shutil.rmtree(mirror.path) if removed == "mirror" else index_file(mirror).unlink()
    assert mirror.resolve("main").sha == head  # indexes everything again, in one append
    assert index_file(mirror).stat().st_size < old_size
    index.refresh()
    assert index.commits == loaded(mirror).commits
    assert_answers_like_git(index, up, base, head)


def test_refresh_while_the_index_file_is_missing(up, mirror):
    mirror.resolve("main")
    index = loaded(mirror)
    index_file(mirror).unlink()
    index.refresh()
    assert index.commits == {}


def test_recreated_index_larger_than_the_old_one_is_read_from_the_start(up, mirror):
    base = up.head("base")
    mirror.resolve("main")
    index = loaded(mirror)
    old_size = index_file(mirror).stat().st_size
    shutil.rmtree(mirror.path)
    head = grow(up, 30, 10)
    mirror.resolve("main")
    assert index_file(mirror).stat().st_size > old_size
    index.refresh()
    assert index.linear_range(base, head) == rev_list(up, base, head)


def test_root_commit_is_indexed_apart_from_its_child(up, mirror):
    head = mirror.resolve("main").sha
    root = up.head("main~31")
    index = loaded(mirror)
    walked = index.linear_range(root, head)
    assert walked is not None
    assert index.touching(walked, {"README"}) == log_touching(up, root, head, {"README"})
    assert root in index.commits


def test_touching_range_reuses_earlier_heads_and_matches_git(up, mirror):
    base = up.head("base")
    index = loaded(mirror)
    paths = frozenset({CORE, SPACED})
    heads = [mirror.resolve("main").sha]
    for seed, count in ((30, 9), (39, 5)):
        heads.append(grow(up, seed, count))
        mirror.resolve("main")
        index.refresh()
    for head in [*heads, heads[0], heads[-1]]:  # forward, then back, then forward again
        assert index.touching_range(base, head, paths) == log_touching(up, base, head, set(paths))
    other = frozenset({ACCENTED})
    assert index.touching_range(base, heads[-1], other) == log_touching(
        up, base, heads[-1], set(other)
    )
