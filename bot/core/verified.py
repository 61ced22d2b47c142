"""Every head verified: what the checks of each tested head say, the last known good head,
and the changes of verdict people are told about, once each. Pure.

A head's verdict comes from the CI rows of its exact tree (the rows share the tree's key):
green when every check passed, red as soon as one failed, unknown when a run ended without a
verdict (an infrastructure error, a cancel), pending while checks are still to come. A check
that ran but could not observe its condition (inconclusive) is shown amber; it keeps the head
from being good only where the series says so (ci.inconclusive_blocks), and never makes it red. Results
can arrive late and out of order: only the newest decided head moves the series' verdict.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from bot.core import bisect
from bot.core.ci_plan import reused_verdict
from bot.core.state import (
    CiState,
    CiStatus,
    GoodHead,
    HeadCheck,
    RedStreak,
    SeriesState,
    Verdict,
)

MAX_HEADS = 30  # tested heads a series remembers
_PENDING = (CiStatus.QUEUED, CiStatus.RUNNING, CiStatus.WAITING_APPROVAL)


class Change(StrEnum):
    """A change of the series' verdict that people are told about."""

    WENT_RED = "went-red"  # the first red head after a green one (or after none)
    WENT_GREEN = "went-green"  # the first green head after a red streak


@dataclass(frozen=True)
class Notice:
    """One change to tell people about: the head, the last good one before it, the streak."""

    change: Change
    series_id: str
    head: str
    tree_key: str
    checks: tuple[tuple[str, str], ...]  # (CI row key, its state)
    last_good: str | None
    streak_heads: int
    since: str  # when the red streak began (went-red: now)

    @property
    def key(self) -> str:
        """The identity of this change: one message per change, however often it is sent."""
        return f"{self.series_id}:{self.change}:{self.tree_key}"

    def summary(self) -> str:
        checks = ", ".join(f"{key}: {state}" for key, state in self.checks)
        if self.change is Change.WENT_RED:
            good = f"last good head {self.last_good[:12]}" if self.last_good else "no good head yet"
            return f"{self.series_id} went red on {self.head[:12]} ({checks}); {good}"
        return (
            f"{self.series_id} is green again on {self.head[:12]} ({checks}) after "
            f"{self.streak_heads} red head{'s' if self.streak_heads != 1 else ''} since {self.since}"
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "key": self.key,
            "change": self.change.value,
            "series": self.series_id,
            "head": self.head,
            "tree_key": self.tree_key,
            "checks": dict(self.checks),
            "last_good": self.last_good,
            "streak_heads": self.streak_heads,
            "since": self.since,
            "summary": self.summary(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Notice:
        """The notice `to_dict` wrote (its key and summary are derived, not read)."""
        last_good = data.get("last_good")
        return cls(
            change=Change(str(data["change"])),
            series_id=str(data["series"]),
            head=str(data["head"]),
            tree_key=str(data["tree_key"]),
            checks=tuple(sorted((str(k), str(v)) for k, v in dict(data["checks"]).items())),
            last_good=str(last_good) if last_good else None,
            streak_heads=int(data["streak_heads"]),
            since=str(data["since"]),
        )


def concluded(row: CiState) -> CiStatus:
    """A row's own state; for a reused row, the state of the run it reuses."""
    if row.state == CiStatus.REUSED:
        reused = reused_verdict(row.detail)
        return CiStatus(reused) if reused else CiStatus.INFRA_ERROR
    return CiStatus(row.state)


def row_passed(row: CiState) -> bool | None:
    """True for a passed check, False for a failed one, None for no verdict (yet), and for an
    inconclusive one (it observed nothing about the bug)."""
    state = concluded(row)
    if state == CiStatus.SUCCESS:
        return True
    if state == CiStatus.FAILURE:
        return False
    return None


def verdict_of(rows: Iterable[CiState], inconclusive_blocks: bool = False) -> Verdict:
    rows = list(rows)
    if not rows:
        return Verdict.PENDING
    passed = [_counts_as_passed(row, inconclusive_blocks) for row in rows]
    if False in passed:
        return Verdict.RED
    if all(passed):
        return Verdict.GREEN
    if any(row.state in _PENDING for row in rows):
        return Verdict.PENDING
    return Verdict.UNKNOWN


def _counts_as_passed(row: CiState, inconclusive_blocks: bool) -> bool | None:
    if concluded(row) == CiStatus.INCONCLUSIVE:
        return None if inconclusive_blocks else True
    return row_passed(row)


def note_rows(
    state: SeriesState, tree_key: str, now: str, inconclusive_blocks: bool = False
) -> Notice | None:
    """The CI rows of tree `tree_key` changed: its head's entry, the last known good head and
    the red streak follow; returns the change to tell people about, if this was one."""
    rows = [row for row in state.ci.values() if row.tree_key == tree_key]
    if not rows:
        return None
    head = rows[0].head_sha
    entry = next((h for h in state.heads if h.tree_key == tree_key), None)
    if entry is None:
        entry = HeadCheck(head=head, tree_key=tree_key, at=now)
        state.heads = [h for h in state.heads if h.head != head] + [entry]
        state.heads = state.heads[-MAX_HEADS:]
    entry.verdict = verdict_of(rows, inconclusive_blocks)
    entry.checks = {row.runner: str(row.state) for row in rows}
    if entry.verdict not in (Verdict.GREEN, Verdict.RED) or _newer_decided(state, entry):
        return None
    checks = tuple(sorted(entry.checks.items()))
    good = state.last_good.head if state.last_good else None
    if entry.verdict is Verdict.GREEN:
        state.last_good = GoodHead(head=head, tree_key=tree_key, at=now)
        streak, state.red_streak = state.red_streak, None
        if state.bisect is not None:
            bisect.stop(state.bisect, f"head {head[:12]} went green before the end", now)
        if streak is None:
            return None
        return Notice(
            Change.WENT_GREEN, state.id, head, tree_key, checks, good, streak.heads, streak.at
        )
    streak = state.red_streak
    if streak is not None:
        if streak.last != head:
            streak.heads, streak.last = streak.heads + 1, head
        return None
    state.red_streak = RedStreak(head=head, at=now, heads=1, last=head)
    return Notice(Change.WENT_RED, state.id, head, tree_key, checks, good, 1, now)


def _newer_decided(state: SeriesState, entry: HeadCheck) -> bool:
    """Whether a head tested after this one already has a verdict (a late result of an older
    head does not move the series back)."""
    later = state.heads[state.heads.index(entry) + 1 :]
    return any(h.verdict in (Verdict.GREEN, Verdict.RED) for h in later)
