"""Each writer's change to a series state, as a pure function on a fresh copy. Pure.

Each returns whether it changed anything. The store applies one to the state it has just read (bot.store.series.update_series)
and runs it again on a fresh copy when another writer committed in between, so each function
changes only the fields its writer owns. The maintainer's overrides (paused_by, pins, drop
requests, approvals) and the CI rows are never written here except by their own commands.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bot.core.classify import Decision, Status
from bot.core.policy import Overrides, final_decision, outcome
from bot.core.render import landed_version
from bot.core.report import PatchReport
from bot.core.state import (
    ClosedPr,
    Notice,
    Outcome,
    PatchState,
    Phase,
    PrInfo,
    PublishRefused,
    SeriesState,
)


@dataclass(frozen=True)
class CheckedPatch:
    """The engine's finding for one patch, before a maintainer's overrides are applied."""

    name: str
    status: Status
    decision: Decision
    reason: str
    subject: str = ""
    evidence: list[dict[str, Any]] = field(default_factory=list)
    interdiff: str = ""
    conflict: dict[str, Any] | None = None
    changed: bool = False
    upstream_commits: list[dict[str, Any]] = field(default_factory=list)
    refresh: dict[str, Any] = field(default_factory=dict)


def checked_patch(result: PatchReport) -> CheckedPatch:
    """What the engine found about one patch (its report), as the series state records it:
    named by its file name, whatever path the engine was given."""
    return CheckedPatch(
        name=result.patch.rsplit("/", 1)[-1],
        status=result.status,
        decision=result.decision,
        reason=result.reason,
        subject=result.subject,
        evidence=result.evidence,
        interdiff=result.interdiff,
        conflict=result.conflict,
        changed=result.changed,
        upstream_commits=result.upstream_commits or [],
        refresh=result.refresh or {},
    )


@dataclass(frozen=True)
class CheckResult:
    """What one rebase found: the head and series content it checked and each patch's finding."""

    head: str
    digest: str
    checked_at: str
    patches: tuple[CheckedPatch, ...]
    auto_drop: bool = True


def resting_phase(state: SeriesState) -> Phase:
    """The phase of a series with no job running: a maintainer's pause shows until resumed."""
    return Phase.PAUSED if state.paused_by else Phase.IDLE


def apply_check(state: SeriesState, result: CheckResult) -> bool:
    """Merges a rebase's result into the state as it is now. The rebase owns the patches'
    findings and decisions, the checked head and the phase that follows a check; the pins and
    drop requests in `state` (possibly newer than the rebase) decide over the engine."""
    current = {p.name: p for p in state.patches}
    state.patches = [
        _decided(found, current.get(found.name), result.auto_drop) for found in result.patches
    ]
    state.checked_head, state.checked_digest = result.head, result.digest
    state.checked_at = result.checked_at
    state.phase = resting_phase(state)
    state.outcome = outcome(
        (p.status for p in state.patches),
        (p.decision for p in state.patches),
        proposes_change(state.patches),
    )
    return True


def _decided(found: CheckedPatch, current: PatchState | None, auto_drop: bool) -> PatchState:
    old = current or PatchState(name=found.name)
    overrides = Overrides(old.pinned, old.drop_requested_by, auto_drop)
    decision, reason = final_decision(found.status, found.decision, found.reason, overrides)
    return PatchState(
        name=found.name,
        subject=found.subject,
        status=found.status,
        decision=decision,
        reason=reason,
        engine_decision=found.decision,
        engine_reason=found.reason,
        evidence=found.evidence,
        pinned=old.pinned,
        drop_requested_by=old.drop_requested_by,
        upstream_prs=old.upstream_prs,
        interdiff=found.interdiff,
        conflict=found.conflict,
        changed=found.changed,
        upstream_commits=found.upstream_commits,
        refresh=found.refresh,
    )


def proposes_change(patches: Iterable[PatchState]) -> bool:
    """Whether the checked series differs from the one on the downstream branch."""
    return any(p.changed or p.decision == "drop" for p in patches)


def start_check(state: SeriesState, head: str, ref: str, actor: str | None, now: str) -> bool:
    if state.head_sha != head:
        state.head_seen_at = now
    state.phase, state.error = Phase.RUNNING, None
    state.head_sha, state.head_ref = head, ref
    state.head_actor = actor if actor is not None else state.pushers.get(head)
    return True


def queue_check(state: SeriesState) -> bool:
    """A rebase was asked for: an idle or failed series shows it is queued."""
    if state.phase not in (Phase.IDLE, Phase.ERROR):
        return False
    state.phase = Phase.QUEUED
    return True


def unqueue(state: SeriesState) -> bool:
    """The rebase that was queued found nothing to do: the series rests again (it showed
    "queued" until the next check, and a `/carry rebase` took it for a check waiting)."""
    if state.phase != Phase.QUEUED:
        return False
    state.phase = resting_phase(state)
    return True


def record_head(
    state: SeriesState, head: str, ref: str, actor: str | None, reason: str, now: str
) -> bool:
    if state.head_sha != head:
        state.head_seen_at = now
    state.head_sha, state.head_ref = head, ref
    state.head_actor = actor if actor is not None else state.pushers.get(head)
    state.last_event = reason
    return True


