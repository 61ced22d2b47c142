"""A red head explained (issue 32), the pure part: the bisection of the first-parent range
between the last good head and the first red one, within ceil(log2(range)) + 2 runs."""

from __future__ import annotations

import math

import pytest

from bot.core import bisect
from bot.core.bisect import Probe, Status

NOW = "2026-12-05T00:00:00Z"


def commits(n: int) -> list[tuple[str, str]]:
    return [(f"{i:040x}", f"change {i} (#{100 + i})") for i in range(1, n + 1)]


def run(n: int, first_bad: int, untestable: frozenset[int] = frozenset()) -> bisect.Bisection:
    """Bisects n commits where commit `first_bad` (1-based) and later fail with the series."""
    b = bisect.start("gaudi/fixed", "0" * 40, commits(n), NOW)
    while True:
        sha = bisect.next_probe(b, NOW)
        if sha is None:
            return b
        index = b.commits.index(sha) + 1
        if index in untestable:
            assert bisect.record(b, sha, Probe.UNTESTABLE)
        else:
            assert bisect.record(b, sha, Probe.FAIL if index >= first_bad else Probe.PASS)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 8, 30, 100])
def test_every_culprit_is_found_within_the_budget(n: int) -> None:
    for first_bad in range(1, n + 1):
        b = run(n, first_bad)
        assert (b.status, b.culprit) == (Status.AB, b.commits[first_bad - 1]), (n, first_bad)
        assert b.runs <= math.ceil(math.log2(n)) == b.budget - 2


def test_the_ab_step_tests_the_culprit_then_its_parent_and_reads_the_four_results() -> None:
    b = run(8, 5)
    assert bisect.next_probe(b, NOW) is None  # no more probes with the series
    culprit = bisect.next_ab(b)
    assert culprit == b.culprit and bisect.next_ab(b) is None  # one run out at a time
    assert not bisect.record_ab(b, b.parent, Probe.FAIL, NOW)  # not the one out
    assert bisect.record_ab(b, culprit, Probe.FAIL, NOW)
    parent = bisect.next_ab(b)
    assert parent == b.commits[3]
    assert bisect.record_ab(b, parent, Probe.FAIL, NOW)
    assert b.status is Status.FOUND and b.runs <= b.budget
    assert b.reading.startswith(f"the fix no longer works after {b.culprit[:12]} change 5 (#105)")
    assert bisect.pr_of(b.subjects[b.culprit]) == 105


@pytest.mark.parametrize(
    ("culprit", "parent", "says"),
    [
        (Probe.FAIL, Probe.FAIL, "the fix no longer works after"),
        (Probe.PASS, Probe.FAIL, "upstream may have fixed the bug itself"),
        (Probe.PASS, Probe.PASS, "upstream may have fixed the bug itself"),
        (Probe.FAIL, Probe.PASS, "the check may not detect the bug"),
        (Probe.NO_VERDICT, Probe.FAIL, "gave no verdict"),
    ],
)
def test_what_plain_upstream_says_beside_the_series(
    culprit: Probe, parent: Probe, says: str
) -> None:
    b = run(4, 2)
    assert says in bisect.ab_reading(b, culprit, parent)


def test_commits_where_the_series_does_not_apply_leave_a_range() -> None:
    b = run(8, 5, untestable=frozenset({4, 5}))
    assert b.status is Status.RANGE and b.culprit is None
    assert b.suspects == b.commits[3:6]  # 4 or 5 (not tested) or 6 (failed, after 3 passed)
    assert "one of 3 commits" in b.reading


def test_a_probe_without_a_verdict_is_skipped_and_counted() -> None:
    b = bisect.start("gaudi/fixed", "0" * 40, commits(4), NOW)
    sha = bisect.next_probe(b, NOW)
    assert sha is not None and bisect.record(b, sha, Probe.NO_VERDICT)
    assert b.runs == 1 and bisect.next_probe(b, NOW) not in (None, sha)


def test_the_budget_ends_it_with_the_range_left() -> None:
    b = bisect.start("gaudi/fixed", "0" * 40, commits(16), NOW)
    while (sha := bisect.next_probe(b, NOW)) is not None:
        bisect.record(b, sha, Probe.NO_VERDICT)
    assert b.status is Status.OUT_OF_BUDGET and b.runs == b.budget - 2
    assert "budget of 6 runs was spent" in b.reading


def test_a_result_that_is_not_awaited_changes_nothing_and_a_green_head_stops_it() -> None:
    b = bisect.start("gaudi/fixed", "0" * 40, commits(8), NOW)
    sha = bisect.next_probe(b, NOW)
    assert bisect.next_probe(b, NOW) is None  # a run is out
    assert not bisect.record(b, b.commits[0] if sha != b.commits[0] else b.commits[1], Probe.PASS)
    bisect.stop(b, "head x went green", NOW)
    assert b.status is Status.STOPPED and not b.active and b.probing is None
    assert bisect.Bisection.from_dict(b.__dict__ | {"status": "stopped"}).status is Status.STOPPED
