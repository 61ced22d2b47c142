"""The planner: an event and a snapshot of facts in, actions out. Pure.

Every action says why (`reason`) and carries an idempotency key, so a repeated event or a
retried task never does the same work twice. Adapters (workers.dispatch) carry actions out.
A request for a hardware run of one tree is an event too (`events.RunRequested`), planned over
the facts of its lane (`Facts.lane`, a `LaneFacts`): workers.ci.requests gathers those facts and
calls `plan` under the runner kind's lock, and carries its actions (RunDecision) out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, Final

from bot.core import actions as act
from bot.core import events as ev
from bot.core.actions import Action, ActionKind, RunDecision
from bot.core.ci_pacing import Pace, next_start, wait_words
from bot.core.ci_plan import Budget, short
from bot.core.commands import HELP, Command, may_command, parse_commands, retarget_base
from bot.core.dashboard_issue import ticked
from bot.core.owners import mention_due
from bot.core.state import CiStatus
from bot.core.tree_branch import is_published_tree
from bot.core.verified import Change
from bot.core.versions import version_key


@dataclass(frozen=True)
class SeriesFacts:
    id: str
    upstream_repo: str  # owner/name
    watched_ref: str | None = None  # refs/heads/x, refs/tags/x, refs/pull/N/head
    tag_pattern: str | None = None
    pull: int | None = None
    current_tag: str | None = None  # for tag_pattern bases: the tag the series sits on now
    paused_by_policy: bool = False
    paused_by: str | None = None  # `/carry pause` author
    trusted_authors: frozenset[str] = frozenset()
    linked_prs: frozenset[tuple[str, int]] = frozenset()
    pr_number: int | None = None  # carry's own PR on the downstream repository
    # carry's PR a person closed, while it stops a new PR (`/carry reopen` lifts that)
    closed_pr: int | None = None
    head_sha: str | None = None
    head_ref: str | None = None
    head_actor: str | None = None  # who pushed head_sha (None: unknown, e.g. a polled head)
    # the newest head the series is on or was asked to check (a rebase may not have run yet)
    newest_head: str | None = None
    # heads the adapter found behind the series' newest head, for the event being planned: an
    # ancestor (in git) of a head the series was checked on or asked for, or a head it moved
    # past (its `replaced_heads`)
    behind: frozenset[str] = frozenset()
    patch_names: tuple[str, ...] = ()  # the patches of the last check, in series order
    awaiting_import: bool = False
    runners: tuple[str, ...] = ()
    # test the tree of every head on the runners, not only the trees carry proposes (ci.on)
    ci_every_head: bool = True

    @property
    def paused(self) -> bool:
        return self.paused_by_policy or self.paused_by is not None


@dataclass(frozen=True)
class Facts:
    downstream_repo: str
    bot_login: str = "carry[bot]"
    series: tuple[SeriesFacts, ...] = ()
    dashboard_issue: int | None = None  # carry's dashboard issue on the downstream repository
    red_streak_mention: int | None = 3  # red heads in a row before a fix's owners are mentioned
    # for a RunRequested event, the facts of its series' lane on its runner kind (None for the
    # other events, which read no lane)
    lane: LaneFacts | None = None

    @classmethod
    def of_lane(cls, lane: LaneFacts) -> Facts:
        """The facts of a RunRequested event: its lane's, and nothing else (the run decision
        reads no series' facts and no repository, so none are gathered for it)."""
        return cls(downstream_repo="", lane=lane)


@dataclass(frozen=True)
class ActiveRun:
    """A run of the same series and runner kind that has not finished."""

    run_id: str
    state: CiStatus  # one of ci_plan.ACTIVE_STATES
    tree_key: str
    head_sha: str
    dispatched: bool = True  # handed to the broker (counts against the budget)


@dataclass(frozen=True)
class StoredResult:
    """A finished, reusable result for the same runner kind and tree key."""

    run_id: str
    state: CiStatus  # one of ci_plan.REUSABLE
    head_sha: str = ""


@dataclass(frozen=True)
class LaneFacts:
    """What the planner knows, for a RunRequested event, of one series' lane on one runner kind, read under the kind's lock
    (workers.ci.requests): the stored verdict for the requested tree, the lane's unfinished runs,
    the kind's runs in flight over all series, its budget and the series' pace."""

    result: StoredResult | None = None
    active: tuple[ActiveRun, ...] = ()  # unfinished runs of this series and kind
    in_flight: int = 0  # dispatched, unfinished runs of this kind, all series
    budget: Budget = dataclasses.field(default_factory=Budget)
    # the series' ci.min_interval_s / ci.daily_budget and its last starts
    pace: Pace = dataclasses.field(default_factory=Pace)


@dataclass(frozen=True)
class Scope:
    """The series whose facts the planner reads to plan an event: the one the event names,
    those on the upstream repository it is about, or (neither given) every series. The adapter
    gathers only these (workers.facts.gather), so an event's cost does not grow with the series
    on other upstreams."""

    series_id: str | None = None
    upstream_repo: str | None = None

    def includes(self, series_id: str, upstream_repo: str) -> bool:
        if self.series_id is not None:
            return series_id == self.series_id
        return self.upstream_repo is None or upstream_repo == self.upstream_repo


