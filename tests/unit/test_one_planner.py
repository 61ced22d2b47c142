"""Issue 31: one planner. The hardware-run decision speaks the planner's language: it answers
with bot.core.actions' Action subclasses and reads a facts dataclass of bot.core.planner, and no
second action, verb or facts type lives beside them (the CI planner once had its own
RunAction, RunVerb and RunFacts)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from bot.core import planner
from bot.core.actions import RUN_ACTIONS, Action
from bot.core.ci_pacing import Pace, PacePolicy
from bot.core.ci_plan import Budget
from bot.core.planner import ActiveRun, LaneFacts, RunRequest, StoredResult, plan_run
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


def _lanes() -> list[tuple[RunRequest, LaneFacts]]:
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
        (RunRequest("s1", "gaudi", "new", "b" * 40, trusted, force), lane)
        for trusted in (True, False)
        for force in (False, True)
        for lane in facts
    ]


def test_every_run_decision_is_a_planner_action() -> None:
    seen: set[type] = set()
    for request, lane in _lanes():
        for action in plan_run(request, lane):
            assert isinstance(action, Action) and type(action) in RUN_ACTIONS, action
            assert dataclasses.is_dataclass(action) and action.key == request.key
            seen.add(type(action))
    assert seen == set(RUN_ACTIONS)  # each kind of decision was reached


def test_the_decision_is_the_planners() -> None:
    assert plan_run.__module__ == planner.__name__
    assert LaneFacts.__module__ == planner.__name__
