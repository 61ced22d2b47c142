"""Carry out the planner's actions: state updates here, slow work as Celery tasks.

Each action is recorded in the series history with its reason. An action whose key was
already carried out is skipped (and that is recorded too), so redelivered events and retried
tasks do not repeat work.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from bot.ci.runs import REPORT_TASK
from bot.core import transitions as tr
from bot.core.bisect import BISECT_TASK
from bot.core.history import HistoryKind
from bot.core.notify import NOTIFY_TASK
from bot.core.owners import RED_STREAK_TASK
from bot.core.planner import Action, ActionKind
from bot.core.state import Phase, SeriesState
from bot.core.tree_branch import GOOD_REF_TASK
from bot.core.trust import Push
from bot.store import series as store
from workers.ci import github as hardware
from workers.ci import requests as ci
from workers.runtime import Runtime

log = logging.getLogger("carry.dispatch")


class Skipped(Exception):
    """An adapter found nothing to do (the message says why): recorded as skipped."""


def carry_out(rt: Runtime, action: Action) -> None:
    client = rt.redis
    if action.kind is not ActionKind.NOTE and store.is_claimed(client, action.key):
        store.append_history(
            client,
            action.series_id,
            HistoryKind.SKIPPED,
            action=action.kind,
            key=action.key,
            reason="already done",
        )
        return
    handler = _HANDLERS.get(action.kind)
    if handler is None:
        raise ValueError(f"no adapter for action kind {action.kind!r}")
    try:
        handler(rt, action)
    except Skipped as why:
        remember(client, action)
        store.append_history(
            client,
            action.series_id,
            HistoryKind.SKIPPED,
            action=action.kind,
            key=action.key,
            reason=str(why),
        )
        return
    if action.kind is not ActionKind.NOTE:
        remember(client, action)
    store.append_history(
        client,
        action.series_id,
        HistoryKind(action.kind),
        reason=action.reason,
        key=action.key,
        **_public(action.args),
    )


def remember(client: Any, action: Action) -> None:
    """Marks the action done, for as long as it says (the store's default otherwise)."""
    if action.remember_s is None:
        store.claim(client, action.key)
    else:
        store.claim(client, action.key, ttl_s=action.remember_s)


# What an entry leaves out: a comment's text, and records its reason already sums up.
_NOT_IN_HISTORY = frozenset({"body", "rows", "notice", "grew"})


def _public(args: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in args.items() if k not in _NOT_IN_HISTORY}


def _note(rt: Runtime, action: Action) -> None:
    pass  # the history entry written by carry_out is the whole effect


def _rebase(rt: Runtime, action: Action) -> None:
    assert action.series_id
    args = dict(action.args)
    recheck = args.pop("recheck", False)  # after a command changed what the series decides
    if args.get("force"):  # a re-check (`/carry rebase`) is of the newest head, never older
        args["head_sha"] = _newest_head(rt, action.series_id, args["head_sha"])
        state = store.load_series(rt.redis, action.series_id)
        if not recheck and state is not None and state.phase == Phase.QUEUED:
            # A burst of `/carry rebase` is one re-check: this head's is waiting already.
            raise Skipped(f"a check of {args['head_sha'][:12]} is already queued")
    else:
        store.set_wanted(rt.redis, action.series_id, args["head_sha"])
    head, replaced = args["head_sha"], args.pop("replaces", ())

    def queue(state: SeriesState) -> bool:
        moved = tr.move_past(state, head, replaced)
        return tr.queue_check(state) or moved

    store.update_series(rt.redis, action.series_id, queue)
    rt.send("carry.rebase", {"series_id": action.series_id, **args})


def _newest_head(rt: Runtime, series_id: str, known: str) -> str:
    """The head a re-check must use: the newest one asked for (its rebase may not have run
    yet), else `known`. Setting `wanted` back to an older head would make the newer head's
    rebase skip itself as superseded."""
    newest = store.wanted(rt.redis, series_id)
    if newest is None:
        store.set_wanted(rt.redis, series_id, known)
    return newest or known


def _change(rt: Runtime, action: Action, change: Callable[[SeriesState], bool]) -> bool:
    """Applies one transition to the series' fresh state, creating the state if it is missing;
    a change that returns False (nothing to do) writes nothing."""
    assert action.series_id
    return store.update_series(rt.redis, action.series_id, change, create={}) is not None


def _record_pusher(rt: Runtime, action: Action) -> None:
    args = action.args
    _change(rt, action, lambda s: tr.record_pusher(s, args["head_sha"], args["actor"]))


def _record_push(rt: Runtime, action: Action) -> None:
    """A push of the watched ref: recorded for the series' trust (bot.core.trust); the runs
    that waited for approval and that it now covers start (a poll saw the head first)."""
    args = action.args
    assert action.series_id
    push = Push(
        before=str(args["before"]).lower(),
        after=str(args["after"]).lower(),
        pusher=str(args["actor"]),
        trusted=bool(args["trusted"]),
        forced=bool(args.get("forced")),
    )
    if ci.record_push(rt.redis, action.series_id, push) and push.trusted:
        ci.release_for_push(rt.redis, action.series_id, push)


def _record_head(rt: Runtime, action: Action) -> None:
    """A head the series follows without checking it now (paused, waiting for import): it is
    the newest head, for a later re-check and for telling older heads from newer ones."""
    args = action.args
    assert action.series_id
    store.set_wanted(rt.redis, action.series_id, args["head_sha"])

    def record(state: SeriesState) -> bool:
        tr.move_past(state, args["head_sha"], args.get("replaces", ()))
        return tr.record_head(
            state, args["head_sha"], args["head_ref"], args.get("actor"), action.reason, rt.clock()
        )

    _change(rt, action, record)


def _record_stale_head(rt: Runtime, action: Action) -> None:
    """A head behind the series' own: the history entry (carry_out) and the series' last event
    say so; nothing is checked or published."""
    _change(rt, action, lambda s: tr.stale_head(s, action.reason))


def _record_base_pr(rt: Runtime, action: Action) -> None:
    _change(rt, action, lambda s: tr.record_base_pr(s, action.args["state"], action.reason))


def _retarget(rt: Runtime, action: Action) -> None:
    base, words = action.args["base"], action.args["words"]
    _change(rt, action, lambda s: tr.retarget(s, base, words))


def _record_upstream_pr(rt: Runtime, action: Action) -> None:
    assert action.series_id
    entry = {k: action.args[k] for k in ("ref", "state", "merge_commit")}
    links = rt.config.series_by_id(action.series_id).links
    _change(rt, action, lambda s: tr.record_upstream_pr(s, links, dict(entry), action.reason))


def _record_carry_pr(rt: Runtime, action: Action) -> None:
    args = action.args
    by, person, at = args.get("by"), bool(args.get("person")), args.get("at")
    _change(rt, action, lambda s: tr.record_carry_pr(s, args["state"], by, person=person, at=at))


def _reopen(rt: Runtime, action: Action) -> None:
    """`/carry reopen`: the close stops no new PR (the planner's re-check then publishes)."""
    if not _change(rt, action, lambda s: tr.reopen(s, action.args["by"])):
        raise Skipped("no PR of carry's is closed by a person (reopened already?)")


def _set_paused(rt: Runtime, action: Action) -> None:
    by = action.args["by"] if action.args["paused"] else None
    _change(rt, action, lambda s: tr.set_paused(s, by))


def _pin(rt: Runtime, action: Action, *, keep: bool) -> None:
    assert action.series_id
    name, by = action.args["patch"], action.args["by"]
    auto_drop = rt.config.series_by_id(action.series_id).policy.auto_drop
    seen: list[SeriesState] = []

    def pin(state: SeriesState) -> bool:
        seen[:] = [state]
        return tr.set_pin(state, name, keep=keep, by=by, auto_drop=auto_drop)

    if not _change(rt, action, pin):
        known = ", ".join(p.name for p in seen[0].patches) if seen else ""
        raise ValueError(
            f"series {action.series_id} has no patch {name!r} (its patches: {known or 'none'})"
        )


def _test_tree(rt: Runtime, action: Action) -> None:
    """Runs of the exact tree on the series' runners (workers.ci.github.test_tree)."""
    assert action.series_id
    hardware.test_tree(rt, action.series_id, **action.args)


def _report_checks(rt: Runtime, action: Action) -> None:
    """Each row to GitHub, as a check run or commit status (workers.ci.github.report)."""
    for row in action.args["rows"]:
        rt.send(REPORT_TASK, {"series_id": action.series_id, "row": row})


def _notify(rt: Runtime, action: Action) -> None:
    """A change of verdict to the configured webhooks (workers.notify)."""
    rt.send(NOTIFY_TASK, {"notice": action.args["notice"]})


def _send_task(task: str) -> Callable[[Runtime, Action], None]:
    def handler(rt: Runtime, action: Action) -> None:
        rt.send(task, {"series_id": action.series_id, **action.args})

    return handler


_HANDLERS: dict[ActionKind, Callable[[Runtime, Action], None]] = {
    ActionKind.NOTE: _note,
    ActionKind.REBASE: _rebase,
    ActionKind.RECORD_HEAD: _record_head,
    ActionKind.RECORD_STALE_HEAD: _record_stale_head,
    ActionKind.RECORD_PUSHER: _record_pusher,
    ActionKind.RECORD_PUSH: _record_push,
    ActionKind.RECORD_BASE_PR: _record_base_pr,
    ActionKind.RETARGET: _retarget,
    ActionKind.FIND_SUCCESSOR: _send_task("carry.find_successor"),
    ActionKind.RECORD_UPSTREAM_PR: _record_upstream_pr,
    ActionKind.RECORD_CARRY_PR: _record_carry_pr,
    ActionKind.REOPEN: _reopen,
    ActionKind.SET_PAUSED: _set_paused,
    ActionKind.PIN_PATCH: lambda rt, a: _pin(rt, a, keep=True),
    ActionKind.REQUEST_DROP: lambda rt, a: _pin(rt, a, keep=False),
    ActionKind.CHECK_PERMISSION: _send_task("carry.check_permission"),
    ActionKind.REPLY: _send_task("carry.reply"),
    ActionKind.PUBLISH: _send_task("carry.publish"),
    ActionKind.APPROVE: _send_task("carry.approve"),
    ActionKind.RETEST: _send_task("carry.retest"),
    ActionKind.RECORD_CI: _note,
    ActionKind.TEST_TREE: _test_tree,
    ActionKind.REPORT_CHECKS: _report_checks,
    ActionKind.NOTIFY: _notify,
    ActionKind.BISECT: _send_task(BISECT_TASK),  # a notice starts one; without, its next step
    ActionKind.MENTION_OWNERS: lambda rt, a: rt.send(RED_STREAK_TASK, dict(a.args)),
    ActionKind.MOVE_GOOD_REF: _send_task(GOOD_REF_TASK),
    ActionKind.POLL: lambda rt, a: rt.send("carry.poll", {}),
    ActionKind.REFRESH_DASHBOARD_ISSUE: lambda rt, a: rt.send(
        "carry.dashboard_issue", dict(a.args)
    ),
}