# events whose handler reads no series' facts but the one the event names
_ONE_SERIES = (
    ev.CommandAuthorized,
    ev.RebaseFinished,
    ev.TreeReady,
    ev.ChecksRecorded,
    ev.RunRequested,
)


def scope(event: ev.Event) -> Scope:
    """Which series' facts `plan` and `plan_duplicate` read for `event` (see Scope). A handler
    that starts reading other series must change this too: tests/unit/test_planner_scope.py
    plans each event on every series and on its scope, and compares."""
    if isinstance(event, (ev.HeadMoved, ev.RefDeleted)):
        return Scope(upstream_repo=event.repo)
    if isinstance(event, _ONE_SERIES):
        return Scope(series_id=event.series_id)
    return Scope()


def plan(event: ev.Event, facts: Facts) -> list[Action]:
    handler = _HANDLERS.get(type(event))
    if handler is None:
        return [_note(event, f"carry does not act on {event.kind} events")]
    return handler(event, facts)


def plan_duplicate(event: ev.Event, facts: Facts) -> list[Action]:
    """An event already handled can still bring a new fact. A push webhook that a poll of the
    same head beat (same key) names the head's pusher, which the poll could not know. And an
    event key never hides a head: a series that is neither on this head nor asked to check it
    (it moved past it, then back; or an older head's check replaced it) and for which the head
    is not behind is checked on it again."""
    if not isinstance(event, ev.HeadMoved) or is_published_tree(event.ref):
        return []
    actions: list[Action] = []
    for series in _watching(event, facts):
        actions += _pushed(series, event)
        late = _late_pusher(series, event)
        if late is not None:
            actions.append(late)
        known = (series.head_sha, series.newest_head)
        if event.after in known or _behind(series, event):
            continue
        why = (
            f"{event.ref} is at {event.after[:12]}, which the series is not on (its head: "
            f"{(series.newest_head or 'none')[:12]}); checked again although its event was seen"
        )
        suffix = f":again:{series.newest_head or 'none'}"
        actions.append(_on_head(series, event.after, event.ref, event.actor, why, suffix, event))
    return actions


# carry pushes these itself (bot.core.tree_branch): a push to one is never a head, so carry's
# own push cannot start a rebase that pushes again
_OWN_TREE = "{ref} is carry's own tree branch: not a head to check"


def _note(event: ev.Event, reason: str, series_id: str | None = None) -> Action:
    return act.Note(key=f"note:{event.key}", reason=reason, series_id=series_id)


def _head_moved(event: ev.Event, facts: Facts) -> list[Action]:
    assert isinstance(event, ev.HeadMoved)
    if is_published_tree(event.ref):
        return [_note(event, _OWN_TREE.format(ref=event.ref))]
    actions: list[Action] = []
    for s in _watching(event, facts):
        actions += _pushed(s, event)
        if _behind(s, event):
            actions.append(_stale_head(s, event))
            continue
        late = _late_pusher(s, event)
        if late is not None:
            actions.append(late)
        why = f"{event.ref} moved to {event.after[:12]}"
        actions.append(_on_head(s, event.after, event.ref, event.actor, why, "", event))
    return actions or [_note(event, f"no series watches {event.repo} {event.ref}")]


def _behind(series: SeriesFacts, event: ev.HeadMoved) -> bool:
    """Heads only move forward: a head behind the one the series is on or was asked to check
    (an out-of-order delivery, a redelivery, a poll that read the ref before a newer push came
    in) is not checked. One exception: an event that moved the ref from the series' own newest
    head (a force push back to an older commit, a poll that read the ref after carry knew its
    head) is a real move and is followed. Tag patterns move by version (_watches)."""
    if series.watched_ref is None or event.after in (series.head_sha, series.newest_head):
        return False
    if series.newest_head is not None and event.before == series.newest_head:
        return False
    return event.after in series.behind


def _stale_head(series: SeriesFacts, event: ev.HeadMoved) -> Action:
    newest = series.newest_head or series.head_sha or ""
    how = "a redelivery" if event.source == "webhook" else "a poll"
    why = (
        f"{event.ref} at {event.after[:12]} ({how}) is behind {newest[:12]}, the head the "
        "series is on: recorded, not checked or published"
    )
    return act.RecordStaleHead(
        key=f"stale:{series.id}:{event.key}",
        reason=why,
        series_id=series.id,
        head_sha=event.after,
        head_ref=event.ref,
        newest=newest,
    )


def _pushed(series: SeriesFacts, event: ev.HeadMoved) -> list[Action]:
    """A push webhook is a fact about the ref's history, whatever else the event causes: it
    is recorded for the series, whose trust covers the range of pushes (bot.core.trust)."""
    if event.actor is None:
        return []  # a poll: nobody is known to have pushed
    return _record_push(series, event.before, event.after, event.actor, event.forced)


