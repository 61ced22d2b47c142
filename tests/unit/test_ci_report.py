"""bot.core.ci_report: which row a CI report sends, when GitHub still has to be told, and the
write budget under GitHub's content-creation limits and the hold a refusal puts on it, and when
the PR's CI table owes GitHub an edit (issue 34, item 2)."""

from __future__ import annotations

import pytest

from bot.core.ci_report import (
    CheckRunCall,
    WriteLimit,
    carry_over,
    check_run_call,
    edits_table,
    landed,
    needs_sending,
    owes_table,
    report_target,
    shown_on_github,
    table_owed,
    write_wait,
)
from bot.core.state import CiState, CiStatus, PrInfo, SeriesState

A, B = "a" * 40, "b" * 40


def row(state: CiStatus, run_id: str = "r1", sha: str = A, **more: object) -> CiState:
    return CiState(runner="gaudi/x", state=state, run_id=run_id, commit_sha=sha, **more)  # type: ignore[arg-type]


def test_a_report_sends_the_newest_word_of_its_run_with_its_check_run() -> None:
    stored = row(CiStatus.SUCCESS, check_run_id=7, reported="running")
    assert report_target(stored, row(CiStatus.RUNNING)) == stored
    assert check_run_call(stored) is CheckRunCall.UPDATE
    assert needs_sending(stored)


def test_nothing_is_sent_for_a_commit_a_newer_run_owns() -> None:
    assert report_target(row(CiStatus.QUEUED, "r2"), row(CiStatus.CANCELLED)) is None


def test_an_old_runs_end_on_another_commit_still_ends_its_own_check_run() -> None:
    late = row(CiStatus.CANCELLED)
    assert report_target(row(CiStatus.RUNNING, "r2", B), late) == late
    assert check_run_call(late) is CheckRunCall.CREATE  # after the look-up found none


def test_a_row_with_no_commit_has_nowhere_sure_to_go() -> None:
    assert report_target(None, row(CiStatus.SUCCESS, sha="")) is None


def test_what_github_shows_is_remembered_and_carried_to_the_runs_next_word() -> None:
    stored = row(CiStatus.RUNNING)
    marked = landed(stored, row(CiStatus.RUNNING), 42)
    assert marked is not None and (marked.check_run_id, marked.reported) == (42, "running")
    assert not needs_sending(marked)
    assert landed(row(CiStatus.QUEUED, "r2"), row(CiStatus.RUNNING), 42) is None
    following = carry_over(marked, row(CiStatus.SUCCESS))
    assert (following.check_run_id, following.reported) == (42, "running")
    assert needs_sending(following) and not shown_on_github(following, has_pr=True)
    assert shown_on_github(following, has_pr=False)  # no PR: nothing owed to GitHub
    assert carry_over(marked, row(CiStatus.QUEUED, "r2")).check_run_id == 0  # a new run


def test_two_rows_with_the_same_word_are_the_same_report() -> None:
    assert row(CiStatus.SUCCESS, check_run_id=3, reported="success").word() == row(CiStatus.SUCCESS)


def test_a_stored_row_keeps_its_github_side() -> None:
    data = {"runner": "k", "state": "success", "check_run_id": "12", "reported": "success"}
    loaded = CiState.from_dict(data)
    assert (loaded.check_run_id, loaded.on_github) == (12, True)
    before = CiState.from_dict({"runner": "k", "state": "success"})  # a row from before
    assert (before.check_run_id, before.on_github) == (0, True)
    assert not CiState.from_dict({"runner": "k", "state": "success", "reported": ""}).on_github


def test_the_write_budget_follows_githubs_minute_and_hour() -> None:
    assert write_wait([], 100.0) == 0.0
    minute = [100.0 + i * 0.5 for i in range(80)]  # 80 in 40 s
    assert write_wait(minute, 140.0) == pytest.approx(20.0)  # the first leaves at 160
    assert write_wait(minute, 160.5) == 0.0
    hour = [float(i * 8) for i in range(500)]  # 500 in 4,000 s... spaced under 80 a minute
    assert write_wait(hour[-450:], 4000.0) == 0.0  # only 450 in the last hour
    inside = [float(i * 7) for i in range(500)]  # 500 within 3,493 s
    assert write_wait(inside, 3500.0) == pytest.approx(100.0)  # the first ages out at 3,600


def test_a_smaller_budget_can_be_given() -> None:
    assert write_wait([1.0, 2.0], 3.0, (WriteLimit(10.0, 2),)) == pytest.approx(8.0)


def test_a_hold_makes_every_write_wait_until_it_ends() -> None:
    assert write_wait([], 100.0, held_until=130.0) == 30.0
    assert write_wait([], 100.0, held_until=90.0) == 0.0  # over
    # the longer of the hold and the budget's own wait
    full = [50.0 + i * 0.1 for i in range(80)]  # the minute's 80, the first leaving at 110
    assert write_wait(full, 100.0, held_until=101.0) == pytest.approx(10.0)
    assert write_wait(full, 100.0, held_until=200.0) == 100.0
    # a hold the writer has sat out already (its own refusal's wait) holds it no longer; one
    # another worker's refusal set later still does
    assert write_wait([], 100.0, held_until=130.0, waited_until=130.0) == 0.0
    assert write_wait([], 100.0, held_until=131.0, waited_until=130.0) == 31.0


def with_pr(owed: bool = False, state: str = "open") -> SeriesState:
    series = SeriesState(id="s")
    series.pr = PrInfo(1, "u", "carry/s", state, ci_table_owed=owed)
    return series


def test_the_table_is_owed_only_on_an_open_pr_whose_edit_was_refused() -> None:
    assert table_owed(with_pr(owed=True))
    assert not table_owed(with_pr())
    assert not table_owed(with_pr(owed=True, state="closed"))
    assert not table_owed(SeriesState(id="s")) and not table_owed(None)


def test_a_retry_edits_the_table_only_for_a_new_row_or_an_owed_edit() -> None:
    assert edits_table(with_pr(), sent=False, first=True)  # a report's first attempt
    assert not edits_table(with_pr(), sent=False, first=False)  # nothing new, nothing owed
    assert edits_table(with_pr(), sent=True, first=False)
    assert edits_table(with_pr(owed=True), sent=False, first=False)
    assert not edits_table(SeriesState(id="s"), sent=True, first=True)  # no PR to edit
    assert not edits_table(with_pr(state="merged"), sent=True, first=True)


def test_a_landed_edit_pays_the_table_only_if_it_still_shows_carrys_word() -> None:
    assert owes_table("body", None)  # refused
    assert not owes_table("body", "body")
    assert owes_table("newer body", "body")  # a newer row came while it was sent
