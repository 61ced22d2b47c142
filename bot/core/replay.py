"""`carry replay`'s decisions: which heads to walk, what carry would have done at each one,
and what the walk adds up to. Pure: bot.replay walks the history and runs the engine.

A replay walks an upstream's first-parent history as the heads carry would have seen. Each
head is planned as the service plans it (bot.core.planner.plan): the head's move
(`head_moved`), then the finished check (`rebase_finished`), over the facts the service would
gather (`facts`). The replay carries out the actions it can model (`CARRIED_OUT`: the check, the
head recorded, the publish) and records the others as what carry would have done (`Planned`).
The engine's findings go through the service's own transitions (bot.core.transitions) and its
own publishing decision (bot.core.proposal, bot.core.publishing); this module models only what
the service learns from GitHub, as a simulated downstream (`Downstream`):

- carry's PR is opened when the publisher would open one, and updated when it would push to it;
- the team merges carry's PR at the first head where it needs no human (its outcome is neither
  conflict nor review): the series directory then becomes the PR's;
- nobody resolves a conflict or a review by hand: such a patch waits until upstream history
  alone changes the finding. How long it waits is what the per-patch summary reports.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime
from enum import StrEnum
from typing import Any

from bot.core import events as ev
from bot.core import proposal
from bot.core import transitions as tr
from bot.core.actions import Action, ActionKind
from bot.core.classify import Decision, Status
from bot.core.planner import Facts, SeriesFacts
from bot.core.publishing import NEEDS_HUMAN, PublishStep, Step, publish_step
from bot.core.render import next_version
from bot.core.state import PrInfo, SeriesState

SCHEMA = 2  # of the JSON form (the resume file and --json)
_PR_IN_SUBJECT = re.compile(r"\(#(\d+)\)")
_HUMAN_STATUSES = (Status.CONFLICT, Status.PARTIAL, Status.INVALID)
_MATCH_SIGNALS = ("patch-id-match", "changes-match", "subject-match")


class ReplayInputError(ValueError):
    """Replay options that cannot work together (said in one line)."""


@dataclass(frozen=True)
class Commit:
    """One first-parent commit of the walked history: a head carry would have seen."""

    sha: str
    date: str  # committer date, ISO 8601 in UTC ("2026-01-01T00:00:00Z")
    subject: str = ""

    @property
    def day(self) -> str:
        return self.date[:10]

    @property
    def month(self) -> str:
        return self.date[:7]


def iso_utc(epoch: int) -> str:
    """A commit's committer time (seconds since the epoch) as the replay records it."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def sample(
    commits: Sequence[Commit], *, every: int | None = None, daily: bool = False
) -> list[Commit]:
    """The heads to walk, oldest first, from the first-parent `commits` (oldest first): every
    one; or every `every`-th from the first; or the last commit of each day (UTC). The last
    commit is always walked, so a replay ends where it was asked to."""
    if every is not None and daily:
        raise ReplayInputError("give --every N or --daily, not both")
    if every is not None and every < 1:
        raise ReplayInputError(f"--every must be 1 or more, not {every}")
    if daily:
        last_of_day: dict[str, Commit] = {}
        for commit in commits:
            last_of_day[commit.day] = commit
        return list(last_of_day.values())
    step = every or 1
    picked = list(commits[::step])
    if commits and picked[-1] != commits[-1]:
        picked.append(commits[-1])
    return picked


def needs_human(status: Status, decision: Decision) -> bool:
    """Whether a patch waits for a human: it conflicts, is partial or invalid, or its
    decision is review (what `carry check --exit-code` gates on)."""
    return status in _HUMAN_STATUSES or decision is Decision.REVIEW


def pr_in_subject(subject: str) -> int | None:
    """The PR number a squash-merged commit's subject names ("Fix it (#123)"), else None."""
    found = _PR_IN_SUBJECT.findall(subject)
    return int(found[-1]) if found else None


def taken_by(evidence: Iterable[Mapping[str, Any]]) -> tuple[str, str] | None:
    """(commit, subject) of the upstream commit the evidence names as having the patch (a
    patch-id or subject match that was not reverted), or None."""
    for entry in evidence:
        if entry.get("signal") in _MATCH_SIGNALS and not entry.get("reverted_by"):
            commit = entry.get("commit")
            if isinstance(commit, str) and commit:
                return commit, str(entry.get("subject") or "")
    return None


