"""The tested tree as branches of the downstream repository (issue 32). Pure.

`carry/tree/<series>`: the upstream head plus one commit per carried patch (message and author
from the patch), the exact tree the runners test, with the check runs on its commit when no PR
of carry's shows them. `carry/good/<series>`: the same commit of the last known good head.
Both are carry's own branches: a push to them is never a head to check (bot.core.planner).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from bot.core.state import GoodHead, SeriesState, TreeBranch

TREE_PREFIX = "carry/tree/"
GOOD_PREFIX = "carry/good/"
GOOD_REF_TASK = "carry.good_ref"  # workers/tree_branch.py: carry/good/<series> follows
MAX_TREE_COMMITS = 30  # the tree commits of recent heads a series remembers (as verified.MAX_HEADS)


def tree_branch(series_id: str) -> str:
    return f"{TREE_PREFIX}{series_id}"


def good_branch(series_id: str) -> str:
    return f"{GOOD_PREFIX}{series_id}"


def is_published_tree(ref: str) -> bool:
    """Whether `ref` (a branch name or refs/heads/...) is one of carry's tree branches."""
    name = ref.removeprefix("refs/heads/")
    return name.startswith((TREE_PREFIX, GOOD_PREFIX))


class TreeStep(StrEnum):
    PUSH = "push"  # the branch gets the built commit
    UNCHANGED = "unchanged"  # the branch already holds it: nothing is pushed
    MISMATCH = "mismatch"  # the commits carry built do not make the tested tree: not pushed


@dataclass(frozen=True)
class TreeDecision:
    step: TreeStep
    reason: str


def tree_step(remote: str | None, built: str, built_tree: str, expected_tree: str) -> TreeDecision:
    """What to do with the commit built for the tested tree, given the branch's commit on the
    downstream repository (None: no such branch). The commits are deterministic (author and
    committer from the patch), so the same tree on the same head is the same commit."""
    if built_tree != expected_tree:
        return TreeDecision(
            TreeStep.MISMATCH,
            f"the commits carry built make tree {built_tree[:12]}, not the tested "
            f"{expected_tree[:12]}: not pushed",
        )
    if remote == built:
        return TreeDecision(TreeStep.UNCHANGED, f"already at {built[:12]}: nothing pushed")
    return TreeDecision(TreeStep.PUSH, f"{(remote or 'none')[:12]} -> {built[:12]}")


def record_tree(state: SeriesState, branch: TreeBranch) -> bool:
    """The branch as pushed (or found): kept in the state with its head's tree commit. False
    when the state already says so."""
    known = state.tree_commits.get(branch.head) == branch.commit
    if known and state.tree_branch is not None and state.tree_branch.commit == branch.commit:
        return False
    commits = {h: c for h, c in state.tree_commits.items() if h != branch.head}
    commits[branch.head] = branch.commit
    state.tree_commits = dict(list(commits.items())[-MAX_TREE_COMMITS:])
    state.tree_branch = branch
    return True


def good_commit(state: SeriesState) -> str | None:
    """The tree commit of the last known good head, when carry built one for it."""
    good = state.last_good
    if good is None:
        return None
    return good.commit or state.tree_commits.get(good.head)


def good_ref_due(state: SeriesState) -> bool:
    """Whether `carry/good/<series>` is still to point at the last good head's tree commit."""
    good, commit = state.last_good, good_commit(state)
    return (
        good is not None
        and commit is not None
        and (good.commit, good.ref)
        != (
            commit,
            good_branch(state.id),
        )
    )


def record_good_ref(state: SeriesState, head: str, commit: str) -> bool:
    """`carry/good/<series>` points at `commit`, the tree of good head `head`. False when the
    last good head has moved on meanwhile (its own push follows) or nothing changes."""
    good: GoodHead | None = state.last_good
    if good is None or good.head != head:
        return False
    if (good.commit, good.ref) == (commit, good_branch(state.id)):
        return False
    good.commit, good.ref = commit, good_branch(state.id)
    return True
