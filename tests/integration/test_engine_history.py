"""History evidence on real git repositories: a landing that upstream later undid (by a titled
revert in any of the forms real projects write, or by removing the same lines) brings the patch
back; a re-landing is judged on content; a base is any revision, resolved or refused."""

from __future__ import annotations

import pytest

from bot.core.classify import Decision, Status
from bot.git.engine import PatchInput
from bot.git.mirror import MirrorError
from harness.gitrepo import RepoBuilder
from tests.support.engine import BODY
from tests.support.engine_checks import check, only, patches_of, signals

CACHED = {"mod.py": BODY.replace("compute(15)", "compute(15, cached=True)")}
PLAIN = {"mod.py": BODY}


@pytest.fixture
def up(make_repo) -> RepoBuilder:
    repo = make_repo("upstream")
    repo.commit("base", {"mod.py": BODY, "other.py": "alpha = first_value()\nbeta = 2\n"})
    return repo


def carried(up: RepoBuilder, tmp_path, files=CACHED, message="Cache value 15") -> list:
    up.checkout("main", new_branch="carry")
    up.commit(message, files)
    patches = patches_of(up, "main..carry", tmp_path / "patches")
    up.checkout("main")
    return patches


def match_of(patch) -> dict:
    return signals(patch)["patch-id-match"]


@pytest.mark.parametrize(
    ("landed", "revert"),
    [
        # vLLM's squash titles: both carry PR numbers, the revert has no trailer line
        ("[Perf] Cache value 15 (#101)", 'Revert "[Perf] Cache value 15 (#101)" (#102)'),
        # the landing's title was edited after the revert was written: the PR number ties them
        ("[Perf] Cache value fifteen in the hot loop (#101)", 'Revert "Cache value 15 (#101)"'),
        # a plain titled revert
        ("Cache value 15", 'Revert "Cache value 15"'),
    ],
)
def test_a_titled_revert_brings_the_patch_back(up, tmp_path, landed, revert):
    patches = carried(up, tmp_path)
    base = up.head("main")
    taken = up.commit(landed, CACHED)
    undone = up.commit(revert, PLAIN)
    up.commit("unrelated upstream work", {"other.py": "alpha = first_value()\nbeta = 3\n"})
    p = only(check(up, "main", patches, tmp_path, base=base))
    assert (p.status, p.decision) == (Status.APPLIES, Decision.KEEP)
    assert match_of(p)["commit"] == taken and match_of(p)["reverted_by"] == undone
    assert undone[:12] in p.reason and taken[:12] in p.reason


def test_a_silent_removal_of_the_same_lines_brings_the_patch_back(up, tmp_path):
    """No title says revert: a later commit puts the lines back as they were, among other work."""
    patches = carried(up, tmp_path)
    base = up.head("main")
    taken = up.commit("[Perf] Speed up lookups (#200)", CACHED)
    undone = up.commit(
        "Simplify the module (#201)",
        {"mod.py": BODY.replace("compute(30)", "compute(30, strict=True)")},
    )
    p = only(check(up, "main", patches, tmp_path, base=base))
    assert (p.status, p.decision) == (Status.APPLIES, Decision.KEEP)
    assert match_of(p)["reverted_by"] == undone
    assert match_of(p)["reverted_how"] == "lines-removed"
    assert taken[:12] in p.reason


def test_moving_the_lines_to_another_file_is_not_a_revert(up, tmp_path):
    """The commit that takes the lines away adds them elsewhere: upstream reworked, not undid."""
    patches = carried(up, tmp_path)
    base = up.head("main")
    up.commit("[Perf] Cache value 15 (#300)", CACHED)
    up.commit(
        "Move value 15 (#301)",
        {"mod.py": BODY.replace("value_15 = compute(15)\n", ""), "moved.py": CACHED["mod.py"]},
    )
    p = only(check(up, "main", patches, tmp_path, base=base))
    assert p.decision == Decision.REVIEW
    assert match_of(p)["reverted_by"] is None


def test_a_relanding_after_the_revert_is_judged_on_its_content(up, tmp_path):
    patches = carried(up, tmp_path)
    base = up.head("main")
    taken = up.commit("[Perf] Cache value 15 (#101)", CACHED)
    up.commit('Revert "[Perf] Cache value 15 (#101)" (#102)', PLAIN)
    relanded = up.commit("[Perf] Reland cache value 15 (#103)", CACHED)
    p = only(check(up, "main", patches, tmp_path, base=base))
    assert (p.status, p.decision) == (Status.CONTAINED, Decision.DROP)
    matches = {e["commit"]: e for e in p.evidence if e["signal"] == "patch-id-match"}
    assert matches[relanded]["reverted_by"] is None and matches[taken]["reverted_by"]


def test_a_revert_of_the_revert_with_pr_numbers_is_contained(up, tmp_path):
    patches = carried(up, tmp_path)
    base = up.head("main")
    taken = up.commit("[Perf] Cache value 15 (#101)", CACHED)
    up.commit('Revert "[Perf] Cache value 15 (#101)" (#102)', PLAIN)
    up.commit('Revert "Revert "[Perf] Cache value 15 (#101)" (#102)" (#104)', CACHED)
    p = only(check(up, "main", patches, tmp_path, base=base))
    assert (p.status, p.decision) == (Status.CONTAINED, Decision.DROP)
    assert match_of(p)["commit"] == taken and match_of(p)["reverted_by"] is None