# ----------------------------------------------------------------------------- the planner


DOWNSTREAM_REPO = "replay/downstream"  # the simulated downstream repository, as facts name it
# what the replay carries out itself, in its model: the engine's check (REBASE), the head a
# paused series only records (RECORD_HEAD), the publisher's step on the simulated downstream
# (PUBLISH). Any other action the planner returns (a GitHub write, a hardware run, a note) is
# recorded as what carry would have done, and not done.
CARRIED_OUT = frozenset({ActionKind.REBASE, ActionKind.RECORD_HEAD, ActionKind.PUBLISH})


@dataclass(frozen=True)
class Watch:
    """The replayed series as the planner sees it: its upstream and the ref whose heads the
    walk moves through, and the config the planner reads (pause, runners, ci.on)."""

    series_id: str
    upstream_repo: str
    ref: str
    paused: bool = False
    runners: tuple[str, ...] = ()
    ci_every_head: bool = True


@dataclass(frozen=True)
class Planned:
    """One action the planner returned at a head; `done`: the replay carried it out
    (CARRIED_OUT), else it is only recorded."""

    kind: str
    reason: str
    done: bool

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "reason": self.reason, "done": self.done}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Planned:
        return cls(data["kind"], data["reason"], bool(data["done"]))


def facts(watch: Watch, state: SeriesState) -> Facts:
    """What the service's adapter (workers.facts.gather) would read for the series: its
    config, and its state as the replay has it. The walk only moves forward along one ref, so
    no head is ever behind the series' own."""
    series = SeriesFacts(
        id=watch.series_id,
        upstream_repo=watch.upstream_repo,
        watched_ref=watch.ref,
        paused_by_policy=watch.paused,
        pr_number=state.pr.number if state.pr else None,
        head_sha=state.head_sha,
        head_ref=state.head_ref,
        head_actor=state.head_actor,
        newest_head=state.head_sha,
        patch_names=tuple(p.name for p in state.patches),
        runners=watch.runners,
        ci_every_head=watch.ci_every_head,
    )
    return Facts(downstream_repo=DOWNSTREAM_REPO, series=(series,))


def head_moved(watch: Watch, state: SeriesState, commit: Commit) -> ev.HeadMoved:
    """The event of the walk reaching `commit`: the watched ref moved there from the head the
    series is on, as a poll sees it (nobody is known to have pushed)."""
    return ev.HeadMoved(
        repo=watch.upstream_repo,
        ref=watch.ref,
        before=state.head_sha or ev.ZERO_SHA,
        after=commit.sha,
        actor=None,
        source="poll",
    )


def rebase_finished(
    watch: Watch, state: SeriesState, digest: str, result_tree: str | None
) -> ev.RebaseFinished:
    """The event a rebase returns (workers.rebase.rebase_series), on the checked `state`."""
    assert state.head_sha is not None
    return ev.RebaseFinished(
        series_id=watch.series_id,
        head_sha=state.head_sha,
        digest=digest,
        outcome=state.outcome.value,
        changed=tr.proposes_change(state.patches),
        result_tree=result_tree,
    )


def planned(actions: Iterable[Action]) -> tuple[Planned, ...]:
    return tuple(Planned(a.kind.value, a.reason, a.kind in CARRIED_OUT) for a in actions)


def not_published(downstream: Downstream, reason: str) -> Published:
    """A head the planner publishes nothing for (a paused series): nothing is proposed."""
    return Published(PublishStep(Step.NOTHING, reason), downstream.open_pr, False, False)


# ----------------------------------------------------------------------------- one head


