"""The runner's persistent clone (runner/tree.py) on real git: what a job's code can
leave in the clone's git directory never changes the tree the next job builds, even where the
job could write it (a runner with no sandbox and no step user); and what it leaves in the tree
where git looks for a repository (a `.git` directory, file or link, a commondir) is never read
by carry's git, nor followed by its clean-up (issue 33)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from bot.ci.spec import TreeSpec
from harness.gitrepo import RepoBuilder, git
from runner.job import hand_over
from runner.tree import (
    TreeError,
    clone_lock,
    git_dir_of,
    materialize,
    remove_entry,
    workdir_problem,
    write_git_file,
)


def in_clone(clone: Path, *args: str, input: bytes | None = None) -> str:
    """git on the clone as the runner keeps it: its git directory beside the tree."""
    where = ["--git-dir", str(git_dir_of(clone)), "--work-tree", str(clone)]
    return git(clone, *where, *args, input=input)


def upstream_spec(tmp_path: Path) -> tuple[TreeSpec, RepoBuilder]:
    upstream = RepoBuilder(tmp_path / "upstream")
    head = upstream.commit("upstream", {"mod.py": "trusted = True\n", "README": "hi\n"})
    tree = upstream.git("rev-parse", "HEAD^{tree}")
    spec = TreeSpec(
        upstream_url=str(upstream.path),
        upstream_sha=head,
        downstream_url=str(upstream.path),
        downstream_ref="refs/heads/main",
        downstream_sha=head,
        patches_dir="patches/none",
        series_digest="d" * 64,
        expected_tree=tree,
        patches=(),
    )
    return spec, upstream


def swap_a_file_by_replace_ref(clone: Path) -> None:
    """What a job's code can do where it may write .git: the tree it was given stands for
    another tree, with the same id, from now on."""
    blob = in_clone(clone, "hash-object", "-w", "--stdin", input=b"trusted = False\n")
    listing = in_clone(clone, "ls-tree", "HEAD")
    listing = listing.replace(in_clone(clone, "rev-parse", "HEAD:mod.py"), blob)
    evil = in_clone(clone, "mktree", input=(listing + "\n").encode())
    in_clone(clone, "replace", "-f", in_clone(clone, "rev-parse", "HEAD^{tree}"), evil)


@pytest.mark.parametrize("plain_upstream", [True, False])
def test_a_replace_ref_a_job_left_never_changes_the_next_jobs_tree(
    tmp_path: Path, plain_upstream: bool
) -> None:
    spec, _ = upstream_spec(tmp_path)
    clone = tmp_path / "clones" / "upstream"
    materialize(spec, clone, lambda _: None, plain_upstream=plain_upstream)
    swap_a_file_by_replace_ref(clone)
    (clone / "mod.py").unlink()  # the next checkout writes it again, from the objects
    built = materialize(spec, clone, lambda _: None, plain_upstream=plain_upstream)
    assert built.tree == spec.expected_tree
    assert (clone / "mod.py").read_text() == "trusted = True\n"
    assert not (git_dir_of(clone) / "refs" / "replace").exists()


def test_an_alternate_object_store_a_job_left_is_forgotten(tmp_path: Path) -> None:
    spec, _ = upstream_spec(tmp_path)
    clone = tmp_path / "clones" / "upstream"
    materialize(spec, clone, lambda _: None, plain_upstream=True)
    foreign = tmp_path / "foreign"
    RepoBuilder(foreign)
    alternates = git_dir_of(clone) / "objects" / "info" / "alternates"
    alternates.write_text(f"{foreign / '.git' / 'objects'}\n")
    (git_dir_of(clone) / "info" / "grafts").write_text(f"{spec.upstream_sha}\n")
    materialize(spec, clone, lambda _: None, plain_upstream=True)
    assert not alternates.exists() and not (git_dir_of(clone) / "info" / "grafts").exists()


def test_a_tree_that_differs_is_still_refused(tmp_path: Path) -> None:
    """The check that stands behind all of this: the tree built must be the one computed."""
    spec, _ = upstream_spec(tmp_path)
    wrong = TreeSpec(**{**spec.to_dict(), "expected_tree": "0" * 40, "patches": ()})
    with pytest.raises(TreeError, match="tree mismatch"):
        materialize(wrong, tmp_path / "clones" / "upstream", lambda _: None)


def planted_repository(tmp_path: Path, marks: Path) -> Path:
    """A git directory a step could make: a config whose fsmonitor and hooks run its code
    (as the runner's user, with the runner's environment, when carry's git reads it)."""
    evil = tmp_path / "evil.git"
    git(tmp_path, "init", "-q", "--bare", str(evil))
    (evil / "config").write_text(
        "[core]\n\trepositoryformatversion = 0\n\tbare = false\n"
        f"\tfsmonitor = touch {marks}/fsmonitor-ran\n\thooksPath = {evil}/hooks\n"
    )
    for hook in ("post-checkout", "reference-transaction"):
        (evil / "hooks" / hook).write_text(f"#!/bin/sh\ntouch {marks}/{hook}-ran\n")
        (evil / "hooks" / hook).chmod(0o755)
    return evil


def test_what_a_job_plants_where_git_looks_is_never_read_by_the_runners_git(
    tmp_path: Path,
) -> None:
    """The clone's tree was the steps' (a step user's top directory): a `.git` it renamed and
    replaced with its own, a `.git` file naming another git directory (the gitdir file), and
    a commondir in the runner's git directory itself. None of them runs anything in the next
    job, which builds and verifies the tree from the runner's own objects."""
    spec, _ = upstream_spec(tmp_path)
    clone = tmp_path / "clones" / "upstream"
    marks = tmp_path / "marks"
    marks.mkdir()
    evil = planted_repository(tmp_path, marks)
    for plant in ("directory", "gitdir file", "commondir"):
        materialize(spec, clone, lambda _: None, plain_upstream=True)
        write_git_file(clone)
        if plant == "directory":  # what renaming root's `.git` made room for
            remove_entry(clone / ".git")
            git(tmp_path, "clone", "-q", "--bare", str(evil), str(clone / ".git"))
            (clone / ".git" / "config").write_text((evil / "config").read_text())
        elif plant == "gitdir file":
            (clone / ".git").write_text(f"gitdir: {evil}\n")
        else:
            (git_dir_of(clone) / "commondir").write_text(f"{evil}\n")
        built = materialize(spec, clone, lambda _: None, plain_upstream=True)
        assert built.tree == spec.expected_tree, plant
        assert sorted(p.name for p in marks.iterdir()) == [], plant
        assert not (clone / ".git").exists() and not (git_dir_of(clone) / "commondir").exists()


def test_a_git_link_in_the_tree_is_removed_never_followed(tmp_path: Path) -> None:
    """`.git` a symlink to a directory of the host's: the next job's clean-up removes the link
    and neither deletes nor writes anything where it points."""
    spec, _ = upstream_spec(tmp_path)
    clone = tmp_path / "clones" / "upstream"
    materialize(spec, clone, lambda _: None)
    victim = tmp_path / "victim"
    (victim / "hooks").mkdir(parents=True)
    (victim / "info").mkdir()
    for name in ("config", "index.lock", "commondir", "info/attributes", "hooks/pre-commit"):
        (victim / name).write_text("the host's\n")
    before = sorted(str(p.relative_to(victim)) for p in victim.rglob("*"))
    (clone / ".git").unlink(missing_ok=True)
    (clone / ".git").symlink_to(victim)
    (clone / "link-out").symlink_to(victim)  # a link among the tree's files: cleaned, as a link
    built = materialize(spec, clone, lambda _: None)
    assert built.tree == spec.expected_tree
    assert not (clone / ".git").is_symlink() and not (clone / "link-out").is_symlink()
    assert sorted(str(p.relative_to(victim)) for p in victim.rglob("*")) == before
    assert all((victim / name).read_text() == "the host's\n" for name in ("config", "index.lock"))


def test_a_git_directory_swapped_for_a_link_is_made_anew(tmp_path: Path) -> None:
    """Where the runner's own git directory is not a real directory of the runner's (a link, a
    directory others may write), it is not trusted: it is removed (the link, not its target)
    and the clone is made again."""
    spec, _ = upstream_spec(tmp_path)
    clone = tmp_path / "clones" / "upstream"
    materialize(spec, clone, lambda _: None)
    elsewhere = tmp_path / "elsewhere.git"
    git_dir_of(clone).rename(elsewhere)
    git_dir_of(clone).symlink_to(elsewhere)
    built = materialize(spec, clone, lambda _: None)
    assert built.tree == spec.expected_tree
    assert git_dir_of(clone).is_dir() and not git_dir_of(clone).is_symlink()
    assert (elsewhere / "HEAD").is_file()  # the link's target is left alone


def test_a_submodule_directory_is_emptied_for_the_next_job(tmp_path: Path) -> None:
    """`git clean` does not look inside a submodule's directory: what a job left there is
    removed before the next job's tree is verified (a link in it, removed as a link)."""
    sub = RepoBuilder(tmp_path / "sub")
    sub_head = sub.commit("sub", {"lib.py": "x = 1\n"})
    upstream = RepoBuilder(tmp_path / "upstream")
    upstream.commit("upstream", {"README": "hi\n"})
    upstream.git("update-index", "--add", "--cacheinfo", f"160000,{sub_head},vendor/sub")
    upstream.git("commit", "-q", "-m", "a submodule")
    head = upstream.git("rev-parse", "HEAD")
    spec = TreeSpec(
        upstream_url=str(upstream.path),
        upstream_sha=head,
        downstream_url=str(upstream.path),
        downstream_ref="refs/heads/main",
        downstream_sha=head,
        patches_dir="patches/none",
        series_digest="d" * 64,
        expected_tree=upstream.git("rev-parse", "HEAD^{tree}"),
        patches=(),
    )
    clone = tmp_path / "clones" / "upstream"
    materialize(spec, clone, lambda _: None, plain_upstream=True)
    vendor = clone / "vendor" / "sub"
    vendor.mkdir(parents=True, exist_ok=True)
    (vendor / "planted.py").write_text("import os\n")
    (vendor / "deep").mkdir()
    (vendor / "deep" / "more.py").write_text("\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("kept\n")
    (vendor / "out").symlink_to(outside)
    built = materialize(spec, clone, lambda _: None, plain_upstream=True)
    assert built.tree == spec.expected_tree
    assert vendor.is_dir() and list(vendor.iterdir()) == []
    assert (outside / "keep").read_text() == "kept\n"


def test_the_clone_handed_to_a_step_user_keeps_its_git_directory_out_of_reach(
    tmp_path: Path,
) -> None:
    """The tree's top directory is the step user's; the git directory is beside it, in the
    runner's clones directory, which the step user may not write: there is nothing of the
    runner's git in the tree to rename."""
    spec, _ = upstream_spec(tmp_path)
    clone = tmp_path / "clones" / "upstream"
    materialize(spec, clone, lambda _: None)
    write_git_file(clone)
    assert (clone / ".git").is_file()
    assert git_dir_of(clone).parent == clone.parent
    hand_over(clone, 65534, 65534)
    assert git_dir_of(clone).stat().st_uid == clone.parent.stat().st_uid
    assert clone.parent.stat().st_mode & 0o022 == 0


@pytest.mark.parametrize(
    ("where", "refused"),
    [
        ("open", "every user may write it"),
        ("sticky/missing/work", "another user could make it first"),
        ("sticky/mine/work", None),
        ("closed/work", None),
    ],
)
def test_a_workdir_under_a_directory_every_user_may_write_is_refused(
    tmp_path: Path, where: str, refused: str | None
) -> None:
    for name, mode in (("open", 0o777), ("sticky", 0o1777), ("closed", 0o755)):
        (tmp_path / name).mkdir()
        (tmp_path / name).chmod(mode)
    (tmp_path / "sticky" / "mine").mkdir(mode=0o711)
    problem = workdir_problem(tmp_path / where / "runner")
    if refused is None:
        assert problem is None
    else:
        assert problem is not None and refused in problem, problem


def test_the_runner_refuses_such_a_workdir_before_it_starts(tmp_path: Path) -> None:
    """`carry runner` says why in one line and exits 2, before it makes the workdir."""
    shared = Path(tempfile.mkdtemp(prefix="carry-open-", dir="/var/tmp"))
    try:
        shared.chmod(0o777)
        env = {name: value for name, value in os.environ.items() if name != "CARRY_CONFIG"}
        env["REDIS_URL"] = "redis://127.0.0.1:1/0"  # nothing there: the runner does not wait
        done = subprocess.run(
            [sys.executable, "-m", "runner.cli", "--kind", "gaudi", "--workdir", f"{shared}/w"],
            env=env,
            cwd=tmp_path,  # no config/carry.yaml here: a runner with no config
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        errors = [line for line in done.stderr.splitlines() if line.startswith("carry: error")]
        assert done.returncode == 2, done.stderr
        assert errors == [
            f"carry: error: the runner's workdir {shared}/w is under {shared} (mode 777): every "
            "user may write it, and any of them could rename or plant files in the clones; use "
            "a directory only the runner's user may write"
        ], done.stderr
        assert not (shared / "w").exists()
    finally:
        shutil.rmtree(shared)


def test_the_clones_directory_is_closed_to_other_users(tmp_path: Path) -> None:
    """Each clone's git directory is an entry of the clones directory: made with a loose umask
    (or loosened since), it is closed again before a job uses it."""
    clones = tmp_path / "clones"
    clones.mkdir()
    clones.chmod(0o777)
    with clone_lock(clones / "upstream", lambda: None):
        assert clones.stat().st_mode & 0o777 == 0o755
