"""Hardware CI at the PR: ask for runs of the tree a PR proposes (and `/carry retest`), put
their results on GitHub (check runs or commit statuses, and the PR's CI table)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from dataclasses import replace
from functools import cache
from typing import Any

import redis
from celery import Task

from bot.ci import runs as ci_runs
from bot.ci.spec import TreeSpec
from bot.core.ci_plan import check_run_status
from bot.core.ci_report import (
    CheckRunCall,
    check_run_call,
    edits_table,
    landed,
    needs_sending,
    owes_table,
    report_target,
)
from bot.core.history import HistoryKind
from bot.core.render import pr_body, pr_title
from bot.core.seriesfile import parse_series
from bot.core.state import CiState, SeriesState
from bot.git.downstream import Downstream
from bot.git.mirror import Mirror, MirrorError
from bot.git.runner import GitError
from bot.github.forge import ForgeError, retry_delay
from bot.github.port import ForgePort
from bot.queue.celery_app import app
from bot.store import series as store
from workers import downstream as downstream_repo
from workers.ci import requests as ci
from workers.runtime import Runtime, runtime

log = logging.getLogger("carry.hardware")


def test_tree(
    rt: Runtime,
    series_id: str,
    *,
    head_sha: str,
    tree: str,
    branch: str,
    branch_sha: str,
    series_sha: str,
    patches_dir: str,
) -> list[CiState]:
    """The planner's TEST_TREE (an exact tree is on a downstream branch): runs of it on the
    series' runners, the series' patch files read at `series_sha`. A series checked on a newer
    head since tests nothing here: that head's tree comes with its own event."""
    state = store.load_series(rt.redis, series_id)
    if state is None or state.checked_head != head_sha:
        log.info(
            "%s: tree %s of %s not tested: the series moved on", series_id, tree[:12], head_sha[:12]
        )
        return []
    url = downstream_repo.url(rt.settings, rt.config)
    downstream = Downstream(
        url,
        rt.cache_dir,
        rt.forge().token if rt.settings.tracks_github else None,
        network_timeout_s=rt.settings.git_timeout_s,
    )
    downstream.fetch(rt.config.downstream.branch, branch)
    files = downstream.read_dir(series_sha, patches_dir)
    return request(rt, state, tree, url, branch, branch_sha, patches_dir, files)


def request(
    rt: Runtime,
    state: SeriesState,
    tree: str,
    downstream_url: str,
    branch: str,
    branch_sha: str,
    patches_dir: str,
    series_files: Mapping[str, bytes] | None = None,
) -> list[CiState]:
    """Runs of the exact tree (upstream head + the series on carry's branch) on each runner.
    `series_files` are the series directory's files at `branch_sha`: the job carries the
    patches, so a runner (which holds no credential) can test a private downstream."""
    series = rt.config.series_by_id(state.id)
    upstream = rt.config.upstreams[series.upstream]
    spec = TreeSpec(
        upstream_url=upstream.url,
        upstream_sha=str(state.checked_head),
        downstream_url=downstream_url,
        downstream_ref=f"refs/heads/{branch}",
        downstream_sha=branch_sha,
        patches_dir=patches_dir,
        series_digest=str(state.checked_digest),
        expected_tree=tree,
        upstream_ref=state.head_ref,
    )
    carried = carried_series(series_files or {})
    if carried is not None:
        spec = spec.with_series(carried)
    store.set_ci_tree(rt.redis, state.id, spec.to_dict())
    targets = ci.targets_from_config(rt.config, state.id)
    return ci.request_ci(
        rt.redis,
        app,
        state.id,
        targets,
        spec,
        issuer=rt.job_issuer,
        # The trust of the tree's own upstream head (not the series' newest head's pusher).
        approved_descendant=_in_approved_head(rt, state, upstream.url, spec.upstream_sha),
    )


def _in_approved_head(rt: Runtime, state: SeriesState, url: str, sha: str) -> bool:
    """Whether git finds `sha` in a head approved by exact SHA (an approval covers its
    ancestors). Asked only when the recorded pushes and the exact approvals leave the head
    waiting. The upstream's mirror fetches the series' ref when it lacks one of them (as the
    rebase did); a commit still missing is in nothing."""
    if not state.approvals or ci.trust_of(state, sha).may_run:
        return False
    try:
        mirror = Mirror(url, rt.cache_dir, network_timeout_s=rt.settings.git_timeout_s)
        return mirror.ancestor_of_any(
            sha, state.approvals[-MAX_APPROVALS_ASKED:], ref=state.head_ref
        )
    except (MirrorError, GitError) as err:
        log.warning("%s: cannot tell whether %s is in an approved head: %s", state.id, sha, err)
        return False


MAX_APPROVALS_ASKED = 20  # the newest approvals git is asked about


def note_rename(rt: Runtime, series_id: str, forge: ForgePort) -> None:
    """GitHub moved carry's repository to a new name and the forge followed it: said in the
    series' history, with what to change, so the config is put right."""
    if forge.renamed_from is not None:
        store.append_history(
            rt.redis,
            series_id,
            HistoryKind.DOWNSTREAM_RENAMED,
            was=forge.renamed_from,
            now=forge.repo_name,
            action=f"set downstream.repo to {forge.repo_name} in the config",
        )


