"""What the publisher does with a checked series: open a PR, update carry's PR, nothing, or
report without a PR. Pure: the publisher on GitHub acts on it, and read-only mode records it,
so the dashboard says what carry would do given credentials, and why."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from bot.core.state import ClosedPr

# Outcomes that need a human before merging: a PR for them is a draft with carry's label.
NEEDS_HUMAN: Final = ("conflict", "review")
NAMED_FILES: Final = 4  # files a reason names before it says how many more


class Step(StrEnum):
    OPEN = "open"  # open a PR from carry's branch
    UPDATE = "update"  # update carry's open PR
    NOTHING = "nothing"  # nothing to propose: the downstream branch has it all
    REPORT = "report"  # needs a human, but there is no file to propose: report without a PR
    HELD = "held"  # a PR to open, but a person closed carry's PR for this head: none is opened


@dataclass(frozen=True)
class PublishStep:
    step: Step
    reason: str
    pr: int | None = None  # the PR an UPDATE updates
    draft: bool = False  # an OPEN of a PR that needs a human first
    # carry's PR a person closed: the one a HELD step keeps closed, or the one an OPEN replaces
    closed_pr: int | None = None

    def fields(self) -> dict[str, Any]:
        """As a history entry records it (beside the proposal it is about)."""
        said: dict[str, Any] = {"step": self.step.value, "step_reason": self.reason}
        said["draft"] = self.draft
        if self.pr is not None:
            said["pr"] = self.pr
        if self.closed_pr is not None:
            said["closed_pr"] = self.closed_pr
        return said

    @classmethod
    def from_fields(cls, data: Mapping[str, Any]) -> PublishStep | None:
        """The step an entry's fields() recorded; None for an entry that records none."""
        try:
            step = Step(str(data.get("step")))
        except ValueError:
            return None
        pr, closed = data.get("pr"), data.get("closed_pr")
        return cls(
            step,
            str(data.get("step_reason") or ""),
            pr if isinstance(pr, int) else None,
            data.get("draft") is True,
            closed if isinstance(closed, int) else None,
        )

    @property
    def words(self) -> str:
        """The step for people, after "carry would": "open a draft PR", "update PR #12",
        "propose nothing" (nothing to propose), "report without a PR"."""
        if self.step is Step.OPEN:
            return "open a draft PR" if self.draft else "open a PR"
        if self.step is Step.UPDATE:
            return f"update PR #{self.pr}"
        if self.step is Step.NOTHING:
            return "propose nothing"
        if self.step is Step.HELD:
            return f"open no new PR (#{self.closed_pr} was closed by a person)"
        return "report without a PR"


def replaces_words(closed: ClosedPr) -> str:
    """The line a new PR's body starts with when it replaces carry's PR a person closed."""
    return f"Replaces #{closed.number}, closed by {closed.who}."


def files_words(files: Mapping[str, bytes | None]) -> str:
    """What the proposal does to the series directory: its files written and removed."""
    written = sorted(name for name, data in files.items() if data is not None)
    removed = sorted(name for name, data in files.items() if data is None)
    parts = [f"{_names(written)} would change"] if written else []
    if removed:
        parts.append(f"{_names(removed)} would be removed")
    return "; ".join(parts) + " in the series directory"


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:NAMED_FILES])
    return shown + (f" and {len(names) - NAMED_FILES} more" if len(names) > NAMED_FILES else "")


def publish_step(
    *,
    files: Mapping[str, bytes | None],
    open_pr: int | None,
    branch_exists: bool,
    outcome: str,
    closed: ClosedPr | None = None,
    checked_head: str | None = None,
) -> PublishStep:
    """`files`: what the proposal writes (bytes) or removes (None) in the series directory; `open_pr`:
    carry's open PR for the series, if any; `branch_exists`: whether carry's branch is there;
    `outcome`: the check's outcome (clean, changed, conflict, review, ...); `closed`: carry's
    PR a person closed (its branch deleted counts), with no PR opened since; `checked_head`:
    the upstream head the check was of.

    A person's close is respected: no new PR for the heads it was closed at, until upstream
    moves on or `/carry reopen`; the PR opened after that replaces the closed one."""
    step = _step(files, open_pr, branch_exists, outcome)
    if step.step is not Step.OPEN or closed is None:
        return step
    if closed.holds(checked_head):
        reason = (
            f"carry's PR #{closed.number} was closed by {closed.who} on this upstream head: "
            "carry opens no new PR until upstream moves or `/carry reopen`"
        )
        return PublishStep(Step.HELD, reason, closed_pr=closed.number)
    why = "reopened by `/carry reopen`" if closed.reopened_by else "upstream moved since"
    reason = f"{step.reason}; it replaces PR #{closed.number}, closed by {closed.who} ({why})"
    return PublishStep(Step.OPEN, reason, draft=step.draft, closed_pr=closed.number)


def _step(
    files: Mapping[str, bytes | None], open_pr: int | None, branch_exists: bool, outcome: str
) -> PublishStep:
    needs_human = outcome in NEEDS_HUMAN
    if open_pr is not None:
        reason = files_words(files) if files else "no file would change: its report is refreshed"
        return PublishStep(Step.UPDATE, reason, pr=open_pr)
    if not files and not needs_human:
        return PublishStep(
            Step.NOTHING, "the downstream branch already has every file as this check leaves it"
        )
    if not files and not branch_exists:
        return PublishStep(
            Step.REPORT,
            f"the series needs a human ({outcome}), but no file would change, so there is no "
            "PR to open: the dashboard and the timeline report it",
        )
    if not files:
        return PublishStep(
            Step.OPEN,
            f"the series needs a human ({outcome}) and carry's branch exists: a PR from it "
            "reports it",
            draft=True,
        )
    reason = files_words(files)
    if needs_human:
        reason += f"; it needs a human first ({outcome})"
    return PublishStep(Step.OPEN, reason, draft=needs_human)
