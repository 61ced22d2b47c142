"""What carry knows about each series, as plain values with a JSON form.

Written by the workers (through bot.store), read by the planner (as facts), the API and the
dashboard. Pure: no I/O here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any


class Phase(StrEnum):
    """Where a series stands, in the words the dashboard shows."""

    IDLE = "idle"
    QUEUED = "queued"
    RUNNING = "running"
    AWAITING_IMPORT = "awaiting-import"
    PAUSED = "paused"
    ERROR = "error"


PHASES = tuple(p.value for p in Phase)
OUTCOMES = ("none", "clean", "changed", "review", "conflict", "error")
CI_STATES = (
    "waiting-approval",
    "queued",
    "running",
    "success",
    "failure",
    "infra-error",
    "cancelled",
    "reused",
)


@dataclass
class PatchState:
    name: str
    subject: str = ""
    status: str = "pending"  # a bot.core.classify.Status value, or "pending" before a check
    decision: str = "none"  # keep | drop | review | none
    reason: str = ""
    evidence: list[dict[str, Any]] = field(default_factory=list)
    pinned: bool = False  # `/carry keep NAME`: never dropped automatically
    drop_requested_by: str | None = None  # `/carry drop NAME`
    upstream_prs: list[dict[str, Any]] = field(default_factory=list)  # {ref, state, merge_commit}
    interdiff: str = ""
    conflict: dict[str, Any] | None = None
    changed: bool = False

    @property
    def needs_attention(self) -> bool:
        return self.status in ("conflict", "partial", "upstream-version", "invalid") or (
            self.decision == "review"
        )


@dataclass
class CiState:
    runner: str
    state: str = "queued"  # one of CI_STATES
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

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CiState:
        built: CiState = _build(cls, data)
        return built


@dataclass
class PrInfo:
    number: int
    url: str
    branch: str
    state: str = "open"  # open | closed | merged
    draft: bool = False
    head_sha: str = ""


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
    phase: str = "idle"
    outcome: str = "none"
    patches: list[PatchState] = field(default_factory=list)
    pr: PrInfo | None = None
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
    base_pr_state: str | None = None  # for pull bases: open | merged | closed_unmerged
    # the watched ref upstream has not created (a release tag not cut yet); polls wait for it
    waiting_for_ref: str | None = None
    # the base the series sits on instead of the config's, after `/carry retarget` or a merged
    # base PR: {"branch": "main"} or {"pull": 54371}; None: the config's base
    base_override: dict[str, Any] | None = None
    # a base PR closed unmerged: its likely successor, why, and how the patches fare on it
    successor: dict[str, Any] | None = None
    updated_at: str = ""

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
        if self.base_pr_state == "closed_unmerged":
            found = self.successor.get("summary") if self.successor else None
            reasons.append(found or "base PR was closed without being merged")
        return reasons

    def patch(self, name: str) -> PatchState | None:
        return next((p for p in self.patches if p.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SeriesState:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["patches"] = [_build(PatchState, p) for p in data.get("patches", [])]
        values["ci"] = {k: CiState.from_dict(v) for k, v in (data.get("ci") or {}).items()}
        values["pr"] = _build(PrInfo, data["pr"]) if data.get("pr") else None
        return cls(**values)


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


def _build(kind: type, data: dict[str, Any]) -> Any:
    known = {f.name for f in fields(kind)}
    return kind(**{k: v for k, v in data.items() if k in known})
