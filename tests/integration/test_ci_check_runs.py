"""Issue 34, item 2: a CI result GitHub refuses must not be lost while carry shows green.

carry's real CI-row and report code (workers.ci.rows.publish_rows, the `carry.ci.report` task)
in this process, against the GitHub emulator as a GitHub App, with real git, Redis and
PyGithub: one check run per run and check, created once and updated; a refused final report
retried after GitHub's Retry-After until it lands; the dashboard's API saying "not yet on
GitHub" meanwhile; a refused edit of the PR's CI table sent again until it lands; the emulator's
own secondary limit on content creation (80 a minute, 500 an hour, as GitHub documents) and
carry's write budget that keeps under it."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from celery.exceptions import Retry
from celery.signals import task_retry

from bot.core.state import CiState, CiStatus, SeriesState
from bot.github.forge import RateLimited
from bot.queue.celery_app import SERVICE_QUEUES
from bot.queue.celery_app import app as celery_app
from bot.store import series as store
from bot.store.write_budget import HOLDS_PREFIX, take_write
from bot.web.app import create_app
from harness.carry_env import SERIES, queued_tasks
from tests.support.asgi import serve
from tests.support.deployment import (
    CHECK,
    DOWN_NAME,
    DOWN_OWNER,
    MOVED,
    Deploy,
    Deployment,
    deployments,
    pr,
)
from workers import tree_branch
from workers.ci import github as hardware
from workers.ci.rows import publish_rows
from workers.rebase import tree_on


@pytest.fixture
def deploy(tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Deploy]:
    waits: list[float] = []  # PyGithub's waits, recorded
    with deployments(tmp_path, redis_url, monkeypatch, waits=waits) as start:
        yield start


def _row(head: str, state: CiStatus, run_id: str = "r1", detail: str = "") -> CiState:
    return CiState(runner=CHECK, state=state, run_id=run_id, commit_sha=head, detail=detail)


def _success_refused(d: Deployment, sha: str, *, writes: int, path: str) -> dict[str, Any]:
    """GitHub's secondary limit refuses the next `writes` writes to the downstream's `path`,
    asking for 10 minutes (longer than a worker sits out); the run then passes, and its report
    task is refused: returns that task's arguments."""
    d.gh.secondary_limit(
        next_n_writes=writes, retry_after_s=600, path=f"/repos/{DOWN_OWNER}/{DOWN_NAME}/{path}"
    )
    _changes(d, _row(sha, CiStatus.SUCCESS, detail="passed in 3 s"))
    (report,) = _report_tasks(d)
    failed = hardware.report_on_github(SERIES, CiState.from_dict(report["row"]))
    assert failed is not None and "rate limit" in str(failed)
    return report


def _report_tasks(d: Deployment) -> list[dict[str, Any]]:
    """The `carry.ci.report` tasks the planner asked for (the rows' ChecksRecorded events
    planned first), taken off the service's lanes: their arguments."""
    d.plan_recorded()
    found = []
    for message in queued_tasks(d.rt.redis):
        if message["headers"]["task"] == "carry.ci.report":
            _args, kwargs, _embed = json.loads(base64.b64decode(message["body"]))
            found.append(kwargs)
    for lane in SERVICE_QUEUES.split(","):
        d.rt.redis.delete(lane)
    return found


def _run_reports(d: Deployment) -> list[Any]:
    """Runs each queued report task as a worker would (celery's apply: a retry it asks for is
    run at once, its countdown kept in the Retry it raises); returns what each gave back."""
    return [hardware.report.apply(kwargs=kwargs).result for kwargs in _report_tasks(d)]


def _changes(d: Deployment, *rows: CiState, new_run: bool = False) -> None:
    """A run's rows change, one report each, as workers.ci.rows publishes them (a new run's
    first rows take the place of the older run's)."""
    for row in rows:
        publish_rows(d.rt.redis, celery_app, SERIES, [row], replace_rows=new_run)


def _hold_over(d: Deployment) -> None:
    """The time GitHub asked for (Retry-After) has passed: the installation's writes are no
    longer held. celery's apply runs a retry at once, where a worker would run it then."""
    d.rt.redis.delete(HOLDS_PREFIX + d.rt.github_writer)


def _apply_counting_retries(d: Deployment, report: dict[str, Any]) -> list[Retry]:
    """Runs a report task as celery's apply does; each retry it asks for runs once its
    countdown is over (the hold GitHub's Retry-After put on the installation's writes too)."""
    retries: list[Retry] = []

    def on_retry(reason: Retry, **_: Any) -> None:
        retries.append(reason)
        _hold_over(d)

    task_retry.connect(on_retry)
    try:
        hardware.report.apply(kwargs=report)
    finally:
        task_retry.disconnect(on_retry)
    return retries


