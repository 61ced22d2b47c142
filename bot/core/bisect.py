"""A red head explained: bisect the upstream first-parent range between the last good head and
the first red one, testing only the failing check, then read the same check on plain upstream
at the culprit and its parent. Pure: workers/bisect.py runs the probes.

The range is `commits` (oldest first): every first-parent commit after the good head, up to and
including the red head, which is known to fail; the good head is known to pass. A probe whose
series does not apply (no tree to test) or whose run ends without a verdict is skipped; the
answer is then a range of commits instead of one. The budget is ceil(log2(len(range))) + 2
runs: the bisection's probes and the two A/B runs. A newer head that goes green stops it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

BISECT_TASK = "carry.bisect"  # workers/bisect.py: start one (with a went-red notice), or step on


class Probe(StrEnum):
    """What one commit of the range said."""

    PASS = "pass"
    FAIL = "fail"
    UNTESTABLE = "untestable"  # the series does not apply there: no tree to test
    NO_VERDICT = "no-verdict"  # the run ended without one (infrastructure, cancelled)


class Status(StrEnum):
    RUNNING = "running"  # probing the range
    AB = "ab"  # the culprit is found; the check runs on plain upstream there and at its parent
    FOUND = "found"  # one commit, with the A/B reading
    RANGE = "range"  # the commits between could not all be tested: one of these
    STOPPED = "stopped"  # a newer head went green first
    OUT_OF_BUDGET = "out-of-budget"


@dataclass
class Bisection:
    check: str  # the failing CI row's key, e.g. "gaudi/fixed"
    good: str  # the last good head
    bad: str  # the first red head (the last of `commits`)
    commits: list[str]
    subjects: dict[str, str]
    budget: int
    started_at: str
    results: dict[str, str] = field(default_factory=dict)  # sha -> Probe
    runs: int = 0
    status: Status = Status.RUNNING
    probing: str | None = None  # the commit whose run is out
    culprit: str | None = None
    suspects: list[str] = field(default_factory=list)  # RANGE / OUT_OF_BUDGET: one of these
    # A/B: the check on plain upstream (without the series) at the culprit and at its parent
    ab: dict[str, str] = field(default_factory=dict)  # "culprit" | "parent" -> Probe
    reading: str = ""
    ended_at: str = ""

    @property
    def active(self) -> bool:
        return self.status in (Status.RUNNING, Status.AB)

    @property
    def parent(self) -> str:
        """The commit before the culprit: the good head when it is the range's first."""
        assert self.culprit is not None
        at = self.commits.index(self.culprit)
        return self.commits[at - 1] if at else self.good

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Bisection:
        known = set(cls.__dataclass_fields__)
        built = cls(**{k: v for k, v in data.items() if k in known})
        built.status = Status(built.status)
        return built


def budget_for(commits: int) -> int:
    return math.ceil(math.log2(max(1, commits))) + 2


def start(check: str, good: str, commits: list[tuple[str, str]], now: str) -> Bisection:
    """A bisection of `commits` ((sha, subject), oldest first, ending with the red head)."""
    assert commits, "the red head is in the range"
    shas = [sha for sha, _ in commits]
    return Bisection(
        check=check,
        good=good,
        bad=shas[-1],
        commits=shas,
        subjects=dict(commits),
        budget=budget_for(len(shas)),
        started_at=now,
    )


def _bounds(b: Bisection) -> tuple[int, int]:
    """(index of the newest commit known to pass, -1 for the good head; index of the oldest
    commit after it known to fail)."""
    lo = max((i for i, c in enumerate(b.commits) if b.results.get(c) == Probe.PASS), default=-1)
    fails = [i for i, c in enumerate(b.commits) if i > lo and b.results.get(c) == Probe.FAIL]
    return lo, min(fails, default=len(b.commits) - 1)


