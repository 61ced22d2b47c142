"""The JSON API's response models: what each dashboard page and its JSON twin show."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from bot.web.timeline import Outcome

# --------------------------------------------------------------------------- response models


class ApiModel(BaseModel):
    model_config = ConfigDict(frozen=True)


class ErrorOut(ApiModel):
    error: str


class UpstreamPrOut(ApiModel):
    ref: str
    state: str  # open | draft | merged | closed_unmerged | superseded | reverted | not-filed
    label: str  # the state in words: "closed unmerged", "superseded by o/r#2"
    url: str | None = None
    merge_commit: str | None = None
    superseded_by: str | None = None
    source: Literal["carry", "fix page"]


class HeadOut(ApiModel):
    ref: str | None
    sha: str | None
    short_sha: str | None
    seen_at: str | None
    age_s: int | None
    age: str | None
    actor: str | None


class PatchOut(ApiModel):
    name: str
    subject: str
    status: str
    decision: str
    reason: str
    pinned: bool
    drop_requested_by: str | None
    changed: bool
    needs_attention: bool
    upstream: list[UpstreamPrOut]
    # a refreshed patch: context-only or content-changed ("" when not refreshed), and for a
    # content change the upstream commits that forced it ({file, hunk, sha, subject, pr})
    refresh: str = ""
    forced_by: list[dict[str, Any]] = []


class PatchStateOut(PatchOut):
    evidence: list[dict[str, Any]]
    interdiff: str
    conflict: dict[str, Any] | None
    upstream_commits: list[dict[str, Any]]


class CiOut(ApiModel):
    runner: str
    state: str
    run_id: str
    tree_key: str
    head_sha: str
    detail: str
    url: str
    updated_at: str
    attempt: int
    # False while GitHub does not show this state yet (a refused report is being retried)
    on_github: bool = True
    check_run_id: int = 0


class PrOut(ApiModel):
    number: int
    url: str
    branch: str
    state: str
    draft: bool
    head_sha: str
    # False while the CI table in the PR's body is behind carry's (GitHub refused its edit; carry
    # sends it again after GitHub's Retry-After)
    ci_table_on_github: bool = True


class AttentionOut(ApiModel):
    series: str  # "" for carry's own health (rate limit, runners), which is no series'
    reason: str
    patch: str | None = None
    run_id: str | None = None
    since: str | None = None  # when it began, where carry knows (ISO 8601)
    age: str | None = None  # how long ago that was, in words
    link: str | None = None  # the page that shows it, for carry's own health


class _SeriesFields(ApiModel):
    id: str
    upstream_repo: str
    base: str
    base_pr_state: str | None
    waiting_for_ref: str | None
    head: HeadOut
    phase: str
    outcome: str
    version: str | None
    paused_by: str | None
    error: str | None
    last_event: str | None
    checked_at: str | None  # when the series was last checked on its head
    updated_at: str
    needs_attention: list[str]
    attention: list[AttentionOut]
    pr: PrOut | None
    ci: dict[str, CiOut]
    # The patch files in the series directory (series order), checked or not; None where the
    # directory cannot be read (no configuration, no directory, problems).
    patch_files: list[str] | None = None


class SeriesSummaryOut(_SeriesFields):
    patches: list[PatchOut]


class SuccessorOut(ApiModel):
    """A base PR closed unmerged: the PR GitHub's records name as carrying its work on."""

    closed: str
    summary: str
    ref: str | None = None
    state: str | None = None
    commit: str | None = None
    reasons: list[str] = []
    command: str | None = None
    evidence: dict[str, str] = {}
    candidates: list[int] = []


class HeadCheckOut(ApiModel):
    """One upstream head whose exact tree carry tested: green, red, pending or unknown."""

    head: str
    tree_key: str
    verdict: str
    checks: dict[str, str]
    at: str


class GoodHeadOut(ApiModel):
    """The last known good head: the newest whose tree passed every check."""

    head: str
    tree_key: str
    at: str
    badge: str  # the series' badge (SVG), for a README
    # its tested tree's commit and the downstream ref at it (carry/good/<series>); "" until
    # carry pushed one
    commit: str = ""
    ref: str = ""


class TreeBranchOut(ApiModel):
    """The tested tree as a branch of the downstream repository (carry/tree/<series>): the
    upstream head plus one commit per carried patch."""

    head: str
    commit: str
    tree: str
    branch: str
    at: str


class RedStreakOut(ApiModel):
    head: str  # the first red head
    at: str
    heads: int
    last: str


class HumanWaitOut(ApiModel):
    """Since when the series has needed a human (a conflict, a review)."""

    head: str  # the first head that needed one
    at: str
    heads: int  # checked heads since
    last: str
    told: bool  # people were told it is stuck (notify.stuck_heads / stuck_hours)


