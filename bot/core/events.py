"""Typed events: what carry reacts to, and their JSON form for the task queue. They come from
GitHub's webhooks (bot.core.github_payloads), the poller, and carry's own tasks. Pure.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar, Literal

from bot.core.owners import StreakGrew
from bot.core.state import CiState
from bot.core.verified import Notice

ZERO_SHA = "0" * 40

Source = Literal["webhook", "poll"]
PrState = Literal["open", "merged", "closed_unmerged", "reopened", "base_edited", "edited"]
CiKind = Literal["check_run", "check_suite", "workflow_run"]
MoveKind = Literal["renamed", "transferred"]


# --------------------------------------------------------------------------- events


@dataclass(frozen=True, kw_only=True)
class HeadMoved:
    """A watched ref now points at `after` (branch push, tag push, or a PR head update)."""

    kind: ClassVar[str] = "head_moved"
    repo: str
    repo_id: int | None = None  # GitHub's id: kept through a rename or transfer
    ref: str
    before: str
    after: str
    actor: str | None
    source: Source = "webhook"
    forced: bool = False
    delivery_id: str = ""

    @property
    def key(self) -> str:
        return f"head:{self.repo}:{self.ref}:{self.after}"


@dataclass(frozen=True, kw_only=True)
class RefDeleted:
    kind: ClassVar[str] = "ref_deleted"
    repo: str
    repo_id: int | None = None  # GitHub's id: kept through a rename or transfer
    ref: str
    before: str
    actor: str | None
    source: Source = "webhook"
    delivery_id: str = ""

    @property
    def key(self) -> str:
        return f"refdel:{self.repo}:{self.ref}:{self.before}"


@dataclass(frozen=True, kw_only=True)
class PrStateChanged:
    """A pull request was opened, reopened, merged, closed unmerged, or edited."""

    kind: ClassVar[str] = "pr_state_changed"
    repo: str
    repo_id: int | None = None  # GitHub's id: kept through a rename or transfer
    number: int
    state: PrState
    head_sha: str
    base_ref: str
    merge_commit_sha: str | None = None
    merged_by: str | None = None
    actor: str | None = None
    previous_base_ref: str | None = None
    at: datetime | None = None
    source: Source = "webhook"
    delivery_id: str = ""

    @property
    def head_ref(self) -> str:
        return f"refs/pull/{self.number}/head"

    @property
    def moves_head(self) -> bool:
        """Opened/reopened: the PR head may be new to carry, so treat it like a head move."""
        return self.state in ("open", "reopened")

    @property
    def key(self) -> str:
        key = f"pr:{self.repo}#{self.number}:{self.state}:{self.head_sha}"
        if self.state == "base_edited":
            key += f":{self.base_ref}"
        # These states can recur for one head (close, reopen, close again), so the time of the
        # change tells them apart. open/merged happen once per head and must match the poller.
        if self.state in ("reopened", "closed_unmerged", "edited", "base_edited") and self.at:
            key += f"@{_iso(self.at)}"
        return key


@dataclass(frozen=True, kw_only=True)
class CommentCreated:
    kind: ClassVar[str] = "comment_created"
    repo: str
    repo_id: int | None = None  # GitHub's id: kept through a rename or transfer
    number: int
    on_pull_request: bool
    author: str
    author_association: str
    body: str
    comment_id: int
    html_url: str | None = None
    delivery_id: str = ""

    @property
    def key(self) -> str:
        return f"comment:{self.repo}:{self.comment_id}"


@dataclass(frozen=True, kw_only=True)
class IssueEdited:
    """Someone edited an issue (not a PR) of a repository: for carry, a tick on its dashboard
    issue. `previous_body` is None when the edit left the body as it was."""

    kind: ClassVar[str] = "issue_edited"
    repo: str
    repo_id: int | None = None  # GitHub's id: kept through a rename or transfer
    number: int
    actor: str
    body: str
    previous_body: str | None
    delivery_id: str = ""

    @property
    def key(self) -> str:
        return f"issue-edited:{self.repo}:{self.number}:{self.delivery_id}"


@dataclass(frozen=True, kw_only=True)
class CiResultReceived:
    """A check run, check suite or workflow run completed (or someone asked to re-run it)."""

    kind: ClassVar[str] = "ci_result"
    ci_kind: CiKind
    action: str
    repo: str
    repo_id: int | None = None  # GitHub's id: kept through a rename or transfer
    head_sha: str
    name: str
    status: str
    conclusion: str | None
    id: int
    external_id: str | None = None
    attempt: int = 1
    head_branch: str | None = None
    pull_requests: tuple[int, ...] = ()
    html_url: str | None = None
    completed_at: datetime | None = None
    delivery_id: str = ""

    @property
    def key(self) -> str:
        return (
            f"ci:{self.ci_kind}:{self.repo}:{self.id}:{self.attempt}:{self.action}:"
            f"{self.status}:{self.conclusion or ''}"
        )


@dataclass(frozen=True, kw_only=True)
class InstallationChanged:
    kind: ClassVar[str] = "installation_changed"
    action: str
    installation_id: int
    account: str | None
    repos: tuple[str, ...] = ()
    repos_removed: tuple[str, ...] = ()
    delivery_id: str = ""

    @property
    def key(self) -> str:
        changed = ",".join(sorted(self.repos)) + "|" + ",".join(sorted(self.repos_removed))
        return f"installation:{self.installation_id}:{self.action}:{changed}"


@dataclass(frozen=True, kw_only=True)
class RepositoryMoved:
    """A repository was renamed or transferred to another owner (GitHub's `repository` event):
    `repo` is its name now, `was` its name before; its id stays the same."""

    kind: ClassVar[str] = "repository_moved"
    action: MoveKind
    repo: str
    repo_id: int
    was: str
    actor: str | None = None
    delivery_id: str = ""

    @property
    def key(self) -> str:
        return f"repo-moved:{self.repo_id}:{self.was}:{self.repo}"


@dataclass(frozen=True, kw_only=True)
class Ping:
    kind: ClassVar[str] = "ping"
    zen: str | None
    hook_id: int | None
    delivery_id: str = ""

    @property
    def key(self) -> str:
        return f"ping:{self.hook_id}:{self.delivery_id}"


@dataclass(frozen=True, kw_only=True)
class Ignored:
    """A delivery carry does not act on, with the reason (shown on the dashboard)."""

    kind: ClassVar[str] = "ignored"
    event_name: str
    action: str | None
    reason: str
    delivery_id: str = ""

    @property
    def key(self) -> str:
        return f"ignored:{self.event_name}:{self.delivery_id}"


@dataclass(frozen=True, kw_only=True)
class CommandAuthorized:
    """Internal: a `/carry` comment on a carry PR, with its author's permission looked up."""

    kind: ClassVar[str] = "command_authorized"
    series_id: str
    number: int
    comment_id: int
    author: str
    permission: str
    body: str
    delivery_id: str = ""
    head_at_comment: str | None = None  # the series' upstream head when the comment came in
    # what the commands came from when not a comment: "dashboard:<delivery>:<series>" for
    # boxes ticked on the dashboard issue (comment_id 0)
    source: str = ""

    @property
    def key(self) -> str:
        return f"authorized:{self.series_id}:{self.source or self.comment_id}"


@dataclass(frozen=True, kw_only=True)
class RebaseFinished:
    """Internal: a rebase stored its result; `changed` when the proposal differs from main."""

    kind: ClassVar[str] = "rebase_finished"
    series_id: str
    head_sha: str
    digest: str
    outcome: str
    changed: bool
    result_tree: str | None = None
    trigger: str = ""  # set for forced re-checks (a /carry command), which must act again
    delivery_id: str = ""

    @property
    def key(self) -> str:
        suffix = f":{self.trigger}" if self.trigger else ""
        return f"rebased:{self.series_id}:{self.head_sha}:{self.digest}{suffix}"


@dataclass(frozen=True, kw_only=True)
class TreeReady:
    """Internal: the exact tree of a checked head (upstream head + the series as carried) is on
    a downstream branch (carry's PR branch, carry/tree/<series>, or the downstream branch):
    what the runners test. The series' patch files are read at `series_sha`."""

    kind: ClassVar[str] = "tree_ready"
    series_id: str
    head_sha: str
    tree: str
    branch: str
    branch_sha: str
    series_sha: str
    patches_dir: str
    delivery_id: str = ""

    @property
    def key(self) -> str:
        return f"tree-ready:{self.series_id}:{self.tree}:{self.branch_sha}"


@dataclass(frozen=True, kw_only=True)
class ChecksRecorded:
    """Internal: the store committed what a hardware run reported (workers/ci/rows.py,
    workers/ci/probes.py). For a head: its CI rows, and what they changed (a verdict that
    turned, a red streak that grew, the last good head that moved); for a bisection probe: that
    the bisection recorded its result. The planner decides what follows."""

    kind: ClassVar[str] = "checks_recorded"
    # each is new (its key names the moment): remembered only as long as a redelivery can come
    remember_s: ClassVar[int] = 2 * 24 * 3600
    series_id: str
    head_sha: str
    at: str  # when the store committed it, to the microsecond: each commit is its own event
    rows: tuple[CiState, ...] = ()  # rows to show on GitHub
    notices: tuple[Notice, ...] = ()  # changes of verdict to tell people about
    streak: StreakGrew | None = None  # the red streak that gained this head
    good_head: str | None = None  # the new last good head, when it moved
    probe: bool = False  # a bisection probe's result was recorded: its next step
    delivery_id: str = ""

    @property
    def key(self) -> str:
        what = "probe" if self.probe else ",".join(sorted({row.run_id for row in self.rows}))
        return f"checks:{self.series_id}:{self.head_sha}:{what}:{self.at}"


@dataclass(frozen=True, kw_only=True)
class RunRequested:
    """Internal: a hardware run of one exact tree (`tree_key`) of a series' head is requested
    on one runner kind. workers.ci.requests plans it where it is requested, under the kind's
    lock, with the facts of the series' lane on that kind (planner.Facts.lane) read under the
    same lock; it never travels the task queue, which would read the facts outside the lock.
    `trusted` is bot.core.trust's decision for the head (`why_untrusted` its reason when not);
    `force` (`/carry retest`) does not answer with a stored result."""

    kind: ClassVar[str] = "run_requested"
    series_id: str
    runner_kind: str
    tree_key: str
    head_sha: str
    trusted: bool
    force: bool = False
    why_untrusted: str = ""
    delivery_id: str = ""

    @property
    def key(self) -> str:
        return f"ci:{self.series_id}:{self.runner_kind}:{self.tree_key}"


Event = (
    HeadMoved
    | RefDeleted
    | PrStateChanged
    | CommentCreated
    | IssueEdited
    | CiResultReceived
    | InstallationChanged
    | RepositoryMoved
    | Ping
    | Ignored
    | CommandAuthorized
    | RebaseFinished
    | TreeReady
    | ChecksRecorded
    | RunRequested
)
EVENT_TYPES: tuple[type[Event], ...] = typing.get_args(Event)
_BY_KIND: dict[str, type[Event]] = {cls.kind: cls for cls in EVENT_TYPES}


# --------------------------------------------------------------------------- serialization


def event_to_dict(event: Event) -> dict[str, Any]:
    """JSON-ready dict with `kind` and `key`; `event_from_dict` reverses it."""
    out: dict[str, Any] = {"kind": event.kind, "key": event.key}
    for field in dataclasses.fields(event):
        value = getattr(event, field.name)
        if isinstance(value, datetime):
            value = _iso(value)
        elif isinstance(value, tuple):
            value = [_plain(item) for item in value]
        else:
            value = _plain(value)
        out[field.name] = value
    return out


def _plain(value: Any) -> Any:
    """A part of an event as JSON holds it: a record as its dict."""
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value


def _record_type(hint: Any) -> Any:
    """The record class (one with `from_dict`) a field holds, alone, optional or in a tuple."""
    for arg in (hint, *typing.get_args(hint)):
        if hasattr(arg, "from_dict"):
            return arg
    return None


def event_from_dict(data: Mapping[str, Any]) -> Event:
    cls = _BY_KIND.get(str(data.get("kind")))
    if cls is None:
        raise ValueError(f"unknown event kind {data.get('kind')!r}")
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        if field.name not in data:
            continue
        value = data[field.name]
        record = _record_type(hints[field.name])
        if record is not None and isinstance(value, list):
            value = tuple(record.from_dict(item) for item in value)
        elif record is not None and isinstance(value, Mapping):
            value = record.from_dict(value)
        elif isinstance(value, list):
            value = tuple(value)
        elif isinstance(value, str) and datetime in typing.get_args(hints[field.name]):
            value = datetime.fromisoformat(value)
        kwargs[field.name] = value
    return cls(**kwargs)


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