def next_probe(b: Bisection, now: str) -> str | None:
    """The next commit to test with the series (or None: then `b` says why it ended or is in
    its A/B step). Records the answer when the range is narrowed down."""
    if b.status is not Status.RUNNING or b.probing is not None:
        return None
    lo, hi = _bounds(b)
    between = [
        i
        for i in range(lo + 1, hi)
        if b.results.get(b.commits[i]) not in (Probe.UNTESTABLE, Probe.NO_VERDICT)
    ]
    if not between:
        if hi - lo == 1:
            b.culprit, b.status = b.commits[hi], Status.AB
        else:
            b.suspects, b.status, b.ended_at = b.commits[lo + 1 : hi + 1], Status.RANGE, now
            b.reading = _range_reading(b)
        return None
    if b.runs >= b.budget - 2:  # the last two runs are the A/B's
        b.suspects, b.status, b.ended_at = b.commits[lo + 1 : hi + 1], Status.OUT_OF_BUDGET, now
        b.reading = f"the budget of {b.budget} runs was spent; " + _range_reading(b)
        return None
    middle = (lo + hi) / 2
    pick = min(between, key=lambda i: (abs(i - middle), i))
    b.probing = b.commits[pick]
    return b.probing


def record(b: Bisection, sha: str, result: Probe) -> bool:
    """A probe's result; False when it is not the one the bisection waits for."""
    if b.status is not Status.RUNNING or b.probing != sha:
        return False
    b.results[sha] = result.value
    b.probing = None
    if result in (Probe.PASS, Probe.FAIL, Probe.NO_VERDICT):
        b.runs += 1
    return True


def next_ab(b: Bisection) -> str | None:
    """The A/B step's next commit: the culprit, then its parent (None while one is out, or
    when both are in)."""
    if b.status is not Status.AB or b.probing is not None:
        return None
    for role, sha in (("culprit", b.culprit), ("parent", b.parent)):
        if role not in b.ab:
            b.probing = sha
            return sha
    return None


def record_ab(b: Bisection, sha: str, plain: Probe, now: str) -> bool:
    """The check on plain upstream at `sha` (the A/B commit out); with both in, the answer."""
    if b.status is not Status.AB or b.probing != sha:
        return False
    b.ab["culprit" if sha == b.culprit else "parent"] = plain.value
    b.probing = None
    b.runs += 1
    if len(b.ab) == 2:
        culprit, parent = Probe(b.ab["culprit"]), Probe(b.ab["parent"])
        b.status, b.ended_at = Status.FOUND, now
        b.reading = ab_reading(b, culprit, parent)
    return True


def stop(b: Bisection, why: str, now: str) -> None:
    if b.active:
        b.status, b.ended_at, b.reading, b.probing = Status.STOPPED, now, why, None


def named(b: Bisection, sha: str) -> str:
    """`<sha12> <subject> (#PR)` as the upstream's commit names it."""
    subject = b.subjects.get(sha, "")
    return f"{sha[:12]} {subject}".strip()


def pr_of(subject: str) -> int | None:
    found = re.search(r"\(#(\d+)\)\s*$", subject)
    return int(found.group(1)) if found else None


def ab_reading(b: Bisection, culprit: Probe, parent: Probe) -> str:
    """What the four results mean: the check with the series passed at the parent and failed
    at the culprit; `culprit` and `parent` are the check on plain upstream there.

    A fix's check is expected to fail without the fix (it detects the bug the fix fixes)."""
    at = named(b, b.culprit or "")
    if culprit is Probe.FAIL and parent is Probe.FAIL:
        return (
            f"the fix no longer works after {at}: plain upstream fails there as before, and "
            "the series no longer makes the check pass"
        )
    if culprit is Probe.PASS:
        return (
            f"plain upstream passes the check at {at}: upstream may have fixed the bug itself, "
            "and the fix now breaks it: a drop to look at"
        )
    if parent is Probe.PASS:
        return (
            f"plain upstream passed the check before {at} and fails at it: the check may not "
            "detect the bug the fix is for any more; look at the check"
        )
    return (
        f"the series fails the check from {at} on; the check on plain upstream gave no verdict "
        f"(at the commit: {culprit}, at its parent: {parent})"
    )


def _range_reading(b: Bisection) -> str:
    suspects = ", ".join(s[:12] for s in b.suspects)
    return (
        f"the check first fails at one of {len(b.suspects)} commits ({suspects}); the series did "
        "not apply, or a run gave no verdict, at the commits between"
    )
