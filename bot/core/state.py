"""What carry knows about each series, as plain values with a JSON form.

Written by the workers (through bot.store), read by the planner (as facts), the API and the
dashboard. Pure: no I/O here.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field, fields, replace
from enum import StrEnum
from typing import Any, TypeVar

from bot.core.bisect import Bisection
from bot.core.classify import Decision, Status
from bot.core.trust import Push
from bot.core.weblink import web_link_problem

log = logging.getLogger("carry.state")
E = TypeVar("E", bound=StrEnum)

# The stored document's layout. 1: what carry stored before the field existed (no "schema"
# key); 2: the same fields, with phase, outcome, patch status, decision and CI state checked
# against their enums on load.
SCHEMA_VERSION = 2


class SchemaError(ValueError):
    """A stored state this carry cannot read (written by a newer one)."""


class Phase(StrEnum):
    """Where a series stands, in the words the dashboard shows."""

    IDLE = "idle"
    QUEUED = "queued"
    RUNNING = "running"
    AWAITING_IMPORT = "awaiting-import"
    PAUSED = "paused"
    ERROR = "error"


class Outcome(StrEnum):
    """What the last check of a series found, as a whole."""

    NONE = "none"
    CLEAN = "clean"
    CHANGED = "changed"
    REVIEW = "review"
    CONFLICT = "conflict"
    ERROR = "error"


class CiStatus(StrEnum):
    """Where one hardware CI row stands."""

    WAITING_APPROVAL = "waiting-approval"
    QUEUED = "queued"
    RUNNING = "running"
    SUCCESS = "success"
    FAILURE = "failure"
    INFRA_ERROR = "infra-error"
    # the check ran but its load did not exercise what it needs (exit 77): amber, never a pass
    # or a bug; whether it keeps a head from being good is the series' ci.inconclusive
    INCONCLUSIVE = "inconclusive"
    CANCELLED = "cancelled"
    REUSED = "reused"


PHASES = tuple(p.value for p in Phase)
OUTCOMES = tuple(o.value for o in Outcome)
CI_STATES = tuple(c.value for c in CiStatus)


@dataclass
class PatchState:
    name: str
    subject: str = ""
    status: Status = Status.PENDING
    decision: Decision = Decision.NONE
    reason: str = ""
    # the engine's own decision and reason, before the series' policy and the overrides: a pin
    # or drop request re-decides from them at once, without waiting for a re-check
    engine_decision: Decision = Decision.NONE
    engine_reason: str = ""
    evidence: list[dict[str, Any]] = field(default_factory=list)
    pinned: bool = False  # `/carry keep NAME`: never dropped automatically
    drop_requested_by: str | None = None  # `/carry drop NAME`
    upstream_prs: list[dict[str, Any]] = field(default_factory=list)  # {ref, state, merge_commit}
    interdiff: str = ""
    conflict: dict[str, Any] | None = None
    changed: bool = False
    # the upstream commits that brought upstream's version of the patch into the head (for
    # upstream-version, partial, contained): {sha, subject, pr, how}
    upstream_commits: list[dict[str, Any]] = field(default_factory=list)
    # a refreshed patch's kind of refresh: {"class": context-only | content-changed,
    # "forced_by": [{file, hunk, sha, subject, pr}]} (bot.core.refresh); {} when not refreshed
    refresh: dict[str, Any] = field(default_factory=dict)

    @property
    def needs_attention(self) -> bool:
        return self.status in ("conflict", "partial", "upstream-version", "invalid") or (
            self.decision == "review"
        )


@dataclass
class CiState:
    runner: str
    state: CiStatus = CiStatus.QUEUED
    run_id: str = ""
    tree_key: str = ""
    head_sha: str = ""
    detail: str = ""
    url: str = ""
    updated_at: str = ""
    attempt: int = 1
    # the commit of carry's branch the run tested (the PR head it reports on); "" in a row
    # stored before carry kept it
    commit_sha: str = ""
    # GitHub's side of the row (App mode: one check run per run and check): the id of the run's
    # check run once created (0 before), and the state GitHub was last told ("" before any);
    # the row is on GitHub when that is its state
    check_run_id: int = 0
    reported: str = ""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CiState:
        built: CiState = _build(cls, data)
        built.state = _member(CiStatus, built.state, CiStatus.INFRA_ERROR, f"CI row {built.runner}")
        built.url = _web_link(built.url, f"CI row {built.runner}")
        built.check_run_id = int(built.check_run_id or 0)
        if "reported" not in data:  # a row from before carry kept it: taken as on GitHub
            built.reported = built.state
        return built

    @property
    def on_github(self) -> bool:
        """Whether GitHub shows this row's state (its check run or commit status)."""
        return self.reported == self.state

    def word(self) -> CiState:
        """The row as a report says it, without GitHub's side: two rows with the same word
        are the same report."""
        return replace(self, check_run_id=0, reported="")


