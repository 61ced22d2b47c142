"""Which PR carries on a base PR closed unmerged, from its timeline (table tests, pure)."""

from __future__ import annotations

from typing import Any

import pytest

from bot.core.successor import candidates, retarget_for, summary

REPO = "vllm-project/vllm"


def comment(body: str, who: str = "maintainer") -> dict[str, Any]:
    return {"event": "commented", "body": body, "user": {"login": who}}


def reference(number: int, *, pull: bool = True, repo: str = REPO) -> dict[str, Any]:
    issue: dict[str, Any] = {
        "number": number,
        "title": f"PR {number}",
        "repository_url": f"https://api.github.com/repos/{repo}",
    }
    if pull:
        issue["pull_request"] = {"url": "..."}
    return {"event": "cross-referenced", "source": {"type": "issue", "issue": issue}}


@pytest.mark.parametrize(
    ("timeline", "ranked"),
    [
        ([], []),
        ([comment("Closing in favor of #54371.")], [54371]),
        ([comment("superseded by vllm-project/vllm#54371")], [54371]),
        ([comment("Replaced by other-org/vllm#9")], []),  # another repository: not a base
        ([reference(54371)], [54371]),
        ([reference(54371, pull=False)], []),  # an issue that mentions it is no successor
        ([reference(54371, repo="fork/vllm")], []),
        ([reference(54000), reference(54371)], [54371, 54000]),  # newest first
        # Words outrank a mere mention; both together rank highest.
        ([reference(54500), comment("closed in favour of #54371")], [54371, 54500]),
        (
            [reference(54500), reference(54371), comment("continued in #54371")],
            [54371, 54500],
        ),
        ([comment("see #53899 for why")], []),  # a mention without the words is no successor
        ([reference(53899)], []),  # the closed PR itself
    ],
)
def test_successor_candidates(timeline: list[dict[str, Any]], ranked: list[int]) -> None:
    assert [c.number for c in candidates(REPO, 53899, timeline)] == ranked


def test_each_candidate_says_what_points_at_it() -> None:
    (found,) = candidates(REPO, 53899, [comment("Closed in favor of #54371"), reference(54371)])
    assert found.reasons == (
        "maintainer wrote on #53899: “in favor of #54371”",
        "PR #54371 (PR 54371) mentions #53899",
    )


@pytest.mark.parametrize(
    ("state", "base", "command"),
    [
        ("merged", "branch main", "/carry retarget main"),
        ("open", "pull 54371", f"/carry retarget {REPO}#54371"),
    ],
)
def test_a_merged_successor_means_its_branch_an_open_one_its_head(
    state: str, base: str, command: str
) -> None:
    retarget = retarget_for(REPO, 54371, state, "main")
    assert (retarget.base, retarget.command) == (base, command)


def test_the_summary_names_the_successor_and_the_command() -> None:
    (found,) = candidates(REPO, 53899, [reference(54371)])
    text = summary(f"{REPO}#53899", found, "merged", retarget_for(REPO, 54371, "merged", "main"))
    assert "likely successor #54371 is merged: /carry retarget main" in text
    assert "no successor found" in summary(f"{REPO}#53899", None, None, None)