def _table(d: Deployment, number: int) -> str:
    """The CI table's row of the check, as GitHub's copy of the PR body shows it."""
    body = d.gh.pull(DOWN_OWNER, DOWN_NAME, number)["body"]
    return next(line for line in body.splitlines() if line.startswith(f"| {CHECK} |"))


def _runs(d: Deployment, sha: str) -> list[dict[str, Any]]:
    return [
        r for r in d.gh.check_runs(DOWN_OWNER, DOWN_NAME, sha=sha) if r["name"] == f"carry/{CHECK}"
    ]


def _api_row(d: Deployment) -> dict[str, Any]:
    """The row as carry's web process shows it, over HTTP: the API's and the page's word."""
    with serve(create_app(d.rt.config, d.rt.settings, d.rt.redis)) as url:
        answer = requests.get(f"{url}/api/v1/series/{SERIES}", timeout=10)
        assert answer.status_code == 200, answer.text
        page = requests.get(f"{url}/series/{SERIES}", timeout=10)
        overview = requests.get(f"{url}/", timeout=10)
    row: dict[str, Any] = answer.json()["ci"][CHECK]
    row["page_says_not_on_github"] = "not yet on GitHub" in page.text
    row["overview_says_not_on_github"] = "not yet on GitHub" in overview.text
    return row


def test_one_run_is_one_check_run_updated_through_its_states(deploy: Deploy) -> None:
    d = deploy(auth="app")
    head = pr(d.propose(MOVED, "Add a header")).head_sha
    for state in (CiStatus.QUEUED, CiStatus.RUNNING, CiStatus.SUCCESS):
        _changes(d, _row(head, state))
        _run_reports(d)
        (run,) = _runs(d, head)  # fails on 6bda570: a new check run for each state
        assert run["external_id"] == "r1"
    assert (run["status"], run["conclusion"]) == ("completed", "success")
    created = d.gh.api_requests("POST", f"/repos/{DOWN_OWNER}/{DOWN_NAME}/check-runs")
    assert len(created) == 1
    stored = store.load_series(d.rt.redis, SERIES)
    assert stored is not None
    row = stored.ci[CHECK]
    assert (row.check_run_id, row.reported) == (run["id"], "success") and row.on_github


def test_a_retest_on_the_same_commit_gets_its_own_check_run(deploy: Deploy) -> None:
    d = deploy(auth="app")
    head = pr(d.propose(MOVED, "Add a header")).head_sha
    _changes(d, _row(head, CiStatus.FAILURE))
    _run_reports(d)
    _changes(d, _row(head, CiStatus.QUEUED, run_id="r2"), new_run=True)
    _changes(d, _row(head, CiStatus.SUCCESS, run_id="r2"))
    _run_reports(d)
    runs = _runs(d, head)
    assert [(r["external_id"], r["conclusion"]) for r in runs] == [
        ("r1", "failure"),
        ("r2", "success"),
    ]


def test_a_check_run_created_before_its_answer_was_lost_is_found_not_duplicated(
    deploy: Deploy,
) -> None:
    """The check run exists on GitHub but carry never learnt its id (the worker died after the
    POST, or the answer was lost): the next report finds it by name and run, and updates it."""
    d = deploy(auth="app")
    head = pr(d.propose(MOVED, "Add a header")).head_sha
    d.rt.forge().create_check_run(
        head, f"carry/{CHECK}", "queued", None, "t", "s", external_id="r1"
    )
    _changes(d, _row(head, CiStatus.RUNNING))
    _run_reports(d)
    (run,) = _runs(d, head)
    assert run["status"] == "in_progress"


def test_a_refused_final_report_is_retried_after_retry_after_until_it_lands(
    deploy: Deploy,
) -> None:
    d = deploy(auth="app")
    head = pr(d.propose(MOVED, "Add a header"))
    sha = head.head_sha
    _changes(d, _row(sha, CiStatus.RUNNING))
    _run_reports(d)
    # GitHub's secondary limit refuses the final update, asking for 10 minutes (longer than a
    # worker sits out): the report task must come back then, not give up.
    report = _success_refused(d, sha, writes=3, path="check-runs/*")
    (run,) = _runs(d, sha)
    assert run["status"] == "in_progress"
    shown = _api_row(d)  # fails on 6bda570: the API and the page say success, and nothing more
    assert shown["state"] == "success" and shown["on_github"] is False
    assert shown["page_says_not_on_github"] and shown["overview_says_not_on_github"]
    # The task asks to run again after GitHub's Retry-After; celery's apply runs the retry at
    # once (the fault is spent by then), and the conclusion lands.
    d.gh.clear_faults()
    _hold_over(d)
    d.gh.secondary_limit(
        next_n_writes=1, retry_after_s=600, path=f"/repos/{DOWN_OWNER}/{DOWN_NAME}/check-runs/*"
    )
    retries = _apply_counting_retries(d, report)
    assert [r.when for r in retries] == [600]
    (run,) = _runs(d, sha)
    assert (run["status"], run["conclusion"]) == ("completed", "success")
    shown = _api_row(d)
    assert shown["on_github"] is True
    assert not shown["page_says_not_on_github"] and not shown["overview_says_not_on_github"]
    assert len(d.gh.api_requests("POST", f"/repos/{DOWN_OWNER}/{DOWN_NAME}/check-runs")) == 1