class Verdict(StrEnum):
    """What the checks of one head's exact tree (upstream head + the series as carried) say."""

    GREEN = "green"  # every check passed
    RED = "red"  # a check failed: the fix, or the build with it, is broken on this head
    PENDING = "pending"  # checks still to come: queued, running, waiting for /carry approve
    UNKNOWN = "unknown"  # no verdict: an infrastructure error or a cancelled run


@dataclass
class HeadCheck:
    """One upstream head whose tree carry tested, and what each of its checks said."""

    head: str
    tree_key: str
    verdict: Verdict = Verdict.PENDING
    checks: dict[str, str] = field(default_factory=dict)  # CI row key -> its state
    at: str = ""  # when the tree was first asked for

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HeadCheck:
        built: HeadCheck = _build(cls, data)
        built.verdict = _member(Verdict, built.verdict, Verdict.UNKNOWN, f"head {built.head}")
        return built


@dataclass
class GoodHead:
    """The newest upstream head whose tree passed every check: the last known good."""

    head: str
    tree_key: str
    at: str  # when its last check passed
    # its tested tree as a commit (the upstream head + one commit per carried patch), and the
    # downstream ref carry pointed at it (carry/good/<series>); "" until carry pushed one
    commit: str = ""
    ref: str = ""


@dataclass
class TreeBranch:
    """The tested tree as a branch of the downstream repository (carry/tree/<series>): the
    upstream head plus one commit per carried patch, the exact tree the runners test."""

    head: str  # the upstream head it is built on
    commit: str  # the branch's commit (the last patch's)
    tree: str
    branch: str
    at: str


@dataclass
class RedStreak:
    """Heads red in a row: since which head and when, and how many."""

    head: str  # the first red head
    at: str
    heads: int = 1
    last: str = ""  # the newest red head


@dataclass
class HumanWait:
    """The series has needed a human (a conflict or a review) since this head: how many
    checked heads since, and whether people were told it is stuck (bot.core.attention)."""

    head: str  # the first head that needed a human
    at: str
    heads: int = 1
    last: str = ""  # the newest checked head that still needs one
    told: bool = False


@dataclass
class PrInfo:
    number: int
    url: str
    branch: str
    state: str = "open"  # open | closed | merged
    draft: bool = False
    head_sha: str = ""
    # GitHub refused the last edit of the PR's CI table (in its body): a report sends it again
    # until it lands (bot.core.ci_report.table_owed); a publish writes a new body and clears it
    ci_table_owed: bool = False


@dataclass
class ClosedPr:
    """carry's PR that a person closed unmerged (or whose branch they deleted, which closes
    it): carry opens no new PR for the heads it was closed at until upstream moves on or a
    maintainer says `/carry reopen`; the next PR it opens links this one."""

    number: int
    url: str = ""
    by: str | None = None  # who closed it; None: GitHub did not say
    # the upstream heads the series was checked on and had seen when it was closed
    heads: list[str] = field(default_factory=list)
    reopened_by: str | None = None  # `/carry reopen`
    at: str | None = None  # when it was closed (ISO 8601), where GitHub said

    def holds(self, checked_head: str | None) -> bool:
        """Whether the close still stops a new PR for a check of `checked_head`."""
        return self.reopened_by is None and checked_head in self.heads

    @property
    def who(self) -> str:
        return f"@{self.by}" if self.by else "someone"


