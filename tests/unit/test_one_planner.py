"""Issue 31: one planner. The hardware-run decision speaks the planner's language: a request is
an event (bot.core.events.RunRequested) that the one entry point, `plan`, plans over the
planner's Facts (its lane's, Facts.lane) and answers with bot.core.actions' Action subclasses;
no second action, verb or facts type lives beside them (the CI planner once had its own
RunAction, RunVerb and RunFacts), and workers reach the planner through `plan` alone."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

import pytest

from bot.core import events as ev
from bot.core import planner
from bot.core.actions import RUN_ACTIONS, Action
from bot.core.ci_pacing import Pace, PacePolicy
from bot.core.ci_plan import Budget
from bot.core.planner import ActiveRun, Facts, LaneFacts, StoredResult, plan
from bot.core.state import CiStatus
from tests.support.paths import REPO_ROOT

PLANNER = REPO_ROOT / "bot" / "core" / "planner.py"
GONE = {"RunAction", "RunVerb", "RunFacts"}


def _classes(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text())
    return [(node.name, node.lineno) for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]


def _carry_modules() -> list[Path]:
    return [p for top in ("bot", "workers", "runner") for p in (REPO_ROOT / top).rglob("*.py")]


def test_no_second_action_verb_or_facts_type() -> None:
    """Every class named ...Facts is the planner's, and the CI planner's own types are gone."""
    paths = _carry_modules()
    assert len(paths) > 100
    found = [
        f"{path.relative_to(REPO_ROOT)}:{line} {name}"
        for path in paths
        for name, line in _classes(path)
        if name in GONE or (name.endswith("Facts") and path != PLANNER)
    ]
    assert found == []


def request(trusted: bool = True, force: bool = False) -> ev.RunRequested:
    return ev.RunRequested(
        series_id="s1",
        runner_kind="gaudi",
        tree_key="new",
        head_sha="b" * 40,
        trusted=trusted,
        force=force,
    )


def _lanes() -> list[tuple[ev.RunRequested, LaneFacts]]:
    """Requests and facts that lead to every kind of run decision."""
    now = 1_800_000_000.0
    full = Budget(queued=1, running=1)
    done = StoredResult("r-done", CiStatus.SUCCESS)
    stale = ActiveRun("r1", CiStatus.RUNNING, "old", "a" * 40)
    waiting = ActiveRun("r2", CiStatus.WAITING_APPROVAL, "new", "b" * 40, dispatched=False)
    paced = Pace(PacePolicy(min_interval_s=3600), now, (now - 60,))
    facts = [
        LaneFacts(),
        LaneFacts(result=done),
        LaneFacts(active=(stale,)),
        LaneFacts(active=(waiting,)),
        LaneFacts(in_flight=2, budget=full),
        LaneFacts(pace=paced),
    ]
    return [
        (request(trusted=trusted, force=force), lane)
        for trusted in (True, False)
        for force in (False, True)
        for lane in facts
    ]


def test_every_run_decision_is_a_planner_action() -> None:
    seen: set[type] = set()
    for event, lane in _lanes():
        for action in plan(event, Facts.of_lane(lane)):
            assert isinstance(action, Action) and type(action) in RUN_ACTIONS, action
            assert dataclasses.is_dataclass(action) and action.key == event.key
            seen.add(type(action))
    assert seen == set(RUN_ACTIONS)  # each kind of decision was reached


def test_the_decision_is_the_planners() -> None:
    assert LaneFacts.__module__ == planner.__name__
    assert ev.RunRequested in ev.EVENT_TYPES
    assert not hasattr(planner, "plan_run")  # no second entry point beside plan
    assert planner.scope(request()) == planner.Scope(series_id="s1")


def test_a_run_request_without_its_lanes_facts_is_refused_aloud() -> None:
    """A request planned without the facts read under its kind's lock (sent through the task
    queue, say) is an error, never an empty answer that would drop the request."""
    with pytest.raises(ValueError, match="facts of its lane"):
        plan(request(), Facts("acme/carry"))


def test_a_run_request_keeps_its_key_and_round_trips() -> None:
    event = request(trusted=False)
    assert event.key == "ci:s1:gaudi:new"  # the key its history entries always had
    assert ev.event_from_dict(ev.event_to_dict(event)) == event


# what a worker may take from the planner: the entry points and the data it plans with
ENTRY_POINTS = {"plan", "plan_duplicate", "scope"}


def _planner_imports() -> list[tuple[str, str]]:
    """(module:line, name) for each name a module of workers/ imports from bot.core.planner,
    and for each import of the module itself (which would reach past the entry points)."""
    found = []
    for path in (REPO_ROOT / "workers").rglob("*.py"):
        where = str(path.relative_to(REPO_ROOT))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "bot.core.planner":
                found += [(f"{where}:{node.lineno}", alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom | ast.Import) and any(
                (getattr(node, "module", None), alias.name)
                in (("bot.core", "planner"), (None, "bot.core.planner"))
                for alias in node.names
            ):
                found.append((f"{where}:{node.lineno}", "bot.core.planner"))
    return found


def test_workers_reach_the_planner_through_plan_alone() -> None:
    """plan (and plan_duplicate, scope) is the planner's only public entry that workers call:
    every other name they import from it is a data class they build facts with."""
    imports = _planner_imports()
    names = {name for _, name in imports}
    assert {"plan", "ActiveRun", "LaneFacts"} <= names  # the CI requests' import was read
    wrong = [
        f"{where} {name}"
        for where, name in imports
        if name not in ENTRY_POINTS
        and not (
            inspect.isclass(getattr(planner, name, None))
            and dataclasses.is_dataclass(getattr(planner, name))
        )
    ]
    assert wrong == []
