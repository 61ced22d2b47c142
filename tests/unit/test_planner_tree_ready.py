"""One loop (issues 31 and 32): publishing no longer starts hardware CI. It says where the exact
tree of a head now is (a TreeReady event); the planner decides that the series' runners test it
(a TEST_TREE action the dispatcher maps to workers.ci.github.test_tree)."""

from __future__ import annotations

from dataclasses import replace

from bot.core import events as ev
from bot.core.planner import ActionKind, Facts, SeriesFacts, plan

READY = ev.TreeReady(
    series_id="s1",
    head_sha="a" * 40,
    tree="b" * 40,
    branch="carry/tree/s1",
    branch_sha="c" * 40,
    series_sha="d" * 40,
    patches_dir="patches/s1",
)
SERIES = SeriesFacts(id="s1", upstream_repo="up/up", runners=("gaudi", "gb10"))


def facts(series: SeriesFacts) -> Facts:
    return Facts(downstream_repo="acme/carry", series=(series,))


def test_a_ready_tree_of_a_series_with_runners_is_tested_there() -> None:
    (action,) = plan(READY, facts(SERIES))
    assert action.kind is ActionKind.TEST_TREE and action.series_id == "s1"
    assert action.args == {
        "head_sha": READY.head_sha,
        "tree": READY.tree,
        "branch": "carry/tree/s1",
        "branch_sha": READY.branch_sha,
        "series_sha": READY.series_sha,
        "patches_dir": "patches/s1",
    }
    assert action.key == f"test:s1:{READY.tree}:{READY.branch_sha}"
    assert "on gaudi, gb10" in action.reason


def test_no_runners_or_a_paused_series_tests_nothing() -> None:
    for series, why in (
        (replace(SERIES, runners=()), "no runners test this series"),
        (replace(SERIES, paused_by="alice"), "the series is paused"),
    ):
        (action,) = plan(READY, facts(series))
        assert action.kind is ActionKind.NOTE and why in action.reason


def test_the_event_goes_through_the_task_queue_and_back() -> None:
    assert ev.event_from_dict(ev.event_to_dict(READY)) == READY
