"""The touch index (bot/git/touchindex.py) against git itself, on mirrors of real repositories
built in tmp_path."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from bot.git import touchindex
from bot.git.mirror import Mirror
from bot.git.touchindex import TouchIndex
from harness.gitrepo import RepoBuilder, git

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


def stored(mirror: Mirror) -> dict[str, touchindex.Touches]:
    return loaded(mirror).all_commits()


def stored_tips(mirror: Mirror) -> list[str]:
    with sqlite3.connect(index_file(mirror)) as db:
        return touchindex._tips(db)


def assert_answers_like_git(index: TouchIndex, repo: RepoBuilder, fork: str, head: str) -> None:
    walked = index.linear_range(fork, head)
    assert walked == rev_list(repo, fork, head)
    for paths in PATH_SETS:
        assert index.touching(walked, paths) == log_touching(repo, fork, head, paths), paths


def touches(index: TouchIndex, sha: str) -> touchindex.Touches:
    found = index.get(sha)
    assert found is not None, sha
    return found


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
    assert touches(index, by_age[7]).paths == {OLD_NAME, NEW_NAME}
    assert touches(index, by_age[20]).paths == frozenset()
    assert index.touching(by_age[::-1], {GONE}) == [by_age[12]]


def test_a_check_reads_only_the_commits_it_walks(up, mirror):
    """The file holds every commit; answering for a short range reads that range's rows."""
    head = mirror.resolve("main").sha
    assert len(stored(mirror)) == 32  # root, base and 30 changes
    index = loaded(mirror)
    fork = up.head("main~4")
    assert index.touching_range(fork, head, frozenset({CORE})) == log_touching(
        up, fork, head, {CORE}
    )
    assert index.rows_read == 5  # the range's four commits, and the fork the walk stops at
    index.linear_range(fork, head)  # asked again: from memory
    assert index.rows_read == 5


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

    assert touches(index, merge).parents == (before_merge, side_tip)
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


def test_a_fork_the_head_does_not_reach_is_known_from_the_lines_without_a_walk(up, mirror):
    """`carry check` without a base anchors a patch at its own parent, often a commit the
    head's history lacks (a downstream branch): the walk read the whole line down to the root
    before it said None (3 s of a 3.6 s check on a 40,000-commit upstream)."""
    fork_point = up.head("main~20")
    up.checkout(fork_point, new_branch="side")
    side = up.commit("a downstream commit", {"side.txt": "one\n"})
    up.checkout("main")
    head = up.commit("main moves on", {CORE: "moved\n"})
    mirror.resolve("side")
    assert mirror.resolve("main").sha == head
    index = loaded(mirror)
    assert index.reaches(head, side) is False
    assert index.reaches(head, up.head("main~25")) is True
    assert index.reaches(side, fork_point) is True
    before = index.rows_read
    assert index.linear_range(side, head) is None
    assert index.rows_read == before  # no commit read: nothing walked
    # a commit the index does not hold (the mirror has its objects, no ref reaches it)
    assert index.reaches(head, "0" * 40) is False
    assert index.linear_range("0" * 40, head) is None
    assert index.rows_read == before
    # an ancestor still walks, as git answers
    assert index.linear_range(up.head("main~3"), head) == rev_list(up, up.head("main~3"), head)


def test_incremental_refresh_equals_a_fresh_load(up, mirror, tmp_path):
    base = up.head("base")
    first = mirror.resolve("main").sha
    index = loaded(mirror)
    assert index.linear_range(base, first) == rev_list(up, base, first)

    second = grow(up, 30, 12)
    assert mirror.resolve("main").sha == second
    index.refresh()
    assert set(rev_list(up, base, second)) <= stored(mirror).keys()

    # Asked again for the same fork with a newer head (the walk stops at the previous head,
    # reading only the new commits), the same head, an older head, and the newer one again.
    before = index.rows_read
    assert index.linear_range(base, second) == rev_list(up, base, second)
    assert index.rows_read - before == 12  # `first`, where it stops, was read before
    assert_answers_like_git(index, up, base, second)
    assert index.linear_range(base, first) == rev_list(up, base, first)
    assert index.linear_range(base, second) == rev_list(up, base, second)
    assert_answers_like_git(loaded(mirror), up, up.head("main~3"), second)

    third = grow(up, 42, 3)
    mirror.resolve("main")
    index.refresh()
    assert index.linear_range(base, third) == rev_list(up, base, third)
    assert stored(mirror) == stored(rebuilt(up, tmp_path))


