"""Push the tested tree to the downstream repository as `carry/tree/<series>`, and the last
known good head's as `carry/good/<series>` (issue 32; the decisions: bot.core.tree_branch).

The engine builds the commits in the upstream's mirror (one per carried patch, message and
author from the patch, committer = author: the same tree on the same head is the same commit)
and checks that they make the tree the runners test; the push sends them from there. A
failure here never stops a run: the tree is tested all the same, and the history says why the
branch did not move.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from celery import Task

from bot.core import tree_branch as tb
from bot.core.history import HistoryKind as H
from bot.core.seriesfile import parse_series
from bot.core.state import SeriesState, TreeBranch
from bot.git.downstream import Downstream, PushRefused
from bot.git.engine import PatchInput
from bot.git.mirror import MirrorError
from bot.git.runner import GitError
from bot.log import correlated
from bot.queue.celery_app import app
from bot.store import series as store
from workers import downstream as downstream_repo
from workers.ci.github import carried_series
from workers.rebase import engine_for
from workers.runtime import Runtime, runtime

log = logging.getLogger("carry.tree")


def downstream_of(rt: Runtime) -> Downstream:
    return Downstream(
        downstream_repo.url(rt.settings, rt.config),
        rt.cache_dir,
        rt.forge().token,
        network_timeout_s=rt.settings.git_timeout_s,
    )


def publish_tree(
    rt: Runtime, state: SeriesState, tree: str, files: Mapping[str, bytes]
) -> TreeBranch | None:
    """`carry/tree/<series>` at upstream head `state.checked_head` plus the series in `files`
    (the series directory as the tested tree carries it), when those make `tree`. Returns the
    branch as it now is (pushed or already there), None when it was not pushed (said in the
    history)."""
    head = str(state.checked_head)
    branch = tb.tree_branch(state.id)
    carried = carried_series(files)
    if carried is None:
        _not_pushed(rt, state.id, head, "the series file is missing or unusable")
        return None
    listing = parse_series(files["series"].decode("utf-8", "replace"))[0]
    try:
        downstream = downstream_of(rt)
        remote = downstream.mirror.remote_refs(f"refs/heads/{branch}").get(f"refs/heads/{branch}")
        commit, built = _build(rt, state.id, head, carried, listing.base)
        decision = tb.tree_step(remote, commit, built, tree)
        if decision.step is tb.TreeStep.MISMATCH:
            _not_pushed(rt, state.id, head, decision.reason)
            return None
        if decision.step is tb.TreeStep.PUSH:
            _push(rt, downstream, state.id, commit, branch, remote)
    except PushRefused as refused:
        _not_pushed(rt, state.id, head, f"GitHub refused the push: {refused.refusal.setting}")
        return None
    except (GitError, MirrorError) as err:
        _not_pushed(rt, state.id, head, str(err))
        return None
    found = TreeBranch(head=head, commit=commit, tree=tree, branch=branch, at=store.now_iso())
    store.update_series(
        rt.redis,
        state.id,
        lambda fresh: tb.record_tree(fresh, found),
        also=lambda pipe: store.queue_history(
            pipe,
            state.id,
            H.TREE_BRANCH,
            branch=branch,
            head=head,
            commit=commit,
            pushed=decision.step is tb.TreeStep.PUSH,
            reason=decision.reason,
        ),
    )
    return found


def _build(
    rt: Runtime, series_id: str, head: str, carried: list[tuple[str, bytes]], base: str | None
) -> tuple[str, str]:
    """(the last patch's commit, its tree): the series applied by the engine on `head`, one
    commit per patch, written in the upstream's mirror."""
    series = rt.config.series_by_id(series_id)
    upstream = rt.config.upstreams[series.upstream]
    engine, lock = engine_for(
        upstream.url, rt.cache_dir, rt.settings.git_timeout_s, rt.settings.max_blob_bytes
    )
    with lock:
        engine.mirror.ensure()
        patches = [PatchInput(name, data) for name, data in carried]
        report = engine.check(head, patches, base=base, commit_result=True)
        commit = report.result_commit or head
        return commit, engine.tree_of(commit)


def _push(
    rt: Runtime,
    downstream: Downstream,
    series_id: str,
    commit: str,
    branch: str,
    remote: str | None,
) -> None:
    series = rt.config.series_by_id(series_id)
    upstream = rt.config.upstreams[series.upstream]
    engine, lock = engine_for(
        upstream.url, rt.cache_dir, rt.settings.git_timeout_s, rt.settings.max_blob_bytes
    )
    with lock:
        downstream.push_from(engine.git, commit, branch, remote)


def _not_pushed(rt: Runtime, series_id: str, head: str, why: str) -> None:
    log.warning("%s: %s not pushed for %s: %s", series_id, tb.tree_branch(series_id), head, why)
    store.append_history(
        rt.redis,
        series_id,
        H.TREE_BRANCH_SKIPPED,
        branch=tb.tree_branch(series_id),
        head=head,
        reason=why,
    )


# --------------------------------------------------------------------------- carry/good/<series>


@app.task(name=tb.GOOD_REF_TASK, bind=True, acks_late=True, max_retries=3)
def good_ref_task(self: Task, series_id: str) -> None:
    """Sent when the last known good head moved (workers/ci/rows.py): `carry/good/<series>`
    follows it."""
    rt = runtime()
    with correlated(task_id=self.request.id, series=series_id):
        try:
            push_good_ref(rt, series_id)
        except (GitError, MirrorError) as err:
            if self.request.retries < 3:
                raise self.retry(countdown=30) from err
            store.append_history(rt.redis, series_id, H.GOOD_REF_FAILED, error=str(err))


def push_good_ref(rt: Runtime, series_id: str) -> str | None:
    """Points `carry/good/<series>` at the last good head's tree commit; returns that commit,
    None when there is nothing to point (no good head, or no tree commit carry built for it).
    Idempotent: a ref already there is not pushed again."""
    state = store.load_series(rt.redis, series_id)
    if state is None or not tb.good_ref_due(state):
        return None
    assert state.last_good is not None
    head, commit = state.last_good.head, tb.good_commit(state)
    assert commit is not None
    ref = tb.good_branch(series_id)
    downstream = downstream_of(rt)
    remote = downstream.mirror.remote_refs(f"refs/heads/{ref}").get(f"refs/heads/{ref}")
    pushed = remote != commit
    if pushed:
        try:
            _push(rt, downstream, series_id, commit, ref, remote)
        except PushRefused as refused:
            store.append_history(
                rt.redis, series_id, H.GOOD_REF_REFUSED, ref=ref, reason=refused.refusal.setting
            )
            return None
    store.update_series(
        rt.redis,
        series_id,
        lambda fresh: tb.record_good_ref(fresh, head, commit),
        also=lambda pipe: store.queue_history(
            pipe, series_id, H.GOOD_REF, ref=ref, head=head, commit=commit, pushed=pushed
        ),
    )
    return commit