MAX_PUSHERS = 50  # recent head SHAs whose pusher is remembered
MAX_REPLACED = 50  # recent heads a series moved past


def move_past(state: SeriesState, head: str, replaced: Iterable[str]) -> bool:
    """The series follows `head`: the heads it replaces are remembered as behind, and `head`
    is behind no longer (a force push back to it was followed)."""
    kept = [h for h in state.replaced_heads if h != head]
    kept += [h for h in replaced if h != head and h not in kept]
    kept = kept[-MAX_REPLACED:]
    if kept == state.replaced_heads:
        return False
    state.replaced_heads = kept
    return True


def stale_head(state: SeriesState, reason: str) -> bool:
    """A head behind the series' own was delivered: said, nothing else changes."""
    state.last_event = reason
    return True


def record_pusher(state: SeriesState, head: str, actor: str) -> bool:
    """A push webhook names who pushed `head`: remembered for that SHA (a check that starts
    from a poll's event takes it), and the current head takes it when none was known. A known
    pusher is never replaced, and never given to another SHA."""
    changed = False
    if head not in state.pushers:
        state.pushers[head] = actor
        for old in list(state.pushers)[:-MAX_PUSHERS]:
            del state.pushers[old]
        changed = True
    if state.head_sha == head and state.head_actor is None:
        state.head_actor = state.pushers[head]
        changed = True
    return changed


def name_upstream(state: SeriesState, repo: str, web_host: str, base: str) -> bool:
    """The series' upstream and base as the config names them now."""
    named = (repo, web_host, base)
    if (state.upstream_repo, state.upstream_web_host, state.base) == named:
        return False
    state.upstream_repo, state.upstream_web_host, state.base = named
    return True


def wait_for_ref(state: SeriesState, ref: str | None) -> bool:
    """A poll found the watched ref missing upstream (ref), or present again (None)."""
    if state.waiting_for_ref == ref:
        return False
    state.waiting_for_ref = ref
    return True


def propose_successor(state: SeriesState, proposal: dict[str, Any]) -> bool:
    """What the closed base PR's records name as its successor (or that they name none)."""
    if state.successor == proposal:
        return False
    state.successor = proposal
    return True


def retarget(state: SeriesState, base: dict[str, Any], words: str) -> bool:
    """The series sits on `base` from now on (`words`: how the config would write it); the
    old base PR's state and its successor proposal are history."""
    if state.base_override == base and state.base == words:
        return False
    state.base_override, state.base = dict(base), words
    state.base_pr_state, state.successor = None, None
    return True


def set_paused(state: SeriesState, by: str | None) -> bool:
    """`/carry pause` (by: who) or `/carry resume` (None). Resuming while a job runs leaves
    the phase to that job."""
    state.paused_by = by
    if by is not None:
        state.phase = Phase.PAUSED
    elif state.phase == Phase.PAUSED:
        state.phase = Phase.IDLE
    return True


def set_pin(state: SeriesState, name: str, *, keep: bool, by: str, auto_drop: bool = True) -> bool:
    """`/carry keep NAME` (keep) or `/carry drop NAME`; False when the series has no such patch.
    A checked patch is decided again at once from the engine's decision of its last check (the
    re-check the dispatcher asks for may be superseded by a head that is not checked yet, as on
    a paused series)."""
    patch = state.patch(name)
    if patch is None:
        return False
    patch.pinned = keep
    patch.drop_requested_by = None if keep else by
    if patch.engine_decision != Decision.NONE:
        overrides = Overrides(patch.pinned, patch.drop_requested_by, auto_drop)
        patch.decision, patch.reason = final_decision(
            patch.status, patch.engine_decision, patch.engine_reason, overrides
        )
        state.outcome = outcome(
            (p.status for p in state.patches),
            (p.decision for p in state.patches),
            proposes_change(state.patches),
        )
    return True


def record_upstream_pr(
    state: SeriesState, links: Mapping[str, Iterable[str]], entry: dict[str, Any], reason: str
) -> bool:
    """An upstream PR that a patch links to changed state: each linked patch keeps its newest."""
    for patch_name, refs in links.items():
        if entry["ref"] not in refs:
            continue
        patch = state.patch(patch_name)
        if patch is None:
            patch = PatchState(name=patch_name)
            state.patches.append(patch)
        patch.upstream_prs = [p for p in patch.upstream_prs if p["ref"] != entry["ref"]] + [entry]
    state.last_event = reason
    return True


CARRY_PR_STATES = {"merged": "merged", "closed_unmerged": "closed", "open": "open"}
CARRY_PR_STATES["reopened"] = "open"


