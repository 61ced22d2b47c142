"""The engine run on a whole series, as the engine's integration tests check it: format-patch a
range into patches, check them on a head, and read the one patch's report and its evidence."""

from __future__ import annotations

from pathlib import Path

from bot.core.report import SeriesReport
from bot.git.engine import Engine, PatchInput
from bot.git.mirror import Mirror
from harness.gitrepo import RepoBuilder


def patches_of(repo: RepoBuilder, rev_range: str, out: Path) -> list[PatchInput]:
    return [PatchInput(str(p), p.read_bytes()) for p in repo.format_patch(rev_range, out)]


def check(
    repo: RepoBuilder, head: str, patches: list[PatchInput], tmp_path: Path, **kw
) -> SeriesReport:
    return Engine(Mirror(str(repo.path), tmp_path / "cache")).check(head, patches, **kw)


def only(report: SeriesReport):
    assert len(report.patches) == 1
    return report.patches[0]


def signals(patch) -> dict[str, dict]:
    return {e["signal"]: e for e in patch.evidence}