def _record_push(
    series: SeriesFacts, before: str, after: str, actor: str, forced: bool
) -> list[Action]:
    """The push, recorded; a trusted one then releases the hardware runs that waited for
    approval and that the recorded pushes now cover (a poll saw the head first)."""
    trusted = actor.lower() in {a.lower() for a in series.trusted_authors}
    why = f"@{actor} pushed {after[:12]} onto {before[:12]}" + (" (forced)" if forced else "")
    key = f"push:{series.id}:{before}:{after}:{actor.lower()}"
    actions: list[Action] = [
        act.RecordPush(
            key=key,
            reason=why,
            series_id=series.id,
            before=before,
            after=after,
            actor=actor,
            trusted=trusted,
            forced=forced,
        )
    ]
    if trusted:
        why = f"start the runs waiting for approval that @{actor}'s trusted push now covers"
        actions.append(
            act.ReleaseRuns(
                key=f"{key}:release", reason=why, series_id=series.id, after=after, actor=actor
            )
        )
    return actions


def _late_pusher(series: SeriesFacts, event: ev.HeadMoved) -> Action | None:
    """A poll saw a head first (the series knows no pusher): the rebase for this head may
    already be planned under the same key, so the pusher this webhook names is recorded on its
    own, for its SHA, and, if trusted, releases the hardware runs that waited for one."""
    if event.actor is None or series.head_actor is not None:
        return None  # no pusher named, or the series' pushers come with their own events
    trusted = event.actor.lower() in {a.lower() for a in series.trusted_authors}
    why = f"@{event.actor} pushed {event.after[:12]}, which a poll saw first"
    key = f"pusher:{series.id}:{event.after}"
    return act.RecordPusher(
        key=key,
        reason=why,
        series_id=series.id,
        head_sha=event.after,
        actor=event.actor,
        trusted=trusted,
    )


def _watching(event: ev.HeadMoved, facts: Facts) -> list[SeriesFacts]:
    return [s for s in facts.series if s.upstream_repo == event.repo and _watches(s, event.ref)]


def _watches(series: SeriesFacts, ref: str) -> bool:
    if series.watched_ref is not None:
        return series.watched_ref == ref
    if series.tag_pattern is None or not ref.startswith("refs/tags/"):
        return False
    tag = ref.removeprefix("refs/tags/")
    if not fnmatchcase(tag, series.tag_pattern):
        return False
    return series.current_tag is None or version_key(tag) > version_key(series.current_tag)


def _on_head(
    series: SeriesFacts,
    head: str,
    ref: str,
    actor: str | None,
    why: str,
    key_suffix: str = "",
    moved: ev.HeadMoved | None = None,
) -> Action:
    replaces: tuple[str, ...] = ()
    if moved is not None:
        # The heads this move leaves behind: a later delivery of one of them is stale.
        past = (moved.before, series.newest_head, series.head_sha)
        replaces = tuple(sorted({h for h in past if h and h != ev.ZERO_SHA and h != head}))
    key = f"rebase:{series.id}:{head}{key_suffix}"
    head_fields: dict[str, Any] = {"head_sha": head, "head_ref": ref, "actor": actor}
    head_fields |= {"replaces": replaces, "key": key, "series_id": series.id}
    if series.awaiting_import:
        return act.RecordHead(reason=f"{why}; series is waiting for import", **head_fields)
    if series.paused:
        who = f"by @{series.paused_by}" if series.paused_by else "by its policy"
        return act.RecordHead(reason=f"{why}; series is paused {who}", **head_fields)
    return act.Rebase(reason=why, **head_fields)


def _ref_deleted(event: ev.Event, facts: Facts) -> list[Action]:
    assert isinstance(event, ev.RefDeleted)
    hits = [s for s in facts.series if s.upstream_repo == event.repo and s.watched_ref == event.ref]
    return [
        act.Note(
            key=f"refdel:{s.id}:{event.key}",
            reason=f"watched ref {event.ref} was deleted",
            series_id=s.id,
        )
        for s in hits
    ] or [_note(event, f"no series watches {event.repo} {event.ref}")]


def _pr_state(event: ev.Event, facts: Facts) -> list[Action]:
    assert isinstance(event, ev.PrStateChanged)
    actions: list[Action] = []
    for series in facts.series:
        if event.repo == facts.downstream_repo and series.pr_number == event.number:
            actions.append(_carry_pr(series, event, facts))
        if series.upstream_repo == event.repo and series.pull == event.number:
            actions.extend(_base_pr(series, event))
        if (event.repo, event.number) in series.linked_prs:
            actions.extend(_linked_pr(series, event))
    return actions or [_note(event, f"{event.repo}#{event.number} concerns no carried series")]