@dataclass(frozen=True)
class Downstream:
    """What the service would learn from GitHub, simulated: the series directory on the
    downstream branch, carry's open PR (its number and the directory it proposes), and the
    number the next PR gets."""

    files: Mapping[str, bytes]
    open_pr: int | None = None
    proposed: Mapping[str, bytes] | None = None
    next_pr: int = 1

    def as_dict(self) -> dict[str, Any]:
        return {
            "files": _encode_files(self.files),
            "open_pr": self.open_pr,
            "proposed": None if self.proposed is None else _encode_files(self.proposed),
            "next_pr": self.next_pr,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Downstream:
        proposed = data.get("proposed")
        return cls(
            _decode_files(data["files"]),
            data.get("open_pr"),
            None if proposed is None else _decode_files(proposed),
            int(data.get("next_pr", 1)),
        )


def _encode_files(files: Mapping[str, bytes]) -> dict[str, str]:
    return {name: base64.b64encode(data).decode("ascii") for name, data in sorted(files.items())}


def _decode_files(files: Mapping[str, str]) -> dict[str, bytes]:
    return {name: base64.b64decode(text) for name, text in files.items()}


@dataclass(frozen=True)
class Published:
    """What the publisher would have done at one head, and what followed in the model."""

    step: PublishStep
    pr: int | None  # carry's PR after the step (opened or updated), None without one
    pushed: bool  # the PR's proposed patches changed (an open, or an update that pushes)
    merged: bool  # the team merged carry's PR at this head (it needs no human)


def publish_at(
    state: SeriesState, downstream: Downstream, refreshed: Mapping[str, bytes], today: date
) -> tuple[Published, Downstream]:
    """The service's publish step on a checked `state` (after transitions.apply_check), with
    the simulated downstream standing for GitHub. Updates `state`'s PR and version as the
    service's publisher does (transitions.published, record_carry_pr)."""
    changed = tr.proposes_change(state.patches)
    version = next_version(state.version, today) if changed else state.version
    plan = proposal.build(downstream.files, state, refreshed, version, today)
    step = publish_step(
        files=plan.files,
        open_pr=downstream.open_pr,
        branch_exists=downstream.open_pr is not None,
        outcome=state.outcome.value,
    )
    if step.step in (Step.NOTHING, Step.REPORT):
        return Published(step, downstream.open_pr, False, False), downstream
    offered = proposal.applied(downstream.files, plan.files)
    if step.step is Step.OPEN:
        number, next_pr, pushed = downstream.next_pr, downstream.next_pr + 1, True
    else:
        number, next_pr = downstream.open_pr or downstream.next_pr, downstream.next_pr
        before = downstream.proposed
        pushed = before is None or not proposal.same_patches(offered, before)
    proposed = offered if pushed else (downstream.proposed or offered)
    info = PrInfo(number, "", f"carry/{state.id}", "open", step.draft or _draft(state, downstream))
    tr.published(state, info, version if pushed else None, f"PR #{number} (replay)")
    merged = state.outcome.value not in NEEDS_HUMAN
    if merged:
        tr.record_carry_pr(state, "merged")
        after = Downstream(dict(proposed), None, None, next_pr)
    else:
        after = Downstream(downstream.files, number, proposed, next_pr)
    return Published(step, number, pushed, merged), after


def _draft(state: SeriesState, downstream: Downstream) -> bool:
    """A PR opened as a draft stays one (GitHub's REST API cannot undo it)."""
    return bool(state.pr and state.pr.number == downstream.open_pr and state.pr.draft)


class ReplayAction(StrEnum):
    """What carry would have done at a head, in the timeline."""

    OPEN_PR = "open-pr"
    UPDATE_PR = "update-pr"
    MERGED = "merged"  # the model's team merged carry's PR (it needed no human)
    DROP = "drop"
    WAIT_HUMAN = "wait-human"
    NOTHING = "nothing"


@dataclass(frozen=True)
class Act:
    action: ReplayAction
    why: str
    patch: str | None = None
    pr: int | None = None

    @property
    def words(self) -> str:
        about = f" {self.patch}" if self.patch else ""
        pr = f" #{self.pr}" if self.pr is not None else ""
        return f"{self.action.value}{about}{pr}: {self.why}"


@dataclass(frozen=True)
class PatchAt:
    """One patch's finding at one head."""

    name: str
    status: Status
    decision: Decision  # after the series' policy (auto-drop) and overrides
    reason: str
    engine_decision: Decision  # what the content alone says
    taken_by: str | None = None  # the upstream commit the evidence names, if any
    taken_subject: str = ""

    @property
    def needs_human(self) -> bool:
        return needs_human(self.status, self.decision)

    @property
    def droppable(self) -> bool:
        return self.engine_decision is Decision.DROP


@dataclass(frozen=True)
class HeadRecord:
    """The timeline's entry for one head."""

    index: int  # position among the walked heads, from 0
    sha: str
    date: str
    subject: str
    outcome: str
    patches: tuple[PatchAt, ...]
    step: Step
    step_reason: str
    pr: int | None
    pushed: bool
    merged: bool
    acts: tuple[Act, ...]
    planned: tuple[Planned, ...] = ()  # the planner's actions at this head, in order

    def as_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "sha": self.sha,
            "date": self.date,
            "subject": self.subject,
            "outcome": self.outcome,
            "patches": [
                {
                    "name": p.name,
                    "status": p.status.value,
                    "decision": p.decision.value,
                    "reason": p.reason,
                    "engine_decision": p.engine_decision.value,
                    "needs_human": p.needs_human,
                    "taken_by": p.taken_by,
                    "taken_subject": p.taken_subject,
                }
                for p in self.patches
            ],
            "step": self.step.value,
            "step_reason": self.step_reason,
            "pr": self.pr,
            "pushed": self.pushed,
            "merged": self.merged,
            "actions": [
                {"action": a.action.value, "why": a.why, "patch": a.patch, "pr": a.pr}
                for a in self.acts
            ],
            "planned": [p.as_dict() for p in self.planned],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HeadRecord:
        return cls(
            index=int(data["index"]),
            sha=data["sha"],
            date=data["date"],
            subject=data["subject"],
            outcome=data["outcome"],
            patches=tuple(
                PatchAt(
                    p["name"],
                    Status(p["status"]),
                    Decision(p["decision"]),
                    p["reason"],
                    Decision(p["engine_decision"]),
                    p.get("taken_by"),
                    p.get("taken_subject", ""),
                )
                for p in data["patches"]
            ),
            step=Step(data["step"]),
            step_reason=data["step_reason"],
            pr=data.get("pr"),
            pushed=bool(data["pushed"]),
            merged=bool(data["merged"]),
            acts=tuple(
                Act(ReplayAction(a["action"]), a["why"], a.get("patch"), a.get("pr"))
                for a in data["actions"]
            ),
            planned=tuple(Planned.from_dict(p) for p in data.get("planned", ())),
        )


def head_record(
    index: int,
    commit: Commit,
    state: SeriesState,
    found: Sequence[tr.CheckedPatch],
    published: Published,
    plan: Sequence[Planned] = (),
) -> HeadRecord:
    """The timeline entry of a head: `state` after the check and publish, `found` the engine's
    own findings (before the policy), `published` what publish_at decided, `plan` what the
    planner asked for at this head."""
    engine = {p.name: p for p in found}
    patches = []
    for p in state.patches:
        finding = engine.get(p.name)
        took = taken_by(p.evidence)
        patches.append(
            PatchAt(
                p.name,
                p.status,
                p.decision,
                p.reason,
                finding.decision if finding is not None else p.decision,
                took[0] if took else None,
                took[1] if took else "",
            )
        )
    return HeadRecord(
        index=index,
        sha=commit.sha,
        date=commit.date,
        subject=commit.subject,
        outcome=state.outcome.value,
        patches=tuple(patches),
        step=published.step.step,
        step_reason=published.step.reason,
        pr=published.pr,
        pushed=published.pushed,
        merged=published.merged,
        acts=acts(patches, published),
        planned=tuple(plan),
    )


def unchecked_record(
    index: int, commit: Commit, state: SeriesState, published: Published, plan: Sequence[Planned]
) -> HeadRecord:
    """The timeline entry of a head the planner does not check (a paused series: the head is
    recorded only): no finding, nothing published."""
    step = published.step
    return HeadRecord(
        index=index,
        sha=commit.sha,
        date=commit.date,
        subject=commit.subject,
        outcome=state.outcome.value,
        patches=(),
        step=step.step,
        step_reason=step.reason,
        pr=published.pr,
        pushed=False,
        merged=False,
        acts=(Act(ReplayAction.NOTHING, step.reason),),
        planned=tuple(plan),
    )


def acts(patches: Sequence[PatchAt], published: Published) -> tuple[Act, ...]:
    """What carry would have done at a head: its PR (opened, updated, merged by the team),
    each patch it drops and why, each patch that waits for a human and why; else nothing."""
    out: list[Act] = []
    step = published.step
    if step.step is Step.OPEN:
        out.append(Act(ReplayAction.OPEN_PR, f"{step.words}: {step.reason}", pr=published.pr))
    elif step.step is Step.UPDATE and published.pushed:
        out.append(Act(ReplayAction.UPDATE_PR, step.reason, pr=published.pr))
    if published.merged:
        out.append(
            Act(ReplayAction.MERGED, "it needs no human: the team merges it", pr=published.pr)
        )
    for p in patches:
        if p.decision is Decision.DROP:
            out.append(Act(ReplayAction.DROP, p.reason, patch=p.name))
        elif p.needs_human:
            out.append(Act(ReplayAction.WAIT_HUMAN, f"{p.status.value}: {p.reason}", patch=p.name))
    if not out:
        out.append(Act(ReplayAction.NOTHING, step.reason))
    return tuple(out)


# ----------------------------------------------------------------------------- the walk's sum


@dataclass(frozen=True)
class Episode:
    """A stretch of heads during which a patch waited for a human."""

    status: Status  # the first head's
    decision: Decision
    reason: str
    start_index: int
    start_sha: str
    start_date: str
    end_index: int | None  # the first head where it no longer waited; None: still waiting
    end_date: str | None
    heads: int
    days: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "status": self.status.value,
            "decision": self.decision.value,
            "reason": self.reason,
            "start": {"index": self.start_index, "sha": self.start_sha, "date": self.start_date},
            "end": None
            if self.end_index is None
            else {"index": self.end_index, "date": self.end_date},
            "heads": self.heads,
            "days": self.days,
        }


