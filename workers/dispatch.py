"""Carry out the planner's actions: state updates here, slow work as Celery tasks.

Each action is recorded in the series history with its reason. An action whose key was
already carried out is skipped (and that is recorded too), so redelivered events and retried
tasks do not repeat work.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from bot.core.planner import Action
from bot.core.state import PatchState
from bot.store import series as store
from workers.runtime import Runtime

log = logging.getLogger("carry.dispatch")

Sender = Callable[[str, dict[str, Any]], None]  # (task name, kwargs) -> enqueue


def carry_out(rt: Runtime, action: Action, send: Sender) -> None:
    client = rt.redis
    if action.kind != "note" and store.is_claimed(client, action.key):
        store.append_history(
            client,
            action.series_id,
            "skipped",
            action=action.kind,
            key=action.key,
            reason="already done",
        )
        return
    handler = _HANDLERS.get(action.kind)
    if handler is None:
        raise ValueError(f"no adapter for action kind {action.kind!r}")
    handler(rt, action, send)
    if action.kind != "note":
        store.claim(client, action.key)
    store.append_history(
        client,
        action.series_id,
        action.kind,
        reason=action.reason,
        key=action.key,
        **_public(action.args),
    )


def _public(args: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in args.items() if k not in ("body",)}


def _note(rt: Runtime, action: Action, send: Sender) -> None:
    pass  # the history entry written by carry_out is the whole effect


def _rebase(rt: Runtime, action: Action, send: Sender) -> None:
    assert action.series_id
    store.set_wanted(rt.redis, action.series_id, action.args["head_sha"])
    state = store.load_series(rt.redis, action.series_id)
    if state is not None and state.phase in ("idle", "error"):
        state.phase = "queued"
        store.save_series(rt.redis, state)
    send("carry.rebase", {"series_id": action.series_id, **action.args})


def _record_head(rt: Runtime, action: Action, send: Sender) -> None:
    assert action.series_id
    state = store.ensure_series(rt.redis, action.series_id)
    if state.head_sha != action.args["head_sha"]:
        state.head_seen_at = store.now_iso()
    state.head_sha = action.args["head_sha"]
    state.head_ref = action.args["head_ref"]
    state.head_actor = action.args.get("actor")
    state.last_event = action.reason
    store.save_series(rt.redis, state)


def _record_base_pr(rt: Runtime, action: Action, send: Sender) -> None:
    assert action.series_id
    state = store.ensure_series(rt.redis, action.series_id)
    state.base_pr_state = action.args["state"]
    state.last_event = action.reason
    store.save_series(rt.redis, state)


def _record_upstream_pr(rt: Runtime, action: Action, send: Sender) -> None:
    assert action.series_id
    state = store.ensure_series(rt.redis, action.series_id)
    entry = {k: action.args[k] for k in ("ref", "state", "merge_commit")}
    series = rt.config.series_by_id(action.series_id)
    for patch_name, refs in series.links.items():
        if entry["ref"] not in refs:
            continue
        patch = state.patch(patch_name)
        if patch is None:
            patch = PatchState(name=patch_name)
            state.patches.append(patch)
        patch.upstream_prs = [p for p in patch.upstream_prs if p["ref"] != entry["ref"]] + [entry]
    state.last_event = action.reason
    store.save_series(rt.redis, state)


def _record_carry_pr(rt: Runtime, action: Action, send: Sender) -> None:
    assert action.series_id
    state = store.ensure_series(rt.redis, action.series_id)
    if state.pr is not None:
        state.pr.state = (
            "merged"
            if action.args["state"] == "merged"
            else ("closed" if action.args["state"] == "closed_unmerged" else "open")
        )
    store.save_series(rt.redis, state)


def _set_paused(rt: Runtime, action: Action, send: Sender) -> None:
    assert action.series_id
    state = store.ensure_series(rt.redis, action.series_id)
    state.paused_by = action.args["by"] if action.args["paused"] else None
    state.phase = "paused" if action.args["paused"] else "idle"
    store.save_series(rt.redis, state)


def _pin(rt: Runtime, action: Action, send: Sender, *, pinned: bool) -> None:
    assert action.series_id
    state = store.ensure_series(rt.redis, action.series_id)
    patch = state.patch(action.args["patch"])
    if patch is None:
        raise ValueError(f"series {action.series_id} has no patch {action.args['patch']!r}")
    if pinned:
        patch.pinned, patch.drop_requested_by = True, None
    else:
        patch.pinned, patch.drop_requested_by = False, action.args["by"]
    store.save_series(rt.redis, state)
    if state.head_sha:  # re-decide with the override on the same head
        store.set_wanted(rt.redis, action.series_id, state.head_sha)
        send(
            "carry.rebase",
            {
                "series_id": action.series_id,
                "head_sha": state.head_sha,
                "head_ref": state.head_ref or "",
                "force": True,
                "trigger": action.key,
            },
        )


def _send_task(task: str) -> Callable[[Runtime, Action, Sender], None]:
    def handler(rt: Runtime, action: Action, send: Sender) -> None:
        send(task, {"series_id": action.series_id, **action.args})

    return handler


_HANDLERS: dict[str, Callable[[Runtime, Action, Sender], None]] = {
    "note": _note,
    "rebase": _rebase,
    "record_head": _record_head,
    "record_base_pr": _record_base_pr,
    "record_upstream_pr": _record_upstream_pr,
    "record_carry_pr": _record_carry_pr,
    "set_paused": _set_paused,
    "pin_patch": lambda rt, a, s: _pin(rt, a, s, pinned=True),
    "request_drop": lambda rt, a, s: _pin(rt, a, s, pinned=False),
    "check_permission": _send_task("carry.check_permission"),
    "reply": _send_task("carry.reply"),
    "publish": _send_task("carry.publish"),
    "approve": _send_task("carry.approve"),
    "retest": _send_task("carry.retest"),
    "record_ci": _note,
}