def _carry_pr(series: SeriesFacts, event: ev.PrStateChanged, facts: Facts) -> Action:
    """carry's own PR changed state. A close unmerged by anyone but carry (a person, or GitHub
    for the person who deleted carry's branch) is a person's close, which carry respects."""
    person = event.state == "closed_unmerged" and event.actor != facts.bot_login
    why = f"carry's PR #{event.number} is {event.state.replace('_', ' ')}"
    if person:
        why += f" by @{event.actor}" if event.actor else " by a person"
        why += ": carry opens no new PR until upstream moves or `/carry reopen`"
    at = event.at.isoformat() if event.at is not None else None
    return act.RecordCarryPr(
        key=f"carrypr:{series.id}:{event.key}",
        reason=why,
        series_id=series.id,
        number=event.number,
        state=event.state,
        by=event.actor,
        person=person,
        at=at,
    )


def _base_pr(series: SeriesFacts, event: ev.PrStateChanged) -> list[Action]:
    why = f"base PR {event.repo}#{event.number} is {event.state.replace('_', ' ')}"
    actions: list[Action] = [
        act.RecordBasePr(
            key=f"basepr:{series.id}:{event.key}",
            reason=why,
            series_id=series.id,
            state=event.state,
            merge_commit=event.merge_commit_sha,
        )
    ]
    if event.state == "merged":
        # Its work is on the branch it merged into now: the series follows it there.
        actions.append(
            act.Retarget(
                key=f"retarget:{series.id}:{event.key}",
                reason=f"{why} into {event.base_ref}",
                series_id=series.id,
                base={"branch": event.base_ref},
                words=f"branch {event.base_ref}",
                by=None,
            )
        )
    elif event.state == "closed_unmerged":
        actions.append(
            act.FindSuccessor(
                key=f"successor:{series.id}:{event.key}",
                reason=f"{why}: look for the PR that carries its work on",
                series_id=series.id,
                repo=event.repo,
                number=event.number,
            )
        )
    if event.moves_head:
        if event.state == "open" and event.actor is not None:
            # whoever opens a PR pushed its branch: the head's first recorded push
            actions += _record_push(series, ev.ZERO_SHA, event.head_sha, event.actor, False)
        actions.append(
            _on_head(series, event.head_sha, event.head_ref, _pusher(series, event), why)
        )
    return actions


def _pusher(series: SeriesFacts, event: ev.PrStateChanged) -> str | None:
    """Who pushed the PR's head, as far as a state event can tell. Whoever opens a PR pushed
    its branch; whoever reopens one did not (a stranger may have pushed while it was closed),
    so a reopened head keeps the pusher carry recorded for it, or none."""
    if event.state == "open":
        return event.actor
    return series.head_actor if event.head_sha == series.head_sha else None


def _linked_pr(series: SeriesFacts, event: ev.PrStateChanged) -> list[Action]:
    ref = f"{event.repo}#{event.number}"
    why = f"linked upstream PR {ref} is {event.state.replace('_', ' ')}"
    actions: list[Action] = [
        act.RecordUpstreamPr(
            key=f"linked:{series.id}:{event.key}",
            reason=why,
            series_id=series.id,
            ref=ref,
            state=event.state,
            merge_commit=event.merge_commit_sha,
        )
    ]
    if series.head_sha and event.state in ("merged", "closed_unmerged", "reopened"):
        # The decision rests on content, but a new PR state changes the evidence: re-check.
        suffix = f":pr:{event.key}"
        head_ref = series.head_ref or series.watched_ref or ""
        actions.append(_on_head(series, series.head_sha, head_ref, None, why, suffix))
    return actions


def _comment(event: ev.Event, facts: Facts) -> list[Action]:
    assert isinstance(event, ev.CommentCreated)
    if event.repo != facts.downstream_repo or not event.on_pull_request:
        return [_note(event, "comment is not on a pull request of the downstream repository")]
    if event.author == facts.bot_login:
        return [_note(event, "carry's own comment")]
    series = next((s for s in facts.series if s.pr_number == event.number), None)
    if series is None:
        return [_note(event, f"#{event.number} is not a carry pull request")]
    if not parse_commands(event.body):
        return [_note(event, "no /carry command in the comment", series.id)]
    why = f"@{event.author} commented a /carry command; look up their permission"
    return [
        act.CheckPermission(
            key=f"perm:{event.key}",
            reason=why,
            series_id=series.id,
            number=event.number,
            comment_id=event.comment_id,
            author=event.author,
            body=event.body,
            # The head the commenter could have seen: `/carry approve` without a SHA means
            # this one, not whatever head is current once the permission lookup comes back.
            head_at_comment=series.head_sha,
        )
    ]


