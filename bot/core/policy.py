"""Series policies and maintainer overrides applied on top of the engine's decision. Pure.

The engine says what the content shows; this says what carry may do about it automatically.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from bot.core.classify import Decision, Status
from bot.core.state import Outcome


@dataclass(frozen=True)
class Overrides:
    pinned: bool = False  # `/carry keep NAME`
    drop_requested_by: str | None = None  # `/carry drop NAME`
    auto_drop: bool = True  # the series' policy


def final_decision(
    status: Status, decision: Decision, reason: str, o: Overrides
) -> tuple[Decision, str]:
    """(decision, reason) after pins, drop requests and the auto-drop policy."""
    if o.drop_requested_by and status != Status.INVALID:
        return (
            Decision.DROP,
            f"dropped at the request of @{o.drop_requested_by} (engine: {decision}, {reason})",
        )
    if decision != Decision.DROP:
        return decision, reason
    if o.pinned:
        return Decision.KEEP, f"pinned with /carry keep; the engine would drop it: {reason}"
    if not o.auto_drop:
        return Decision.REVIEW, f"auto-drop is off for this series; {reason}"
    return decision, reason


def series_digest(patches: Iterable[tuple[str, bytes]]) -> str:
    """Identity of a series' content: names and bytes in order."""
    digest = hashlib.sha256()
    for name, data in patches:
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return digest.hexdigest()[:20]


def outcome(statuses: Iterable[Status], decisions: Iterable[Decision], changed: bool) -> Outcome:
    statuses, decisions = list(statuses), list(decisions)
    if any(s in (Status.CONFLICT, Status.INVALID) for s in statuses):
        return Outcome.CONFLICT
    if Decision.REVIEW in decisions:
        return Outcome.REVIEW
    if changed or Decision.DROP in decisions:
        return Outcome.CHANGED
    return Outcome.CLEAN


def over_budget(
    sizes: Sequence[tuple[str, int]], max_patch_bytes: int, max_patches: int
) -> list[str]:
    """Why a series is too big to check (one line per problem, naming the limit), or []."""
    problems = [
        f"{name} is {size:,} bytes, over the limit of {max_patch_bytes:,} (CARRY_MAX_PATCH_BYTES)"
        for name, size in sizes
        if size > max_patch_bytes
    ]
    if len(sizes) > max_patches:
        problems.append(
            f"the series has {len(sizes):,} patches, over the limit of {max_patches:,} "
            "(CARRY_MAX_SERIES_PATCHES)"
        )
    return problems