def test_a_refused_edit_of_the_ci_table_is_sent_again_until_it_lands(deploy: Deploy) -> None:
    """The check run lands but GitHub refuses the PR body's edit that shows it in the CI table:
    the edit is recorded as owed and the report task comes back for it after GitHub's
    Retry-After (on main it was only a history entry, and the table said `running` for good)."""
    d = deploy(auth="app")
    state = d.propose(MOVED, "Add a header")
    number, sha = pr(state).number, pr(state).head_sha
    _changes(d, _row(sha, CiStatus.RUNNING))
    _run_reports(d)
    assert _table(d, number).startswith(f"| {CHECK} | running |")
    d.gh.clear_requests()
    d.gh.secondary_limit(
        next_n_writes=1, retry_after_s=600, path=f"/repos/{DOWN_OWNER}/{DOWN_NAME}/pulls/*"
    )
    _changes(d, _row(sha, CiStatus.SUCCESS, detail="passed in 3 s"))
    (report,) = _report_tasks(d)
    retries = _apply_counting_retries(d, report)
    assert [r.when for r in retries] == [600]  # fails on main: no retry, the edit is lost
    assert _table(d, number) == f"| {CHECK} | success | passed in 3 s |"
    (run,) = _runs(d, sha)
    assert (run["status"], run["conclusion"]) == ("completed", "success")
    stored = store.load_series(d.rt.redis, SERIES)
    assert stored is not None and stored.pr is not None and not stored.pr.ci_table_owed
    assert len(d.history("ci-table-failed")) == 1
    edits = d.gh.api_requests("PATCH", f"/repos/{DOWN_OWNER}/{DOWN_NAME}/pulls/{number}")
    # the refused edit and the one that landed; the retry did not send the check run again
    assert len(edits) == 2
    (check_run_id,) = {r["id"] for r in _runs(d, sha)}
    path = f"/repos/{DOWN_OWNER}/{DOWN_NAME}/check-runs/{check_run_id}"
    assert len(d.gh.api_requests("PATCH", path)) == 1


def _table_shown(d: Deployment) -> tuple[bool, bool]:
    """The PR's CI table as carry's web process shows it, over HTTP: whether the API says it is
    on GitHub, and whether the series page says it is not yet."""
    with serve(create_app(d.rt.config, d.rt.settings, d.rt.redis)) as url:
        answer = requests.get(f"{url}/api/v1/series/{SERIES}", timeout=10)
        assert answer.status_code == 200, answer.text
        page = requests.get(f"{url}/series/{SERIES}", timeout=10)
        assert page.status_code == 200, page.text
    says_behind = "CI table in the description of" in page.text and "not yet on GitHub" in page.text
    return answer.json()["pr"]["ci_table_on_github"], says_behind


def test_the_dashboard_says_a_refused_ci_table_edit_is_not_yet_on_github(deploy: Deploy) -> None:
    """The check run lands but GitHub refuses the PR body's edit: the row is on GitHub, the PR's
    table is not; the series page and the API say so (on the old code they showed the table as
    if GitHub had it) until the edit sent again lands."""
    d = deploy(auth="app")
    state = d.propose(MOVED, "Add a header")
    number, sha = pr(state).number, pr(state).head_sha
    _changes(d, _row(sha, CiStatus.RUNNING))
    _run_reports(d)
    assert _table_shown(d) == (True, False)
    report = _success_refused(d, sha, writes=1, path="pulls/*")
    assert _table(d, number).startswith(f"| {CHECK} | running |")
    assert _api_row(d)["on_github"] is True  # the check run landed
    assert _table_shown(d) == (False, True)  # fails on the old code: no word of the table
    d.gh.clear_faults()
    _hold_over(d)
    assert _apply_counting_retries(d, report) == []
    assert _table(d, number) == f"| {CHECK} | success | passed in 3 s |"
    assert _table_shown(d) == (True, False)


def test_a_retry_with_nothing_owed_does_not_edit_the_table_again(deploy: Deploy) -> None:
    """A retry whose row and table have both landed (another report sent them) sends nothing:
    in a storm of refusals, edits sent again for nothing spend what the limit leaves."""
    d = deploy(auth="app")
    sha = pr(d.propose(MOVED, "Add a header")).head_sha
    _changes(d, _row(sha, CiStatus.SUCCESS))
    (report,) = _report_tasks(d)
    assert hardware.report_on_github(SERIES, CiState.from_dict(report["row"])) is None
    writes = len([r for r in d.gh.api_requests() if r.method != "GET"])
    row = CiState.from_dict(report["row"])
    assert hardware.report_on_github(SERIES, row, first=False) is None
    assert len([r for r in d.gh.api_requests() if r.method != "GET"]) == writes