def _issue_edited(event: ev.Event, facts: Facts) -> list[Action]:
    """A tick on the dashboard issue is a `/carry` command by whoever ticked, with the same
    permission check as a comment; the issue is written again either way (the box unticked,
    a person's edit of carry's text undone)."""
    assert isinstance(event, ev.IssueEdited)
    if event.repo != facts.downstream_repo or event.number != facts.dashboard_issue:
        return [_note(event, f"#{event.number} is not carry's dashboard issue")]
    if event.actor == facts.bot_login:
        return [_note(event, "carry's own edit of its dashboard issue")]
    actions: list[Action] = []
    by_series: dict[str, list[str]] = {}
    for tick in ticked(event.previous_body, event.body):
        by_series.setdefault(tick.series_id, []).append(tick.command)
    for series_id, commands in by_series.items():
        series = next((s for s in facts.series if s.id == series_id), None)
        if series is None:
            actions.append(_note(event, f"a ticked box names series {series_id!r}, not configured"))
            continue
        why = f"@{event.actor} ticked {', '.join(commands)} on the dashboard issue"
        actions.append(
            act.CheckPermission(
                key=f"perm:{event.key}:{series.id}",
                reason=why,
                series_id=series.id,
                number=event.number,
                comment_id=0,
                author=event.actor,
                body="\n".join(commands),
                head_at_comment=series.head_sha,
                source=f"dashboard:{event.delivery_id}:{series.id}",
            )
        )
    if not by_series:
        actions.append(_note(event, "the dashboard issue was edited; no box was ticked"))
    actions.append(_refresh_dashboard(event.key, "the dashboard issue was edited"))
    return actions


def _refresh_dashboard(key: str, why: str) -> Action:
    return act.RefreshDashboardIssue(key=f"dashboard:{key}", reason=why, force=True)


def _authorized(event: ev.Event, facts: Facts) -> list[Action]:
    assert isinstance(event, ev.CommandAuthorized)
    series = next((s for s in facts.series if s.id == event.series_id), None)
    if series is None:
        return [_note(event, f"series {event.series_id} is no longer configured")]
    base_key = f"cmd:{event.source or event.comment_id}"
    if not may_command(event.permission):
        text = (
            f"Sorry @{event.author}, carry takes commands only from people with write access "
            f"to this repository (your permission: {event.permission or 'none'})."
        )
        # One refusal per PR: twenty comments of strangers (one, or twenty accounts) get one
        # answer, which the next stranger can read, not twenty.
        once = f"refused:{series.id}:{event.number}"
        return [_reply(series, event, text, once, "commenter lacks write access")]
    actions: list[Action] = []
    lines: list[str] = []
    for index, command in enumerate(parse_commands(event.body)):
        key = f"{base_key}:{index}"
        action, line = _command_action(series, event, command, key)
        if action is not None:
            actions += [action, *_follow_ups(series, action)]
        lines.append(line)
    actions.append(
        _reply(series, event, "\n".join(lines), f"{base_key}:reply", "answer the command")
    )
    if event.source.startswith("dashboard:"):
        actions.append(_refresh_dashboard(base_key, "show what the ticked boxes did"))
    return actions


def _command_action(
    series: SeriesFacts, event: ev.CommandAuthorized, command: Command, key: str
) -> tuple[Action | None, str]:
    who = event.author
    if command.verb in ("help", "unknown"):
        intro = f"{command.problem}.\n\n" if command.problem else ""
        return None, intro + HELP
    if command.verb == "rebase":
        if series.head_sha is None:
            return None, "Nothing to rebase yet: carry has not seen the upstream head."
        head_ref = series.head_ref or series.watched_ref or ""
        return (
            act.Rebase(
                key=f"rebase:{series.id}:{series.head_sha}:{key}",
                reason=f"/carry rebase by @{who}",
                series_id=series.id,
                head_sha=series.head_sha,
                head_ref=head_ref,
                # The head's pusher stays its pusher: asking for a rebase confers no trust.
                actor=series.head_actor,
                force=True,
                trigger=key,
            ),
            f"Re-checking the series on {series.head_sha[:12]}.",
        )
    if command.verb in ("keep", "drop") and command.arg not in series.patch_names:
        return None, _unknown_patch(series, command)
    if command.verb == "retarget":
        return _retarget(series, command, key, who)
    if command.verb == "reopen":
        return _reopen(series, key, who)
    reason = f"/carry {command.verb} by @{who}"
    if command.verb in ("pause", "resume"):
        paused = command.verb == "pause"
        line = "Paused: carry will not act on its own." if paused else "Resumed."
        return act.SetPaused(
            key=key, reason=reason, series_id=series.id, paused=paused, by=who
        ), line
    if command.verb in ("keep", "drop") and command.arg is not None:
        if command.verb == "keep":
            line = f"Pinned {command.arg}: it will never be dropped automatically."
            return act.PinPatch(
                key=key, reason=reason, series_id=series.id, patch=command.arg, by=who
            ), line
        line = f"Dropping {command.arg} was requested; the next proposal removes it."
        return act.RequestDrop(
            key=key, reason=reason, series_id=series.id, patch=command.arg, by=who
        ), line
    if command.verb == "retest":
        line = f"Hardware CI will run again on {command.arg or 'every runner'}."
        return act.Retest(
            key=key, reason=reason, series_id=series.id, runner=command.arg, by=who
        ), line
    return _approve(series, event, command, key)


