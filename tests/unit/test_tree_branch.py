"""The tested tree as branches of the downstream repository (issue 32): carry/tree/<series>
and carry/good/<series>, the pure decisions (bot.core.tree_branch), and that a push to one of
them is never a head for the planner (carry's own push must not start a rebase)."""

from __future__ import annotations

from bot.core import events as ev
from bot.core import tree_branch as tb
from bot.core.planner import Facts, SeriesFacts, plan, plan_duplicate
from bot.core.state import GoodHead, SeriesState, TreeBranch

A, B, C, T = "a" * 40, "b" * 40, "c" * 40, "d" * 40


def test_the_same_tree_on_the_same_head_pushes_nothing() -> None:
    assert tb.tree_step(None, A, T, T).step is tb.TreeStep.PUSH
    assert tb.tree_step(B, A, T, T).step is tb.TreeStep.PUSH
    same = tb.tree_step(A, A, T, T)
    assert same.step is tb.TreeStep.UNCHANGED and "nothing pushed" in same.reason


def test_commits_that_do_not_make_the_tested_tree_are_not_pushed() -> None:
    wrong = tb.tree_step(None, A, C, T)
    assert wrong.step is tb.TreeStep.MISMATCH
    assert C[:12] in wrong.reason and T[:12] in wrong.reason


def test_the_tree_commit_of_each_head_is_kept_and_bounded() -> None:
    state = SeriesState(id="s1")
    for n in range(tb.MAX_TREE_COMMITS + 5):
        head = f"{n:040x}"
        branch = TreeBranch(head, f"{n + 1000:040x}", T, tb.tree_branch("s1"), "t")
        assert tb.record_tree(state, branch)
    assert len(state.tree_commits) == tb.MAX_TREE_COMMITS
    assert state.tree_branch is not None and state.tree_branch.head == f"{34:040x}"
    assert not tb.record_tree(state, state.tree_branch)  # said already: no write


def test_the_good_ref_follows_the_last_good_head_once() -> None:
    state = SeriesState(id="s1", tree_commits={A: B})
    assert not tb.good_ref_due(state)  # no good head
    state.last_good = GoodHead(head=A, tree_key="k", at="t")
    assert tb.good_ref_due(state) and tb.good_commit(state) == B
    assert not tb.record_good_ref(state, C, B)  # the good head moved on meanwhile
    assert tb.record_good_ref(state, A, B)
    assert state.last_good.ref == "carry/good/s1" and state.last_good.commit == B
    assert not tb.good_ref_due(state) and not tb.record_good_ref(state, A, B)
    state.last_good = GoodHead(head=C, tree_key="k2", at="t")  # no tree commit for it
    assert not tb.good_ref_due(state)


def test_the_stored_state_keeps_the_branch_and_the_ref() -> None:
    state = SeriesState(id="s1", tree_commits={A: B})
    state.last_good = GoodHead(head=A, tree_key="k", at="t", commit=B, ref="carry/good/s1")
    tb.record_tree(state, TreeBranch(A, B, T, "carry/tree/s1", "t"))
    back = SeriesState.from_dict(state.to_dict())
    assert back.tree_branch == state.tree_branch and back.tree_commits == {A: B}
    assert back.last_good == state.last_good


def _facts(watched: str) -> Facts:
    series = SeriesFacts(
        id="s1",
        upstream_repo="acme/carry",  # a series whose upstream is carry's own repository
        watched_ref=watched,
        head_sha=C,
        newest_head=C,
        head_ref=watched,
    )
    return Facts("acme/carry", series=(series,))


def test_a_push_to_carrys_tree_branches_is_never_a_head() -> None:
    for ref in ("refs/heads/carry/tree/s1", "refs/heads/carry/good/s1"):
        moved = ev.HeadMoved(repo="acme/carry", ref=ref, before=C, after=A, actor="carry[bot]")
        (action,) = plan(moved, _facts(ref))  # even where a series would watch that ref
        assert action.kind == "note" and "carry's own tree branch" in action.reason
        assert plan_duplicate(moved, _facts(ref)) == []
    other = ev.HeadMoved(
        repo="acme/carry", ref="refs/heads/carry/s1", before=C, after=A, actor="carry[bot]"
    )
    assert plan(other, _facts("refs/heads/carry/s1"))[-1].kind == "rebase"