@dataclass(frozen=True)
class Droppable:
    """Where a patch first became droppable (the engine's content evidence says drop)."""

    index: int
    head: str
    date: str
    commit: str  # the upstream commit that took it: the evidence's, else the head itself
    subject: str
    pr: int | None  # the PR the commit's subject names, e.g. "(#123)"
    from_evidence: bool  # False: no history match named one; the head commit stands for it

    def as_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "head": self.head,
            "date": self.date,
            "commit": self.commit,
            "subject": self.subject,
            "pr": self.pr,
            "from_evidence": self.from_evidence,
        }


@dataclass(frozen=True)
class PatchSummary:
    name: str
    episodes: tuple[Episode, ...]
    droppable: Droppable | None
    dropped_at: int | None  # the head whose merged PR removed it from the series
    last_status: Status
    last_decision: Decision

    @property
    def first_human(self) -> Episode | None:
        return self.episodes[0] if self.episodes else None

    @property
    def human_heads(self) -> int:
        return sum(e.heads for e in self.episodes)

    @property
    def human_days(self) -> float:
        return round(sum(e.days for e in self.episodes), 2)

    def as_dict(self) -> dict[str, Any]:
        first = self.first_human
        return {
            "name": self.name,
            "first_needed_human": None if first is None else first.as_dict()["start"],
            "human_heads": self.human_heads,
            "human_days": self.human_days,
            "episodes": [e.as_dict() for e in self.episodes],
            "droppable": None if self.droppable is None else self.droppable.as_dict(),
            "dropped_at": self.dropped_at,
            "last_status": self.last_status.value,
            "last_decision": self.last_decision.value,
        }