# A change of what the series decides re-decides it on its newest head at once.
_RECHECKED: Final = frozenset({ActionKind.PIN_PATCH, ActionKind.REQUEST_DROP, ActionKind.REOPEN})


def _follow_ups(series: SeriesFacts, action: Action) -> list[Action]:
    """What a command's change leads to: a re-check with the override or the reopened PR (none
    before the series' first head), or the new base's head polled now rather than at the next
    interval."""
    if action.kind in _RECHECKED and series.head_sha is not None:
        return [
            act.Rebase(
                key=f"{action.key}:recheck",
                reason=f"re-decide the series after {action.kind}",
                series_id=series.id,
                head_sha=series.head_sha,  # the dispatcher takes the newest head asked for
                head_ref=series.head_ref or "",
                force=True,
                trigger=action.key,
                recheck=True,  # never folded into a check already queued: it must publish
            )
        ]
    if action.kind is ActionKind.RETARGET:
        why = "the new base's head, now rather than at the next poll"
        return [act.Poll(key=f"{action.key}:poll", reason=why, series_id=series.id)]
    return []


def _retarget(
    series: SeriesFacts, command: Command, key: str, who: str
) -> tuple[Action | None, str]:
    base, words = retarget_base(command.arg or "", series.upstream_repo)
    if base is None:
        return None, f"Not done: {words}."
    line = (
        f"Retargeted: the series now sits on {words} of {series.upstream_repo}; carry checks "
        "it on that head at its next poll."
    )
    reason = f"/carry retarget by @{who}"
    action = act.Retarget(
        key=key, reason=reason, series_id=series.id, base=base, words=words, by=who
    )
    return action, line


def _reopen(series: SeriesFacts, key: str, who: str) -> tuple[Action | None, str]:
    if series.closed_pr is None:
        return None, "Nothing to reopen: no PR of carry's for this series was closed by a person."
    line = (
        f"Re-checking the series: carry opens a new PR in place of #{series.closed_pr}, "
        "which links it."
    )
    reason = f"/carry reopen by @{who}"
    action = act.Reopen(
        key=key, reason=reason, series_id=series.id, by=who, closed_pr=series.closed_pr
    )
    return action, line


def _unknown_patch(series: SeriesFacts, command: Command) -> str:
    if not series.patch_names:
        return (
            f"Not done: `/carry {command.verb} {command.arg}` names a patch, and carry has not "
            "checked this series yet. Try again after its first check."
        )
    known = ", ".join(f"`{name}`" for name in series.patch_names)
    return f"Not done: the series has no patch `{command.arg}` (its patches: {known})."


def _approve(
    series: SeriesFacts, event: ev.CommandAuthorized, command: Command, key: str
) -> tuple[Action | None, str]:
    """Trust is a fact about one SHA: a bare `/carry approve` means the head the commenter
    could have seen when they wrote it, never a head that arrived afterwards."""
    sha = command.arg or event.head_at_comment
    if sha is None:
        if series.head_sha is None:
            return None, "Nothing to approve yet: carry has not seen the upstream head."
        return None, (
            "Not approved: carry cannot tell which upstream head you reviewed. Name it: "
            f"`/carry approve {series.head_sha[:12]}`."
        )
    known = {h for h in (event.head_at_comment, series.head_sha) if h}
    if len(sha) < 40 and not any(head.startswith(sha) for head in known):
        shown = ", ".join(sorted(h[:12] for h in known)) or "none yet"
        return None, f"Not approved: no upstream head carry knows starts with {sha} ({shown})."
    line = f"Approved {sha[:12]} for the hardware runners."
    if not any(head.startswith(sha.lower()) for head in known):  # a full SHA, of no known head
        current = f"the upstream head is {series.head_sha[:12]}" if series.head_sha else "none yet"
        line += (
            f" carry has seen no upstream head {sha[:12]} ({current}): that exact commit runs "
            "on the hardware if it becomes the head, and nothing else does."
        )
    if command.arg is None and series.head_sha and series.head_sha != sha:
        line += (
            f" The upstream head has moved since your comment, to {series.head_sha[:12]}: "
            f"it is not approved (`/carry approve {series.head_sha[:12]}` approves it)."
        )
    reason = f"/carry approve by @{event.author}"
    return act.Approve(key=key, reason=reason, series_id=series.id, sha=sha, by=event.author), line


def _reply(
    series: SeriesFacts, event: ev.CommandAuthorized, body: str, key: str, why: str
) -> Action:
    return act.Reply(key=key, reason=why, series_id=series.id, number=event.number, body=body)


