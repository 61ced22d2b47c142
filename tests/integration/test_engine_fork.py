"""Where a downstream series meets the head (Engine._fork) on real git repositories: a patch
anchored at its own parent, a downstream commit the mirror holds but no upstream ref reaches,
is placed through the touch index and the object reader, with no `git merge-base`; where its
ancestry meets the head's history at more than one commit, git answers as before. Either way
the range is the one `git merge-base` gives."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.git.engine import Engine, PatchInput
from bot.git.mirror import Mirror
from harness.gitrepo import RepoBuilder
from tests.support.engine import BODY
from tests.support.engine_checks import patches_of, signals

OTHER = "alpha = first_value()\nbeta = {}\n"
SAFE_4 = BODY.replace("compute(4)", "compute(4, safe=True)")
SAFE_30 = BODY.replace("compute(30)", "compute(30, safe=True)")


@pytest.fixture
def up(make_repo) -> RepoBuilder:
    repo = make_repo("upstream")
    repo.commit("base", {"mod.py": BODY, "other.py": OTHER.format(1)})
    repo.commit("upstream work 2", {"other.py": OTHER.format(2)})
    return repo


def traced_check(up: RepoBuilder, patches: list[PatchInput], tmp_path: Path) -> tuple:
    """The check on main, and the git commands it ran (GIT_TRACE)."""
    trace = tmp_path / "git-trace"
    mirror = Mirror(str(up.path), tmp_path / "cache", env={"GIT_TRACE": str(trace)})
    engine = Engine(mirror)
    try:
        report = engine.check("main", patches)
    finally:
        engine.close()
    commands = [
        line.split("trace: built-in: git ", 1)[1]
        for line in trace.read_text().splitlines()
        if "trace: built-in: git " in line
    ]
    return report, commands


def downstream_series(up: RepoBuilder, tmp_path: Path, *, merge_main: bool) -> list[PatchInput]:
    """Two downstream commits on main (the second like upstream's later #7), optionally with
    main merged in between; the branch is then deleted, so upstream lacks the commits while
    its object store (and so the mirror, which links it) still holds them."""
    up.checkout("main", new_branch="downstream")
    up.commit("Make value 4 safe", {"mod.py": SAFE_4})
    if merge_main:
        up.checkout("main")
        up.commit("upstream work 3", {"other.py": OTHER.format(3)})
        up.checkout("downstream")
        up.git("merge", "-q", "--no-ff", "-m", "Merge main", "main")
    up.commit(
        "Make value 30 safe", {"mod.py": SAFE_4.replace("compute(30)", "compute(30, safe=True)")}
    )
    patches = patches_of(up, "main..downstream", tmp_path / "patches")
    up.checkout("main")
    up.git("branch", "-D", "downstream")
    return patches


@pytest.mark.parametrize("merge_main", [False, True], ids=["linear", "main-merged-in"])
def test_a_downstream_patch_is_placed_at_gits_merge_base(up, tmp_path, merge_main):
    patches = downstream_series(up, tmp_path, merge_main=merge_main)
    own = patches[1].data.split(b"\n", 1)[0].split()[1].decode()  # the From line
    anchor = up.git("rev-parse", f"{own}^")
    taken = up.commit("Make value 30 safe (#7)", {"mod.py": SAFE_30})
    up.commit("upstream work 4", {"other.py": OTHER.format(4)})
    head = up.head("main")
    fork = up.git("merge-base", anchor, head)

    report, commands = traced_check(up, patches, tmp_path)

    match = signals(report.patches[1])["patch-id-match"]
    assert match["commit"] == taken
    assert match["range"] == f"{fork}..{head}"
    merge_bases = [c for c in commands if c.startswith("merge-base")]
    if merge_main:  # the ancestry meets the head's at two commits: git says which is best
        assert len(merge_bases) == 1 and anchor in merge_bases[0]
    else:  # the walk found it: no git process but the object reader and the commits' read
        assert merge_bases == []
