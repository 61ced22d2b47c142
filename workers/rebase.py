"""Re-check one series on one upstream head, store every decision with its evidence.

Called by the `carry.rebase` task while it holds the series lock. Returns the RebaseFinished
event that re-enters the planner, or None when there was nothing to do (and says why in the
history).
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

from bot.config import BaseSpec, Series
from bot.core import events as ev
from bot.core import transitions as tr
from bot.core.attention import HumanNotice, note_check
from bot.core.classify import Status
from bot.core.dropwhen import declared_prs
from bot.core.history import HistoryKind
from bot.core.policy import over_budget, series_digest
from bot.core.report import PatchReport, SeriesReport
from bot.core.state import Phase, SeriesState
from bot.git.engine import Engine, LinkedPr, PatchInput
from bot.git.mirror import Mirror
from bot.git.runner import DEFAULT_MAX_BLOB_BYTES
from bot.github.forge import ForgeError
from bot.series_loader import LoadedSeries, SeriesInvalid, load_series
from bot.store import series as store
from bot.store.metrics import observe_rebase
from workers import attention
from workers import downstream as downstream_repo
from workers.facts import base_of
from workers.runtime import Runtime

log = logging.getLogger("carry.rebase")


def describe_base(base: BaseSpec) -> str:
    return (
        f"{base.kind.replace('_', ' ')} {base.branch or base.tag or base.tag_pattern or base.pull}"
    )


def initial_state(rt: Runtime, series: Series) -> SeriesState:
    upstream = rt.config.upstreams[series.upstream]
    named = (upstream.repo, upstream.web_host, describe_base(series.base))
    state = store.ensure_series(
        rt.redis,
        series.id,
        upstream_repo=named[0],
        upstream_web_host=named[1],
        base=named[2],
    )
    named = (*named[:2], describe_base(base_of(series, state)))  # a retargeted series stays so
    if tr.name_upstream(state, *named):  # the config changed since the state was stored
        store.update_series(rt.redis, series.id, lambda fresh: tr.name_upstream(fresh, *named))
    return state


def register_series(rt: Runtime) -> None:
    """Every configured series has a state from the start, so the dashboard lists it (with
    "no head seen yet" or "waiting for import") before its first event."""
    for series in rt.config.series:
        state = initial_state(rt, series)
        try:
            loaded = load_series(rt.patches_root / series.patches, root=rt.downstream_dir)
        except SeriesInvalid:
            continue  # reported by the first rebase, with every problem
        if loaded.is_awaiting_import and state.phase != Phase.AWAITING_IMPORT:
            names, reason = _page_patches(loaded), f"waiting for import: {loaded.awaiting_import}"

            def wait(fresh: SeriesState, names: list[str] = names, reason: str = reason) -> bool:
                if fresh.phase == Phase.AWAITING_IMPORT:
                    return False
                tr.awaiting_import(fresh, names, reason)
                return True

            store.update_series(rt.redis, series.id, wait)


def rebase_series(
    rt: Runtime,
    series_id: str,
    head_sha: str,
    head_ref: str,
    *,
    actor: str | None = None,
    force: bool = False,
    trigger: str = "",
    lease: store.Lease | None = None,
) -> ev.RebaseFinished | None:
    """Checks the series on `head_sha` and commits the result with `lease` (the task's hold
    on the series): a job that lost its lock stores nothing (store.LeaseLost)."""
    client = rt.redis
    if series_id not in {s.id for s in rt.config.series}:
        store.append_history(
            client, series_id, HistoryKind.SKIPPED, reason=f"series {series_id} is not configured"
        )
        return None
    series = rt.config.series_by_id(series_id)
    state = initial_state(rt, series)
    newest = store.wanted(client, series_id)
    # Forced or not: a check of an older head would move the series back (its result and
    # proposal replaced by an older one); the newest head's own rebase covers it.
    if newest not in (None, head_sha):
        store.append_history(
            client, series_id, HistoryKind.SUPERSEDED, head=head_sha, newest=newest
        )
        return None
    rt.refresh_downstream()
    loaded = _load(rt, series, state)
    if loaded is None:
        return None
    sizes = [(p.name, p.stat().st_size) for p in loaded.patch_paths]
    too_big = over_budget(sizes, rt.settings.max_patch_bytes, rt.settings.max_series_patches)
    if too_big:
        _refuse(rt, series, state, too_big)
        return None
    patches = [PatchInput(p.name, p.read_bytes()) for p in loaded.patch_paths]
    digest = series_digest((p.name, p.data) for p in patches)
    if not force and (state.checked_head, state.checked_digest) == (head_sha, digest):
        store.update_series(client, series_id, tr.unqueue)
        store.append_history(
            client,
            series_id,
            HistoryKind.UNCHANGED,
            head=head_sha,
            digest=digest,
            reason="this head and series content were checked already",
        )
        return None
    _mark_running(rt, series_id, head_sha, head_ref, actor, lease)
    started = time.perf_counter()
    report = _check(rt, series, state, loaded, patches, head_sha, head_ref)
    state, changed = _store_report(rt, series, report, digest, lease)
    observe_rebase(rt.redis, time.perf_counter() - started)
    log.info(
        "rebased %s on %s in %.0f ms",
        series_id,
        head_sha[:12],
        (time.perf_counter() - started) * 1000,
    )
    return ev.RebaseFinished(
        series_id=series_id,
        head_sha=head_sha,
        digest=digest,
        outcome=state.outcome,
        changed=changed,
        result_tree=report.result_tree,
        trigger=trigger if force else "",
    )


def _load(rt: Runtime, series: Series, state: SeriesState) -> LoadedSeries | None:
    """The series as the downstream repository has it now (never a cached copy), or None when
    it cannot be used, with the reason stored where the user sees it."""
    try:
        loaded = load_series(rt.patches_root / series.patches, root=rt.downstream_dir)
    except SeriesInvalid as err:
        _refuse(rt, series, state, [str(p) for p in err.problems])
        return None
    if loaded.is_awaiting_import:
        names, reason = _page_patches(loaded), f"waiting for import: {loaded.awaiting_import}"
        store.update_series(
            rt.redis,
            series.id,
            lambda fresh: tr.awaiting_import(fresh, names, None),
            also=lambda pipe: store.queue_history(
                pipe, series.id, HistoryKind.AWAITING_IMPORT, reason=reason
            ),
        )
        return None
    return loaded


def _refuse(rt: Runtime, series: Series, state: SeriesState, problems: list[str]) -> None:
    """The series cannot be checked as it is: its problems are its error, its history's and
    its PR's; nothing is checked, changed or dropped until the downstream repository is fixed."""
    store.update_series(
        rt.redis,
        series.id,
        lambda fresh: tr.series_invalid(fresh, problems),
        also=lambda pipe: store.queue_history(
            pipe, series.id, HistoryKind.SERIES_INVALID, problems=problems
        ),
    )
    _report_invalid(rt, state, problems)