def test_a_conflicting_patch_whose_landing_was_reverted_is_kept_as_a_conflict(up, tmp_path):
    patches = carried(up, tmp_path)
    base = up.head("main")
    up.commit("[Perf] Cache value 15 (#101)", CACHED)
    up.commit('Revert "[Perf] Cache value 15 (#101)" (#102)', PLAIN)
    up.commit("Rename value 15 (#105)", {"mod.py": BODY.replace("compute(15)", "calc(15)")})
    p = only(check(up, "main", patches, tmp_path, base=base))
    assert (p.status, p.decision) == (Status.CONFLICT, Decision.KEEP)
    assert "undid it in" in p.reason


# ---- the base: any revision, resolved or refused

REMOVAL = "def workaround(x):\n    cap_blocks(x)\n    return limit_context(x)\n"


def removal_setup(up: RepoBuilder, tmp_path) -> list:
    """A patch removing a block that upstream also removed after the tag v1."""
    up.commit("add the workaround", {"mod.py": BODY + REMOVAL})
    up.git("tag", "-a", "v1", "-m", "release 1")
    up.git("branch", "release-1")
    patches = carried(up, tmp_path, {"mod.py": BODY}, message="Remove the workaround")
    up.commit("upstream removes it too", {"mod.py": BODY})
    return patches


@pytest.mark.parametrize("base", ["v1", "release-1", "main~1"])
def test_a_base_given_by_name_is_resolved(up, tmp_path, base):
    patches = removal_setup(up, tmp_path)
    tagged = up.git("rev-parse", "v1^{commit}")
    report = check(up, "main", patches, tmp_path, base=base)
    p = only(report)
    assert (p.status, p.decision) == (Status.CONTAINED, Decision.DROP)
    assert report.base == tagged


def test_without_a_base_the_reason_does_not_claim_one_was_checked(up, tmp_path):
    up.commit("add the workaround", {"mod.py": BODY + REMOVAL})
    patch = carried(up, tmp_path, {"mod.py": BODY}, message="Remove the workaround")[0]
    plain = patch.data[patch.data.index(b"diff --git") :]  # no From commit to anchor history
    reworked = BODY.replace("compute(38)", "c(38)")  # removed along with another edit nearby
    up.commit("upstream reworks", {"mod.py": reworked})
    p = only(check(up, "main", [PatchInput("fix.diff", plain)], tmp_path))
    assert p.decision == Decision.REVIEW
    assert "before the patch's base" not in p.reason
    assert "no base" in p.reason


def test_a_base_that_does_not_resolve_is_refused(up, tmp_path):
    patches = removal_setup(up, tmp_path)
    with pytest.raises(MirrorError, match="base 'no-such-rev-xyz'"):
        check(up, "main", patches, tmp_path, base="no-such-rev-xyz")


# ---- no base: the head's own history, by patch id


def test_without_a_base_a_patch_id_match_in_the_heads_history_lets_a_removal_drop(up, tmp_path):
    """A plain diff (no From commit, no base) that upstream merged as is: the head's history
    holds a commit with the same patch id, which tells "took it" from "never had it"."""
    up.commit("add the workaround", {"mod.py": BODY + REMOVAL})
    taken = up.commit("upstream removes the workaround (#77)", {"mod.py": BODY})
    up.commit("later work", {"other.py": "alpha = first_value()\nbeta = 5\n"})
    mail = up.git("format-patch", "-1", "--stdout", taken).encode()
    plain = mail[mail.index(b"diff --git") :]
    p = only(check(up, "main", [PatchInput("removal.diff", plain)], tmp_path))
    assert (p.status, p.decision) == (Status.CONTAINED, Decision.DROP)
    found = signals(p)
    assert found["history"]["result"] == "head-history"
    assert found["patch-id-match"]["commit"] == taken


def test_without_a_base_the_reason_says_the_heads_history_had_no_match(up, tmp_path):
    up.commit("add the workaround", {"mod.py": BODY + REMOVAL})
    up.commit("upstream rewrites the module", {"mod.py": BODY.replace("compute(2)", "c(2)")})
    removal = (
        b"diff --git a/mod.py b/mod.py\n--- a/mod.py\n+++ b/mod.py\n@@ -39,5 +39,2 @@\n"
        b" value_39 = compute(39)\n value_40 = compute(40)\n"
        + b"".join(b"-" + line.encode() + b"\n" for line in REMOVAL.splitlines())
    )
    up.commit("upstream drops it its own way", {"mod.py": BODY.replace("compute(2)", "c(2)")})
    p = only(check(up, "main", [PatchInput("removal.diff", removal)], tmp_path))
    assert p.decision == Decision.REVIEW
    assert "no patch-id or changed-lines match" in signals(p)["history"]["detail"]


def test_conflict_blame_from_the_touch_index_equals_a_walk_of_the_range(up, tmp_path):
    """The touch index's commits spare git the walk of a long range; the answer is the same."""
    from bot.git import history
    from bot.git.engine import Engine
    from bot.git.mirror import Mirror

    base = up.head("main")
    for n in range(6):
        up.commit(f"edit {n}", {"mod.py": BODY.replace(f"compute({n + 2})", f"c({n})")})
        up.commit(f"other {n}", {"other.py": f"alpha = {n}\n"})
    mirror = Mirror(str(up.path), tmp_path / "cache")
    head = mirror.resolve("main").sha
    engine = Engine(mirror)
    engine.touches.refresh()
    rev_range, paths = f"{base}..{head}", ["mod.py", "other.py"]
    touching = engine.touching(rev_range, paths)
    assert touching is not None and len(touching) == 12
    walked = history.file_histories(engine.git, rev_range, paths)
    assert history.file_histories(engine.git, rev_range, paths, touching) == walked
    assert [len(walked[p]) for p in paths] == [6, 6]
