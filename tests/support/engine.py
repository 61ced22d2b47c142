"""The engine run on one patch, as the engine's integration tests check it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bot.core.report import PatchReport
from bot.git.engine import Engine, PatchInput
from bot.git.mirror import Mirror
from harness.gitrepo import RepoBuilder


def body(lines: int = 40) -> str:
    """An upstream file of `lines` numbered assignments, the engine tests' usual mod.py."""
    return "".join(f"value_{i} = compute({i})\n" for i in range(1, lines + 1))


BODY = body()
# A function a patch adds or edits, and upstream takes in its own form.
FUNC = (
    "def frobnicate(widget, level):\n"
    "    checked = validate_widget(widget)\n"
    "    scaled = checked.scale(level * 2)\n"
    "    return scaled.finish(mode='strict')\n"
)


def check(
    repo: RepoBuilder, patches: list[PatchInput], tmp_path: Path, head: str = "main", **kw: Any
) -> PatchReport:
    """The report of the one patch in `patches` on `repo`'s `head`, through a fresh mirror."""
    engine = Engine(Mirror(str(repo.path), tmp_path / "cache"))
    try:
        (report,) = engine.check(head, patches, **kw).patches
    finally:
        engine.close()
    return report
