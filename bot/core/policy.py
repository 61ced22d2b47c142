"""Series policies and maintainer overrides applied on top of the engine's decision. Pure.

The engine says what the content shows; this says what carry may do about it automatically.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Overrides:
    pinned: bool = False  # `/carry keep NAME`
    drop_requested_by: str | None = None  # `/carry drop NAME`
    auto_drop: bool = True  # the series' policy


def final_decision(status: str, decision: str, reason: str, o: Overrides) -> tuple[str, str]:
    """(decision, reason) after pins, drop requests and the auto-drop policy."""
    if o.drop_requested_by and status != "invalid":
        return (
            "drop",
            f"dropped at the request of @{o.drop_requested_by} (engine: {decision}, {reason})",
        )
    if decision != "drop":
        return decision, reason
    if o.pinned:
        return "keep", f"pinned with /carry keep; the engine would drop it: {reason}"
    if not o.auto_drop:
        return "review", f"auto-drop is off for this series; {reason}"
    return decision, reason


def series_digest(patches: Iterable[tuple[str, bytes]]) -> str:
    """Identity of a series' content: names and bytes in order."""
    digest = hashlib.sha256()
    for name, data in patches:
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return digest.hexdigest()[:20]


def outcome(statuses: Iterable[str], decisions: Iterable[str], changed: bool) -> str:
    statuses, decisions = list(statuses), list(decisions)
    if any(s in ("conflict", "invalid") for s in statuses):
        return "conflict"
    if "review" in decisions:
        return "review"
    if changed or "drop" in decisions:
        return "changed"
    return "clean"


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
