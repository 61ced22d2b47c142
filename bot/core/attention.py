"""When a checked head needs a human, people are told once per change: a patch that newly
conflicts, a patch newly sent to review, and a series stuck waiting for a human for
`notify.stuck_heads` heads or `notify.stuck_hours` hours. Pure: workers/rebase.py calls
`note_check` inside the transaction that stores a check, and sends what it returns the way
a change of verdict is sent (workers/ci/rows.py: history, then the planner's notify); the beat asks
`stuck_now` between heads (workers/stuck.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from bot.core.classify import Decision, Status
from bot.core.state import HumanWait, PatchState, SeriesState

_CONFLICTS = (Status.CONFLICT, Status.INVALID)


class Attention(StrEnum):
    """A change that needs a human, told to people once."""

    NEW_CONFLICT = "new-conflict"  # a patch does not apply any more (or is not a valid patch)
    NEW_REVIEW = "new-review"  # a patch newly waits for a human's decision
    STUCK = "stuck"  # the series has waited for a human for too many heads or hours


@dataclass(frozen=True)
class StuckLimits:
    """notify.stuck_heads and notify.stuck_hours (None: that limit is off)."""

    heads: int | None = 10
    hours: float | None = 72.0


@dataclass(frozen=True)
class HumanNotice:
    change: Attention
    series_id: str
    head: str
    patches: tuple[tuple[str, str], ...]  # (patch, why it needs a human)
    heads: int = 1  # stuck: checked heads since the series first needed a human
    since: str = ""  # stuck: when that was

    @property
    def key(self) -> str:
        """One message per change: per head for new findings, per stretch for stuck."""
        if self.change is Attention.STUCK:
            return f"{self.series_id}:{self.change}:{self.since}"
        return f"{self.series_id}:{self.change}:{self.head}"

    def summary(self) -> str:
        names = ", ".join(name for name, _ in self.patches)
        if self.change is Attention.NEW_CONFLICT:
            return f"{self.series_id}: {names} no longer applies on {self.head[:12]}"
        if self.change is Attention.NEW_REVIEW:
            return f"{self.series_id}: {names} needs a review on {self.head[:12]}"
        heads = f"{self.heads} head{'s' if self.heads != 1 else ''}"
        return f"{self.series_id} has waited for a human for {heads} since {self.since}: {names}"

    def to_dict(self) -> dict[str, object]:
        return {
            "key": self.key,
            "change": self.change.value,
            "series": self.series_id,
            "head": self.head,
            "patches": dict(self.patches),
            "heads": self.heads,
            "since": self.since,
            "summary": self.summary(),
        }


def needs_human(patch: PatchState) -> Attention | None:
    if patch.status in _CONFLICTS:
        return Attention.NEW_CONFLICT
    if patch.decision == Decision.REVIEW:
        return Attention.NEW_REVIEW
    return None


def note_check(
    before: Iterable[PatchState], state: SeriesState, now: str, limits: StuckLimits
) -> list[HumanNotice]:
    """`state` has just taken a check of `state.checked_head` (transitions.apply_check);
    `before` are its patches as they were. Returns what to tell people, and keeps the
    series' human wait (state.human_wait) up to date."""
    head = state.checked_head or ""
    was = {p.name: needs_human(p) for p in before}
    notices = []
    for change in (Attention.NEW_CONFLICT, Attention.NEW_REVIEW):
        new = tuple(
            (p.name, p.reason)
            for p in state.patches
            if needs_human(p) is change and was.get(p.name) is not change
        )
        if new:
            notices.append(HumanNotice(change, state.id, head, new))
    waiting = tuple((p.name, p.reason) for p in state.patches if needs_human(p) is not None)
    stuck = _follow_wait(state, waiting, head, now, limits)
    return notices + ([stuck] if stuck else [])


def _follow_wait(
    state: SeriesState,
    waiting: tuple[tuple[str, str], ...],
    head: str,
    now: str,
    limits: StuckLimits,
) -> HumanNotice | None:
    if not waiting:
        state.human_wait = None
        return None
    wait = state.human_wait
    if wait is None:
        wait = state.human_wait = HumanWait(head=head, at=now, heads=1, last=head)
    elif wait.last != head:
        wait.heads, wait.last = wait.heads + 1, head
    return stuck_now(state, now, limits)


def stuck_now(state: SeriesState, now: str, limits: StuckLimits) -> HumanNotice | None:
    """The stuck notice, once per stretch, when the series' wait for a human has passed a
    limit by now; also asked by the beat between heads (an upstream that does not move
    checks no head, and hours still pass)."""
    wait = state.human_wait
    if wait is None or wait.told or not _stuck(wait, now, limits):
        return None
    wait.told = True
    waiting = tuple((p.name, p.reason) for p in state.patches if needs_human(p) is not None)
    return HumanNotice(Attention.STUCK, state.id, wait.last, waiting, wait.heads, wait.at)


def _stuck(wait: HumanWait, now: str, limits: StuckLimits) -> bool:
    if limits.heads is not None and wait.heads >= limits.heads:
        return True
    if limits.hours is None:
        return False
    waited = datetime.fromisoformat(now) - datetime.fromisoformat(wait.at)
    return waited.total_seconds() / 3600 >= limits.hours