def test_update_without_news_adds_nothing(up, mirror):
    mirror.resolve("main")
    before = stored(mirror)
    assert touchindex.update(mirror.git, mirror.path) == 0
    mirror.resolve("main")  # fetches again: nothing new
    mirror.fetch("+refs/heads/main:refs/carry/heads/main")
    assert stored(mirror) == before
    # A new commit is one row more, and the new tip.
    new = up.commit("one more", {CORE: "more\n"})
    mirror.resolve("main")
    grown = stored(mirror)
    assert grown.keys() - before.keys() == {new} and stored_tips(mirror) == [new]


CRASHING_UPDATE = """
import os, sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN")
db.execute("INSERT OR REPLACE INTO commits (sha, parents, paths) VALUES (?, '', x'')", ("f" * 40,))
db.execute("INSERT OR REPLACE INTO meta VALUES ('tips', ?)", ("f" * 40,))
os._exit(0)  # a crash before the commit: the update's transaction is torn
"""


def test_update_torn_by_a_crash_leaves_the_index_as_it_was(up, mirror):
    base = up.head("base")
    first = mirror.resolve("main").sha
    at_first = stored(mirror)
    stale = loaded(mirror)
    subprocess.run([sys.executable, "-c", CRASHING_UPDATE, str(index_file(mirror))], check=True)

    stale.refresh()
    assert stored(mirror) == at_first and stored_tips(mirror) == [first]
    assert stale.get("f" * 40) is None
    assert stale.linear_range(base, first) == rev_list(up, base, first)

    head = grow(up, 30, 4)
    mirror.resolve("main")
    stale.refresh()
    assert_answers_like_git(stale, up, base, head)
    assert_answers_like_git(loaded(mirror), up, base, head)


def test_damaged_index_answers_unknown_and_the_next_fetch_rebuilds_it(up, mirror, tmp_path):
    base = up.head("base")
    head = mirror.resolve("main").sha
    data = index_file(mirror).read_bytes()
    for suffix in ("-wal", "-shm"):
        Path(f"{index_file(mirror)}{suffix}").unlink(missing_ok=True)
    index_file(mirror).write_bytes(data[:100])  # torn by a copy, say
    assert loaded(mirror).linear_range(base, head) is None
    newer = grow(up, 30, 2)
    mirror.resolve("main")
    assert_answers_like_git(loaded(mirror), up, base, newer)
    assert stored(mirror) == stored(rebuilt(up, tmp_path))


def legacy_bytes(commits: Mapping[str, touchindex.Touches], tips: list[str]) -> bytes:
    """An index file of the earlier format holding `commits`."""
    chunks = []
    for sha, t in commits.items():
        head = " ".join(["C", sha, *t.parents]).encode()
        chunks.append(b"\0".join([head, *(p.encode() for p in sorted(t.paths))]))
    chunks.append(b"T " + " ".join(tips).encode())
    return b"".join(chunk + b"\0\0" for chunk in chunks)


def test_legacy_index_is_migrated_not_rebuilt(up, mirror, tmp_path):
    base = up.head("base")
    head = mirror.resolve("main").sha
    everything = stored(mirror)
    for leftover in mirror.path.glob(f"{touchindex.FILE_NAME}*"):
        leftover.unlink()
    legacy = mirror.path / touchindex.LEGACY_FILE_NAME
    # A complete append, then one torn by a crash (its tips record cut), which nobody trusts.
    torn = b"C " + ("e" * 40).encode() + b" " + head.encode() + b"\0\0T " + b"e" * 20
    legacy.write_bytes(legacy_bytes(everything, [head]) + torn)

    index = TouchIndex(mirror.path, when_missing=mirror.index)  # as the engine opens it
    index.refresh()
    assert not legacy.exists()
    assert stored(mirror) == everything and stored_tips(mirror) == [head]
    assert_answers_like_git(index, up, base, head)
    # The next fetch indexes only what is new.
    newer = grow(up, 30, 2)
    mirror.resolve("main")
    assert len(stored(mirror)) == len(everything) + 2
    assert_answers_like_git(loaded(mirror), up, base, newer)
    assert stored(mirror) == stored(rebuilt(up, tmp_path))


