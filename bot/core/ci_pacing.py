"""How often a series' heads may start hardware runs: `ci: {min_interval_s, daily_budget}`.

A run for a new head that would start too soon after the series' last one, or past the runs a
day allows, is not dropped: it waits until it may start, and a newer head replaces it as it
would replace a queued run (a burst of heads tests only the newest). `/carry retest` and
bisection are a person's or a red head's request and are not paced.

Pure: the times come from the run store (workers/ci/requests.py), the answer is a time.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

DAY_S = 86_400.0


@dataclass(frozen=True)
class PacePolicy:
    """A series' `ci.min_interval_s` and `ci.daily_budget` (0 and None: no limit; a budget
    is at least 1, the config says so)."""

    min_interval_s: float = 0.0
    daily_budget: int | None = None

    @property
    def limits(self) -> bool:
        return self.min_interval_s > 0 or self.daily_budget is not None


@dataclass(frozen=True)
class Pace:
    """What pacing knows at a request: the policy, the time, and when the series' head runs
    started (handed to a runner's queue) within the last day."""

    policy: PacePolicy = PacePolicy()
    now: float = 0.0
    started: tuple[float, ...] = ()


@dataclass(frozen=True)
class Wait:
    """A run that must wait: until when (epoch seconds), and why, in words."""

    until: float
    reason: str


def next_start(pace: Pace) -> Wait | None:
    """None when a run may start now; else the earliest time it may, and which limit holds it."""
    policy = pace.policy
    if not policy.limits:
        return None
    recent = sorted(t for t in pace.started if t > pace.now - DAY_S)
    waits: list[Wait] = []
    if policy.min_interval_s > 0 and recent:
        until = recent[-1] + policy.min_interval_s
        if until > pace.now:
            waits.append(
                Wait(
                    until,
                    f"ci.min_interval_s is {policy.min_interval_s:g}: the last run started "
                    f"{pace.now - recent[-1]:.0f} s ago",
                )
            )
    budget = policy.daily_budget
    if budget is not None and len(recent) >= budget:
        # the run that frees a place is the oldest of the `budget` newest in the window
        until = recent[len(recent) - budget] + DAY_S
        waits.append(
            Wait(
                until,
                f"ci.daily_budget is {budget}: {len(recent)} run{'s' if len(recent) != 1 else ''} "
                "started in the last 24 h",
            )
        )
    if not waits:
        return None
    return max(waits, key=lambda wait: wait.until)


def wait_words(wait: Wait) -> str:
    """'paced: starts at 2026-12-06 14:05:00 UTC unless a newer head replaces it (why)'."""
    at = datetime.fromtimestamp(wait.until, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"paced: starts at {at} unless a newer head replaces it ({wait.reason})"