INVALID_MARKER = "<!-- carry:series-invalid -->"


def _report_invalid(rt: Runtime, state: SeriesState, problems: list[str]) -> None:
    """A series carry cannot read is said out loud on its PR too: nothing is dropped or skipped
    silently, and nothing is proposed until a maintainer fixes it."""
    if state.pr is None or rt.settings.github_auth == "none":
        return
    lines = "\n".join(f"- `{p}`" for p in problems)
    body = (
        f"{INVALID_MARKER}\ncarry cannot use the series as it is on the default branch; "
        f"nothing was changed or dropped:\n\n{lines}\n"
    )
    try:
        rt.forge().upsert_comment(state.pr.number, INVALID_MARKER, body)
    except ForgeError as err:
        store.append_history(rt.redis, state.id, HistoryKind.REPORT_FAILED, error=str(err))


def _page_patches(loaded: LoadedSeries) -> list[str]:
    return [name for page in loaded.pages for name in page.patch_names]


def _mark_running(
    rt: Runtime, series_id: str, head: str, ref: str, actor: str | None, lease: store.Lease | None
) -> None:
    store.update_series(
        rt.redis,
        series_id,
        lambda fresh: tr.start_check(fresh, head, ref, actor, rt.clock()),
        lease=lease,
    )


def tree_on(rt: Runtime, series_id: str, sha: str) -> str | None:
    """The tree of the series as the downstream branch carries it, applied by the engine in
    memory on upstream commit `sha` (a bisection's probe); None where a patch does not apply.
    Nothing is stored."""
    series = rt.config.series_by_id(series_id)
    state = initial_state(rt, series)
    rt.refresh_downstream()
    loaded = load_series(rt.patches_root / series.patches, root=rt.downstream_dir)
    if loaded.is_awaiting_import:
        return None
    patches = [PatchInput(p.name, p.read_bytes()) for p in loaded.patch_paths]
    report = _check(rt, series, state, loaded, patches, sha, "")
    if any(p.status in (Status.CONFLICT, Status.INVALID) for p in report.patches):
        return None
    return report.result_tree


