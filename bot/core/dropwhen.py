"""Declared drop conditions: an upstream PR a maintainer named as the one that makes a patch
unnecessary (a fix page's Upstream entry, or the series' `drop_when`), judged on a head. Pure.

The engine gives the facts: the head's first-parent commits whose subjects name the PRs (a
squash merge's `title (#N)`, a merge commit's `Merge pull request #N`, and reverts of those),
and each hunk's state on the head. This module says whether the PR is merged and what that
means for the engine's verdict. The rule that matters: a declared PR never drops a patch on
its own. Only when the PR is merged *and* the head has upstream's version of every hunk
(applied or similar; never a partial) is the patch proposed for drop, and automatically only
where the series opts in (`policy.drop_when_merged`); otherwise it goes to review with the PR
leading the reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from bot.core.classify import Decision, HunkPresence, HunkState, Status, Verdict
from bot.core.landing import pr_number

# typing.TYPE_CHECKING without importing typing: the fix page parser (and the Markdown library
# under it) is only needed for annotations here, and `carry check` imports this module.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from bot.core.fixpage import FixPage

MAX_REASON_DIFF_LINES = 8  # a differences diff longer than this is left to the evidence


class DeclaredIn(StrEnum):
    """Where a maintainer declared the PR."""

    FIX_PAGE = "fix page"
    DROP_WHEN = "drop_when"


@dataclass(frozen=True)
class DeclaredPr:
    """An upstream PR whose merge should make a patch unnecessary. `repo` is owner/name, or
    None where the caller cannot tell (a CLI check of a local upstream)."""

    number: int
    declared_in: DeclaredIn
    repo: str | None = None
    automatic: bool = False  # the series' policy.drop_when_merged

    @property
    def ref(self) -> str:
        return f"{self.repo}#{self.number}" if self.repo else f"#{self.number}"


@dataclass(frozen=True)
class FirstParentCommit:
    """A commit of the head's first-parent history whose subject names a declared PR."""

    sha: str
    subject: str


@dataclass(frozen=True)
class PrMerge:
    """Where a declared PR came into the head: its merge (or squash) commit, and the commit
    that reverted it, if any did after."""

    pr: DeclaredPr
    sha: str
    subject: str
    reverted_by: str | None = None

    @property
    def merged(self) -> bool:
        return self.reverted_by is None


# A page's entries in these states still name the change that would make the patch unnecessary
# (the page's state may lag behind upstream); closed, superseded, reverted and not-filed do not.
_LIVE_STATES = ("open", "draft", "merged")


def declared_prs(
    pages: Iterable[FixPage],
    drop_when: Mapping[str, tuple[str, int]],
    upstream_repo: str | None,
    *,
    automatic: bool,
) -> dict[str, list[DeclaredPr]]:
    """Per patch file: the PRs declared for it, by its fix page's Upstream entries and by the
    series' `drop_when` (patch -> (repo, number)). Only PRs of `upstream_repo` count (a page
    may name a PR of another project); with None (not known), every one does."""

    def ours(repo: str | None) -> bool:
        return upstream_repo is None or (repo or "").lower() == upstream_repo.lower()

    out: dict[str, list[DeclaredPr]] = {}
    for patch, (repo, number) in drop_when.items():
        if ours(repo):
            out.setdefault(patch, []).append(
                DeclaredPr(number, DeclaredIn.DROP_WHEN, repo, automatic)
            )
    for page in pages:
        for entry in page.upstream:
            if entry.number is None or entry.state not in _LIVE_STATES or not ours(entry.repo):
                continue
            pr = DeclaredPr(entry.number, DeclaredIn.FIX_PAGE, entry.repo, automatic)
            for patch in page.patch_names:
                if all(d.number != pr.number for d in out.get(patch, [])):
                    out.setdefault(patch, []).append(pr)
    return out


def find_merge(pr: DeclaredPr, newest_first: Sequence[FirstParentCommit]) -> PrMerge | None:
    """The newest commit of `newest_first` that merged `pr` (by its subject), with the newer
    commit that reverted it (`Revert "<that subject>"`), or None when none merged it."""
    for position, commit in enumerate(newest_first):
        if pr_number(commit.subject) != pr.number:
            continue
        undo = f'Revert "{commit.subject}"'
        reverted = next(
            (c.sha for c in newest_first[:position] if c.subject.startswith(undo)), None
        )
        return PrMerge(pr, commit.sha, commit.subject, reverted)
    return None


def every_hunk_upstream(hunks: Iterable[HunkPresence]) -> bool:
    """True when the head has every hunk, as the patch has it or in upstream's version."""
    states = [h.state for h in hunks]
    return bool(states) and all(s in (HunkState.APPLIED, HunkState.SIMILAR) for s in states)


def differences(hunk_diffs: Sequence[str]) -> str:
    """The differences part of the evidence: upstream's text against the patch's, per hunk."""
    return "\n".join(hunk_diffs) if hunk_diffs else "none, every hunk is as the patch has it"


def evidence_text(merge: PrMerge, hunk_diffs: Sequence[str]) -> str:
    return f"merged upstream as #{merge.pr.number} in {merge.sha}; differences: " + differences(
        hunk_diffs
    )


# The verdicts a merged declared PR can turn into a proposed drop: the head holds upstream's
# version and the engine only asked a human which one to keep.
_DROPPABLE = (Status.UPSTREAM_VERSION, Status.CONTAINED)


def judge(
    verdict: Verdict,
    merge: PrMerge | None,
    hunks: Sequence[HunkPresence],
    hunk_diffs: Sequence[str],
    *,
    predates_range: bool = False,
) -> Verdict:
    """The verdict once the declared PR's state on the head is known.

    - not merged (or reverted): the engine's verdict stands;
    - merged, every hunk upstream's version, the engine asked a human: drop where the series
      opts in, else review, the reason leading with the PR and the differences;
    - merged otherwise (a partial, a conflict, a patch that still applies): the engine's
      decision stands; a review's reason leads with the PR.
    `predates_range`: the head was already in the patch's state before its base, so the PR
    did not bring it: never dropped for the PR."""
    if merge is None or not merge.merged:
        return verdict
    pr = merge.pr
    lead = f"merged upstream as #{pr.number} in {merge.sha[:12]} (declared in the {pr.declared_in})"
    droppable = (
        verdict.status in _DROPPABLE
        and verdict.decision == Decision.REVIEW
        and every_hunk_upstream(hunks)
        and not predates_range
    )
    if droppable:
        shown = differences(hunk_diffs)
        lines = shown.count("\n") + 1
        if lines > MAX_REASON_DIFF_LINES:
            shown = (
                f"{len(hunk_diffs)} of {len(hunks)} hunks differ (the diffs are in the evidence)"
            )
        reason = f"{lead}; differences: {shown}"
        if pr.automatic:
            return Verdict(verdict.status, Decision.DROP, reason)
        return Verdict(
            verdict.status,
            Decision.REVIEW,
            f"{reason}; the head has upstream's version of every hunk: drop if it is the fix "
            "(set policy.drop_when_merged to drop such patches automatically)",
            verdict.problem_hunks,
        )
    if verdict.decision == Decision.REVIEW:
        return replace(verdict, reason=f"{lead}, but {verdict.reason}")
    return verdict