def _rebase_finished(event: ev.Event, facts: Facts) -> list[Action]:
    assert isinstance(event, ev.RebaseFinished)
    series = next((s for s in facts.series if s.id == event.series_id), None)
    if series is not None and series.paused:
        # Paused while the check ran: a paused series is never touched automatically.
        who = f"by @{series.paused_by}" if series.paused_by else "by its policy"
        why = (
            f"the series was paused {who} while it was checked: the result is kept, nothing is "
            "published; `/carry resume` then `/carry rebase` publishes it"
        )
        return [_note(event, why, event.series_id)]
    runners = series.runners if series else ()
    test = bool(runners and event.result_tree and event.outcome not in ("conflict", "error"))
    why = (
        "the refreshed series differs from the downstream branch"
        if event.changed
        else "refresh the PR's report (no patch content changed)"
    )
    every_head = test and series is not None and series.ci_every_head
    if test:
        why += "; then test the exact tree on " + ", ".join(runners)
        why += " (every head)" if every_head else " (when a PR proposes it)"
    return [
        act.Publish(
            key=f"publish:{event.key.removeprefix('rebased:')}",
            reason=why,
            series_id=event.series_id,
            head_sha=event.head_sha,
            digest=event.digest,
            changed=event.changed,
            tree=event.result_tree if test else None,
            every_head=every_head,
        )
    ]


def _tree_ready(event: ev.Event, facts: Facts) -> list[Action]:
    """The exact tree of a head is on a downstream branch: the series' runners test it (a
    paused series, or one with no runners, tests nothing)."""
    assert isinstance(event, ev.TreeReady)
    series = next((s for s in facts.series if s.id == event.series_id), None)
    if series is None or not series.runners:
        return [_note(event, "no runners test this series", event.series_id)]
    if series.paused:
        return [_note(event, "the series is paused: its tree is not tested", event.series_id)]
    why = (
        f"test the exact tree {event.tree[:12]} of {event.head_sha[:12]} "
        f"({event.branch} at {event.branch_sha[:12]}) on {', '.join(series.runners)}"
    )
    return [
        act.TestTree(
            key=f"test:{event.key.removeprefix('tree-ready:')}",
            reason=why,
            series_id=event.series_id,
            head_sha=event.head_sha,
            tree=event.tree,
            branch=event.branch,
            branch_sha=event.branch_sha,
            series_sha=event.series_sha,
            patches_dir=event.patches_dir,
        )
    ]


def _ci_result(event: ev.Event, facts: Facts) -> list[Action]:
    assert isinstance(event, ev.CiResultReceived)
    return [
        act.RecordCi(
            key=f"ci-result:{event.key}",
            reason=f"{event.ci_kind} {event.name} {event.conclusion or event.status}",
            event=ev.event_to_dict(event),
        )
    ]


def _checks_recorded(event: ev.Event, facts: Facts) -> list[Action]:
    """What a run's stored result leads to: its rows shown on GitHub; each change of verdict
    told to people, and a head that went red after a good one explained by a bisection; the
    owners of a failing fix mentioned once its red streak is long enough; carry/good/<series>
    moved to the new last good head; a bisection's next step once a probe of it ended."""
    assert isinstance(event, ev.ChecksRecorded)
    sid, actions, once = event.series_id, list[Action](), event.remember_s
    if event.probe:
        why = f"a bisection probe of {event.head_sha[:12]} ended: take the next step"
        actions.append(
            act.Bisect(key=f"bisect:{event.key}", reason=why, series_id=sid, remember_s=once)
        )
    if event.rows:
        said = ", ".join(f"{row.runner}: {row.state}" for row in event.rows)
        rows = tuple(dataclasses.asdict(row) for row in event.rows)
        actions.append(
            act.ReportChecks(
                key=f"report:{event.key}",
                reason=f"show on GitHub: {said}",
                series_id=sid,
                remember_s=once,
                rows=rows,
            )
        )
    for notice in event.notices:
        actions.append(
            act.Notify(
                key=f"notify:{notice.key}",
                reason=notice.summary(),
                series_id=sid,
                notice=notice.to_dict(),
            )
        )
        if notice.change is Change.WENT_RED and notice.last_good is not None:
            why = (
                f"explain it: bisect upstream between the last good head "
                f"{notice.last_good[:12]} and {notice.head[:12]}"
            )
            actions.append(
                act.Bisect(
                    key=f"bisect:{notice.key}", reason=why, series_id=sid, notice=notice.to_dict()
                )
            )
    streak = event.streak
    if streak is not None and mention_due(streak.heads, facts.red_streak_mention):
        why = (
            f"red for {streak.heads} heads since {streak.streak_head[:12]}: "
            "mention the failing fix's owners (once per streak)"
        )
        key = f"mention:{sid}:{streak.streak_head}:{streak.head}"
        actions.append(act.MentionOwners(key=key, reason=why, series_id=sid, grew=streak.to_dict()))
    if event.good_head is not None:
        why = f"the last good head is now {event.good_head[:12]}: carry/good/{sid} follows"
        key = f"good-ref:{sid}:{event.good_head}"
        actions.append(act.MoveGoodRef(key=key, reason=why, series_id=sid))
    return actions or [_note(event, "nothing to show or tell", sid)]


def _ignored(event: ev.Event, facts: Facts) -> list[Action]:
    assert isinstance(event, ev.Ignored)
    return [_note(event, event.reason)]


