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
from bot.core import actions as act
from bot.core import transitions as tr
from bot.core.actions import Action, ActionKind
from bot.core.history import HistoryKind
from bot.core.notify import NOTIFY_TASK
from bot.core.state import Phase, SeriesState
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
    handler = _HANDLERS.get(type(action))
    if handler is None:
        raise ValueError(f"no adapter for action {type(action).__name__} ({action.kind})")
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
    assert isinstance(action, act.Rebase) and action.series_id
    args = action.task_args()
    if action.force:  # a re-check (`/carry rebase`) is of the newest head, never older
        args["head_sha"] = _newest_head(rt, action.series_id, action.head_sha)
        state = store.load_series(rt.redis, action.series_id)
        if not action.recheck and state is not None and state.phase == Phase.QUEUED:
            # A burst of `/carry rebase` is one re-check: this head's is waiting already.
            raise Skipped(f"a check of {args['head_sha'][:12]} is already queued")
    else:
        store.set_wanted(rt.redis, action.series_id, action.head_sha)
    head, replaced = args["head_sha"], action.replaces

    def queue(state: SeriesState) -> bool:
        moved = tr.move_past(state, head, replaced)
        return tr.queue_check(state) or moved

    store.update_series(rt.redis, action.series_id, queue)
    assert action.TASK
    rt.send(action.TASK, args)


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
    assert isinstance(action, act.RecordPusher)
    _change(rt, action, lambda s: tr.record_pusher(s, action.head_sha, action.actor))


def _record_push(rt: Runtime, action: Action) -> None:
    """A push of the watched ref: recorded for the series' trust (bot.core.trust)."""
    assert isinstance(action, act.RecordPush) and action.series_id
    push = Push(
        before=action.before.lower(),
        after=action.after.lower(),
        pusher=action.actor,
        trusted=action.trusted,
        forced=action.forced,
    )
    ci.record_push(rt.redis, action.series_id, push)


def _release_runs(rt: Runtime, action: Action) -> None:
    """The runs that waited for approval and that the recorded pushes now cover start."""
    assert isinstance(action, act.ReleaseRuns) and action.series_id
    push = Push(before="", after=action.after.lower(), pusher=action.actor, trusted=True)
    ci.release_for_push(rt.redis, action.series_id, push, issuer=rt.job_issuer)


def _record_head(rt: Runtime, action: Action) -> None:
    """A head the series follows without checking it now (paused, waiting for import): it is
    the newest head, for a later re-check and for telling older heads from newer ones."""
    assert isinstance(action, act.RecordHead) and action.series_id
    head = action.head_sha
    store.set_wanted(rt.redis, action.series_id, head)

    def record(state: SeriesState) -> bool:
        tr.move_past(state, head, action.replaces)
        return tr.record_head(state, head, action.head_ref, action.actor, action.reason, rt.clock())

    _change(rt, action, record)


def _record_stale_head(rt: Runtime, action: Action) -> None:
    """A head behind the series' own: the history entry (carry_out) and the series' last event
    say so; nothing is checked or published."""
    _change(rt, action, lambda s: tr.stale_head(s, action.reason))


def _record_base_pr(rt: Runtime, action: Action) -> None:
    assert isinstance(action, act.RecordBasePr)
    _change(rt, action, lambda s: tr.record_base_pr(s, action.state, action.reason))


def _retarget(rt: Runtime, action: Action) -> None:
    assert isinstance(action, act.Retarget)
    _change(rt, action, lambda s: tr.retarget(s, action.base, action.words))


def _record_upstream_pr(rt: Runtime, action: Action) -> None:
    assert isinstance(action, act.RecordUpstreamPr) and action.series_id
    entry = {"ref": action.ref, "state": action.state, "merge_commit": action.merge_commit}
    links = rt.config.series_by_id(action.series_id).links
    _change(rt, action, lambda s: tr.record_upstream_pr(s, links, dict(entry), action.reason))


def _record_carry_pr(rt: Runtime, action: Action) -> None:
    assert isinstance(action, act.RecordCarryPr)
    by, person, at = action.by, action.person, action.at
    _change(rt, action, lambda s: tr.record_carry_pr(s, action.state, by, person=person, at=at))


def _reopen(rt: Runtime, action: Action) -> None:
    """`/carry reopen`: the close stops no new PR (the planner's re-check then publishes)."""
    assert isinstance(action, act.Reopen)
    if not _change(rt, action, lambda s: tr.reopen(s, action.by)):
        raise Skipped("no PR of carry's is closed by a person (reopened already?)")


def _set_paused(rt: Runtime, action: Action) -> None:
    assert isinstance(action, act.SetPaused)
    by = action.by if action.paused else None
    _change(rt, action, lambda s: tr.set_paused(s, by))


def _pin(rt: Runtime, action: Action, *, keep: bool) -> None:
    assert isinstance(action, act.PinPatch | act.RequestDrop) and action.series_id
    name, by = action.patch, action.by
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
    assert isinstance(action, act.TestTree) and action.series_id
    hardware.test_tree(rt, action.series_id, **action.args)


def _report_checks(rt: Runtime, action: Action) -> None:
    """Each row to GitHub, as a check run or commit status (workers.ci.github.report)."""
    assert isinstance(action, act.ReportChecks)
    for row in action.rows:
        rt.send(REPORT_TASK, {"series_id": action.series_id, "row": row})


def _notify(rt: Runtime, action: Action) -> None:
    """A change of verdict to the configured webhooks (workers.notify)."""
    assert isinstance(action, act.Notify)
    rt.send(NOTIFY_TASK, {"notice": action.notice})


def _send_task(rt: Runtime, action: Action) -> None:
    """The work is the action's task's (Action.TASK), with the action's own inputs."""
    assert action.TASK is not None, f"{type(action).__name__} names no task"
    rt.send(action.TASK, action.task_args())


# One adapter per action class.
_HANDLERS: dict[type[Action], Callable[[Runtime, Action], None]] = {
    act.Note: _note,
    act.Rebase: _rebase,
    act.RecordHead: _record_head,
    act.RecordStaleHead: _record_stale_head,
    act.RecordPusher: _record_pusher,
    act.RecordPush: _record_push,
    act.RecordBasePr: _record_base_pr,
    act.Retarget: _retarget,
    act.FindSuccessor: _send_task,
    act.RecordUpstreamPr: _record_upstream_pr,
    act.RecordCarryPr: _record_carry_pr,
    act.Reopen: _reopen,
    act.SetPaused: _set_paused,
    act.PinPatch: lambda rt, a: _pin(rt, a, keep=True),
    act.RequestDrop: lambda rt, a: _pin(rt, a, keep=False),
    act.CheckPermission: _send_task,
    act.Reply: _send_task,
    act.Publish: _send_task,
    act.Approve: _send_task,
    act.Retest: _send_task,
    act.RecordCi: _note,
    act.TestTree: _test_tree,
    act.ReportChecks: _report_checks,
    act.Notify: _notify,
    act.Bisect: _send_task,  # a notice starts one; without, its next step
    act.MentionOwners: _send_task,
    act.MoveGoodRef: _send_task,
    act.Poll: _send_task,
    act.ReleaseRuns: _release_runs,
    act.RefreshDashboardIssue: _send_task,
}
