"""The service side of hardware CI: ask for runs of a proposed tree, report results on GitHub."""

from __future__ import annotations

import logging

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
        actor=state.head_actor,
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
    """The hook workers.ci calls on every CI row change: a check run on the PR head and the PR's
    CI table. Without GitHub credentials the dashboard is the only report."""
    rt = runtime()
    state = store.load_series(rt.redis, series_id)
    if rt.settings.github_auth == "none" or state is None or state.pr is None:
        return
    try:
        forge = Forge.connect(rt.settings, rt.config.downstream.repo)
        status, conclusion = check_run_status(row.state, row.detail)
        forge.create_check_run(
            state.pr.head_sha,
            f"carry/{row.runner}",
            status,
            conclusion,
            f"{row.runner}: {row.state}",
            row.detail or row.state,
        )
        forge.update_pull(state.pr.number, pr_title(state), pr_body(state, state.version))
    except ForgeError as err:
        store.append_history(
            rt.redis, series_id, "ci-report-failed", runner=row.runner, error=str(err)
        )


ci.on_result = report_on_github