def test_a_refused_report_stops_once_a_newer_run_owns_the_commit(deploy: Deploy) -> None:
    d = deploy(auth="app")
    sha = pr(d.propose(MOVED, "Add a header")).head_sha
    _changes(d, _row(sha, CiStatus.SUCCESS))
    (report,) = _report_tasks(d)
    _changes(d, _row(sha, CiStatus.QUEUED, run_id="r2"), new_run=True)  # a retest came meanwhile
    _report_tasks(d)
    assert hardware.report.apply(kwargs=report).result is None  # nothing owed: no retry
    assert _runs(d, sha) == []


# -- the emulator's secondary limit on content creation, and carry's budget under it ----------


def test_carrys_write_budget_keeps_under_githubs_content_limits(redis_url: str) -> None:
    import redis

    client = redis.Redis.from_url(redis_url)
    who = "test-budget|installation:1"
    client.delete(f"carry:github-writes:{who}")
    waits = [take_write(client, who, now=1000.0 + i * 0.1) for i in range(81)]
    assert waits[:80] == [0.0] * 80
    assert waits[80] == pytest.approx(60.0 - 8.0, abs=0.01)  # the first leaves the minute
    # 500 in the hour: 80 a minute for six minutes and a bit, then nothing until the first ages
    now = 1008.0
    taken = 80
    while taken < 500:
        now += 0.8  # 75 a minute
        if take_write(client, who, now=now) == 0.0:
            taken += 1
    assert take_write(client, who, now=now + 1) > 60


def test_a_report_waits_for_the_installations_write_budget_instead_of_being_refused(
    deploy: Deploy,
) -> None:
    """The installation's other workers spent GitHub's 80 writes of this minute: the report is
    not sent (GitHub would refuse it); the task comes back when the budget has room."""
    d = deploy(auth="app")
    sha = pr(d.propose(MOVED, "Add a header")).head_sha
    now = time.time()
    for i in range(80):
        assert take_write(d.rt.redis, d.rt.github_writer, now=now - 30 + i * 0.01) == 0.0
    writes = len([r for r in d.gh.api_requests() if r.method != "GET"])
    _changes(d, _row(sha, CiStatus.SUCCESS))
    (report,) = _report_tasks(d)
    failed = hardware.report_on_github(SERIES, CiState.from_dict(report["row"]))
    assert isinstance(failed, RateLimited)
    assert "budget of content-creating requests" in str(failed)
    assert 25 < failed.retry_after_s <= 31
    assert len([r for r in d.gh.api_requests() if r.method != "GET"]) == writes
    assert _runs(d, sha) == []
    assert _api_row(d)["on_github"] is False


def test_with_no_pr_the_check_run_goes_on_the_tested_trees_commit(deploy: Deploy) -> None:
    """Issue 32: a head tested with nothing to propose has its check run on its commit of
    `carry/tree/<series>` (the exact tree); a row on any other commit, with no PR, stays on
    the dashboard as before."""
    d = deploy(auth="app")
    head = d.env.upstream.head()
    tree = tree_on(d.rt, SERIES, head)
    assert tree is not None

    def on_head(fresh: SeriesState) -> bool:
        fresh.checked_head = head
        return True

    store.update_series(d.rt.redis, SERIES, on_head)
    state = store.load_series(d.rt.redis, SERIES)
    assert state is not None and state.pr is None
    directory = d.env.downstream / "patches" / SERIES
    files = {p.name: p.read_bytes() for p in directory.iterdir() if p.is_file()}
    built = tree_branch.publish_tree(d.rt, state, tree, files)
    assert built is not None
    assert d.gh.ref(DOWN_OWNER, DOWN_NAME, f"refs/heads/carry/tree/{SERIES}") == built.commit

    elsewhere = d.gh.ref(DOWN_OWNER, DOWN_NAME, "refs/heads/main")
    assert elsewhere is not None
    _changes(d, _row(elsewhere, CiStatus.SUCCESS, run_id="r0"))
    _run_reports(d)
    assert _runs(d, elsewhere) == []  # no PR, not carry's tree: nothing on GitHub
    for state_now in (CiStatus.QUEUED, CiStatus.SUCCESS):
        _changes(d, _row(built.commit, state_now, run_id="r1"), new_run=True)
        _run_reports(d)
    (run,) = _runs(d, built.commit)
    assert (run["status"], run["conclusion"], run["external_id"]) == ("completed", "success", "r1")
