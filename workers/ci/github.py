"""Hardware CI at the PR: ask for runs of the tree a PR proposes (and `/carry retest`), put
their results on GitHub (check runs or commit statuses, and the PR's CI table)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from functools import cache
from typing import Any

from bot.ci import runs as ci_runs
from bot.ci.spec import TreeSpec
from bot.core.ci_plan import check_run_status
from bot.core.render import pr_body, pr_title
from bot.core.seriesfile import parse_series
from bot.core.state import CiState, SeriesState
from bot.github.forge import ForgeError
from bot.github.port import ForgePort
from bot.queue.celery_app import app
from bot.store import series as store
from workers.ci import requests as ci
from workers.runtime import Runtime, runtime

log = logging.getLogger("carry.hardware")


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
        trusted_authors=series.trusted_authors,
        # No actor: state.head_actor is the pusher of state.head_sha, which may be a newer head
        # than the tree's; request_ci takes it only when the two are the same SHA.
    )


def note_rename(rt: Runtime, series_id: str, forge: ForgePort) -> None:
    """GitHub moved carry's repository to a new name and the forge followed it: said in the
    series' history, with what to change, so the config is put right."""
    if forge.renamed_from is not None:
        store.append_history(
            rt.redis,
            series_id,
            "downstream-renamed",
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
            rt.redis, series_id, "retest", result="no proposed tree to test yet", by=by
        )
        return []
    series = rt.config.series_by_id(series_id)
    targets = [t for t in ci.targets_from_config(rt.config, series_id) if runner in (None, t.kind)]
    if not targets:
        store.append_history(
            rt.redis, series_id, "retest", result=f"no runner {runner!r} for this series", by=by
        )
        return []
    return ci.request_ci(
        rt.redis,
        app,
        series_id,
        targets,
        TreeSpec(**saved),
        trusted_authors=series.trusted_authors,
        force=True,
    )


@app.task(name=ci_runs.REPORT_TASK, acks_late=True)
def report(series_id: str, row: dict[str, Any]) -> None:
    """workers.ci.rows sends this task for every change of a CI row, on the service and on
    runners."""
    report_on_github(series_id, CiState.from_dict(row))


def report_on_github(series_id: str, row: CiState) -> None:
    """What the `carry.ci.report` task does for a changed CI row: the row's result on the
    commit its run tested (a check run as an App, a commit status with a token: GitHub lets
    only Apps write check runs), then the PR's CI table, whatever became of the first. Without
    credentials the dashboard is the only report.

    Reports can arrive late and out of order (runner hosts forward theirs as tasks). GitHub shows
    the newest status or check run of a name, so a stale report is not sent: one that a newer
    row of its run replaced, or an old run's end on a commit a newer run now owns. Each report
    sent is checked against the store once more afterwards, in case a newer row was reported
    while it was on its way."""
    rt = runtime()
    state = store.load_series(rt.redis, series_id)
    if rt.settings.github_auth == "none" or state is None or state.pr is None:
        return
    forge = rt.forge()
    sent = _post_result(rt, forge, state, row)
    for _ in range(_RECHECKS):
        state = store.load_series(rt.redis, series_id)
        newer = state.ci.get(row.runner) if state is not None else None
        if sent is None or newer is None or newer == sent or not _owns(newer, sent):
            break
        assert state is not None
        sent = _post_result(rt, forge, state, newer)
    _update_table(rt, forge, series_id, row.runner)
    note_rename(rt, series_id, forge)


_RECHECKS = 2


def _owns(stored: CiState, row: CiState) -> bool:
    """Whether the stored row speaks for the check where `row` would be reported: the same run,
    or a newer run on the same commit (a retest)."""
    return stored.run_id == row.run_id or (
        bool(stored.commit_sha) and (stored.commit_sha == row.commit_sha)
    )


def _post_result(rt: Runtime, forge: ForgePort, state: SeriesState, row: CiState) -> CiState | None:
    """Posts the row unless the store holds a newer word for its check; returns what was sent."""
    stored = state.ci.get(row.runner)
    if stored is not None and stored != row and _owns(stored, row):
        return None  # the stored row was (or will be) reported by its own change
    if not row.commit_sha and (stored is None or stored.run_id != row.run_id):
        return None  # a row from before carry kept the commit: nowhere sure to put it
    assert state.pr is not None
    sha = row.commit_sha or state.pr.head_sha
    try:
        if rt.settings.github_auth == "app":
            _check_run(forge, sha, state.id, row)
        else:
            _commit_status(forge, sha, row)
    except ForgeError as err:
        store.append_history(
            rt.redis, state.id, "ci-report-failed", runner=row.runner, error=str(err)
        )
    return row


def _update_table(rt: Runtime, forge: ForgePort, series_id: str, runner: str) -> None:
    state = store.load_series(rt.redis, series_id)
    if state is None or state.pr is None:
        return
    try:
        forge.update_pull(
            state.pr.number, pr_title(state), pr_body(state, state.version), series=state.id
        )
    except ForgeError as err:
        store.append_history(rt.redis, series_id, "ci-table-failed", runner=runner, error=str(err))


def _check_run(forge: ForgePort, sha: str, series_id: str, row: CiState) -> None:
    status, conclusion = check_run_status(row.state, row.detail)
    forge.create_check_run(
        sha,
        f"carry/{row.runner}",
        status,
        conclusion,
        f"{row.runner}: {row.state}",
        row.detail or row.state,
        series=series_id,
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