def test_a_check_builds_a_missing_index(up, mirror):
    base = up.head("base")
    head = mirror.resolve("main").sha
    index_file(mirror).unlink()
    plain = loaded(mirror)
    assert plain.linear_range(base, head) is None  # a plain reader never writes
    index = TouchIndex(mirror.path, when_missing=mirror.index)
    index.refresh()
    assert_answers_like_git(index, up, base, head)


@pytest.mark.parametrize("removed", ["index file", "mirror"])
def test_recreated_index_is_read_from_the_start(up, mirror, removed):
    base = up.head("base")
    mirror.resolve("main")
    grow(up, 30, 3)
    head = mirror.resolve("main").sha
    index = loaded(mirror)
    assert index.linear_range(base, head) == rev_list(up, base, head)
    before = stored(mirror)

    shutil.rmtree(mirror.path) if removed == "mirror" else index_file(mirror).unlink()
    assert mirror.resolve("main").sha == head  # indexes everything again, in one update
    index.refresh()
    assert stored(mirror) == before
    assert_answers_like_git(index, up, base, head)


def test_refresh_while_the_index_file_is_missing(up, mirror):
    head = mirror.resolve("main").sha
    index = loaded(mirror)
    index_file(mirror).unlink()
    index.refresh()
    assert index.all_commits() == {} and index.get(head) is None


def test_recreated_larger_index_is_read_from_the_start(up, mirror):
    base = up.head("base")
    mirror.resolve("main")
    index = loaded(mirror)
    shutil.rmtree(mirror.path)
    head = grow(up, 30, 10)
    mirror.resolve("main")
    index.refresh()
    assert index.linear_range(base, head) == rev_list(up, base, head)


def test_root_commit_is_indexed_apart_from_its_child(up, mirror):
    head = mirror.resolve("main").sha
    root = up.head("main~31")
    index = loaded(mirror)
    walked = index.linear_range(root, head)
    assert walked is not None
    assert index.touching(walked, {"README"}) == log_touching(up, root, head, {"README"})
    assert index.get(root) is not None


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


def test_local_fetch_links_objects_and_a_url_fetch_gets_the_same(up, mirror, tmp_path):
    """From a local path the mirror links the source's packs and loose objects; through a
    file:// URL git fetches them. Both end with the same refs, objects and index."""
    up.git("repack", "-q", "-a", "-d")
    loose = up.commit("a loose one", {CORE: "loose\n"})
    head = mirror.resolve("main").sha
    assert head == loose
    objects = up.path / ".git" / "objects"
    for source in [*objects.glob("pack/*.pack"), objects / loose[:2] / loose[2:]]:
        linked = mirror.path / "objects" / source.relative_to(objects)
        assert os.path.samefile(linked, source)
    by_url = Mirror(f"file://{up.path}", tmp_path / "url-cache")
    assert by_url.resolve("main").sha == head
    assert stored(by_url) == stored(mirror)
    assert git(mirror.path, "for-each-ref") == git(by_url.path, "for-each-ref")
    assert git(mirror.path, "rev-list", "--objects", head) == git(
        by_url.path, "rev-list", "--objects", head
    )


def test_widening_again_with_every_ref_held_writes_nothing(up, tmp_path):
    """`carry check` of patches whose commits upstream lacks widens the mirror in every
    process: when the source's branches and tags are where the mirror holds them, that is one
    ls-remote, with no link, ref update or index update; a branch that moved is fetched."""
    trace = tmp_path / "git-trace"
    mirror = Mirror(str(up.path), tmp_path / "cache", env={"GIT_TRACE": str(trace)})
    mirror.resolve("main")
    mirror.widen()
    assert git(mirror.path, "rev-parse", "refs/carry/heads/main") == up.head()

    def commands() -> list[str]:
        lines = trace.read_text().splitlines()
        trace.write_text("")
        return [
            line.split("trace: built-in: git ", 1)[1].split()[0]
            for line in lines
            if "trace: built-in: git " in line
        ]

    commands()
    mirror.widen()
    assert commands() == ["ls-remote", "upload-pack"]
    moved = up.commit("upstream moves on", {CORE: "moved\n"})
    mirror.widen()
    ran = commands()
    assert "update-ref" in ran and "for-each-ref" in ran  # the new head, and its indexing
    assert git(mirror.path, "rev-parse", "refs/carry/heads/main") == moved
    assert loaded(mirror).get(moved) is not None


