"""Issue 35: a declared drop condition. A fix page's upstream PR (or the series' drop_when) is
looked for in every head's first-parent history; when it merged and the head has upstream's
version of every hunk, the patch is proposed for drop with the PR and the differences as
evidence: automatically only where the series opts in, else as a review led by the PR. Never
for a partial, never after a revert."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.core.classify import Decision, Status
from bot.core.dropwhen import DeclaredIn, DeclaredPr
from bot.git.engine import PatchInput
from harness.gitrepo import RepoBuilder
from tests.support.engine import FUNC, body, check

BODY = body(60)
HELPER = (
    "def helper_for_frobnicate(widget):\n"
    "    prepared = widget.prepare(strict=True)\n"
    "    return prepared.with_defaults(timeout=30)\n"
)


def mine() -> str:
    """The patch: two hunks far apart in mod.py."""
    text = BODY.replace("value_10 = compute(10)\n", "value_10 = compute(10)\n" + FUNC)
    return text.replace("value_50 = compute(50)\n", "value_50 = compute(50)\n" + HELPER)


def theirs(*, both: bool = True) -> str:
    """Upstream's review-edited version: the scale changed; with `both`, the helper too."""
    text = BODY.replace(
        "value_10 = compute(10)\n",
        "value_10 = compute(10)\n" + FUNC.replace("level * 2", "level * 3"),
    )
    if both:
        text = text.replace("value_50 = compute(50)\n", "value_50 = compute(50)\n" + HELPER)
    return text


@pytest.fixture
def up(make_repo) -> RepoBuilder:
    repo = make_repo("upstream")
    repo.commit("base", {"mod.py": BODY, "other.py": "alpha = first_value()\n"})
    return repo


def carried(up: RepoBuilder, tmp_path: Path) -> tuple[list[PatchInput], str]:
    up.checkout("main", new_branch="down")
    up.commit("Add frobnicate", {"mod.py": mine()})
    (made,) = up.format_patch("main..down", tmp_path / "patches")
    up.checkout("main")
    return [PatchInput(str(made), made.read_bytes())], up.head("main")


def declared(number: int, *, automatic: bool = False) -> dict[str, list[DeclaredPr]]:
    pr = DeclaredPr(number, DeclaredIn.FIX_PAGE, "owner/upstream", automatic)
    return {"0001-Add-frobnicate.patch": [pr]}


def entry(report, signal: str) -> dict:
    (found,) = [e for e in report.evidence if e["signal"] == signal]
    return found


def test_without_a_declared_pr_upstreams_version_goes_to_review(up, tmp_path):
    patches, base = carried(up, tmp_path)
    up.commit("Add frobnicate, reviewed (#123)", {"mod.py": theirs()})
    p = check(up, patches, tmp_path, base=base)
    assert (p.status, p.decision) == (Status.UPSTREAM_VERSION, Decision.REVIEW)
    assert "#123" not in p.reason


def test_a_merged_declared_pr_leads_the_review_with_the_pr_and_the_differences(up, tmp_path):
    patches, base = carried(up, tmp_path)
    landed = up.commit("Add frobnicate, reviewed (#123)", {"mod.py": theirs()})
    up.commit("Unrelated (#1234)", {"other.py": "alpha = 1\n"})
    p = check(up, patches, tmp_path, base=base, declared=declared(123))
    assert (p.status, p.decision) == (Status.UPSTREAM_VERSION, Decision.REVIEW)
    assert p.reason.startswith(
        f"merged upstream as #123 in {landed[:12]} (declared in the fix page)"
    )
    assert "drop_when_merged" in p.reason
    found = entry(p, "declared-pr")
    assert found["merged"] is True and found["merge_commit"] == landed
    detail = found["detail"]
    assert detail.startswith(f"merged upstream as #123 in {landed}; differences: ")
    assert "-    scaled = checked.scale(level * 2)" in detail.splitlines()
    assert "+    scaled = checked.scale(level * 3)" in detail.splitlines()
    assert p.upstream_commits[0] == {
        "sha": landed,
        "subject": "Add frobnicate, reviewed (#123)",
        "pr": 123,
        "how": "declared-pr",
    }


def test_where_the_series_opts_in_a_merged_declared_pr_drops_the_patch(up, tmp_path):
    patches, base = carried(up, tmp_path)
    landed = up.commit("Add frobnicate, reviewed (#123)", {"mod.py": theirs()})
    p = check(up, patches, tmp_path, base=base, declared=declared(123, automatic=True))
    assert (p.status, p.decision) == (Status.UPSTREAM_VERSION, Decision.DROP)
    assert p.reason.startswith(f"merged upstream as #123 in {landed[:12]}")
    assert p.refreshed is None


def test_a_merge_commit_names_the_pr_and_without_a_base_it_still_counts(up, tmp_path):
    patches, _ = carried(up, tmp_path)
    up.checkout("main", new_branch="contributor")
    up.commit("Add frobnicate", {"mod.py": theirs()})
    up.checkout("main")
    up.commit("Unrelated", {"other.py": "alpha = 1\n"})
    up.git(
        "merge", "-q", "--no-ff", "-m", "Merge pull request #77 from someone/frob", "contributor"
    )
    merge = up.head()
    p = check(up, patches, tmp_path, declared=declared(77, automatic=True))
    assert p.decision == Decision.DROP
    assert entry(p, "declared-pr")["merge_commit"] == merge


def test_a_partial_is_never_dropped_for_a_merged_pr(up, tmp_path):
    patches, base = carried(up, tmp_path)
    landed = up.commit("Add frobnicate only (#123)", {"mod.py": theirs(both=False)})
    p = check(up, patches, tmp_path, base=base, declared=declared(123, automatic=True))
    assert (p.status, p.decision) == (Status.PARTIAL, Decision.REVIEW)
    assert p.reason.startswith(f"merged upstream as #123 in {landed[:12]}")


def test_a_reverted_pr_does_not_count(up, tmp_path):
    patches, base = carried(up, tmp_path)
    landed = up.commit("Add frobnicate, reviewed (#123)", {"mod.py": theirs()})
    revert = up.commit('Revert "Add frobnicate, reviewed (#123)"', {"mod.py": BODY})
    p = check(up, patches, tmp_path, base=base, declared=declared(123, automatic=True))
    assert p.decision == Decision.KEEP
    found = entry(p, "declared-pr")
    assert found["merged"] is False
    assert (found["merge_commit"], found["reverted_by"]) == (landed, revert)


def test_another_prs_number_is_not_the_declared_one(up, tmp_path):
    patches, base = carried(up, tmp_path)
    up.commit("Add frobnicate, reviewed (#1234)", {"mod.py": theirs()})
    p = check(up, patches, tmp_path, base=base, declared=declared(123, automatic=True))
    assert (p.status, p.decision) == (Status.UPSTREAM_VERSION, Decision.REVIEW)
    assert entry(p, "declared-pr")["merged"] is False
    assert not p.reason.startswith("merged upstream")
