"""The planner's snapshot of facts, read from the config and the store."""

from __future__ import annotations

import dataclasses
import logging

import redis

from bot.config import BaseSpec, CarryConfig, Series, parse_pr_ref
from bot.core import events as ev
from bot.core.planner import Facts, Scope, SeriesFacts, scope
from bot.core.state import SeriesState
from bot.git.mirror import Mirror, MirrorError
from bot.series_loader import SeriesInvalid, load_series
from bot.store import dashboard_issue
from bot.store.series import load_many, wanted_many
from workers.runtime import Runtime

log = logging.getLogger("carry.facts")


def base_of(series: Series, state: SeriesState | None) -> BaseSpec:
    """The base the series sits on: the config's, unless `/carry retarget` (or a merged base
    PR) moved it; the stored override was validated when it was made."""
    if state is not None and state.base_override:
        return BaseSpec.model_validate(state.base_override)
    return series.base


def series_facts(
    series: Series, config: CarryConfig, state: SeriesState | None, awaiting: bool
) -> SeriesFacts:
    upstream = config.upstreams[series.upstream]
    linked = frozenset(parse_pr_ref(ref) for refs in series.links.values() for ref in refs)
    base = base_of(series, state)
    current_tag = None
    if base.tag_pattern and state and state.head_ref:
        current_tag = state.head_ref.removeprefix("refs/tags/")
    return SeriesFacts(
        id=series.id,
        upstream_repo=upstream.repo,
        watched_ref=base.ref,
        tag_pattern=base.tag_pattern,
        pull=base.pull,
        current_tag=current_tag,
        paused_by_policy=series.policy.paused,
        paused_by=state.paused_by if state else None,
        trusted_authors=frozenset(series.trusted_authors),
        linked_prs=linked,
        pr_number=state.pr.number if state and state.pr else None,
        closed_pr=_closed_pr(state),
        head_sha=state.head_sha if state else None,
        head_ref=state.head_ref if state else None,
        head_actor=state.head_actor if state else None,
        patch_names=tuple(patch.name for patch in state.patches) if state else (),
        awaiting_import=awaiting,
        runners=tuple(series.runners),
        ci_every_head=series.ci.on == "every-head",
    )


def _closed_pr(state: SeriesState | None) -> int | None:
    closed = state.closed_pr if state else None
    return closed.number if closed is not None and closed.reopened_by is None else None


def awaiting_import(rt: Runtime, series: Series) -> bool:
    try:
        return load_series(
            rt.patches_root / series.patches, root=rt.downstream_dir
        ).is_awaiting_import
    except SeriesInvalid:
        return False  # an invalid series is reported by the rebase, not hidden here


def gather(rt: Runtime, client: redis.Redis | None = None, event: ev.Event | None = None) -> Facts:
    """The facts for planning `event` (any event when None): the state of each series the
    planner reads for it (bot.core.planner.scope), and for a head move, whether its head is
    behind each series' own (from git and the state)."""
    client = client or rt.redis
    board = dashboard_issue.load(client, rt.config.downstream.repo)
    read = scope(event) if event is not None else Scope()
    upstreams = rt.config.upstreams
    chosen = [s for s in rt.config.series if read.includes(s.id, upstreams[s.upstream].repo)]
    ids = [s.id for s in chosen]
    series = []
    for s, state, wanted_head in zip(
        chosen, load_many(client, ids), wanted_many(client, ids), strict=True
    ):
        facts = series_facts(s, rt.config, state, awaiting_import(rt, s))
        newest = wanted_head or facts.head_sha
        facts = dataclasses.replace(facts, newest_head=newest)
        if isinstance(event, ev.HeadMoved) and state is not None:
            facts = dataclasses.replace(facts, behind=_behind(rt, s, state, newest, event))
        series.append(facts)
    return Facts(
        downstream_repo=rt.config.downstream.repo,
        bot_login=rt.bot_login,
        dashboard_issue=board.number if board else None,
        series=tuple(series),
        red_streak_mention=rt.config.notify.red_streak_mention,
    )


def _behind(
    rt: Runtime, series: Series, state: SeriesState, newest: str | None, event: ev.HeadMoved
) -> frozenset[str]:
    """{event.after} when it is behind the series' heads: one it moved past, or an ancestor (in
    the upstream's mirror, fetching the event's ref when it lacks a commit) of a head it was
    checked on or asked to check. Not asked when the event moved the ref from the series'
    newest head: the planner follows such a move whatever git says."""
    head = event.after
    upstream = rt.config.upstreams[series.upstream]
    if upstream.repo != event.repo or newest is None or event.before == newest:
        return frozenset()
    if head in state.replaced_heads:
        return frozenset({head})
    known = {h for h in (newest, state.head_sha, state.checked_head) if h}
    try:
        mirror = Mirror(upstream.url, rt.cache_dir, network_timeout_s=rt.settings.git_timeout_s)
        behind = mirror.ancestor_of_any(head, known, ref=event.ref)
    except MirrorError as err:  # the rebase fetches the head and says why it cannot
        log.warning("%s: cannot tell whether %s is behind: %s", series.id, head[:12], err)
        return frozenset()
    return frozenset({head}) if behind else frozenset()