class NoticeKind(StrEnum):
    """What carry must tell carry's PR once, that no later state says again by itself (a
    conflict's report and the drops are rendered from the state at every publish)."""

    COMMITS_KEPT = "commits-kept"  # a person's commits on carry's branch, kept on a backup branch
    OTHER = "other"  # one stored by a newer carry: said as stored all the same


@dataclass
class Notice:
    """Something carry must say on its PR: recorded in the state before it is said, and said
    (one comment, found again by its marker) until GitHub has it."""

    id: str  # names its comment: `<!-- carry:notice=<id> -->`
    kind: NoticeKind
    body: str  # the comment's text, without the marker
    at: str = ""  # when it became due
    # the history entry's fields once said (the backup branch, the commits, their authors)
    details: dict[str, Any] = field(default_factory=dict)
    said_at: str | None = None  # None: still to say
    pr: int | None = None  # the PR it was said on
    comment_id: int = 0

    @property
    def due(self) -> bool:
        return self.said_at is None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Notice:
        built: Notice = _build(cls, data)
        # a kind this carry does not know is still said: its text is stored with it
        built.kind = _member(NoticeKind, built.kind, NoticeKind.OTHER, f"notice {built.id}")
        built.comment_id = int(built.comment_id or 0)
        return built


@dataclass
class PublishRefused:
    """GitHub refused carry's push to its branch because of a setting (a ruleset or a branch
    protection, bot/core/push_refusal.py): the setting, what fixes it, and since when. Cleared
    by the next push that gets through."""

    code: str  # GH013 (ruleset) / GH006 (branch protection)
    source: str  # push_refusal.Source
    branch: str
    blocks: list[str] = field(default_factory=list)  # push_refusal.Block values
    setting: str = ""
    fix: str = ""
    head: str | None = None  # the upstream head whose refresh was refused
    at: str | None = None  # when it was first refused (ISO 8601)
    attempts: int = 1
    pr: int | None = None  # the PR whose comment says so

    @property
    def words(self) -> str:
        return f"GitHub refused carry's push ({self.code}): {self.setting}; fix: {self.fix}"


