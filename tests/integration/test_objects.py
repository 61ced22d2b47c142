"""Reading and writing git objects (bot/git/objects.py), checked against git on a mirror of a
real repository built in tmp_path."""

from __future__ import annotations

import os
import random
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from bot.git.mirror import Mirror
from bot.git.objects import (
    ObjectReader,
    Trees,
    TreeShapeChanged,
    TreeWriter,
    edit_tree,
    write_blob,
)
from harness.gitrepo import PINNED_ENV, RepoBuilder

MAIN = "refs/carry/heads/main"
FILES = {
    "a/b/c.txt": "c\n",
    "a/b/d.txt": "d\n",
    "a/b/with space.txt": "spaced\n",
    "a/e.txt": "e\n",
    "a.txt": "sorts between a and a/\n",
    "données/é.txt": "accent\n",
    "top.txt": "top\n",
}


def raw(
    git_dir: Path, *args: str, input: bytes | None = None, env: Mapping[str, str] | None = None
) -> bytes:
    """stdout of git in a bare repository, as bytes."""
    proc = subprocess.run(
        ["git", "--git-dir", str(git_dir), *args],
        input=input,
        capture_output=True,
        env={**os.environ, **PINNED_ENV, **(env or {})},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    return proc.stdout


def text(
    git_dir: Path, *args: str, input: bytes | None = None, env: Mapping[str, str] | None = None
) -> str:
    return raw(git_dir, *args, input=input, env=env).decode().strip()


@pytest.fixture
def up(make_repo) -> RepoBuilder:
    repo = make_repo("upstream")
    repo.write("bin/run.sh", "#!/bin/sh\necho run\n", mode=0o755)
    os.symlink("top.txt", repo.path / "link")
    repo.commit("base", FILES)
    repo.git("tag", "-a", "-m", "version one", "v1")
    return repo


@pytest.fixture
def mirror(up: RepoBuilder, tmp_path: Path) -> Mirror:
    mirror = Mirror(str(up.path), tmp_path / "cache")
    mirror.resolve("main")
    mirror.resolve("v1")
    return mirror


@pytest.fixture
def reader(mirror: Mirror) -> Iterator[ObjectReader]:
    reader = ObjectReader(mirror.git)
    yield reader
    reader.close()


def content(reader: ObjectReader, name: str) -> bytes:
    found = reader.read(name)
    assert found is not None, name
    return found.content


def tree_of(mirror: Mirror, rev: str = MAIN) -> str:
    return text(mirror.path, "rev-parse", f"{rev}^{{tree}}")


def git_tree_with(mirror: Mirror, base: str, changes: Mapping[str, bytes | None], tmp: Path) -> str:
    """What git's own index makes of `base` with files replaced (keeping their mode, 100644
    for new ones) or removed."""
    # An empty work tree only so that update-index takes paths; no file is read from it.
    (tmp / "empty-work-tree").mkdir(exist_ok=True)
    env = {
        "GIT_INDEX_FILE": str(tmp / "expected-index"),
        "GIT_WORK_TREE": str(tmp / "empty-work-tree"),
    }
    raw(mirror.path, "read-tree", base, env=env)
    for path, data in changes.items():
        if data is None:
            raw(mirror.path, "update-index", "--force-remove", "--", path, env=env)
            continue
        listed = text(mirror.path, "ls-files", "-s", "--", path, env=env)
        mode = listed.split()[0] if listed else "100644"
        oid = text(mirror.path, "hash-object", "-w", "--stdin", input=data)
        raw(mirror.path, "update-index", "--add", "--cacheinfo", f"{mode},{oid},{path}", env=env)
    return text(mirror.path, "write-tree", env=env)


def fsck_errors(mirror: Mirror) -> str:
    proc = subprocess.run(
        ["git", "--git-dir", str(mirror.path), "fsck", "--strict", "--no-dangling"],
        capture_output=True,
        env={**os.environ, **PINNED_ENV},
        check=False,
    )
    return "" if proc.returncode == 0 else proc.stdout.decode() + proc.stderr.decode()


def test_reader_answers_like_cat_file(up, mirror, reader):
    sha = text(mirror.path, "rev-parse", MAIN)
    for path in [*FILES, "bin/run.sh"]:
        found = reader.read(f"{MAIN}:{path}")
        assert found is not None, path
        assert found.content == raw(mirror.path, "cat-file", "blob", f"{MAIN}:{path}")
        assert (found.kind, found.oid) == ("blob", text(mirror.path, "rev-parse", f"{MAIN}:{path}"))
    commit = reader.read(sha)
    assert commit is not None and commit.kind == "commit"
    assert commit.content == raw(mirror.path, "cat-file", "commit", sha)

    info = reader.info(f"{sha}:a/b")
    assert info is not None
    assert (info.oid, info.kind) == (text(mirror.path, "rev-parse", f"{sha}:a/b"), "tree")
    assert info.size == int(text(mirror.path, "cat-file", "-s", f"{sha}:a/b"))
    assert reader.commit(MAIN) == sha == up.head()
    assert reader.commit("refs/carry/tags/v1") == sha  # the annotated tag is peeled
    tag = reader.info("refs/carry/tags/v1")
    assert tag is not None and tag.kind == "tag"


def test_reader_gives_none_for_missing_and_unaskable_names(mirror, reader):
    assert reader.read(f"{MAIN}:nope.txt") is None
    assert reader.read(f"{MAIN}:a/b/nope with space.txt") is None
    assert reader.info("0" * 40) is None
    assert reader.commit("refs/carry/heads/nope") is None
    assert reader.commit(f"{MAIN}:top.txt") is None  # a blob names no commit
    assert reader.read(f"{MAIN}:a.txt\n{MAIN}:top.txt") is None
    assert reader.read("") is None
    # The process is still in step after all of these.
    assert content(reader, f"{MAIN}:top.txt") == b"top\n"


def test_reader_gives_none_for_a_missing_path_ending_in_an_object_kind(reader):
    # "<name> missing" then splits into three words, like "<oid> <kind> <size>".
    for kind in ("blob", "tree", "commit", "tag"):
        assert reader.read(f"{MAIN}:notes/release {kind}") is None
        assert reader.info(f"{MAIN}:notes/release {kind}") is None
    assert content(reader, f"{MAIN}:a/b/with space.txt") == b"spaced\n"


def test_reader_restarts_a_dead_process_and_closes_twice(mirror, reader):
    expected = raw(mirror.path, "cat-file", "blob", f"{MAIN}:a/e.txt")
    assert content(reader, f"{MAIN}:a/e.txt") == expected
    first = reader._proc
    assert first is not None
    first.kill()
    first.wait()
    assert content(reader, f"{MAIN}:a/e.txt") == expected
    assert reader._proc is not None and reader._proc.pid != first.pid
    # Killed and not waited for: the next question finds out and restarts.
    reader._proc.kill()
    assert reader.commit(MAIN) == text(mirror.path, "rev-parse", MAIN)

    running = reader._proc
    assert running is not None
    reader.close()
    assert reader._proc is None and running.poll() is not None
    reader.close()
    assert reader._proc is None


@pytest.mark.parametrize(
    "data",
    [b"hello\n", b"", bytes(range(256)) * 3, random.Random(7).randbytes(50_000)],
    ids=["text", "empty", "all-bytes", "random"],
)
def test_write_blob_matches_hash_object(mirror, data):
    oid = write_blob(mirror.path, data)
    assert oid == text(mirror.path, "hash-object", "--stdin", input=data)
    assert raw(mirror.path, "cat-file", "-p", oid) == data
    assert text(mirror.path, "cat-file", "-t", oid) == "blob"
    assert write_blob(mirror.path, data) == oid  # already there: same id, still readable
    assert raw(mirror.path, "cat-file", "blob", oid) == data
    assert not fsck_errors(mirror)


def test_edit_tree_matches_git(mirror, reader, tmp_path):
    trees = Trees(reader)
    tree = tree_of(mirror)
    assert edit_tree(trees, mirror.path, tree, {}) == tree
    edits = {
        "a/b/c.txt": b"c, edited\n",
        "a/b/with space.txt": b"spaced, edited\n",
        "a.txt": b"edited too\n",
        "données/é.txt": "accent, édité\n".encode(),
        "bin/run.sh": b"#!/bin/sh\necho edited\n",
    }
    edited = edit_tree(trees, mirror.path, tree, edits)
    assert edited == git_tree_with(mirror, tree, edits, tmp_path)
    assert raw(mirror.path, "cat-file", "blob", f"{edited}:a/b/c.txt") == b"c, edited\n"
    assert text(mirror.path, "rev-parse", f"{edited}:a/e.txt") == text(
        mirror.path, "rev-parse", f"{tree}:a/e.txt"
    )
    # One file deep down, then the edited tree edited again.
    deeper = edit_tree(trees, mirror.path, edited, {"a/b/d.txt": b"d, edited\n"})
    assert deeper == git_tree_with(mirror, tree, {**edits, "a/b/d.txt": b"d, edited\n"}, tmp_path)
    assert not fsck_errors(mirror)


def test_edit_tree_refuses_what_is_not_an_existing_regular_file(mirror, reader):
    trees, tree = Trees(reader), tree_of(mirror)
    for path in ["a/b/nope.txt", "nope/c.txt", "a/b", "a", "link", "top.txt/x", "a/b/c.txt/x"]:
        with pytest.raises(TreeShapeChanged):
            edit_tree(trees, mirror.path, tree, {path: b"x\n"})
        # Refused even next to an edit that is fine.
        with pytest.raises(TreeShapeChanged):
            edit_tree(trees, mirror.path, tree, {"top.txt": b"fine\n", path: b"x\n"})


def test_tree_writer_adds_removes_and_keeps_modes(mirror, tmp_path):
    writer = TreeWriter(mirror.git, mirror.path)
    try:
        changes: dict[str, bytes | None] = {
            "new/dir/file.txt": b"brand new\n",
            "a/e.txt": None,
            "bin/run.sh": b"#!/bin/sh\necho changed\n",
        }
        written = writer.write(MAIN, changes)
        assert written == git_tree_with(mirror, tree_of(mirror), changes, tmp_path)
        listing = text(mirror.path, "ls-tree", "-r", written)
        assert "100755 blob" in next(line for line in listing.splitlines() if "bin/run.sh" in line)
        assert "100644 blob" in next(line for line in listing.splitlines() if "new/dir" in line)
        assert "a/e.txt" not in listing and "120000 blob" in listing
        assert raw(mirror.path, "cat-file", "blob", f"{written}:new/dir/file.txt") == b"brand new\n"

        # The next write builds on the tree just written.
        again = writer.write(written, {"new/dir/file.txt": None, "a/b/c.txt": b"c2\n"})
        assert again == git_tree_with(
            mirror, written, {"new/dir/file.txt": None, "a/b/c.txt": b"c2\n"}, tmp_path
        )
        assert "new/dir" not in text(mirror.path, "ls-tree", "-r", again)
        # And a write from another base starts from that base.
        assert writer.write(MAIN, {}) == tree_of(mirror)
    finally:
        writer.close()
    assert not fsck_errors(mirror)


def test_lookup_matches_ls_tree(mirror, reader):
    trees = Trees(reader)
    tree = tree_of(mirror)
    for path in [
        "a/b/c.txt",
        "a/b/with space.txt",
        "a/b",
        "a",
        "bin/run.sh",
        "link",
        "données/é.txt",
    ]:
        mode, _kind, oid = text(mirror.path, "ls-tree", tree, "--", path).split("\t")[0].split()
        found = trees.lookup(tree, path)
        assert found is not None, path
        assert (int(found[0], 8), found[1]) == (int(mode, 8), oid), path
    for path in ["nope", "a/b/nope.txt", "nope/c.txt", "top.txt/x", "a/b/c.txt/x", "link/x", ""]:
        assert trees.lookup(tree, path) is None, path


def test_batched_questions_answer_as_single_ones_in_one_round_trip(mirror, reader):
    """read_many/info_many: the answers of read/info, in order, unaskable and missing names
    included, in one round trip per batch; a batch of long names still gets its answers."""
    names = [
        *(f"{MAIN}:{path}" for path in FILES),
        f"{MAIN}:nope.txt",
        "",
        f"{MAIN}:a.txt\n{MAIN}:top.txt",
        f"{MAIN}:notes/release blob",
        MAIN,
        "refs/carry/tags/v1",
    ]
    single = [reader.read(name) for name in names]
    before = reader.round_trips
    assert reader.read_many(names) == single
    assert reader.round_trips == before + 1
    assert reader.info_many(names) == [reader.info(name) for name in names]
    assert any(found is None for found in single) and any(found for found in single)
    # More questions than one batch holds, and names too long to share a batch.
    many = [f"{MAIN}:top.txt"] * 100 + [f"{MAIN}:{'x' * 3000}"] * 3 + [f"{MAIN}:a/e.txt"]
    answers = reader.read_many(many)
    assert [a.content if a else None for a in answers] == [b"top\n"] * 100 + [None] * 3 + [b"e\n"]


def test_prefetch_reads_the_trees_on_the_way_a_level_at_a_time(mirror, reader):
    trees = Trees(reader)
    tree = tree_of(mirror)
    paths = ["a/b/c.txt", "a/b/d.txt", "a/e.txt", "données/é.txt", "nope/x.txt", "top.txt/x"]
    before = reader.round_trips
    trees.prefetch(tree, paths)
    assert reader.round_trips == before + 3  # the root; a and données; a/b
    expected = [trees.lookup(tree, path) for path in paths]
    assert reader.round_trips == before + 3  # every lookup found its trees parsed
    assert expected == [Trees(reader).lookup(tree, path) for path in paths]
    assert expected[0] is not None and expected[4] is None
    trees.prefetch("0" * 40, paths)  # nothing readable: left for lookup to say
    with pytest.raises(TreeShapeChanged):
        trees.lookup("0" * 40, "a/e.txt")
