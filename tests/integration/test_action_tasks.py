"""Each action that hands its work to a Celery task (Action.TASK) names a task the workers
register, with arguments that task takes: a renamed task or argument fails here, not as a
message no worker can run."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest

import workers.tasks  # noqa: F401  (the service's worker registers its tasks by importing it)
from bot.core.actions import ACTIONS, Action
from bot.queue.celery_app import app
from workers import dispatch


def _instance(cls: type[Action]) -> Action:
    """One action of the class, every field it requires given a placeholder."""
    required: dict[str, Any] = {
        f.name: "x"
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    return cls(**{**required, "series_id": "s1"})


@pytest.mark.parametrize("cls", [c for c in ACTIONS if c.TASK], ids=lambda c: c.__name__)
def test_an_actions_task_is_registered_and_takes_its_arguments(cls: type[Action]) -> None:
    task = app.tasks.get(str(cls.TASK))
    assert task is not None, f"{cls.__name__}: no worker registers {cls.TASK}"
    params = inspect.signature(task.run).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    given = set(_instance(cls).task_args())
    assert takes_any or given <= set(params), (cls.__name__, given - set(params))
    needed = {
        name
        for name, p in params.items()
        if p.default is inspect.Parameter.empty
        and p.kind is not inspect.Parameter.VAR_KEYWORD
        and name != "self"
    }
    assert needed <= given, (cls.__name__, needed - given)


def test_every_action_without_a_task_has_its_own_adapter() -> None:
    for cls in ACTIONS:
        if cls.TASK is None:
            assert dispatch._HANDLERS[cls] is not dispatch._send_task, cls.__name__