def carried_series(files: Mapping[str, bytes]) -> list[tuple[str, bytes]] | None:
    """The patches the `series` file lists, in order, from the series directory's files; None
    when one is missing or the file is unusable (the runner then reads the branch itself, and
    says what is wrong there)."""
    listing = files.get("series")
    if listing is None:
        return None
    parsed, problems = parse_series(listing.decode("utf-8", "replace"))
    if problems or parsed.is_awaiting_import or any(n not in files for n in parsed.patches):
        return None
    return [(name, files[name]) for name in parsed.patches]


def retest(rt: Runtime, series_id: str, runner: str | None, by: str) -> list[CiState]:
    saved = store.ci_tree(rt.redis, series_id)
    if saved is None:
        store.append_history(
            rt.redis, series_id, HistoryKind.RETEST, result="no proposed tree to test yet", by=by
        )
        return []
    targets = [t for t in ci.targets_from_config(rt.config, series_id) if runner in (None, t.kind)]
    if not targets:
        store.append_history(
            rt.redis,
            series_id,
            HistoryKind.RETEST,
            result=f"no runner {runner!r} for this series",
            by=by,
        )
        return []
    return ci.request_ci(
        rt.redis,
        app,
        series_id,
        targets,
        TreeSpec(**saved),
        issuer=rt.job_issuer,
        force=True,
    )


REPORT_RETRIES = 12  # with backoff up to 5 minutes, or longer as GitHub's Retry-After asks
LOCK_S = 120  # one report of a check at a time: two must not both create its check run


@app.task(name=ci_runs.REPORT_TASK, bind=True, acks_late=True, max_retries=REPORT_RETRIES)
def report(self: Task, series_id: str, row: dict[str, Any]) -> None:
    """workers.ci.rows sends this task for every change of a CI row, on the service and on
    runners. A report GitHub refused or that failed is sent again (after GitHub's Retry-After
    when it gave one) until it lands or a newer run owns its check; so is an edit of the PR's CI
    table that GitHub refused, until it lands."""
    # the row as it changed: what GitHub has of its run is read from the store, not from it
    failed = report_on_github(
        series_id, CiState.from_dict(row).word(), first=self.request.retries == 0
    )
    if failed is None:
        return
    if self.request.retries >= REPORT_RETRIES:
        rt = runtime()
        store.append_history(
            rt.redis,
            series_id,
            HistoryKind.CI_REPORT_GAVE_UP,
            runner=row.get("runner"),
            error=str(failed),
        )
        return
    raise self.retry(
        exc=failed, countdown=retry_delay(failed, self.request.retries), max_retries=None
    )


def report_on_github(series_id: str, row: CiState, *, first: bool = True) -> ForgeError | None:
    """What the `carry.ci.report` task does for a changed CI row: the row's result on the
    commit its run tested (a check run as an App, a commit status with a token: GitHub lets
    only Apps write check runs), then the PR's CI table, whatever became of the first. Without
    credentials the dashboard is the only report. Returns the error of a report that did not
    land and is still owed (the task tries again), None when nothing is owed.

    One check run per run and check: created at the first report, its id kept with the row
    (after a restart, or an answer lost, it is found by name and run before one is created),
    then updated. Reports can arrive late and out of order (runner hosts forward theirs as
    tasks): a report sends the newest word of its run that GitHub does not show yet, and nothing
    for a commit a newer run owns (bot.core.ci_report).

    The PR's CI table is edited at a report's `first` attempt; a retry edits it only when it
    sent its row now or an earlier edit was refused (recorded as owed, PrInfo.ci_table_owed),
    so that a storm of refusals is not made worse by edits sent again for nothing."""
    rt = runtime()
    state = store.load_series(rt.redis, series_id)
    if rt.settings.github_auth == "none" or state is None or not reported_on(state, row):
        return None
    forge = rt.forge()
    lock = rt.redis.lock(
        f"{store.PREFIX}ci-report:{series_id}:{row.runner}", timeout=LOCK_S, blocking_timeout=LOCK_S
    )
    if not lock.acquire():
        return ForgeError(f"the report of {row.runner} waited {LOCK_S} s for another one")
    try:
        failed, sent = _send_owed(rt, forge, series_id, row)
    finally:
        with contextlib.suppress(redis.RedisError):
            lock.release()
    table_failed = None
    if edits_table(store.load_series(rt.redis, series_id), sent=sent, first=first):
        table_failed = _update_table(rt, forge, series_id, row.runner)
    note_rename(rt, series_id, forge)
    return failed or table_failed


_RECHECKS = 3


def reported_on(state: SeriesState, row: CiState) -> bool:
    """Whether GitHub gets `row`: there is a PR of carry's to show it, or its run tested a
    commit of carry's tree branch (carry/tree/<series>, bot.core.tree_branch)."""
    return state.pr is not None or (
        bool(row.commit_sha) and row.commit_sha in state.tree_commits.values()
    )


