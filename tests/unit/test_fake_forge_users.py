"""Workers' GitHub calls on InMemoryForge, which refuses what GitHub refuses: the conflict
report is one comment kept up to date, and every CI row's check run or commit status is one
GitHub accepts (tests/integration/test_forge_contract.py holds the fake to the real Forge)."""

from __future__ import annotations

import pytest

from bot.core.state import CiState, CiStatus, PatchState, SeriesState
from bot.github.fake import InMemoryForge
from bot.github.forge import ForgeError
from workers.ci import github as hardware
from workers.publish_github import CONFLICT_MARKER, _conflict_comment


def with_pull() -> tuple[InMemoryForge, int]:
    forge = InMemoryForge("acme/widget")
    forge.push("carry/calc")
    return forge, forge.create_pull("main", "carry/calc", "Rebase calc", "body", False).number


def series(*patches: PatchState) -> SeriesState:
    return SeriesState("calc", checked_head="c" * 40, patches=list(patches))


def test_the_conflict_report_is_one_comment_kept_up_to_date() -> None:
    forge, number = with_pull()
    _conflict_comment(forge, number, series(PatchState("0001-a.patch", status="applies")))
    assert forge.writes == ["create pull"]  # no conflict, no earlier report: nothing said
    _conflict_comment(forge, number, series(PatchState("0001-a.patch", status="conflict")))
    _conflict_comment(forge, number, series(PatchState("0002-b.patch", status="conflict")))
    ((_, report),) = forge.comments(number)
    assert report.startswith(CONFLICT_MARKER) and "0002-b.patch" in report
    _conflict_comment(forge, number, series(PatchState("0002-b.patch", status="applies")))
    ((_, resolved),) = forge.comments(number)
    assert "The earlier conflicts are resolved on cccccccccccc." in resolved


@pytest.mark.parametrize("state", list(CiStatus))
def test_every_ci_row_makes_a_check_run_github_accepts(state: CiStatus) -> None:
    forge = InMemoryForge(auth="app")
    sha = forge.push("carry/calc")
    row = CiState("gaudi/x", state, detail="exit 1" if state == "failure" else "")
    hardware._check_run(forge, sha, "calc", row)
    (run,) = forge.check_runs(sha)
    assert run["name"] == "carry/gaudi/x" and run["output"]["title"] == f"gaudi/x: {state}"


@pytest.mark.parametrize("state", list(CiStatus))
def test_every_ci_row_makes_a_commit_status_github_accepts(state: CiStatus) -> None:
    forge = InMemoryForge()
    sha = forge.push("carry/calc")
    row = CiState("gaudi/x", state, detail="d" * 300, url="javascript:alert(1)")
    hardware._commit_status(forge, sha, row)
    (status,) = forge.statuses(sha)
    assert status["context"] == "carry/gaudi/x" and status["target_url"] is None
    assert len(status["description"]) == 140  # cut to GitHub's limit


def test_a_check_run_needs_a_github_app() -> None:
    forge = InMemoryForge(auth="token")
    sha = forge.push("carry/calc")
    with pytest.raises(ForgeError, match=r"failed \(403\)"):
        hardware._check_run(forge, sha, "calc", CiState("gaudi/x", CiStatus.RUNNING))
