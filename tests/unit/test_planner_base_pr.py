"""What the planner does when a series' base PR changes state (table test, pure)."""

from __future__ import annotations

import pytest

from bot.core import events as ev
from bot.core.planner import Facts, SeriesFacts, plan

SERIES = SeriesFacts(
    id="ple", upstream_repo="vllm-project/vllm", watched_ref="refs/pull/53899/head", pull=53899
)


def changed(state: ev.PrState) -> ev.PrStateChanged:
    return ev.PrStateChanged(
        repo="vllm-project/vllm",
        number=53899,
        state=state,
        head_sha="c" * 40,
        base_ref="main",
        merge_commit_sha="d" * 40 if state == "merged" else None,
    )


@pytest.mark.parametrize(
    ("state", "kinds", "args"),
    [
        # Merged: its work is on main now, and the series follows it there.
        (
            "merged",
            ["record_base_pr", "retarget"],
            {"base": {"branch": "main"}, "words": "branch main", "by": None},
        ),
        # Closed unmerged: carry looks for the PR that carries the work on; nothing moves.
        (
            "closed_unmerged",
            ["record_base_pr", "find_successor"],
            {"repo": "vllm-project/vllm", "number": 53899},
        ),
        ("open", ["record_base_pr", "rebase"], {"head_sha": "c" * 40}),
    ],
)
def test_a_base_pr_state_change(state: ev.PrState, kinds: list[str], args: dict) -> None:
    actions = plan(changed(state), Facts("acme/carry", series=(SERIES,)))
    assert [a.kind for a in actions] == kinds
    assert args.items() <= actions[1].args.items()