def _days(start: str, end: str) -> float:
    def parse(text: str) -> datetime:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ")

    return round((parse(end) - parse(start)).total_seconds() / 86400, 2)


def patch_summaries(records: Sequence[HeadRecord]) -> list[PatchSummary]:
    """Per patch, in the order they first appear: each stretch it waited for a human (heads,
    days), where it first became droppable and by which upstream commit (and PR)."""
    names: dict[str, None] = {}
    for record in records:
        for p in record.patches:
            names.setdefault(p.name)
    return [_summary(name, records) for name in names]


def _summary(name: str, records: Sequence[HeadRecord]) -> PatchSummary:
    episodes: list[Episode] = []
    open_: tuple[PatchAt, HeadRecord, int] | None = None  # (first finding, first head, heads)
    droppable: Droppable | None = None
    dropped_at: int | None = None
    last: PatchAt | None = None
    for record in records:
        found = next((p for p in record.patches if p.name == name), None)
        if found is None:
            if open_ is not None:  # gone from the series while it waited
                episodes.append(_close(open_, record))
                open_ = None
            continue
        last = found
        if found.needs_human and open_ is None:
            open_ = (found, record, 0)
        if open_ is not None and not found.needs_human:
            episodes.append(_close(open_, record))
            open_ = None
        if open_ is not None:
            open_ = (open_[0], open_[1], open_[2] + 1)
        if found.droppable and droppable is None:
            droppable = _droppable(found, record)
        if found.decision is Decision.DROP and record.merged and dropped_at is None:
            dropped_at = record.index
    if open_ is not None:
        episodes.append(_close(open_, None, records[-1].date))
    assert last is not None
    return PatchSummary(name, tuple(episodes), droppable, dropped_at, last.status, last.decision)


