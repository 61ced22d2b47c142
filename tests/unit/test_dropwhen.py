"""bot.core.dropwhen: which PRs a series declares, and what a merged one does to a verdict."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from bot.config.schema import Policy, Series
from bot.core.classify import Decision, HunkPresence, HunkState, Status, Verdict
from bot.core.dropwhen import DeclaredIn, DeclaredPr, PrMerge, declared_prs, judge
from bot.core.fixpage import parse_fix_page

PAGE = """# frob

Frobnicate widgets.

| Field | Value |
|---|---|
| Affects | everyone |
| Releases | v1 |
| Patches | 0001-a.patch: mod.py |
| Upstream | owner/up#5 (open); owner/up#6 (closed); other/lib#7 (merged) |
| Test | none |
"""


def test_a_pages_live_prs_of_the_upstream_and_the_series_drop_when_are_declared():
    page, _ = parse_fix_page(PAGE, "frob.md")
    found = declared_prs([page], {"0002-b.patch": ("owner/up", 9)}, "owner/up", automatic=True)
    assert found == {
        "0001-a.patch": [DeclaredPr(5, DeclaredIn.FIX_PAGE, "owner/up", True)],
        "0002-b.patch": [DeclaredPr(9, DeclaredIn.DROP_WHEN, "owner/up", True)],
    }


def test_without_a_known_upstream_every_live_pr_of_the_page_counts():
    page, _ = parse_fix_page(PAGE, "frob.md")
    found = declared_prs([page], {}, None, automatic=False)
    assert [pr.number for pr in found["0001-a.patch"]] == [5, 7]


def hunks(*states: HunkState) -> tuple[HunkPresence, ...]:
    return tuple(HunkPresence("mod.py", f"@@ {i} @@", s) for i, s in enumerate(states))


MERGE = PrMerge(DeclaredPr(5, DeclaredIn.FIX_PAGE, "owner/up", automatic=True), "a" * 40, "X (#5)")
REVIEW = Verdict(Status.UPSTREAM_VERSION, Decision.REVIEW, "the head has all 2 hunks")


def test_a_merged_pr_drops_only_with_every_hunk_upstream():
    dropped = judge(REVIEW, MERGE, hunks(HunkState.APPLIED, HunkState.SIMILAR), ["diff"])
    assert dropped.decision == Decision.DROP
    assert (
        dropped.reason
        == f"merged upstream as #5 in {'a' * 12} (declared in the fix page); differences: diff"
    )
    for states in [(HunkState.APPLIED, HunkState.ABSENT), (HunkState.UNKNOWN,), ()]:
        kept = judge(REVIEW, MERGE, hunks(*states), [])
        assert kept.decision == Decision.REVIEW
        assert kept.reason.startswith("merged upstream as #5")


@pytest.mark.parametrize(
    "verdict",
    [
        Verdict(Status.PARTIAL, Decision.REVIEW, "1 of 2"),
        Verdict(Status.CONFLICT, Decision.KEEP, "conflicts"),
        Verdict(Status.APPLIES, Decision.KEEP, "applies as is"),
    ],
)
def test_a_merged_pr_never_drops_a_partial_a_conflict_or_a_patch_that_applies(verdict):
    assert judge(verdict, MERGE, hunks(HunkState.APPLIED), []).decision == verdict.decision


def test_a_state_older_than_the_range_or_a_revert_is_not_the_prs_doing():
    all_there = hunks(HunkState.APPLIED)
    assert judge(REVIEW, MERGE, all_there, [], predates_range=True).decision == Decision.REVIEW
    reverted = PrMerge(MERGE.pr, MERGE.sha, MERGE.subject, reverted_by="b" * 40)
    assert judge(REVIEW, reverted, all_there, []) == REVIEW


def test_the_policy_is_off_by_default_and_drop_when_names_a_pr():
    assert Policy().drop_when_merged is False
    base = {"id": "s", "upstream": "u", "base": {"branch": "main"}, "patches": "p"}
    series = Series(**base, drop_when={"0001-a.patch": {"merged": "owner/up#12"}})
    assert series.drop_when_prs() == {"0001-a.patch": ("owner/up", 12)}
    with pytest.raises(ValidationError, match="owner/repo#N"):
        Series(**base, drop_when={"0001-a.patch": {"merged": "#12"}})