def test_an_index_opened_in_one_thread_answers_in_another(up, mirror, caplog):
    """Its SQLite reader was bound to the thread that first read it: a worker thread asking
    next got 'objects created in a thread can only be used in that same thread', and the
    index went unused (every walk fell back to git)."""
    import threading

    head = mirror.resolve("main").sha
    index = loaded(mirror)
    fork = up.head("main~4")
    assert index.touching_range(fork, head, frozenset({CORE}))  # opens the reader here
    answers: list[object] = []
    other = up.head("main~8")
    thread = threading.Thread(
        target=lambda: answers.append(index.touching_range(other, head, frozenset({CORE})))
    )
    thread.start()
    thread.join(30)
    assert answers == [log_touching(up, other, head, {CORE})]
    assert "cannot read touch index" not in caplog.text
    assert index.rows_read > 5  # it read the rows, not git


def log_history(repo: RepoBuilder, head: str, paths: set[str], limit: int) -> list[str]:
    """What the engine asks git for a check without a base: the head's whole history."""
    out = git(
        repo.path,
        "log",
        "--no-merges",
        f"-n{limit}",
        "--format=%H",
        "--no-renames",
        head,
        "--",
        *paths,
    )
    return out.split()


def assert_history_like_git(index: TouchIndex, repo: RepoBuilder, head: str) -> None:
    for paths in [*PATH_SETS, {"README"}, {CORE, "README"}]:
        for limit in (400, 3):
            assert index.head_history(head, paths, limit) == log_history(
                repo, head, paths, limit
            ), (paths, limit)


def test_head_history_matches_git_on_lines_that_fork(up, mirror, tmp_path):
    """A head's whole history (a check without a base) from the index, never walked: on main,
    on a release branch that forks from main, and on main after it moved on; the other line's
    commits are never part of the answer."""
    first = mirror.resolve("main").sha
    up.checkout("main~10", new_branch="release")
    release = grow(up, 100, 6)  # touches CORE, UTIL, ... as main does after its fork
    up.checkout("main")
    main = grow(up, 30, 4)
    assert mirror.resolve("release").sha == release
    assert mirror.resolve("main").sha == main
    index = loaded(mirror)
    for head in (first, release, main, up.head("release~2"), up.head("main~25")):
        assert_history_like_git(index, up, head)
    assert index.rows_read == 0  # answered from the lines and the touched table, not a walk
    # An index built in one go (parents after children in git's order) answers the same.
    assert_history_like_git(loaded(rebuilt(up, tmp_path)), up, main)


def test_head_history_is_unknown_past_a_merge_or_for_an_unindexed_head(up, mirror):
    base = up.head("base")
    up.checkout("main~20", new_branch="side")
    up.commit("side one", {"side.txt": "side\n"})
    up.checkout("main")
    up.git("merge", "--no-ff", "-q", "-m", "merge side", "side")
    after = up.commit("after the merge", {CORE: "after\n"})
    mirror.resolve("main")
    index = loaded(mirror)
    assert index.head_history(after, {CORE}, 400) is None  # git walks it
    assert index.head_history(after, {"side.txt"}, 400) is None
    assert index.head_history(base, {CORE}, 400) == log_history(up, base, {CORE}, 400)
    assert index.head_history("0" * 40, {CORE}, 400) is None


def test_index_of_the_first_version_is_upgraded_by_a_check(up, mirror):
    """An index written before lines existed (no schema, no lines) answers a whole history
    only once a check has had it indexed again; nothing else changes."""
    head = mirror.resolve("main").sha
    everything = stored(mirror)
    with sqlite3.connect(index_file(mirror)) as db:
        db.execute("DROP TABLE lines")
        db.execute("DROP TABLE touched")
        db.execute("DELETE FROM meta WHERE key = 'schema'")
        db.execute("CREATE TABLE old AS SELECT sha, parents, paths FROM commits")
        db.execute("DROP TABLE commits")
        db.execute("ALTER TABLE old RENAME TO commits")
    assert loaded(mirror).head_history(head, {CORE}, 400) is None
    assert_answers_like_git(loaded(mirror), up, up.head("base"), head)  # ranges still work
    index = TouchIndex(mirror.path, when_missing=mirror.index)  # as the engine opens it
    index.refresh()
    assert_history_like_git(index, up, head)
    assert stored(mirror) == everything