def _close(
    open_: tuple[PatchAt, HeadRecord, int], end: HeadRecord | None, last_date: str = ""
) -> Episode:
    found, start, heads = open_
    end_date = end.date if end is not None else last_date
    return Episode(
        found.status,
        found.decision,
        found.reason,
        start.index,
        start.sha,
        start.date,
        end.index if end is not None else None,
        end.date if end is not None else None,
        heads,
        _days(start.date, end_date),
    )


def _droppable(found: PatchAt, record: HeadRecord) -> Droppable:
    if found.taken_by:
        commit, subject, from_evidence = found.taken_by, found.taken_subject, True
    else:
        commit, subject, from_evidence = record.sha, record.subject, False
    return Droppable(
        record.index,
        record.sha,
        record.date,
        commit,
        subject,
        pr_in_subject(subject),
        from_evidence,
    )


@dataclass(frozen=True)
class Summary:
    heads_walked: int
    first_head: str | None
    last_head: str | None
    first_date: str | None
    last_date: str | None
    prs_opened: int
    prs_updated: int
    prs_merged: int
    automatic_drops: int
    reviews: int  # times a patch's decision became review
    conflicts: int  # times a patch began to conflict
    human_actions: int  # stretches of a patch waiting for a human (a review, a conflict, ...)
    human_actions_per_month: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "heads_walked": self.heads_walked,
            "first_head": self.first_head,
            "last_head": self.last_head,
            "first_date": self.first_date,
            "last_date": self.last_date,
            "prs_opened": self.prs_opened,
            "prs_updated": self.prs_updated,
            "prs_merged": self.prs_merged,
            "automatic_drops": self.automatic_drops,
            "reviews": self.reviews,
            "conflicts": self.conflicts,
            "human_actions": self.human_actions,
            "human_actions_per_month": self.human_actions_per_month,
        }


def summarize(records: Sequence[HeadRecord]) -> Summary:
    """The walk in figures: PRs, automatic drops, and each time a patch started to wait for a
    human (a review, a conflict), per month of the head where it started."""
    counts = {action: 0 for action in ReplayAction}
    for record in records:
        for act in record.acts:
            counts[act.action] += 1
    automatic = sum(
        1
        for record in records
        if record.merged
        for p in record.patches
        if p.decision is Decision.DROP
    )
    reviews, conflicts = _entries(records)
    per_month = dict.fromkeys(_months(records), 0)
    for summary in patch_summaries(records):
        for episode in summary.episodes:
            per_month[episode.start_date[:7]] += 1
    first, last = (records[0], records[-1]) if records else (None, None)
    return Summary(
        heads_walked=len(records),
        first_head=first.sha if first else None,
        last_head=last.sha if last else None,
        first_date=first.date if first else None,
        last_date=last.date if last else None,
        prs_opened=counts[ReplayAction.OPEN_PR],
        prs_updated=counts[ReplayAction.UPDATE_PR],
        prs_merged=counts[ReplayAction.MERGED],
        automatic_drops=automatic,
        reviews=reviews,
        conflicts=conflicts,
        human_actions=sum(per_month.values()),
        human_actions_per_month=per_month,
    )


def _entries(records: Sequence[HeadRecord]) -> tuple[int, int]:
    """(reviews, conflicts): how often a patch entered review, and began to conflict."""
    reviews = conflicts = 0
    before: dict[str, PatchAt] = {}
    for record in records:
        for p in record.patches:
            old = before.get(p.name)
            if p.decision is Decision.REVIEW and (
                old is None or old.decision is not Decision.REVIEW
            ):
                reviews += 1
            if p.status is Status.CONFLICT and (old is None or old.status is not Status.CONFLICT):
                conflicts += 1
        before = {p.name: p for p in record.patches}
    return reviews, conflicts


