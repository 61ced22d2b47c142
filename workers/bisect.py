"""The `carry.bisect` task: a series went red after a good head; find the upstream commit.

It walks the pure bisection (bot.core.bisect) one step at a time: it picks a commit of the
first-parent range, has the engine apply the series there in memory (workers.rebase.tree_on;
a commit where it does not apply is skipped), and asks for a hardware run of only the failing
check on that exact tree (a `bisect` run: its own lane, never the series' CI rows). The run's
end comes back through workers/ci/probes.py, which records it and asks for the next step.
With one commit left, the same check runs with the series and on plain upstream (A/B) at that
commit and at its parent; the reading says what the four results mean. The answer is in the
series (the page and the API), its history (`bisected`) and a message to the webhooks.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from celery import Task

from bot.ci.spec import TreeSpec
from bot.core import bisect
from bot.core.ci_plan import split_ci_key
from bot.core.history import HistoryKind
from bot.core.notify import NOTIFY_TASK
from bot.core.policy import series_digest
from bot.core.state import SeriesState
from bot.git.downstream import Downstream
from bot.git.mirror import MirrorError
from bot.git.runner import GitError
from bot.github.forge import ForgeError
from bot.log import correlated
from bot.queue.celery_app import app
from bot.series_loader import SeriesInvalid
from bot.store import series as store
from workers import downstream as downstream_repo
from workers.ci import requests as ci
from workers.ci.github import carried_series
from workers.rebase import engine_for, tree_on
from workers.runtime import Runtime, runtime

log = logging.getLogger("carry.bisect")


@app.task(name=bisect.BISECT_TASK, bind=True, acks_late=True, max_retries=3)
def bisect_task(self: Task, series_id: str, notice: dict[str, Any] | None = None) -> None:
    """`notice`: a went-red notice (start a bisection); without it, take the next step."""
    rt = runtime()
    with correlated(task_id=self.request.id, series=series_id):
        try:
            if notice is not None and not begin(rt, series_id, notice):
                return
            advance(rt, series_id)
        except (GitError, MirrorError, ForgeError, SeriesInvalid) as err:
            store.append_history(rt.redis, series_id, HistoryKind.BISECT_FAILED, error=str(err))
            if self.request.retries < 3:
                raise self.retry(countdown=30) from err
            _end(rt, series_id, f"could not go on: {err}")


def begin(rt: Runtime, series_id: str, notice: dict[str, Any]) -> bool:
    """Starts bisecting the range from the notice's last good head to its red head; False
    when there is nothing to bisect (said in the history)."""
    good, bad = notice.get("last_good"), str(notice["head"])
    failing = [key for key, state in notice.get("checks", {}).items() if state == "failure"]
    checks = [key for key in failing if not split_ci_key(key)[2]]  # not an A/B variant
    if not good or not checks:
        return False
    series = rt.config.series_by_id(series_id)
    upstream = rt.config.upstreams[series.upstream]
    engine, lock = engine_for(
        upstream.url, rt.cache_dir, rt.settings.git_timeout_s, rt.settings.max_blob_bytes
    )
    with lock:
        engine.mirror.ensure()
        commits = engine.mirror.first_parent_range(good, bad)
    if not commits:
        store.append_history(
            rt.redis,
            series_id,
            HistoryKind.BISECT_SKIPPED,
            reason=f"the last good head {good[:12]} is not an ancestor of {bad[:12]}",
        )
        return False
    started = bisect.start(checks[0], good, commits, store.now_iso())

    def put(state: SeriesState) -> bool:
        if state.bisect is not None and state.bisect.active and state.bisect.bad == bad:
            return False  # already bisecting this head (a repeated notice)
        state.bisect = started
        return True

    if not store.update_series(rt.redis, series_id, put):
        return False
    store.append_history(
        rt.redis,
        series_id,
        HistoryKind.BISECT_STARTED,
        reason=(
            f"{checks[0]} failed on {bad[:12]} after passing on {good[:12]}: bisecting "
            f"{len(commits)} commits within {started.budget} runs"
        ),
        check=checks[0],
        good=good,
        bad=bad,
        commits=len(commits),
        budget=started.budget,
    )
    return True


def advance(rt: Runtime, series_id: str) -> None:
    """Takes steps until a run is out or the bisection has ended."""
    state = store.load_series(rt.redis, series_id)
    limit = len(state.bisect.commits) + 3 if state and state.bisect else 0
    for _ in range(limit):
        picked = _take_step(rt, series_id)
        if picked is None:
            return  # waiting for a run, or nothing to bisect
        sha, b = picked
        if sha is None:
            if not b.active:
                _answer(rt, series_id, b)
                return
            continue  # found: the A/B step is next
        tree = tree_on(rt, series_id, sha)
        if tree is None:
            _untestable(rt, series_id, sha)
            continue
        _request(rt, series_id, b, sha, tree)
        return


def _take_step(rt: Runtime, series_id: str) -> tuple[str | None, bisect.Bisection] | None:
    """The next commit to test (None: the bisection ended, or its A/B step is next), committed
    as the one out; None while a run is out or there is no bisection."""
    picked: list[tuple[str | None, bisect.Bisection]] = []

    def pick(state: SeriesState) -> bool:
        picked.clear()
        b = state.bisect
        if b is not None and not b.active:
            picked.append((None, b))  # ended: its answer is said once (_answer)
        if b is None or not b.active or b.probing is not None:
            return False
        sha = bisect.next_ab(b) if b.status is bisect.Status.AB else None
        if sha is None and b.status is bisect.Status.RUNNING:
            sha = bisect.next_probe(b, store.now_iso())
        picked.append((sha, b))
        return True

    store.update_series(rt.redis, series_id, pick)
    return picked[0] if picked else None


def _untestable(rt: Runtime, series_id: str, sha: str) -> None:
    def record(state: SeriesState) -> bool:
        b = state.bisect
        if b is None or b.status is not bisect.Status.RUNNING:
            return False
        return bisect.record(b, sha, bisect.Probe.UNTESTABLE)

    if store.update_series(rt.redis, series_id, record):
        store.append_history(
            rt.redis, series_id, HistoryKind.BISECT_PROBE, commit=sha, result="untestable",
            reason=f"the series does not apply on {sha[:12]}: it cannot be tested there",
        )  # fmt: skip


def _request(rt: Runtime, series_id: str, b: bisect.Bisection, sha: str, tree: str) -> None:
    """A run of the failing check alone on the series' exact tree at `sha` (and on plain
    upstream too in the A/B step), trusted as the red head is."""
    state = store.load_series(rt.redis, series_id)
    assert state is not None
    series = rt.config.series_by_id(series_id)
    upstream = rt.config.upstreams[series.upstream]
    kind, check, _ = split_ci_key(b.check)
    ab = b.status is bisect.Status.AB
    target = next(t for t in ci.targets_from_config(rt.config, series_id) if t.kind == kind)
    steps = tuple(replace(c, ab=ab) for c in target.checks if c.name == check)
    target = replace(target, checks=steps)
    url = downstream_repo.url(rt.settings, rt.config)
    downstream = Downstream(
        url, rt.cache_dir, rt.forge().token, network_timeout_s=rt.settings.git_timeout_s
    )
    main = rt.config.downstream.branch
    heads = downstream.fetch(main)
    directory = f"{rt.config.downstream.patches_dir}/{series.patches}"
    carried = carried_series(downstream.read_dir(heads[main], directory)) or []
    spec = TreeSpec(
        upstream_url=upstream.url,
        upstream_sha=sha,
        downstream_url=url,
        downstream_ref=f"refs/heads/{main}",
        downstream_sha=heads[main],
        patches_dir=directory,
        series_digest=series_digest(carried),
        expected_tree=tree,
        upstream_ref=state.head_ref,
    ).with_series(carried)
    # the probes are ancestors of the red head: they may run where it may (bot.core.trust)
    trusted = ci.trust_of(state, b.bad).may_run
    store.append_history(
        rt.redis,
        series_id,
        HistoryKind.BISECT_PROBE,
        commit=sha,
        result="asked",
        reason=(
            f"{b.check} {'with the series and on plain upstream' if ab else 'with the series'} "
            f"on {bisect.named(b, sha)}"
        ),
    )
    ci.request_ci(
        rt.redis,
        app,
        series_id,
        [target],
        spec,
        issuer=rt.job_issuer,
        purpose="bisect",
        trusted=trusted,
        debounce_s=0,
    )


def _end(rt: Runtime, series_id: str, why: str) -> None:
    def stop(state: SeriesState) -> bool:
        if state.bisect is None or not state.bisect.active:
            return False
        bisect.stop(state.bisect, why, store.now_iso())
        return True

    state = store.update_series(rt.redis, series_id, stop)
    if state is not None and state.bisect is not None:
        _answer(rt, series_id, state.bisect)


def _answer(rt: Runtime, series_id: str, b: bisect.Bisection) -> None:
    """The bisection ended: in the history and to the webhooks, once."""
    if not store.claim(rt.redis, f"bisected:{series_id}:{b.bad}:{b.started_at}"):
        return
    culprit = b.culprit if b.status is bisect.Status.FOUND else None
    subject = b.subjects.get(culprit or "", "")
    summary = f"{series_id}: {b.check} bisected between {b.good[:12]} and {b.bad[:12]}: {b.reading}"
    store.append_history(
        rt.redis,
        series_id,
        HistoryKind.BISECTED,
        reason=summary,
        status=b.status.value,
        culprit=culprit,
        pr=bisect.pr_of(subject),
        suspects=b.suspects,
        runs=b.runs,
        budget=b.budget,
        ab=b.ab,
    )
    notice = {
        "key": f"{series_id}:bisected:{b.bad}:{b.started_at}",
        "change": "bisected",
        "series": series_id,
        "head": b.bad,
        "culprit": culprit,
        "subject": subject,
        "pr": bisect.pr_of(subject),
        "status": b.status.value,
        "last_good": b.good,
        "reading": b.reading,
        "summary": summary,
    }
    try:
        app.send_task(NOTIFY_TASK, args=[notice])
    except Exception:  # the history entry stands
        log.exception("telling the webhooks how %s was bisected failed", series_id)
