"""The service side of hardware CI: ask for runs of a proposed tree, report results on GitHub."""

from __future__ import annotations

import logging
from functools import cache

from bot.core.ci_plan import check_run_status
from bot.core.render import pr_body, pr_title
from bot.core.state import CiState, SeriesState
from bot.github.forge import Forge, ForgeError
from bot.store import series as store
from workers import ci
from workers.celery_app import app
from workers.runner.spec import TreeSpec
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
) -> list[CiState]:
    """Runs of the exact tree (upstream head + the series on carry's branch) on each runner."""
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


def report_on_github(series_id: str, row: CiState) -> None:
    """The hook workers.ci calls on every CI row change: the row's result on the PR head (a check
    run as an App, a commit status with a token: GitHub lets only Apps write check runs), then
    the PR's CI table, whatever became of the first. Without credentials the dashboard is the
    only report."""
    rt = runtime()
    state = store.load_series(rt.redis, series_id)
    if rt.settings.github_auth == "none" or state is None or state.pr is None:
        return
    forge = Forge.connect(rt.settings, rt.config.downstream.repo)
    try:
        if rt.settings.github_auth == "app":
            _check_run(forge, state, row)
        else:
            _commit_status(forge, state, row)
    except ForgeError as err:
        store.append_history(
            rt.redis, series_id, "ci-report-failed", runner=row.runner, error=str(err)
        )
    try:
        forge.update_pull(
            state.pr.number, pr_title(state), pr_body(state, state.version), series=state.id
        )
    except ForgeError as err:
        store.append_history(
            rt.redis, series_id, "ci-table-failed", runner=row.runner, error=str(err)
        )


def _check_run(forge: Forge, state: SeriesState, row: CiState) -> None:
    assert state.pr is not None
    status, conclusion = check_run_status(row.state, row.detail)
    forge.create_check_run(
        state.pr.head_sha,
        f"carry/{row.runner}",
        status,
        conclusion,
        f"{row.runner}: {row.state}",
        row.detail or row.state,
        series=state.id,
    )


def _commit_status(forge: Forge, state: SeriesState, row: CiState) -> None:
    assert state.pr is not None
    _say_statuses_once()
    forge.create_status(
        state.pr.head_sha,
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


ci.on_result = report_on_github