@dataclass
class SeriesState:
    id: str
    upstream_repo: str = ""
    # where upstream_repo's web pages are (config's upstream URL: github.com, a GHE host); ""
    # for an upstream with none (a local path); None in a state stored before carry kept it
    upstream_web_host: str | None = None
    base: str = ""  # how the base is named, e.g. "tag v0.26.0", "pull 53899"
    head_sha: str | None = None
    head_ref: str | None = None
    head_seen_at: str | None = None
    head_actor: str | None = None
    checked_head: str | None = None
    checked_digest: str | None = None
    checked_at: str | None = None
    phase: Phase = Phase.IDLE
    outcome: Outcome = Outcome.NONE
    patches: list[PatchState] = field(default_factory=list)
    pr: PrInfo | None = None
    # carry's PR a person closed, until a new PR replaces it (see ClosedPr)
    closed_pr: ClosedPr | None = None
    ci: dict[str, CiState] = field(default_factory=dict)
    version: str | None = None
    last_event: str | None = None
    error: str | None = None
    upstream_error: str | None = (
        None  # why the last poll of the upstream failed; None after a good one
    )
    # when the error (or the upstream's) began: set as it appears, kept while it lasts
    error_since: str | None = None
    upstream_error_since: str | None = None
    paused_by: str | None = None  # set by `/carry pause`; the config's policy is separate
    approvals: list[str] = field(default_factory=list)  # head SHAs approved for hardware
    # who pushed each recent head SHA, from push webhooks (a poll knows no pusher): trust
    # belongs to a SHA and its pusher, whichever event about the SHA came first
    pushers: dict[str, str] = field(default_factory=dict)
    # the recent pushes of the watched ref (newest last, bot.core.trust.MAX_PUSHES kept): a
    # head runs on the hardware unapproved only if every push since a trusted or approved
    # head was a trusted author's (bot.core.trust)
    pushes: list[Push] = field(default_factory=list)
    # recent heads the series moved past (the head before each move carry followed): a late
    # delivery of one of them is behind, not a move (heads only move forward)
    replaced_heads: list[str] = field(default_factory=list)
    base_pr_state: str | None = None  # for pull bases: open | merged | closed_unmerged
    # the watched ref upstream has not created (a release tag not cut yet); polls wait for it
    waiting_for_ref: str | None = None
    # the base the series sits on instead of the config's, after `/carry retarget` or a merged
    # base PR: {"branch": "main"} or {"pull": 54371}; None: the config's base
    base_override: dict[str, Any] | None = None
    # a base PR closed unmerged: its likely successor, why, and how the patches fare on it
    successor: dict[str, Any] | None = None
    # every head verified: the recent heads whose trees were tested (oldest first), the last
    # known good one, and the red streak the series is in (None when it is not red)
    heads: list[HeadCheck] = field(default_factory=list)
    last_good: GoodHead | None = None
    red_streak: RedStreak | None = None
    # the tested tree's branch as last pushed, and the tree commit of each recent head (upstream
    # head -> commit, newest last; bot.core.tree_branch.MAX_TREE_COMMITS kept)
    tree_branch: TreeBranch | None = None
    tree_commits: dict[str, str] = field(default_factory=dict)
    # since when a human is needed (a conflict, a review); None when none is
    human_wait: HumanWait | None = None
    # the upstream range between the last good head and the first red one, bisected
    bisect: Bisection | None = None
    # what carry must say on its PR (due), and the last ones it said; empty in a state stored
    # before carry kept them
    notices: list[Notice] = field(default_factory=list)
    # GitHub refuses carry's push because of a ruleset or branch protection; None: it does not
    publish_refused: PublishRefused | None = None
    updated_at: str = ""
    schema: int = SCHEMA_VERSION

    @property
    def needs_attention(self) -> list[str]:
        """Why a maintainer should look now, most urgent first; empty when nothing is needed."""
        reasons = []
        if self.phase == "error" and self.error:
            reasons.append(f"error: {self.error}")
        reasons += [
            f"{p.name}: {p.status}" for p in self.patches if p.status in ("conflict", "invalid")
        ]
        reasons += [
            f"{p.name}: review ({p.status})"
            for p in self.patches
            if p.decision == "review" and p.status not in ("conflict", "invalid")
        ]
        reasons += [
            f"CI {c.runner}: {c.state}"
            for c in self.ci.values()
            if c.state in ("failure", "infra-error")
        ]
        reasons += [
            f"CI {c.runner}: waiting for /carry approve"
            for c in self.ci.values()
            if c.state == "waiting-approval"
        ]
        if self.upstream_error:
            reasons.append(f"upstream unreachable: {self.upstream_error}")
        if self.closed_pr is not None and self.closed_pr.holds(self.checked_head):
            reasons.append(self.closed_pr_words)
        if self.base_pr_state == "closed_unmerged":
            found = self.successor.get("summary") if self.successor else None
            reasons.append(found or "base PR was closed without being merged")
        if self.publish_refused is not None:
            reasons.append(self.publish_refused.words)
        return reasons

    @property
    def closed_pr_words(self) -> str:
        closed = self.closed_pr
        assert closed is not None
        return (
            f"carry's PR #{closed.number} was closed by {closed.who}; carry opens no new PR "
            "until upstream moves or `/carry reopen`"
        )

    def patch(self, name: str) -> PatchState | None:
        return next((p for p in self.patches if p.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SeriesState:
        data = migrate(data)
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["patches"] = [_patch(p) for p in data.get("patches", [])]
        values["ci"] = {k: CiState.from_dict(v) for k, v in (data.get("ci") or {}).items()}
        values["pr"] = _build(PrInfo, data["pr"]) if data.get("pr") else None
        values["heads"] = [HeadCheck.from_dict(h) for h in data.get("heads") or []]
        values["pushes"] = [Push.from_dict(p) for p in data.get("pushes") or []]
        good, red = data.get("last_good"), data.get("red_streak")
        values["last_good"] = _build(GoodHead, good) if good else None
        values["red_streak"] = _build(RedStreak, red) if red else None
        branch = data.get("tree_branch")
        values["tree_branch"] = _build(TreeBranch, branch) if isinstance(branch, dict) else None
        wait = data.get("human_wait")
        values["human_wait"] = _build(HumanWait, wait) if isinstance(wait, dict) else None
        values["bisect"] = Bisection.from_dict(data["bisect"]) if data.get("bisect") else None
        values["notices"] = [Notice.from_dict(n) for n in data.get("notices") or []]
        closed = data.get("closed_pr")
        values["closed_pr"] = _build(ClosedPr, closed) if isinstance(closed, dict) else None
        refused = data.get("publish_refused")
        values["publish_refused"] = (
            _build(PublishRefused, refused) if isinstance(refused, dict) else None
        )
        where = f"series {data.get('id')}"
        if values["pr"] is not None:
            values["pr"].url = _web_link(values["pr"].url, f"{where}: PR")
        if values.get("upstream_web_host"):
            values["upstream_web_host"] = _web_link(
                values["upstream_web_host"], f"{where}: upstream web host"
            )
        values["phase"] = _member(Phase, data.get("phase", Phase.IDLE), Phase.ERROR, where)
        values["outcome"] = _member(
            Outcome, data.get("outcome", Outcome.NONE), Outcome.ERROR, where
        )
        return cls(**values)


def migrate(data: dict[str, Any]) -> dict[str, Any]:
    """The stored document in this carry's layout. Schema 1 (no "schema" key) has today's
    fields; its values are checked against the enums by from_dict. A newer schema is refused:
    writing it back would lose the fields this carry does not know."""
    schema = data.get("schema", 1)
    if not isinstance(schema, int) or schema < 1:
        raise SchemaError(f"series {data.get('id')}: schema {schema!r} is not a version number")
    if schema > SCHEMA_VERSION:
        raise SchemaError(
            f"series {data.get('id')} was stored by a newer carry (schema {schema}); this "
            f"carry reads schema {SCHEMA_VERSION} and older: upgrade it before it writes"
        )
    return {**data, "schema": SCHEMA_VERSION}


def stamp_since(state: SeriesState, before: tuple[str | None, str | None], now: str) -> None:
    """Keeps when the series' error and its upstream's began: `before` is (error,
    upstream_error) as they were; a new one starts now, one that went away has no start."""
    had_error, had_upstream_error = before
    if state.error is None:
        state.error_since = None
    elif had_error is None or state.error_since is None:
        state.error_since = now
    if state.upstream_error is None:
        state.upstream_error_since = None
    elif had_upstream_error is None or state.upstream_error_since is None:
        state.upstream_error_since = now


def _patch(data: dict[str, Any]) -> PatchState:
    patch: PatchState = _build(PatchState, data)
    where = f"patch {patch.name}"
    patch.status = _member(Status, patch.status, Status.INVALID, where)
    # never read an unknown decision as a drop: a human looks at it
    patch.decision = _member(Decision, patch.decision, Decision.REVIEW, where)
    # an unknown engine decision is not re-decided from: the next check decides
    patch.engine_decision = _member(Decision, patch.engine_decision, Decision.NONE, where)
    return patch


def _member(enum: type[E], value: Any, fallback: E, where: str) -> E:
    """`value` as a member of `enum`; a value this carry does not know becomes `fallback`
    (the safe reading), and the log says so."""
    try:
        return enum(value)
    except ValueError:
        log.warning(
            "%s: stored %s %r is unknown to this carry; read as %r",
            where,
            enum.__name__,
            value,
            fallback.value,
        )
        return fallback


def _web_link(value: Any, where: str) -> str:
    """A stored link as carry reads it: an http(s) URL, or "" for none. Any other (a
    `javascript:` one planted in the store) is refused, and the log says so: the dashboard
    and the API never show it."""
    if value in ("", None):
        return ""
    problem = web_link_problem(str(value))
    if problem is None:
        return str(value)
    log.warning("%s: stored link refused: %s", where, problem)
    return ""


def _build(kind: type, data: dict[str, Any]) -> Any:
    known = {f.name for f in fields(kind)}
    return kind(**{k: v for k, v in data.items() if k in known})
