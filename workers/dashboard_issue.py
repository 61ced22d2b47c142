"""Keeps carry's dashboard issue on the downstream repository up to date (bot.core.dashboard_issue
renders it; ticks on it come back as `issues.edited` webhooks, which the planner reads).

One PATCH only when the body changed since carry last wrote it (or when forced: after a
person edited it), one issue per repository: found again by its label and author when the
store forgot it, opened anew when it was deleted.
"""

from __future__ import annotations

import hashlib
import logging
from enum import StrEnum

from bot.config import ConfigError
from bot.core import dashboard_issue as board
from bot.core.history import HistoryKind
from bot.core.state import SeriesState
from bot.github.forge import ForgeError
from bot.github.port import ForgePort
from bot.store import dashboard_issue as record
from bot.store import series as store
from workers.runtime import Runtime

log = logging.getLogger("carry.dashboard_issue")

LOCK_NAME = "~dashboard-issue"  # a series lock name no series id can take (ids start [a-z0-9])


class Refresh(StrEnum):
    OFF = "off"  # not configured, or no credentials
    BUSY = "busy"  # another refresh holds the lock
    UNCHANGED = "unchanged"
    EDITED = "edited"
    OPENED = "opened"


def enabled(rt: Runtime) -> bool:
    return decision(rt).on


def decision(rt: Runtime) -> board.BoardDecision:
    """Whether this process keeps the dashboard issue: decided once (the first call, at the
    worker's start), asking GitHub only when the config leaves it unset, and said in one log
    line. Credentials that cannot write issues turn it off; that is no error."""
    configured = rt.config.downstream.dashboard_issue
    credentials = rt.settings.github_auth != "none"
    key = (rt.config.downstream.repo, rt.settings.github_base_url, configured, str(credentials))
    decided = rt.board_decisions
    if key not in decided:
        writable = None
        if credentials and configured is not False:
            try:
                writable = rt.forge().issues_writable()
            except (ForgeError, ConfigError) as err:  # GitHub did not say: carry tries
                log.info("dashboard issue: cannot ask GitHub about issue writes: %s", err)
        found = board.decide_board(configured, credentials, writable)
        log.info("dashboard issue on %s %s", rt.config.downstream.repo, found.reason)
        decided[key] = found
    return decided[key]


def body(rt: Runtime) -> str:
    """Every configured series, checked or not yet (a series with no state has no head yet)."""
    ids = [s.id for s in rt.config.series]
    stored = store.load_many(rt.redis, ids)
    states = [state or SeriesState(sid) for sid, state in zip(ids, stored, strict=True)]
    return board.render(states, dashboard_url=rt.config.web.public_url)


def refresh(rt: Runtime, forge: ForgePort, *, force: bool = False) -> Refresh:
    if not enabled(rt):
        return Refresh.OFF
    with store.series_lock(rt.redis, LOCK_NAME, ttl_s=300) as held:
        if not held:
            return Refresh.BUSY
        return _write(rt, forge, body(rt), force)


def _write(rt: Runtime, forge: ForgePort, text: str, force: bool) -> Refresh:
    repo = rt.config.downstream.repo
    digest = hashlib.sha256(text.encode()).hexdigest()
    known = record.load(rt.redis, repo)
    if known is not None and known.digest == digest and not force:
        return Refresh.UNCHANGED
    number = known.number if known else forge.find_issue(board.LABEL, rt.bot_login)
    if number is not None and forge.edit_issue(number, text):
        record.save(rt.redis, record.DashboardIssue(repo, number, digest))
        return Refresh.EDITED
    if number is not None:
        log.warning("dashboard issue #%s of %s is gone; opening a new one", number, repo)
    number = forge.create_issue(board.TITLE, text, [board.LABEL])
    record.save(rt.redis, record.DashboardIssue(repo, number, digest))
    store.append_history(
        rt.redis, None, HistoryKind.DASHBOARD_ISSUE_OPENED, repo=repo, number=number
    )
    return Refresh.OPENED