# --------------------------------------------------------------------------- hardware runs


def _run_requested(event: ev.Event, facts: Facts) -> list[Action]:
    """What to do with a request for one series and runner kind, over its lane's facts
    (Facts.lane). The last action is the outcome; a SupersedeRuns before it names the stale
    runs to cancel first.

    Rules, in order: runs of the same series and kind on another tree are stale (a newer head
    wins, so a burst leaves one run); a run queued or running on the same tree is joined; a
    stored result for the same tree is reused, but never for a head that needs approval (a
    verdict is no approval: whoever could plant one would turn a stranger's head green); an
    untrusted head waits for approval (a request for a tree already waiting joins it); the
    series' pacing (ci.min_interval_s, ci.daily_budget; not for a retest) holds a run until it
    may start; the kind's budget defers the rest; otherwise the run is enqueued (releasing the
    waiting run, if any).
    """
    assert isinstance(event, ev.RunRequested)
    if facts.lane is None:
        raise ValueError(
            f"{event.key}: a run request is planned with the facts of its lane, read under the "
            "runner kind's lock (workers.ci.requests); these facts have none"
        )
    return list(_plan_lane(event, facts.lane))


def _plan_lane(request: ev.RunRequested, facts: LaneFacts) -> tuple[RunDecision, ...]:
    same = [run for run in facts.active if run.tree_key == request.tree_key]
    stale = [run for run in facts.active if run.tree_key != request.tree_key]
    outcome = _run_outcome(request, facts, same, stale)
    if isinstance(outcome, act.ReuseResult):  # a run of this tree waiting for approval: not needed
        stale += same
    if not stale:
        return (outcome,)
    why = f"superseded by head {short(request.head_sha)}"
    if isinstance(outcome, act.ReuseResult) and not any(
        run.tree_key != request.tree_key for run in stale
    ):
        why = f"the same tree already has a result ({outcome.source_run})"
    runs = tuple(run.run_id for run in stale)
    supersede = act.SupersedeRuns(
        key=request.key, reason=why, series_id=request.series_id, runs=runs
    )
    return (supersede, outcome)


def _run_outcome(
    request: ev.RunRequested, facts: LaneFacts, same: list[ActiveRun], stale: list[ActiveRun]
) -> RunDecision:
    envelope: dict[str, Any] = {"key": request.key, "series_id": request.series_id}
    waiting = next((run for run in same if run.state is CiStatus.WAITING_APPROVAL), None)
    running = next((run for run in same if run.state is not CiStatus.WAITING_APPROVAL), None)
    # a retest of a tree whose run is held back (paced, or over budget) releases that run
    held = running is not None and running.state is CiStatus.QUEUED and not running.dispatched
    if running is not None and not (held and request.force):
        why = f"same tree already {running.state} in run {running.run_id}"
        return act.JoinRun(reason=why, run=running.run_id, **envelope)
    result = facts.result
    if result is not None and not request.force and request.trusted:
        why = f"same tree already tested: {result.state} in run {result.run_id}"
        return act.ReuseResult(reason=why, source_run=result.run_id, **envelope)
    kept = waiting or running  # the run this request continues: waiting, or held and retested
    continues = kept.run_id if kept is not None else None
    if not request.trusted:
        if waiting is not None:
            why = "same tree already waiting for approval"
            return act.JoinRun(reason=why, run=waiting.run_id, **envelope)
        what = request.why_untrusted or (
            f"head {short(request.head_sha)} was pushed by an author outside trusted_authors"
        )
        why = f"{what}: it waits for `/carry approve {short(request.head_sha)}`"
        return act.WaitForApproval(reason=why, **envelope)
    wait = None if request.force else next_start(facts.pace)
    if wait is not None:
        return act.PaceRun(
            reason=wait_words(wait), continues=continues, not_before=wait.until, **envelope
        )
    freed = sum(1 for run in stale if run.dispatched)
    in_flight = max(0, facts.in_flight - freed)
    if in_flight >= facts.budget.capacity:
        why = (
            f"{request.runner_kind} budget is full ({in_flight} of {facts.budget.capacity} jobs "
            f"queued or running); it starts when one finishes"
        )
        return act.DeferOverBudget(reason=why, continues=continues, **envelope)
    why = f"new tree for {request.runner_kind}"
    return act.EnqueueRun(reason=why, continues=continues, **envelope)


_HANDLERS: dict[type, Callable[[ev.Event, Facts], list[Action]]] = {
    ev.HeadMoved: _head_moved,
    ev.RefDeleted: _ref_deleted,
    ev.PrStateChanged: _pr_state,
    ev.CommentCreated: _comment,
    ev.IssueEdited: _issue_edited,
    ev.CommandAuthorized: _authorized,
    ev.RebaseFinished: _rebase_finished,
    ev.CiResultReceived: _ci_result,
    ev.TreeReady: _tree_ready,
    ev.ChecksRecorded: _checks_recorded,
    ev.Ignored: _ignored,
    ev.RunRequested: _run_requested,
}