def _months(records: Sequence[HeadRecord]) -> list[str]:
    """Every month from the first head's to the last head's, none skipped."""
    if not records:
        return []
    year, month = int(records[0].date[:4]), int(records[0].date[5:7])
    end = records[-1].date[:7]
    months = []
    while True:
        label = f"{year:04d}-{month:02d}"
        months.append(label)
        if label >= end:
            return months
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)


def changed_heads(records: Sequence[HeadRecord]) -> list[HeadRecord]:
    """The heads where something happened: the first, and each where carry acted or a
    patch's status or decision differs from the head before (the text and HTML show these)."""
    shown = []
    before: tuple[tuple[str, str, str], ...] | None = None
    said: tuple[tuple[ReplayAction, str | None], ...] = ()
    for record in records:
        now = tuple((p.name, p.status.value, p.decision.value) for p in record.patches)
        says = tuple(
            (a.action, a.patch) for a in record.acts if a.action is not ReplayAction.NOTHING
        )
        quiet = not says or _only_waits(record) or _repeats(says, said)
        if before is None or now != before or not quiet:
            shown.append(record)
        before, said = now, says
    return shown


def moved_patches(before: HeadRecord | None, record: HeadRecord) -> tuple[PatchAt, ...]:
    """The patches of `record` whose status or decision differs from the head before (every
    patch at the first head): what a timeline shows, so a long series' steady patches do not
    drown the one that moved."""
    if before is None:
        return record.patches
    was = {p.name: (p.status, p.decision) for p in before.patches}
    return tuple(p for p in record.patches if was.get(p.name) != (p.status, p.decision))


def previous_heads(records: Sequence[HeadRecord]) -> dict[int, HeadRecord | None]:
    """Each head's index -> the head walked before it (None for the first)."""
    return {r.index: (records[i - 1] if i else None) for i, r in enumerate(records)}


def _only_waits(record: HeadRecord) -> bool:
    """A head where a waiting patch still waits, and carry's report is all that changes."""
    return all(a.action is ReplayAction.WAIT_HUMAN for a in record.acts)


_NEWS = frozenset({ReplayAction.OPEN_PR, ReplayAction.UPDATE_PR, ReplayAction.MERGED})


def _repeats(
    says: tuple[tuple[ReplayAction, str | None], ...],
    said: tuple[tuple[ReplayAction, str | None], ...],
) -> bool:
    """carry says again what it said at the head before (a drop waiting in a draft PR beside a
    review), touching no PR: nothing new to show."""
    if any(action in _NEWS for action, _ in says):
        return False
    return says == tuple(said_once for said_once in said if said_once[0] not in _NEWS)


# ----------------------------------------------------------------------------- resume


@dataclass(frozen=True)
class Progress:
    """A replay as far as it went: the heads done, the state they left, the timeline."""

    key: str  # what the replay is of (repo, series, start, sampling): see bot.replay
    heads: tuple[str, ...]  # the walked heads' SHAs, in order
    state: SeriesState
    downstream: Downstream
    records: tuple[HeadRecord, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "key": self.key,
            "heads": list(self.heads),
            "state": self.state.to_dict(),
            "downstream": self.downstream.as_dict(),
            "records": [r.as_dict() for r in self.records],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Progress:
        if data.get("schema") != SCHEMA:
            raise ValueError(f"replay progress of schema {data.get('schema')!r}")
        return cls(
            str(data["key"]),
            tuple(data["heads"]),
            SeriesState.from_dict(data["state"]),
            Downstream.from_dict(data["downstream"]),
            tuple(HeadRecord.from_dict(r) for r in data["records"]),
        )

    def resumes(self, key: str, heads: Sequence[str]) -> bool:
        """Whether this progress is a beginning of the replay of `key` over `heads`."""
        return self.key == key and tuple(heads[: len(self.heads)]) == self.heads

    def extended(self, state: SeriesState, downstream: Downstream, record: HeadRecord) -> Progress:
        return replace(
            self,
            heads=(*self.heads, record.sha),
            state=state,
            downstream=downstream,
            records=(*self.records, record),
        )
