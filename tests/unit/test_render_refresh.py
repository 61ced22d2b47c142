"""Issue 35: carry's PR body lists refreshed patches in two lists, context only and content
changed, each content change with the upstream commit that forced it."""

from __future__ import annotations

from bot.core.render import pr_body
from bot.core.state import PatchState, SeriesState

INTERDIFF = "--- carried\n+++ refreshed\n@@ -1 +1 @@\n-@@ -7,7 +7,7 @@\n+@@ -8,7 +8,7 @@"
FORCED = {
    "file": "mod.py",
    "hunk": "@@ -48,6 +48,8 @@",
    "sha": "e" * 40,
    "subject": "Add the frobnicate helper (#88)",
    "pr": 88,
}


def refreshed(name: str, refresh: dict) -> PatchState:
    return PatchState(
        name=name,
        status="applies-moved",
        decision="keep",
        changed=True,
        interdiff=INTERDIFF,
        refresh=refresh,
    )


def test_context_only_and_content_changed_refreshes_are_two_lists():
    patches = [
        refreshed("0001-moved.patch", {"class": "context-only"}),
        refreshed("0002-took.patch", {"class": "content-changed", "forced_by": [FORCED]}),
    ]
    body = pr_body(SeriesState(id="s", upstream_repo="o/r", patches=patches), None)
    context = body.index("### Refreshed, context only")
    content = body.index("### Refreshed, content changed")
    assert context < body.index("0001-moved.patch", context) < content
    assert body.index("0002-took.patch", content) > content
    assert (
        "- `0002-took.patch`: forced by `mod.py` `@@ -48,6 +48,8 @@` by `eeeeeeeeeeee` "
        "`Add the frobnicate helper (#88)` (PR `#88`)." in body
    )
    assert "### Refreshed patches" not in body


def test_a_content_change_no_commit_explains_says_so():
    unknown = {"class": "content-changed", "forced_by": [{"file": "mod.py", "hunk": "@@ -1 +1 @@"}]}
    body = pr_body(
        SeriesState(id="s", upstream_repo="o/r", patches=[refreshed("0001-a.patch", unknown)]),
        None,
    )
    assert "(no upstream commit found that touched these lines)" in body
