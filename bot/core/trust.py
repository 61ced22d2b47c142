"""Who may put an upstream head on the hardware without `/carry approve`: trust covers the
range of pushes, not the last pusher. Pure: the adapter loads the facts (the series' recorded
pushes, its approvals, and git's answer to "is this head an ancestor of an approved SHA").

A head is covered when
- it is approved by exact SHA, or it is an ancestor of an approved SHA (the adapter asks git);
- or a trusted user (write permission: the series' trusted_authors) pushed it onto a head
  that is covered, or created the ref with it. A trusted force push onto a covered head stays
  trusted.

Anything else waits: a head nobody is known to have pushed (a poll saw it first), a stranger's
push, and a trusted push on top of a stranger's head that nobody approved (GitHub's "Update
branch", a maintainer's fixup): the stranger's commits are in it, whoever pushed last.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any, Final

MAX_PUSHES: Final = 200  # the newest pushes a series keeps
ZERO_SHA: Final = "0" * 40  # a push that created the ref
_SHORT = 12


@dataclass(frozen=True)
class Push:
    """One push of the watched ref, from a push webhook (a poll knows no pusher)."""

    before: str
    after: str
    pusher: str
    trusted: bool  # the pusher was a trusted author when the push was recorded
    forced: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Push:
        return cls(
            before=str(data.get("before", "")).lower(),
            after=str(data.get("after", "")).lower(),
            pusher=str(data.get("pusher", "")),
            trusted=data.get("trusted") is True,
            forced=data.get("forced") is True,
        )


class Basis(StrEnum):
    """Why a head may run, or why it waits."""

    APPROVED = "approved"  # the head's exact SHA was approved
    APPROVED_DESCENDANT = "approved-descendant"  # an approved SHA contains the head
    TRUSTED_RANGE = "trusted-range"  # every push since a covered head was a trusted user's
    UNKNOWN_PUSHER = "unknown-pusher"  # no push of the head is recorded
    UNTRUSTED_PUSH = "untrusted-push"  # a stranger pushed the head, or a head under it


@dataclass(frozen=True)
class Trust:
    may_run: bool
    basis: Basis
    reason: str  # one line for the history and the CI row
    blamed: Push | None = None  # the untrusted push that makes the head wait, if one does


def record(pushes: Sequence[Push], push: Push) -> list[Push] | None:
    """The series' pushes with `push` added (the newest MAX_PUSHES kept); None when it is
    already recorded (a redelivered webhook)."""
    if push in pushes:
        return None
    return [*pushes, push][-MAX_PUSHES:]


def decide(
    head: str,
    pushes: Sequence[Push],
    approvals: Iterable[str],
    approved_descendant: bool = False,
) -> Trust:
    """Whether `head` may run on the hardware without approval. `approved_descendant`: git
    says the head is an ancestor of an approved SHA (the adapter asks only when it matters)."""
    head = head.lower()
    approved = {sha.lower() for sha in approvals}
    if head in approved:
        return Trust(True, Basis.APPROVED, f"{head[:_SHORT]} was approved by its exact SHA")
    if approved_descendant:
        return Trust(
            True, Basis.APPROVED_DESCENDANT, f"{head[:_SHORT]} is in a head that was approved"
        )
    by_after: dict[str, list[Push]] = {}
    for push in pushes:
        by_after.setdefault(push.after.lower(), []).insert(0, push)  # newest first
    covered: dict[str, bool] = {}
    blamed = _covered(head, by_after, approved, covered, set())
    if covered[head]:
        push = next(p for p in by_after[head] if p.trusted and covered.get(p.before.lower()))
        return Trust(
            True,
            Basis.TRUSTED_RANGE,
            f"{head[:_SHORT]} was pushed by @{push.pusher} onto a trusted or approved head",
        )
    if blamed is None:
        return Trust(
            False,
            Basis.UNKNOWN_PUSHER,
            f"no push of head {head[:_SHORT]} by a trusted author onto a trusted or approved "
            "head is recorded",
        )
    if blamed.after.lower() == head:
        why = f"head {head[:_SHORT]} was pushed by @{blamed.pusher}, who is not a trusted author"
    else:
        why = (
            f"head {head[:_SHORT]} contains {blamed.after[:_SHORT]}, pushed by "
            f"@{blamed.pusher}, who is not a trusted author, and nobody approved it"
        )
    return Trust(False, Basis.UNTRUSTED_PUSH, why, blamed)


def _covered(
    sha: str,
    by_after: dict[str, list[Push]],
    approved: set[str],
    covered: dict[str, bool],
    walking: set[str],
) -> Push | None:
    """Fills covered[sha]; returns the untrusted push found on the way when it is not covered
    (None: no untrusted push, only a missing record). A cycle (force pushes back and forth)
    covers nothing by itself. Iterative over the chain of `before`s, so a long history of
    pushes cannot exhaust the stack."""
    stack = [sha]
    blame: dict[str, Push | None] = {}
    while stack:
        current = stack[-1]
        if current in covered:
            stack.pop()
            continue
        if current == ZERO_SHA or current in approved:
            covered[current], blame[current] = current in approved or current == ZERO_SHA, None
            stack.pop()
            continue
        walking.add(current)
        pending = [
            p.before.lower()
            for p in by_after.get(current, [])
            if p.trusted and p.before.lower() not in covered and p.before.lower() not in walking
        ]
        if pending:
            stack.append(pending[0])
            continue
        found: Push | None = None
        ok = False
        for push in by_after.get(current, []):
            if not push.trusted:
                found = found or push
            elif covered.get(push.before.lower(), False):
                ok = True
                break
            else:
                found = found or blame.get(push.before.lower())
        covered[current], blame[current] = ok, (None if ok else found)
        walking.discard(current)
        stack.pop()
    return blame.get(sha)
