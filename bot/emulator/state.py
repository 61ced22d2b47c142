"""The emulator's in-memory objects. Git data itself lives in the bare repositories."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .gitops import BareRepo

Permission = Literal["admin", "maintain", "write", "triage", "read", "none"]
PERMISSIONS: tuple[str, ...] = ("admin", "maintain", "write", "triage", "read", "none")
# The legacy `permission` field of the collaborator-permission endpoint folds roles into four.
LEGACY_PERMISSION = {
    "admin": "admin",
    "maintain": "write",
    "write": "write",
    "triage": "read",
    "read": "read",
    "none": "none",
}
WRITE_ROLES = frozenset({"admin", "maintain", "write"})
# Who may edit anyone's issue (REST docs, Update an issue: "Issue owners and users with push
# access or Triage role can edit an issue.").
TRIAGE_ROLES = WRITE_ROLES | {"triage"}


@dataclass
class User:
    login: str
    id: int
    type: str = "User"  # User / Bot / Organization
    name: str | None = None
    email: str | None = None


@dataclass
class Label:
    id: int
    name: str
    color: str = "ededed"
    description: str | None = None
    default: bool = False


@dataclass
class PullData:
    """The pull-request half of an issue."""

    id: int
    head_ref: str
    head_sha: str
    base_ref: str
    base_sha: str  # live while open; frozen when closed
    draft: bool = False
    maintainer_can_modify: bool = False
    merged: bool = False
    merged_at: float | None = None
    merged_by: str | None = None
    merge_commit_sha: str | None = None
    # cached mergeability for (base_sha, head_sha)
    mergeable_key: tuple[str, str] | None = None
    mergeable: bool | None = None
    test_merge_sha: str | None = None


@dataclass
class Issue:
    """An issue, or a pull request when `pull` is set (they share one number space)."""

    number: int
    id: int
    title: str
    body: str | None
    user: str
    created_at: float
    updated_at: float
    state: str = "open"
    closed_at: float | None = None
    labels: list[str] = field(default_factory=list)
    pull: PullData | None = None
    state_reason: str | None = None  # completed / not_planned / duplicate / reopened
    assignees: list[str] = field(default_factory=list)
    via_app: int | None = None  # the App whose installation token opened it

    @property
    def is_pull(self) -> bool:
        return self.pull is not None


@dataclass
class Comment:
    id: int
    repo: str  # full name
    issue_number: int
    user: str
    body: str
    created_at: float
    updated_at: float


@dataclass
class CheckRun:
    id: int
    repo: str
    name: str
    head_sha: str
    app_id: int
    check_suite_id: int
    status: str = "queued"
    conclusion: str | None = None
    started_at: float | None = None
    completed_at: float | None = None
    details_url: str | None = None
    external_id: str | None = None
    output: dict[str, Any] = field(default_factory=dict)


@dataclass
class CommitStatus:
    id: int
    repo: str
    sha: str
    state: str
    context: str
    creator: str
    created_at: float
    updated_at: float
    target_url: str | None = None
    description: str | None = None


@dataclass
class Repo:
    owner: str
    name: str
    id: int
    git: BareRepo
    default_branch: str
    created_at: float
    pushed_at: float
    private: bool = False
    plan: str = "free"  # the owner's plan: free / pro / team / enterprise
    description: str | None = None
    permissions: dict[str, str] = field(default_factory=dict)
    labels: dict[str, Label] = field(default_factory=dict)
    issues: dict[int, Issue] = field(default_factory=dict)
    statuses: list[CommitStatus] = field(default_factory=list)
    ref_snapshot: dict[str, str] = field(default_factory=dict)

    @property
    def full_name(self) -> str:
        return f"{self.owner}/{self.name}"

    @property
    def path(self) -> Path:
        return self.git.path

    def next_number(self) -> int:
        return max(self.issues, default=0) + 1


@dataclass
class App:
    id: int
    slug: str
    name: str
    owner: str
    public_key: Any  # cryptography RSAPublicKey
    created_at: float
    permissions: dict[str, str] = field(default_factory=dict)
    events: list[str] = field(default_factory=list)

    @property
    def bot_login(self) -> str:
        return f"{self.slug}[bot]"


@dataclass
class Installation:
    id: int
    app_id: int
    account: str
    repos: set[str] | None  # full names; None = every repository of the account
    created_at: float

    def covers(self, repo: Repo) -> bool:
        if self.repos is None:
            return repo.owner == self.account
        return repo.full_name in self.repos


@dataclass
class Token:
    """A credential accepted in `Authorization: token ...`: a user PAT or an installation token."""

    value: str
    login: str  # the acting user (a bot for installation tokens)
    installation_id: int | None = None
    expires_at: float | None = None
    repos: set[str] | None = None  # restriction for installation tokens
    minted_at: float | None = None  # installation tokens: when they were created


@dataclass(frozen=True)
class Identity:
    """Who a request acts as."""

    kind: str  # "user", "installation", "app", "anonymous"
    login: str | None = None
    installation_id: int | None = None
    app_id: int | None = None
    token_repos: frozenset[str] | None = None

    @property
    def rate_key(self) -> str:
        if self.kind == "installation":
            return f"installation:{self.installation_id}"
        if self.kind == "app":
            return f"app:{self.app_id}"
        return f"{self.kind}:{self.login}"