def _check(
    rt: Runtime,
    series: Series,
    state: SeriesState,
    loaded: LoadedSeries,
    patches: list[PatchInput],
    head_sha: str,
    head_ref: str,
) -> SeriesReport:
    upstream = rt.config.upstreams[series.upstream]
    engine, engine_lock = engine_for(
        upstream.url, rt.cache_dir, rt.settings.git_timeout_s, rt.settings.max_blob_bytes
    )
    mirror = engine.mirror
    mirror.ensure()
    mirror.widened = False  # each rebase may fetch every branch once for missing pre-images
    if not mirror.has_commit(head_sha):
        if head_ref:
            mirror.resolve(head_ref)
        if not mirror.has_commit(head_sha):
            mirror.resolve(head_sha)
    links = {
        name: [LinkedPr(pr["ref"], pr["state"], pr.get("merge_commit")) for pr in p.upstream_prs]
        for name, p in ((p.name, p) for p in state.patches)
        if p.upstream_prs
    }
    # The reproduce commands take the patches from a clone of the downstream repository, by
    # their paths in it: the worker's own paths mean nothing on a maintainer's laptop.
    root = rt.downstream_dir.resolve()
    paths = {p.name: p.resolve().relative_to(root).as_posix() for p in loaded.patch_paths}
    local = rt.settings.downstream_dir is not None  # a checkout of its own: clone it as is
    url = str(root) if local else downstream_repo.url(rt.settings, rt.config)
    source = (url, rt.config.downstream.branch)
    declared = declared_prs(
        loaded.pages,
        series.drop_when_prs(),
        upstream.repo,
        automatic=series.policy.drop_when_merged,
    )
    with engine_lock:
        return engine.check(
            head_sha,
            patches,
            base=loaded.base,
            links=links,
            patch_paths=paths,
            downstream=source,
            declared=declared,
        )


_ENGINES: dict[tuple[str, str, int], tuple[Engine, threading.Lock]] = {}
_ENGINES_LOCK = threading.Lock()


def engine_for(
    url: str,
    cache_dir: Path,
    network_timeout_s: float,
    max_blob_bytes: int = DEFAULT_MAX_BLOB_BYTES,
) -> tuple[Engine, threading.Lock]:
    """One engine per upstream mirror in a worker process: it keeps its `git cat-file` process
    and its content-keyed caches (trees, commits read, patch ids) from one rebase to the next."""
    key = (url, str(cache_dir), max_blob_bytes)
    with _ENGINES_LOCK:
        if key not in _ENGINES:
            mirror = Mirror(
                url,
                cache_dir,
                network_timeout_s=network_timeout_s,
                max_blob_bytes=max_blob_bytes,
            )
            _ENGINES[key] = (Engine(mirror), threading.Lock())
        return _ENGINES[key]


def _store_report(
    rt: Runtime, series: Series, report: SeriesReport, digest: str, lease: store.Lease | None
) -> tuple[SeriesState, bool]:
    """Merges the result into the state as it is now (a pause, pin or CI row written while the
    engine ran stays) and commits it with its history entries and the refreshed patches, in
    one transaction. Returns the merged state and whether it proposes a change."""
    result = tr.CheckResult(
        head=report.head,
        digest=digest,
        checked_at=rt.clock(),
        patches=tuple(finding(r) for r in report.patches),
        auto_drop=series.policy.auto_drop,
    )
    refreshed = {
        r.patch.rsplit("/", 1)[-1]: r.refreshed
        for r in report.patches
        if r.changed and r.refreshed is not None
    }
    merged: list[SeriesState] = []
    notices: list[HumanNotice] = []
    limits = attention.limits(rt)

    def merge(fresh: SeriesState) -> bool:
        merged[:] = [fresh]
        before = list(fresh.patches)
        tr.apply_check(fresh, result)
        notices[:] = note_check(before, fresh, result.checked_at, limits)
        return True

    def entries(pipe: Any) -> None:
        (state,) = merged
        store.queue_refreshed(pipe, series.id, report.head, digest, refreshed)
        store.queue_history(
            pipe,
            series.id,
            HistoryKind.REBASED,
            head=report.head,
            digest=digest,
            outcome=state.outcome,
            summary=report.summary(),
        )
        for p in state.patches:
            store.queue_history(
                pipe,
                series.id,
                HistoryKind.DECISION,
                patch=p.name,
                head=report.head,
                status=p.status,
                decision=p.decision,
                reason=p.reason,
                evidence=p.evidence,
            )
        attention.queue_notices(pipe, series.id, notices)

    store.update_series(rt.redis, series.id, merge, create={}, also=entries, lease=lease)
    (state,) = merged
    attention.send_notices(rt, series.id, notices)  # to the webhooks, once per change
    return state, tr.proposes_change(state.patches)


def finding(result: PatchReport) -> tr.CheckedPatch:
    """What the engine found about one patch, as the series state records it."""
    return tr.checked_patch(result)
