"""The runner's persistent clone (runner/tree.py) on real git: what a job's code can
leave in the clone's .git never changes the tree the next job builds, even where the job
could write .git (a runner with no sandbox and no step user)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.ci.spec import TreeSpec
from runner.tree import TreeError, materialize
from tests.support.gitrepo import RepoBuilder, git


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
    blob = git(clone, "hash-object", "-w", "--stdin", input=b"trusted = False\n")
    listing = git(clone, "ls-tree", "HEAD").replace(git(clone, "rev-parse", "HEAD:mod.py"), blob)
    evil = git(clone, "mktree", input=(listing + "\n").encode())
    git(clone, "replace", "-f", git(clone, "rev-parse", "HEAD^{tree}"), evil)


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
    assert not (clone / ".git" / "refs" / "replace").exists()


def test_an_alternate_object_store_a_job_left_is_forgotten(tmp_path: Path) -> None:
    spec, _ = upstream_spec(tmp_path)
    clone = tmp_path / "clones" / "upstream"
    materialize(spec, clone, lambda _: None, plain_upstream=True)
    foreign = tmp_path / "foreign"
    RepoBuilder(foreign)
    alternates = clone / ".git" / "objects" / "info" / "alternates"
    alternates.write_text(f"{foreign / '.git' / 'objects'}\n")
    (clone / ".git" / "info" / "grafts").write_text(f"{spec.upstream_sha}\n")
    materialize(spec, clone, lambda _: None, plain_upstream=True)
    assert not alternates.exists() and not (clone / ".git" / "info" / "grafts").exists()


def test_a_tree_that_differs_is_still_refused(tmp_path: Path) -> None:
    """The check that stands behind all of this: the tree built must be the one computed."""
    spec, _ = upstream_spec(tmp_path)
    wrong = TreeSpec(**{**spec.to_dict(), "expected_tree": "0" * 40, "patches": ()})
    with pytest.raises(TreeError, match="tree mismatch"):
        materialize(wrong, tmp_path / "clones" / "upstream", lambda _: None)
