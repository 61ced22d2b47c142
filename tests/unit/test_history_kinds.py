"""History kinds, action kinds and run states are types: every kind carry writes is a
HistoryKind, every planner action has one adapter, and no call writes a kind as free text."""

from __future__ import annotations

import ast
from pathlib import Path

from bot.core.actions import ACTIONS, RUN_ACTIONS, ActionKind
from bot.core.attention import Attention
from bot.core.ci_plan import FINAL_STATES
from bot.core.history import RUN_KINDS, UNKNOWN_RUN_KINDS, HistoryKind, ci_kind
from bot.core.verified import Change
from bot.web.timeline import known_kind, outcome_of
from tests.support.paths import REPO_ROOT as ROOT
from workers import dispatch
from workers.ci import requests

WRITERS = ("append_history", "queue_history")


def test_each_action_kind_has_one_class_one_adapter_and_its_own_history_kind() -> None:
    classes = (*ACTIONS, *RUN_ACTIONS)
    assert sorted(cls.KIND for cls in classes) == sorted(ActionKind)  # one class per kind
    assert set(dispatch._HANDLERS) == set(ACTIONS)
    assert set(requests._APPLY) == set(RUN_ACTIONS)  # the run decisions' adapter
    for kind in ActionKind:
        assert HistoryKind(kind.value).value == kind.value


def test_run_decisions_final_states_and_notices_are_history_kinds() -> None:
    for cls in RUN_ACTIONS:  # each run decision keeps the `ci-<verb>` entry it always wrote
        assert cls.KIND.value.startswith("ci-")
        assert ci_kind(cls.KIND.value.removeprefix("ci-")) == HistoryKind(cls.KIND.value)
    for state in FINAL_STATES:
        assert ci_kind(state) in RUN_KINDS
    assert UNKNOWN_RUN_KINDS <= RUN_KINDS
    for change in (*Change, *Attention):
        assert HistoryKind(change.value).value == change.value


def test_an_entry_an_older_carry_wrote_still_reads() -> None:
    assert known_kind("finding-failed") is None
    assert outcome_of("finding-failed", {}) == "problem"  # by its suffix, as before
    assert outcome_of("something-else", {}) == "routine"
    assert outcome_of(HistoryKind.STUCK, {}) == "problem"


def _free_text_kinds(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
        if name in WRITERS and len(node.args) > 2:
            kind = node.args[2]
            if isinstance(kind, ast.Constant | ast.JoinedStr):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_no_history_entry_is_written_with_a_free_text_kind() -> None:
    files = [p for top in ("bot", "workers", "runner") for p in (ROOT / top).rglob("*.py")]
    assert len(files) > 100
    assert [hit for path in files for hit in _free_text_kinds(path)] == []


def test_the_github_adapter_keeps_no_process_wide_state() -> None:
    """Issue 31: tokens, roles, moved repositories, ETags and waits live in one ForgeCaches the
    runtime holds and passes to Forge.connect, not in module globals a test must reset."""
    import inspect

    from bot.github import forge

    for hidden in ("TOKENS", "PERMISSIONS", "RENAMES", "VALIDATORS", "sleep"):
        assert not hasattr(forge, hidden), hidden
    caches = inspect.signature(forge.Forge.connect).parameters["caches"]
    assert caches.default is inspect.Parameter.empty and caches.kind is caches.KEYWORD_ONLY