class NoticeOut(ApiModel):
    """Something carry must say on its PR (bot.core.state.Notice): due until GitHub has it."""

    id: str
    kind: str
    body: str
    at: str  # when it became due
    said_at: str | None  # None: not on GitHub yet
    pr: int | None


class BisectOut(ApiModel):
    """The upstream range between the last good head and the first red one, bisected."""

    check: str
    good: str
    bad: str
    commits: int
    status: str  # running | ab | found | range | stopped | out-of-budget
    culprit: str | None
    culprit_subject: str | None
    culprit_pr: int | None
    suspects: list[str]
    ab: dict[str, str]  # the check on plain upstream: culprit | parent -> pass | fail | ...
    runs: int
    budget: int
    reading: str
    started_at: str
    ended_at: str


class SeriesOut(_SeriesFields):
    patches: list[PatchStateOut]
    checked_head: str | None
    checked_digest: str | None
    approvals: list[str]
    base_override: dict[str, Any] | None
    successor: SuccessorOut | None
    heads: list[HeadCheckOut] = []  # the heads tested, newest first
    last_good: GoodHeadOut | None = None
    tree_branch: TreeBranchOut | None = None
    red_streak: RedStreakOut | None = None
    human_wait: HumanWaitOut | None = None
    bisect: BisectOut | None = None
    notices: list[NoticeOut] = []  # what carry must say on its PR, the ones still due first


class SeriesListOut(ApiModel):
    series: list[SeriesSummaryOut]
    health: list[AttentionOut] = []  # carry's own trouble: GitHub's rate limit, runners


class HistoryEntryOut(ApiModel):
    id: str
    at: str
    series: str
    kind: str
    summary: str
    outcome: Outcome  # problem | changed | routine | nothing: bot.web.timeline.outcome_of
    data: dict[str, Any]


class HistoryOut(ApiModel):
    series: str | None
    kind: str | None = None
    outcome: Outcome | None = None
    entries: list[HistoryEntryOut]
    # pass as `before` for the next (older) page; None when this page is the last
    next_before: str | None = None


class PatchFilesOut(ApiModel):
    patch: str
    files: list[str]


class SectionOut(ApiModel):
    title: str
    body: str


class ReleaseLineOut(ApiModel):
    release: str
    carried: bool
    mark: str  # "" when carried, "waiting" (not cut upstream yet) or "not carried"
    reason: str | None  # why, when it is not carried


class FixPageOut(ApiModel):
    name: str
    file: str
    summary: str
    affects: str
    releases: list[str]
    release_lines: list[ReleaseLineOut]  # each release: is a configured series on it?
    patches: list[PatchFilesOut]
    upstream: list[UpstreamPrOut]
    test: str
    sections: list[SectionOut]
    markdown: str


class PatchHistoryEntryOut(HistoryEntryOut):
    about: dict[str, Any]  # the part of `data` about this patch (all of it when not split)


class PatchDetailOut(ApiModel):
    series: str
    patch: PatchStateOut
    fix_page: FixPageOut | None
    fix_page_note: str | None
    history: list[PatchHistoryEntryOut]


class RunnerOut(ApiModel):
    name: str
    seen_at: str | None
    age: str | None
    info: dict[str, str]


class QueueOut(ApiModel):
    runner: str
    queue: str
    depth: int


class RunnersOut(ApiModel):
    runners: list[RunnerOut]
    queues: list[QueueOut]


class RunOut(ApiModel):
    run_id: str
    series: str | None
    runner: str | None  # the runner kind (and check) of its CI row
    ci: CiOut | None
    taken_by: str | None = None  # the runner that took it, by name


class RunLogLineOut(ApiModel):
    id: str
    stream: str
    text: str


class RunLogOut(ApiModel):
    run_id: str
    after: str
    lines: list[RunLogLineOut]


class RunRowOut(ApiModel):
    """One hardware run as the list of runs shows it."""

    run_id: str
    series: str
    kind: str  # the runner kind it was requested for
    runner: str  # the runner that took it ("" before one did)
    head_sha: str
    result: str  # its state: waiting-approval | queued | running | success | failure | ...
    finished: bool
    detail: str
    attempt: int
    requested_at: str | None
    updated_at: str | None
    duration_s: int | None  # from request to result; so far, for a run not finished
    duration: str | None
    age: str | None  # how long ago it was requested, in words


class RunsFilterOut(ApiModel):
    series: str | None = None
    runner: str | None = None  # a runner kind or a runner's name
    head: str | None = None  # a prefix of the upstream head
    result: str | None = None


class RunsOut(ApiModel):
    runs: list[RunRowOut]  # newest request first
    filters: RunsFilterOut
    total: int  # runs that match the filters
    page: int
    pages: int
    per_page: int
    series_ids: list[str]  # what the filters can choose from, over every run
    kinds: list[str]
    results: list[str]