def _send_owed(
    rt: Runtime, forge: ForgePort, series_id: str, row: CiState
) -> tuple[ForgeError | None, bool]:
    """Sends what GitHub does not show yet of `row`'s run, checking the store again after each
    send in case a newer word came meanwhile. Returns the error of a send that failed, and
    whether anything landed."""
    sent = False
    for _ in range(_RECHECKS):
        state = store.load_series(rt.redis, series_id)
        if state is None or not reported_on(state, row):
            return None, sent
        target = report_target(state.ci.get(row.runner), row)
        if target is None or not needs_sending(target):
            return None, sent
        sha = target.commit_sha or (state.pr.head_sha if state.pr else "")
        if not sha:
            return None, sent
        try:
            check_run_id = _send(rt, forge, sha, series_id, target)
        except ForgeError as err:
            store.append_history(
                rt.redis,
                series_id,
                HistoryKind.CI_REPORT_FAILED,
                runner=target.runner,
                error=str(err),
            )
            return err, sent
        row = replace(target, check_run_id=check_run_id, reported=target.state)
        _mark_landed(rt, series_id, row)
        sent = True
    return None, sent


def _send(rt: Runtime, forge: ForgePort, sha: str, series_id: str, row: CiState) -> int:
    """Puts the row on GitHub; the id of its check run (0 for a commit status)."""
    if rt.settings.github_auth == "app":
        return _check_run(forge, sha, series_id, row)
    _commit_status(forge, sha, row)
    return 0


def _mark_landed(rt: Runtime, series_id: str, sent: CiState) -> None:
    """The stored row of `sent`'s run now shows on GitHub as `sent` (and keeps its check run)."""

    def update(state: SeriesState) -> bool:
        stored = state.ci.get(sent.runner)
        marked = landed(stored, sent, sent.check_run_id) if stored is not None else None
        if marked is None or marked == stored:
            return False
        state.ci[sent.runner] = marked
        return True

    store.update_series(rt.redis, series_id, update)


def _update_table(rt: Runtime, forge: ForgePort, series_id: str, runner: str) -> ForgeError | None:
    """Edits the PR's body to show the CI table as carry has it now. A refused edit is recorded
    as owed (and its error returned: the report task comes back for it); one that lands clears
    that, unless the table changed meanwhile (bot.core.ci_report.owes_table)."""
    state = store.load_series(rt.redis, series_id)
    if state is None or state.pr is None:
        return None
    number, body = state.pr.number, pr_body(state, state.version)
    failed: ForgeError | None = None
    try:
        forge.update_pull(number, pr_title(state), body, series=state.id)
    except ForgeError as err:
        failed = err
        store.append_history(
            rt.redis, series_id, HistoryKind.CI_TABLE_FAILED, runner=runner, error=str(err)
        )

    def owed(fresh: SeriesState) -> bool:
        if fresh.pr is None or fresh.pr.number != number:
            return False
        now_owed = owes_table(pr_body(fresh, fresh.version), body if failed is None else None)
        if fresh.pr.ci_table_owed == now_owed:
            return False
        fresh.pr.ci_table_owed = now_owed
        return True

    store.update_series(rt.redis, series_id, owed)
    return failed


def _check_run(forge: ForgePort, sha: str, series_id: str, row: CiState) -> int:
    status, conclusion = check_run_status(row.state, row.detail)
    name, title, summary = f"carry/{row.runner}", f"{row.runner}: {row.state}", row.detail
    known = row.check_run_id
    if not known and row.run_id:
        known = forge.find_check_run(sha, name, row.run_id) or 0
    if check_run_call(replace(row, check_run_id=known)) is CheckRunCall.UPDATE:
        forge.update_check_run(
            known, status, conclusion, title, summary or row.state, series=series_id
        )
        return known
    return forge.create_check_run(
        sha,
        name,
        status,
        conclusion,
        title,
        summary or row.state,
        series=series_id,
        external_id=row.run_id,
    )


def _commit_status(forge: ForgePort, sha: str, row: CiState) -> None:
    _say_statuses_once()
    forge.create_status(
        sha,
        f"carry/{row.runner}",
        commit_status_state(row.state, row.detail),
        f"{row.state}: {row.detail}" if row.detail else row.state,
        row.url if row.url.startswith(("https://", "http://")) else "",
    )


# A check run's conclusion as a commit status state (statuses know only these four).
_STATUS_OF_CONCLUSION = {
    "success": "success",
    "neutral": "success",
    "skipped": "success",
    "failure": "failure",
    "timed_out": "failure",
    "action_required": "pending",  # waits for /carry approve
}


def commit_status_state(state: str, detail: str = "") -> str:
    status, conclusion = check_run_status(state, detail)
    if status != "completed" or conclusion is None:
        return "pending"
    return _STATUS_OF_CONCLUSION.get(conclusion, "error")


@cache
def _say_statuses_once() -> None:
    log.info(
        "GitHub token mode: hardware CI is reported as commit statuses; "
        "check runs need a GitHub App (GITHUB_APP_ID)"
    )
