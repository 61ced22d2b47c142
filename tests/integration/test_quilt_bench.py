"""bench/quilt.py's core on a corpus built here: an upstream with three releases and a distro
whose quilt series carries one patch upstream takes (the distro drops it), one it never takes,
and one upstream takes while the distro keeps it for one more release."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.quilt import (
    CONTAINED,
    DEBIAN_VERSION,
    KEPT_UPSTREAM_HAS_IT,
    MODES,
    NOT_CONTAINED,
    Corpus,
    caught,
    label_count,
    measure,
    release_steps,
    series_names,
    table,
    wrong_drops,
)
from bot.core.classify import Decision
from harness.gitrepo import RepoBuilder


def source(name: str, value: str) -> str:
    lines = [f"/* {name}.c */", "#include <stdio.h>", "", f"int {name}_value(void)", "{"]
    return "\n".join([*lines, f"\treturn {value};", "}", f"/* end of {name}.c */", ""])


ORIGINAL = {name: source(name, "1") for name in ("alpha", "beta", "gamma")}
CHANGED = {name: source(name, f"{name}_tuned()") for name in ORIGINAL}


def diff_of(up: RepoBuilder, name: str) -> str:
    """A distro patch: DEP-3 header and the diff of one change against the work tree's file."""
    path = f"src/{name}.c"
    up.write(path, CHANGED[name])
    diff = up.git("diff", "--", path)
    up.git("checkout", "-q", "--", path)
    return f"Description: tune {name}\nForwarded: yes\n\n{diff}\n"


@pytest.fixture
def upstream(make_repo) -> tuple[RepoBuilder, dict[str, str]]:
    """v1.0, then v2.0 taking the alpha and gamma changes, then v3.0 with an unrelated one."""
    up = make_repo("upstream")
    up.commit("Initial import", {f"src/{n}.c": text for n, text in ORIGINAL.items()})
    up.git("tag", "v1.0")
    patches = {name: diff_of(up, name) for name in ORIGINAL}
    up.commit("Tune alpha", {"src/alpha.c": CHANGED["alpha"]})
    up.commit("Tune gamma", {"src/gamma.c": CHANGED["gamma"]})
    up.git("tag", "v2.0")
    up.commit("Add a readme", {"README": "upstream\n"})
    up.git("tag", "v3.0")
    return up, patches


def changelog(version: str) -> str:
    return f"pkg ({version}) unstable; urgency=medium\n\n  * Release.\n"


@pytest.fixture
def corpus(make_repo, upstream) -> Corpus:
    up, patches = upstream
    distro = make_repo("distro")
    files = {f"debian/patches/{name}.patch": text for name, text in patches.items()}
    distro.commit(
        "1.0-1",
        {
            "debian/changelog": changelog("1:1.0-1"),
            "debian/patches/series": "alpha.patch\nbeta.patch\ngamma.patch\n",
            **files,
        },
    )
    refreshed = patches["beta"].replace("Forwarded: yes", "Forwarded: yes\nLast-Update: 1.0-2")
    distro.commit(
        "1.0-2", {"debian/changelog": changelog("1:1.0-2"), "debian/patches/beta.patch": refreshed}
    )
    distro.commit(
        "New upstream release 2.0: drop alpha.patch, applied upstream",
        {
            "debian/changelog": changelog("1:2.0-1"),
            "debian/patches/series": "# kept\nbeta.patch -p1\ngamma.patch\n",
            "debian/patches/alpha.patch": None,
        },
    )
    distro.commit(
        "New upstream release 3.0: drop gamma.patch",
        {
            "debian/changelog": changelog("1:3.0-1"),
            "debian/patches/series": "beta.patch\n",
            "debian/patches/gamma.patch": None,
        },
    )
    return Corpus(
        "tiny", up.path, distro.path, "main", "debian/patches", "debian/changelog", DEBIAN_VERSION
    )


def test_release_steps_take_each_versions_last_series(corpus):
    steps = release_steps(corpus)
    assert [(s.version, s.tag) for s in steps] == [
        ("1.0", "v1.0"),
        ("2.0", "v2.0"),
        ("3.0", "v3.0"),
    ]
    assert [p.name for p in steps[0].series] == ["alpha.patch", "beta.patch", "gamma.patch"]
    assert b"Last-Update: 1.0-2" in steps[0].series[1].data
    assert [p.name for p in steps[1].series] == ["beta.patch", "gamma.patch"]


def test_labels_come_from_the_distros_next_step_and_the_engine_drops_no_kept_patch(
    corpus, tmp_path
):
    result = measure(corpus, cache=tmp_path / "cache")
    labels = [(s.t1, s.t2, s.patch.name, s.label) for s in result.samples]
    assert labels == [
        ("v1.0", "v2.0", "alpha.patch", CONTAINED),
        ("v1.0", "v2.0", "beta.patch", NOT_CONTAINED),
        ("v1.0", "v2.0", "gamma.patch", KEPT_UPSTREAM_HAS_IT),
        ("v2.0", "v3.0", "beta.patch", NOT_CONTAINED),
        ("v2.0", "v3.0", "gamma.patch", CONTAINED),
    ]
    assert result.steps == 2
    assert [label_count(result, label) for label in (CONTAINED, NOT_CONTAINED)] == [2, 2]
    for mode in MODES:
        assert caught(result, mode) == 2
        assert wrong_drops(result, mode) == []
    drop, review, keep = Decision.DROP, Decision.REVIEW, Decision.KEEP
    assert result.decisions["no base"] == [drop, keep, drop, keep, drop]
    # With base v2.0, gamma's change was in the base already: nothing in v2.0..v3.0 took it.
    assert result.decisions["--base T1"] == [drop, keep, drop, keep, review]
    assert "| no base | 2/2 (2 drops) | 0/2 | 0 | 1/0/0 |" in table(result)
    assert "| --base T1 | 2/2 (1 drops) | 0/2 | 0 | 1/0/0 |" in table(result)


def test_steps_limit_keeps_the_newest_pairs(corpus, tmp_path):
    result = measure(corpus, 1, cache=tmp_path / "cache")
    assert result.steps == 1
    assert {(s.t1, s.t2) for s in result.samples} == {("v2.0", "v3.0")}


def test_a_directory_without_series_file_applies_its_patches_in_name_order(make_repo):
    distro = make_repo("openwrt")
    commit = distro.commit(
        "lxc: update",
        {
            "utils/lxc/Makefile": "PKG_VERSION:=1.0\n",
            "utils/lxc/patches/020-b.patch": "x\n",
            "utils/lxc/patches/010-a.patch": "x\n",
            "utils/lxc/patches/notes.txt": "x\n",
        },
    )
    layout = Corpus("lxc", Path("."), distro.path, "main", "utils/lxc/patches", "", "")
    assert series_names(layout, commit) == ["010-a.patch", "020-b.patch"]