def record_carry_pr(
    state: SeriesState,
    event_state: str,
    by: str | None = None,
    *,
    person: bool = True,
    at: str | None = None,
) -> bool:
    """carry's PR changed state on GitHub (an edit leaves its state). Closed unmerged by a
    person (`person`; `by`: who, when GitHub says), or by deleting its branch, which closes it:
    the close is kept (`at`: when), with the upstream heads it was closed at, so that no new PR is opened
    for them. Reopened: the close is gone."""
    if state.pr is None or event_state not in CARRY_PR_STATES:
        return False
    state.pr.state = CARRY_PR_STATES[event_state]
    if event_state == "closed_unmerged" and person:
        heads = [h for h in (state.checked_head, state.head_sha) if h]
        number, url = state.pr.number, state.pr.url
        unique = sorted(set(heads), key=heads.index)
        state.closed_pr = ClosedPr(number, url, by, unique, at=at)
    elif state.pr.state == "open" and state.closed_pr and state.closed_pr.number == state.pr.number:
        state.closed_pr = None
    return True


def reopen(state: SeriesState, by: str) -> bool:
    """`/carry reopen`: the PR a person closed stops no new PR; False when none does."""
    if state.closed_pr is None or state.closed_pr.reopened_by is not None:
        return False
    state.closed_pr.reopened_by = by
    return True


def record_base_pr(state: SeriesState, pr_state: str, reason: str) -> bool:
    state.base_pr_state = pr_state
    state.last_event = reason
    return True


def awaiting_import(state: SeriesState, names: Iterable[str], reason: str | None) -> bool:
    """The series has pages waiting for `carry import`: its patches show as such. A pin or
    drop request on one of them stays for when it is imported."""
    current = {p.name: p for p in state.patches}
    state.phase, state.error = Phase.AWAITING_IMPORT, None
    state.patches = [_awaiting(name, current.get(name)) for name in names]
    if reason is not None:
        state.last_event = reason
    return True


def _awaiting(name: str, current: PatchState | None) -> PatchState:
    patch = PatchState(name=name, status=Status.AWAITING_IMPORT)
    if current is not None:
        patch.pinned, patch.drop_requested_by = current.pinned, current.drop_requested_by
        patch.upstream_prs = current.upstream_prs
    return patch


def series_invalid(state: SeriesState, problems: Iterable[str]) -> bool:
    state.phase, state.outcome, state.error = Phase.ERROR, Outcome.ERROR, "; ".join(problems)
    return True


def step_failed(state: SeriesState, message: str, *, final: bool) -> bool:
    """A step failed and is retried (queued) or, after its last retry, stays an error."""
    state.error = message
    state.phase = Phase.ERROR if final else Phase.QUEUED
    if final:
        state.outcome = Outcome.ERROR
    return True


def published(state: SeriesState, pr: PrInfo | None, version: str | None, last_event: str) -> bool:
    """The publisher's facts: carry's PR as GitHub has it now and the version carry's branch
    carries (read back from GitHub; never an older build than the state knows)."""
    if pr is not None:
        state.pr = pr
        if pr.state == "open":  # a PR is open again: the closed one is history
            state.closed_pr = None
    state.version = landed_version(state.version, version)
    state.last_event = last_event
    if state.phase == Phase.QUEUED and state.error:  # a retried publish got through
        state.phase, state.error = resting_phase(state), None
    state.publish_refused = None  # whatever GitHub refused before, this publish got through
    return True


def publish_refused(state: SeriesState, refused: PublishRefused, now: str) -> bool:
    """GitHub refused carry's push because of a setting: kept (with how often, since when)
    until a push gets through; not an error to retry."""
    before = state.publish_refused
    if before is not None:
        refused.at, refused.attempts = before.at, before.attempts + 1
        refused.pr = refused.pr or before.pr
    else:
        refused.at = refused.at or now
    state.publish_refused = refused
    state.last_event = f"push refused by GitHub ({refused.code}) on {refused.branch}"
    return True


def version_landed(state: SeriesState, carried: str | None) -> bool:
    """A push failed, but carry's branch carries `carried` (read back from GitHub): a push that
    landed and answered an error still counts, so its number is not handed out again."""
    landed = landed_version(state.version, carried)
    if landed == state.version:
        return False
    state.version = landed
    return True


MAX_SAID_NOTICES = 20  # said notices kept in the state (the history keeps them all)


def notice_due(state: SeriesState, notice: Notice) -> bool:
    """carry must say `notice`: recorded before it is said. One with its id (due or said) is
    not recorded twice: a retried publish that finds the same thing to say says it once."""
    if any(known.id == notice.id for known in state.notices):
        return False
    state.notices.append(notice)
    _trim_notices(state)
    return True


def notice_said(state: SeriesState, notice_id: str, pr: int, comment_id: int, at: str) -> bool:
    """GitHub has the notice (its comment `comment_id` on `pr`); False when it was said already."""
    notice = next((n for n in state.notices if n.id == notice_id and n.due), None)
    if notice is None:
        return False
    notice.said_at, notice.pr, notice.comment_id = at, pr, comment_id
    _trim_notices(state)
    return True


def _trim_notices(state: SeriesState) -> None:
    said = [n for n in state.notices if not n.due]
    gone = {id(n) for n in said[: max(0, len(said) - MAX_SAID_NOTICES)]}
    state.notices = [n for n in state.notices if id(n) not in gone]
