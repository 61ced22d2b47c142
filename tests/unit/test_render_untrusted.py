"""Upstream commit subjects are text nobody here wrote: in carry's PR body and conflict
comment they are shown, never interpreted (no HTML, links, @mentions or #references)."""

from __future__ import annotations

import re

from bot.core.render import conflict_report, pr_body
from bot.core.state import PatchState, SeriesState

HOSTILE = (
    "Fix <img src=x onerror=alert(1)> for @octocat, closes #12 [see](https://evil.example) `x`"
)


def outside_code_spans(markdown: str) -> str:
    """The text a Markdown renderer would interpret: code spans (any fence length) removed."""
    return re.sub(r"(`+)(?:(?!\1).)+?\1", "", markdown)


def hostile_patches() -> list[PatchState]:
    conflict = {
        "hunks": [
            {
                "file": "mod.py",
                "hunk": "@@ -1,3 +1,3 @@",
                "state": "absent",
                "detail": "",
                "upstream_commits": [{"sha": "a" * 40, "subject": HOSTILE}],
            }
        ]
    }
    match = {"signal": "patch-id-match", "commit": "b" * 40, "subject": HOSTILE}
    landing = {"sha": "c" * 40, "subject": HOSTILE, "pr": 12, "how": "content"}
    return [
        PatchState(name="0001-c.patch", status="conflict", decision="keep", conflict=conflict),
        PatchState(name="0002-d.patch", status="contained", decision="drop", evidence=[match]),
        PatchState(
            name="0003-u.patch",
            status="upstream-version",
            decision="review",
            upstream_commits=[landing],
        ),
    ]


def test_a_conflict_comment_shows_an_upstream_subject_as_code():
    text = conflict_report(hostile_patches()[0])
    assert "onerror" in text  # shown ...
    interpreted = outside_code_spans(text)
    for active in ("<img", "@octocat", "#12", "](https://evil"):
        assert active not in interpreted  # ... never interpreted


def test_the_pr_body_shows_upstream_subjects_as_code():
    state = SeriesState(id="s", upstream_repo="o/r", patches=hostile_patches())
    text = pr_body(state, "2026.12.1")
    assert text.count("onerror") >= 3
    interpreted = outside_code_spans(text)
    for active in ("<img", "@octocat", "#12", "](https://evil"):
        assert active not in interpreted


def test_a_dropped_patch_without_a_subject_shows_no_empty_parentheses():
    dropped = PatchState(name="0003-e.patch", status="contained", decision="drop", reason="merged")
    text = pr_body(SeriesState(id="s", upstream_repo="o/r", patches=[dropped]), "2026.12.1")
    assert "- `0003-e.patch`: merged." in text and "()" not in text


def test_the_pr_body_names_where_upstreams_version_came_from():
    """Issue 35: a review (or drop) of a patch upstream took names the upstream commit and PR."""
    landing = {"sha": "d" * 40, "subject": "Add the loader", "pr": 1659, "how": "content"}
    patch = PatchState(
        name="0004-l.patch",
        status="upstream-version",
        decision="review",
        reason="the head has all 1 hunks",
        upstream_commits=[landing],
    )
    text = pr_body(SeriesState(id="s", upstream_repo="o/r", patches=[patch]), "2026.12.1")
    assert "Upstream's version: `dddddddddddd` `Add the loader` (PR `#1659`)." in text
