"""Polling, the fallback that always works: one `git ls-remote` per upstream covers every
watched ref. It emits the same HeadMoved events a webhook would."""

from __future__ import annotations

import logging
from collections import defaultdict

from celery.exceptions import SoftTimeLimitExceeded

from bot.config import BaseSpec, Series, parse_pr_ref
from bot.core import transitions as tr
from bot.core.events import ZERO_SHA, HeadMoved, PrStateChanged
from bot.core.history import HistoryKind
from bot.core.state import SeriesState
from bot.git.mirror import Mirror, MirrorError
from bot.github.forge import ForgeError
from bot.store import metrics as store_metrics
from bot.store import pr_polls
from bot.store import series as store
from workers.facts import base_of
from workers.runtime import Runtime

log = logging.getLogger("carry.poller")


def _patterns(bases: list[BaseSpec]) -> list[str]:
    out = []
    for base in bases:
        ref = _wanted_ref(base)
        out.append(ref)
        if ref.startswith("refs/tags/") and base.ref:
            # ls-remote prints an annotated tag's peeled line only for a pattern matching
            # `<ref>^{}`: without it a fixed tag would be polled as its tag object.
            out.append(f"{ref}^{{}}")
    return sorted(set(out))


def _watched(base: BaseSpec, refs: dict[str, str]) -> tuple[str, str] | None:
    if base.ref is not None:
        sha = refs.get(base.ref)
        return (base.ref, sha) if sha else None
    tags = [r.removeprefix("refs/tags/") for r in refs if r.startswith("refs/tags/")]
    newest = base.newest_tag(tags)
    return (f"refs/tags/{newest}", refs[f"refs/tags/{newest}"]) if newest else None


def _poll_failed(rt: Runtime, upstream: str, members: list[Series], error: str) -> None:
    """An upstream that cannot be reached is said everywhere a maintainer looks: the worker's
    log, each series' history and its "needs attention", and carry_events_total."""
    log.warning("poll of upstream %s failed: %s", upstream, error)
    store_metrics.count_event(rt.redis, "poll_failed")
    store.append_history(rt.redis, None, HistoryKind.POLL_FAILED, upstream=upstream, error=error)
    for series in members:
        store.append_history(
            rt.redis, series.id, HistoryKind.POLL_FAILED, upstream=upstream, error=error
        )
        store.ensure_series(rt.redis, series.id)
        _set_upstream_error(rt, series.id, error[:500])


def _set_upstream_error(rt: Runtime, series_id: str, error: str | None) -> None:
    def change(state: SeriesState) -> bool:
        if state.upstream_error == error:
            return False
        state.upstream_error = error
        return True

    store.update_series(rt.redis, series_id, change)


def _wanted_ref(base: BaseSpec) -> str:
    return base.ref or f"refs/tags/{base.tag_pattern}"


def _set_waiting(rt: Runtime, series: Series, ref: str | None) -> None:
    """Says once (state and history), not at every poll, that the watched ref is missing
    upstream (a release tag not cut yet) and, later, that it appeared."""
    was: dict[str, str | None] = {"ref": None}

    def change(state: SeriesState) -> bool:
        was["ref"] = state.waiting_for_ref
        return tr.wait_for_ref(state, ref)

    def history(pipe: object) -> None:
        if ref is not None:
            store.queue_history(pipe, series.id, HistoryKind.WAITING_FOR_REF, ref=ref)
        else:
            store.queue_history(pipe, series.id, HistoryKind.REF_APPEARED, ref=was["ref"])

    store.update_series(rt.redis, series.id, change, create={}, also=history)


def head_events(rt: Runtime) -> list[HeadMoved]:
    by_upstream: dict[str, list[Series]] = defaultdict(list)
    for series in rt.config.series:
        by_upstream[series.upstream].append(series)
    events = []
    for name, members in by_upstream.items():
        upstream = rt.config.upstreams[name]
        states = {s.id: store.load_series(rt.redis, s.id) for s in members}
        bases = {s.id: base_of(s, states[s.id]) for s in members}
        # The head each series knew before the refs were read: a ref found elsewhere moved
        # from it (the planner follows that move even backwards; a head the series learnt of
        # while the refs were read is newer than what they say, and an older one is behind).
        known = {s.id: store.wanted(rt.redis, s.id) or _head(states[s.id]) for s in members}
        try:
            mirror = Mirror(upstream.url, rt.cache_dir, network_timeout_s=rt.settings.git_timeout_s)
            refs = mirror.remote_refs(*_patterns(list(bases.values())))
        except MirrorError as err:
            _poll_failed(rt, name, members, str(err))
            continue
        except SoftTimeLimitExceeded:  # the poll's time limit: this upstream is the slow one
            limit_s = rt.settings.poll_time_limit_s
            why = f"the poll stopped at its time limit ({limit_s} s, CARRY_POLL_TIME_LIMIT_S)"
            _poll_failed(rt, name, members, f"{why} while asking this upstream for its refs")
            raise
        for series in members:
            _set_upstream_error(rt, series.id, None)
            found = _watched(bases[series.id], refs)
            _set_waiting(rt, series, None if found else _wanted_ref(bases[series.id]))
            state = store.load_series(rt.redis, series.id)
            if found is None:
                continue
            ref, sha = found
            if state is not None and state.head_sha == sha:
                continue
            before = known[series.id] or ZERO_SHA
            events.append(
                HeadMoved(
                    repo=upstream.repo,
                    ref=ref,
                    before=before,
                    after=sha,
                    actor=None,
                    source="poll",
                    delivery_id=f"poll:{series.id}:{sha[:12]}",
                )
            )
    return events


def _head(state: SeriesState | None) -> str | None:
    return state.head_sha if state else None


def watched_prs(rt: Runtime) -> list[tuple[str, int]]:
    """Every upstream PR a series depends on: linked PRs of its patches, and PR bases."""
    found: dict[tuple[str, int], None] = {}
    for series in rt.config.series:
        for refs in series.links.values():
            for ref in refs:
                found[parse_pr_ref(ref)] = None
        base = base_of(series, store.load_series(rt.redis, series.id))
        if base.pull is not None:
            found[(rt.config.upstreams[series.upstream].repo, base.pull)] = None
    return list(found)


def pr_events(rt: Runtime) -> list[PrStateChanged]:
    """State changes of watched PRs, via conditional requests (a 304 costs no rate limit)."""
    if rt.settings.github_auth == "none":
        return []
    forge = rt.forge()
    events = []
    for repo, number in watched_prs(rt):
        known = pr_polls.load(rt.redis, repo, number)
        try:
            state, etag = forge.pull_state(repo, number, known.etag or None)
        except ForgeError as err:
            store.append_history(
                rt.redis, None, HistoryKind.POLL_FAILED, pr=f"{repo}#{number}", error=str(err)
            )
            continue
        if state is None:
            continue  # 304: nothing changed
        moved = (known.state, known.head) != (state.state, state.head_sha)
        if moved or (etag or "") != known.etag:
            # Any change to the PR's payload (a comment, the base repository's star count)
            # gives it a new ETag: kept verbatim, or every later poll is a full 200.
            pr_polls.save(
                rt.redis, repo, number, pr_polls.PrSeen(etag or "", state.state, state.head_sha)
            )
        if not moved or known.state == state.state:
            continue  # no move, or only the head moved: the ref poller and webhooks cover those
        events.append(
            PrStateChanged(
                repo=repo,
                number=number,
                state=state.state,
                head_sha=state.head_sha,
                base_ref=state.base_ref,
                merge_commit_sha=state.merge_commit,
                merged_by=state.merged_by,
                source="poll",
                delivery_id=f"poll:{repo}#{number}",
            )
        )
    return events
