"""The emulator's domain logic: repositories, pull requests, merges, comments, checks.

Both the REST handlers and the Python test API call into a Hub. Every public method expects
the caller to hold `hub.lock`. Git state is read from the bare repositories; `sync()` notices
ref moves made by `git push` (or by anything else writing the bare repository) and updates
pull requests and sends push / synchronize / closed webhooks.
"""

from __future__ import annotations

import re
import secrets
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import issues as rules
from .errors import ApiError, custom_validation, not_found, validation_failed
from .gitops import ZERO_SHA, BareRepo, Person, valid_rev
from .payloads import HookPayloads
from .protection import Protections
from .state import (
    PERMISSIONS,
    TRIAGE_ROLES,
    WRITE_ROLES,
    App,
    CheckRun,
    Comment,
    CommitStatus,
    Identity,
    Installation,
    Issue,
    Label,
    PullData,
    Repo,
    Token,
    User,
)
from .util import Clock, Counter
from .views import RestViews

ACTIONS_APP_ID = 15368  # GitHub Actions' app id: the app of check runs not made by an App
CHECK_STATUSES = ("queued", "in_progress", "completed", "waiting", "requested", "pending")
CHECK_CONCLUSIONS = (
    "action_required",
    "cancelled",
    "failure",
    "neutral",
    "success",
    "skipped",
    "stale",
    "timed_out",
)
STATUS_STATES = ("error", "failure", "pending", "success")
PLANS = ("free", "pro", "team", "enterprise")
REPO_NAME = re.compile(r"[A-Za-z0-9._-]{1,100}")  # what GitHub keeps of a new name
# Draft PRs: "public repositories with GitHub Free and GitHub Free for organizations, GitHub Pro
# and legacy per-repository billing plans, and in public and private repositories with GitHub
# Team and GitHub Enterprise Cloud" (REST docs, Create a pull request, `draft`).
NO_PRIVATE_DRAFTS = frozenset({"free", "pro"})
# REST limits; the error bodies are GitHub's as recorded in public reports (see the tests).
MAX_BODY_CHARS = 65536  # PR and issue bodies, issue comments
MAX_CHECK_OUTPUT_BYTES = 65535  # check-run output.summary and output.text (UTF-8 bytes)
MERGE_METHODS = ("merge", "squash", "rebase")
GITHUB_COMMITTER = ("GitHub", "noreply@github.com")

# (event, payload, repo or None) -> None; set by the emulator to its webhook dispatcher
EventSink = Callable[[str, dict[str, Any], Repo | None], None]


class Hub:
    def __init__(self, root: Path, clock: Clock) -> None:
        self.root = root
        self.clock = clock
        self.lock = threading.RLock()
        self.base_url = "http://127.0.0.1"  # the REST API's root
        self.web_url = "http://127.0.0.1"  # web pages and git (github.com's two hosts are one here)
        self.api_prefix = ""  # "/api/v3" on an Enterprise Server
        self.views = RestViews(self)
        self.users: dict[str, User] = {}
        self.repos: dict[str, Repo] = {}
        # old full name (lower case) -> id of the repository renamed away from it: GitHub
        # redirects requests that use the old name (301 for GET/HEAD, 307 for other methods)
        self.moved: dict[str, int] = {}
        # told (old full name, new full name) when a repository moves: the hooks follow it
        self.on_move: list[Callable[[str, str], None]] = []
        self.comments: dict[int, Comment] = {}
        self.check_runs: dict[int, CheckRun] = {}
        self.check_suites: dict[tuple[str, str, int], int] = {}
        self.apps: dict[int, App] = {}
        self.installations: dict[int, Installation] = {}
        self.tokens: dict[str, Token] = {}
        self.protections = Protections()  # branch protections and rulesets
        # Seconds a new installation token answers 401 (GitHub's replication lag; 0: none).
        self.token_warmup_s = 0.0
        self._user_ids = Counter(1001)
        self._repo_ids = Counter(500001)
        self._issue_ids = Counter(900001)
        self._pull_ids = Counter(700001)
        self._comment_ids = Counter(1_200_001)
        self._label_ids = Counter(300001)
        self._check_ids = Counter(4_000_001)
        self._suite_ids = Counter(5_000_001)
        self._status_ids = Counter(6_000_001)
        self._token_serial = Counter(1)
        self.sink: EventSink = lambda event, payload, repo: None
        self.payloads = HookPayloads(self)

    # -- users and permissions --------------------------------------------------------------------

    def user(self, login: str, *, type: str | None = None) -> User:
        """The user with this login, created on first use (bots for `name[bot]`)."""
        key = login.lower()
        found = self.users.get(key)
        if found is None:
            kind = type or ("Bot" if login.endswith("[bot]") else "User")
            found = User(login=login, id=self._user_ids(), type=kind)
            self.users[key] = found
        elif type is not None:
            found.type = type
        return found

    def known_user(self, login: str) -> bool:
        return login.lower() in self.users

    def login_for_email(self, email: str) -> str | None:
        for u in self.users.values():
            noreply = f"{u.id}+{u.login}@users.noreply.github.com".lower()
            if email.lower() in {(u.email or "").lower(), noreply}:
                return u.login
        return None

    def person(self, login: str, when: float) -> Person:
        u = self.user(login)
        email = u.email or f"{u.id}+{u.login}@users.noreply.github.com"
        return Person(u.name or u.login, email, int(when))

    def permission(self, repo: Repo, login: str) -> str:
        """admin / maintain / write / triage / read / none, as GitHub's role_name."""
        if login.lower() == repo.owner.lower():
            return "admin"
        explicit = repo.permissions.get(login.lower())
        if explicit is not None:
            return explicit
        for inst in self.installations.values():
            if inst.covers(repo) and self.apps[inst.app_id].bot_login.lower() == login.lower():
                return "write"
        return "none" if repo.private else "read"

    def set_permission(self, repo: Repo, login: str, role: str) -> None:
        if role not in PERMISSIONS:
            raise ValueError(f"permission must be one of {PERMISSIONS}, not {role!r}")
        self.user(login)
        repo.permissions[login.lower()] = role

    def association(self, repo: Repo, login: str) -> str:
        if login.lower() == repo.owner.lower():
            return "OWNER"
        if login.lower() in repo.permissions and repo.permissions[login.lower()] != "none":
            return "COLLABORATOR"
        return "NONE"

    # -- repositories -----------------------------------------------------------------------------

    def create_repo(
        self,
        owner: str,
        name: str,
        *,
        from_path: Path | None = None,
        default_branch: str = "main",
        private: bool = False,
        description: str | None = None,
        plan: str = "free",
    ) -> Repo:
        if plan not in PLANS:
            raise ValueError(f"plan must be one of {PLANS}, not {plan!r}")
        if f"{owner}/{name}".lower() in self.repos:
            raise ValueError(f"repository {owner}/{name} exists")
        self.user(owner)
        git = BareRepo.init(self.root / owner / f"{name}.git", default_branch)
        if from_path is not None:
            git.import_from(Path(from_path))
        now = self.clock.now()
        repo = Repo(
            owner=owner,
            name=name,
            id=self._repo_ids(),
            git=git,
            default_branch=default_branch,
            created_at=now,
            pushed_at=now,
            private=private,
            plan=plan,
            description=description,
        )
        repo.ref_snapshot = git.refs("refs/heads/", "refs/tags/")
        self.repos[repo.full_name.lower()] = repo
        return repo

    def rename_repo(
        self, owner: str, name: str, new_name: str, *, actor: str | None = None
    ) -> Repo:
        """Renames a repository (its git directory too); the old name redirects, and a
        `repository` `renamed` event goes out under the new name, with the same id."""
        repo = self.repo(owner, name)
        if not REPO_NAME.fullmatch(new_name):
            raise validation_failed("Repository", "name", "invalid")
        old_name = repo.name
        self._move(repo, owner, new_name)
        changes = {"repository": {"name": {"from": old_name}}}
        payload = self.payloads.repository_event("renamed", repo, actor or repo.owner, changes)
        self.emit("repository", payload, repo)
        return repo

    def transfer_repo(
        self,
        owner: str,
        name: str,
        new_owner: str,
        *,
        new_name: str | None = None,
        actor: str | None = None,
    ) -> Repo:
        """Transfers a repository to another account (GitHub's `POST .../transfer`, as the
        new owner has accepted it): the old full name redirects, and a `repository`
        `transferred` event names the old owner in changes.owner.from."""
        repo = self.repo(owner, name)
        if not self.known_user(new_owner):
            raise validation_failed("Repository", "new_owner", "invalid")
        old_owner = self.user(repo.owner)
        self._move(repo, self.user(new_owner).login, new_name or repo.name)
        for inst in self.installations.values():  # an installation belongs to an account
            if inst.repos is not None:
                inst.repos.discard(repo.full_name)
        kind = "organization" if old_owner.type == "Organization" else "user"
        changes = {"owner": {"from": {kind: self.views.owned_user(old_owner.login)}}}
        payload = self.payloads.repository_event(
            "transferred", repo, actor or old_owner.login, changes
        )
        self.emit("repository", payload, repo)
        return repo

    def _move(self, repo: Repo, owner: str, name: str) -> None:
        """The repository's new full name: git directory, lookups, redirects from the old one,
        and (through on_move) the hooks and installations that name it."""
        old = repo.full_name
        if f"{owner}/{name}".lower() in self.repos:
            raise custom_validation("Repository", "name already exists on this account")
        target = self.root / owner / f"{name}.git"
        target.parent.mkdir(parents=True, exist_ok=True)
        repo.git.path.rename(target)
        repo.git.path = target
        repo.owner, repo.name = owner, name
        del self.repos[old.lower()]
        self.repos[repo.full_name.lower()] = repo
        self.moved[old.lower()] = repo.id
        self.moved.pop(repo.full_name.lower(), None)
        for inst in self.installations.values():
            if inst.repos is not None and old in inst.repos:
                inst.repos.discard(old)
                inst.repos.add(repo.full_name)
        for follow in self.on_move:
            follow(old, repo.full_name)

    def repo_by_id(self, repo_id: int) -> Repo:
        found = next((r for r in self.repos.values() if r.id == repo_id), None)
        if found is None:
            raise not_found()
        return found

    def moved_repo(self, owner: str, name: str) -> Repo | None:
        """The repository that was renamed away from owner/name, if one was."""
        repo_id = self.moved.get(f"{owner}/{name}".lower())
        if repo_id is None or f"{owner}/{name}".lower() in self.repos:
            return None
        return self.repo_by_id(repo_id)

    def repo(self, owner: str, name: str) -> Repo:
        found = self.repos.get(f"{owner}/{name}".lower())
        if found is None:
            raise not_found()
        return found

    def installation_for(self, repo: Repo) -> Installation | None:
        for inst in self.installations.values():
            if inst.covers(repo):
                return inst
        return None

    # -- ref tracking --------------------------------------------------------------------------

    def sync(self, repo: Repo, pusher: str | None = None) -> None:
        """Notices ref moves since the last look: push events, PR heads, auto-merge/close."""
        current = repo.git.refs("refs/heads/", "refs/tags/")
        before = repo.ref_snapshot
        if current == before:
            return
        repo.ref_snapshot = current
        repo.pushed_at = self.clock.now()
        actor = pusher or repo.owner
        changed = sorted(
            ref for ref in set(before) | set(current) if before.get(ref) != current.get(ref)
        )
        for ref in changed:
            old, new = before.get(ref, ZERO_SHA), current.get(ref, ZERO_SHA)
            self.emit("push", self.payloads.push(repo, ref, old, new, actor, before), repo)
        for ref in changed:
            if ref.startswith("refs/heads/"):
                self._follow_branch(repo, ref.removeprefix("refs/heads/"), current.get(ref), actor)

    def _follow_branch(self, repo: Repo, branch: str, sha: str | None, actor: str) -> None:
        now = self.clock.now()
        for issue in list(repo.issues.values()):
            pr = issue.pull
            if pr is None or issue.state != "open":
                continue
            if pr.head_ref == branch:
                if sha is None:
                    self._close(repo, issue, actor)
                elif sha != pr.head_sha:
                    before = pr.head_sha
                    pr.head_sha = sha
                    issue.updated_at = now
                    repo.git.update_ref(f"refs/pull/{issue.number}/head", sha)
                    payload = self.payloads.pull_request(
                        "synchronize", repo, issue, actor, before=before, after=sha
                    )
                    self.emit("pull_request", payload, repo)
            if pr.base_ref == branch and sha is not None and issue.state == "open":
                pr.base_sha = sha
                if repo.git.is_ancestor(pr.head_sha, sha):
                    self._mark_merged(repo, issue, actor, pr.head_sha, now)

    def _mark_merged(
        self, repo: Repo, issue: Issue, actor: str, merge_sha: str, now: float
    ) -> None:
        pr = issue.pull
        assert pr is not None
        pr.merged, pr.merged_at, pr.merged_by, pr.merge_commit_sha = True, now, actor, merge_sha
        issue.state, issue.closed_at, issue.updated_at = "closed", now, now
        self.emit("pull_request", self.payloads.pull_request("closed", repo, issue, actor), repo)

    def _close(self, repo: Repo, issue: Issue, actor: str) -> None:
        now = self.clock.now()
        issue.state, issue.closed_at, issue.updated_at = "closed", now, now
        if issue.pull is not None:
            self.emit(
                "pull_request", self.payloads.pull_request("closed", repo, issue, actor), repo
            )

    def emit(self, event: str, payload: dict[str, Any], repo: Repo | None) -> None:
        self.sink(event, payload, repo)

    # -- refs via REST ---------------------------------------------------------------------------

    def create_ref(self, repo: Repo, ref: str, sha: str, actor: str) -> None:
        if not ref.startswith("refs/") or ref.count("/") < 2 or not valid_rev(ref):
            raise ApiError(422, "Reference name is invalid", documentation_url=_DOC_REFS)
        if not _is_sha(sha) or repo.git.object_type(sha) is None:
            raise ApiError(422, "Object does not exist", documentation_url=_DOC_REFS)
        if repo.git.ref_sha(ref) is not None:
            raise ApiError(422, "Reference already exists", documentation_url=_DOC_REFS)
        repo.git.update_ref(ref, sha, ZERO_SHA)
        self.sync(repo, actor)

    def update_ref(self, repo: Repo, ref: str, sha: str, force: bool, actor: str) -> None:
        current = repo.git.ref_sha(ref)
        if current is None:
            raise ApiError(422, "Reference does not exist", documentation_url=_DOC_REFS)
        if not _is_sha(sha) or repo.git.object_type(sha) is None:
            raise ApiError(422, "Object does not exist", documentation_url=_DOC_REFS)
        if not force and not repo.git.is_ancestor(current, sha):
            raise ApiError(422, "Update is not a fast forward", documentation_url=_DOC_REFS)
        repo.git.update_ref(ref, sha, current)
        self.sync(repo, actor)

    def delete_ref(self, repo: Repo, ref: str, actor: str) -> None:
        if repo.git.ref_sha(ref) is None:
            raise ApiError(422, "Reference does not exist", documentation_url=_DOC_REFS)
        repo.git.delete_ref(ref)
        self.sync(repo, actor)

    def resolve(self, repo: Repo, rev: str) -> str:
        """A commit sha for a sha/branch/tag, else 422 like GitHub's commit endpoints."""
        sha = repo.git.resolve(rev)
        if sha is None:
            raise ApiError(422, f"No commit found for SHA: {rev}", documentation_url=_DOC_COMMITS)
        return sha

    # -- issues and pull requests ------------------------------------------------------------------

    def issue(self, repo: Repo, number: int) -> Issue:
        found = repo.issues.get(number)
        if found is None:
            raise not_found()
        return found

    def pull(self, repo: Repo, number: int) -> Issue:
        found = self.issue(repo, number)
        if found.pull is None:
            raise not_found()
        return found

    def _new_issue(self, repo: Repo, title: str, body: str | None, user: str) -> Issue:
        now = self.clock.now()
        self.user(user)
        issue = Issue(repo.next_number(), self._issue_ids(), title, body, user, now, now)
        repo.issues[issue.number] = issue
        return issue

    # -- issues (not pull requests) -----------------------------------------------------------

    def open_issue(self, repo: Repo, identity: Identity, data: dict[str, Any]) -> Issue:
        """POST /issues (title, body, labels, assignees): labels and assignees are kept only
        for callers with push access (GitHub drops them silently otherwise); unknown labels
        are created."""
        actor = self._issue_writer(repo, identity, rules.DOC_CREATE)
        text = rules.title_of(data.get("title"))
        content = rules.body_of(data.get("body"))
        _check_issue_body(content, rules.DOC_CREATE)
        names = rules.label_names(data["labels"]) if data.get("labels") is not None else []
        people = rules.assignee_logins(data)
        pushes = self._may_push(repo, identity)
        logins = self._assignable(repo, None, people) if pushes else []
        issue = self._new_issue(repo, text, content, actor)
        if identity.kind == "installation":
            issue.via_app = identity.app_id
        if pushes:
            self.set_labels(repo, issue, names)
            issue.assignees = logins
        self.emit("issues", self.payloads.issues("opened", repo, issue, actor), repo)
        return issue

    def update_issue(
        self, repo: Repo, issue: Issue, identity: Identity, data: dict[str, Any]
    ) -> None:
        """PATCH /issues/{n}: an issue's title, body and state (issues.edited / closed /
        reopened), or a pull request's issue side (pull_request events); labels and
        assignees only for callers with push access."""
        actor = self._issue_writer(repo, identity, rules.DOC_UPDATE)
        if not self._may_edit(repo, issue, identity):
            raise rules.edit_refused()
        state, reason = data.get("state"), data.get("state_reason")
        rules.check_state(state, reason)
        rules.check_milestone(data.get("milestone"))
        title = rules.title_of(data["title"]) if data.get("title") is not None else None
        body = rules.body_of(data.get("body"))
        _check_issue_body(body, rules.DOC_UPDATE)
        labels = rules.label_names(data["labels"]) if data.get("labels") is not None else None
        people = rules.assignee_logins(data)
        pushes = self._may_push(repo, identity)
        logins = self._assignable(repo, issue, people) if pushes and people is not None else None
        if issue.pull is not None:
            self.edit_pull(repo, issue, actor, title=title, body=body, state=state)
        else:
            self._edit_issue(repo, issue, actor, title, body)
            self._set_issue_state(repo, issue, actor, state, reason)
        if pushes and labels is not None:
            self.set_labels(repo, issue, labels, replace=True)
        if logins is not None:
            issue.assignees = logins
            issue.updated_at = self.clock.now()

    def _edit_issue(
        self, repo: Repo, issue: Issue, actor: str, title: str | None, body: str | None
    ) -> None:
        changes: dict[str, Any] = {}
        if title is not None and title != issue.title:
            changes["title"] = {"from": issue.title}
            issue.title = title
        if body is not None and body != (issue.body or ""):
            changes["body"] = {"from": issue.body or ""}
            issue.body = body
        if changes:
            issue.updated_at = self.clock.now()
            payload = self.payloads.issues("edited", repo, issue, actor, changes=changes)
            self.emit("issues", payload, repo)

    def _set_issue_state(
        self, repo: Repo, issue: Issue, actor: str, state: str | None, reason: str | None
    ) -> None:
        """Closing or reopening; `state_reason` counts only when the state changes."""
        if state is None or state == issue.state:
            return
        now = self.clock.now()
        if state == "closed":
            issue.state, issue.closed_at = "closed", now
            issue.state_reason = reason or "completed"
        else:
            issue.state, issue.closed_at, issue.state_reason = "open", None, "reopened"
        issue.updated_at = now
        action = "closed" if state == "closed" else "reopened"
        self.emit("issues", self.payloads.issues(action, repo, issue, actor), repo)

    def _may_push(self, repo: Repo, identity: Identity) -> bool:
        """Push access, which setting labels and assignees takes (an installation that got
        past `_issue_writer` has the App's issues: write)."""
        if identity.kind == "installation":
            return True
        return identity.login is not None and self.permission(repo, identity.login) in WRITE_ROLES

    def _issue_writer(self, repo: Repo, identity: Identity, docs: str) -> str:
        """The acting login of an issue write: anonymous 401, an installation needs its App's
        `issues: write`, a user needs to see the repository (404 otherwise)."""
        if identity.login is None:
            raise ApiError(401, "Requires authentication")
        if identity.kind == "installation":
            app = self.apps[self.installations[identity.installation_id or 0].app_id]
            if app.permissions.get("issues") != "write":
                raise rules.integration_refused(docs)
        elif self.permission(repo, identity.login) == "none":
            raise not_found()
        return identity.login

    def _may_edit(self, repo: Repo, issue: Issue, identity: Identity) -> bool:
        login = identity.login or ""
        if identity.kind == "installation" or login.lower() == issue.user.lower():
            return True
        return self.permission(repo, login) in TRIAGE_ROLES

    def _assignable(
        self, repo: Repo, issue: Issue | None, people: tuple[str, list[str]] | None
    ) -> list[str]:
        """Assignees must have write access or have commented on the issue (GitHub's
        "Assigning issues"); bots cannot be assigned. 422 for anyone else."""
        if people is None:
            return []
        field, logins = people
        commenters = set()
        if issue is not None:
            commenters = {c.user.lower() for c in self.comments_of(repo, issue.number)}
        kept: list[str] = []
        for login in logins:
            known = self.known_user(login) and self.user(login).type == "User"
            allowed = known and (
                self.permission(repo, login) in WRITE_ROLES or login.lower() in commenters
            )
            if not allowed:
                raise validation_failed("Issue", field, "invalid", value=login)
            canonical = self.user(login).login
            if canonical not in kept:
                kept.append(canonical)
        return kept

    def open_pull(
        self,
        repo: Repo,
        *,
        head: str,
        base: str,
        title: str | None,
        body: str | None,
        user: str,
        draft: bool = False,
        maintainer_can_modify: bool = False,
    ) -> Issue:
        if not head:
            raise validation_failed("PullRequest", "head", "missing_field")
        if not base:
            raise validation_failed("PullRequest", "base", "missing_field")
        if not title:
            raise validation_failed("PullRequest", "title", "missing_field")
        _check_issue_body(body)
        if draft and repo.private and repo.plan in NO_PRIVATE_DRAFTS:
            raise ApiError(
                422,
                "Draft pull requests are not supported in this repository.",
                documentation_url=_DOC_PULLS,
            )
        owner, _, branch = head.rpartition(":")
        if owner and owner.lower() != repo.owner.lower():
            raise validation_failed("PullRequest", "head", "invalid")
        head_sha = repo.git.ref_sha(f"refs/heads/{branch}")
        if head_sha is None:
            raise validation_failed("PullRequest", "head", "invalid")
        base_sha = repo.git.ref_sha(f"refs/heads/{base}")
        if base_sha is None:
            raise validation_failed("PullRequest", "base", "invalid")
        for other in repo.issues.values():
            p = other.pull
            if p and other.state == "open" and p.head_ref == branch and p.base_ref == base:
                raise custom_validation(
                    "PullRequest", f"A pull request already exists for {repo.owner}:{branch}."
                )
        if not repo.git.rev_list(head_sha, [base_sha], limit=1):
            raise custom_validation("PullRequest", f"No commits between {base} and {branch}")
        issue = self._new_issue(repo, title, body, user)
        issue.pull = PullData(
            id=self._pull_ids(),
            head_ref=branch,
            head_sha=head_sha,
            base_ref=base,
            base_sha=base_sha,
            draft=draft,
            maintainer_can_modify=maintainer_can_modify,
        )
        repo.git.update_ref(f"refs/pull/{issue.number}/head", head_sha)
        self.mergeability(repo, issue)
        self.emit("pull_request", self.payloads.pull_request("opened", repo, issue, user), repo)
        return issue

    def edit_pull(
        self,
        repo: Repo,
        issue: Issue,
        actor: str,
        *,
        title: str | None = None,
        body: str | None = None,
        state: str | None = None,
        base: str | None = None,
    ) -> None:
        pr = issue.pull
        assert pr is not None
        if state not in (None, "open", "closed"):
            raise validation_failed("PullRequest", "state", "invalid")
        _check_issue_body(body)
        changes: dict[str, Any] = {}
        if base is not None and base != pr.base_ref:
            if issue.state != "open":
                raise custom_validation(
                    "PullRequest", "Cannot change the base of a closed pull request"
                )
            base_sha = repo.git.ref_sha(f"refs/heads/{base}")
            if base_sha is None:
                raise validation_failed("PullRequest", "base", "invalid")
            changes["base"] = {"ref": {"from": pr.base_ref}, "sha": {"from": pr.base_sha}}
            pr.base_ref, pr.base_sha = base, base_sha
        if title is not None and title != issue.title:
            changes["title"] = {"from": issue.title}
            issue.title = title
        if body is not None and body != issue.body:
            changes["body"] = {"from": issue.body or ""}
            issue.body = body
        now = self.clock.now()
        if changes:
            issue.updated_at = now
            payload = self.payloads.pull_request("edited", repo, issue, actor, changes=changes)
            self.emit("pull_request", payload, repo)
        if state == "closed" and issue.state == "open":
            self._close(repo, issue, actor)
        elif state == "open" and issue.state == "closed":
            self._reopen(repo, issue, actor)

    def _reopen(self, repo: Repo, issue: Issue, actor: str) -> None:
        pr = issue.pull
        assert pr is not None
        if pr.merged:
            raise custom_validation("PullRequest", "Cannot reopen a merged pull request")
        head_sha = repo.git.ref_sha(f"refs/heads/{pr.head_ref}")
        base_sha = repo.git.ref_sha(f"refs/heads/{pr.base_ref}")
        if head_sha is None or base_sha is None:
            raise custom_validation(
                "PullRequest", "state cannot be changed. The branch was deleted."
            )
        pr.head_sha, pr.base_sha = head_sha, base_sha
        repo.git.update_ref(f"refs/pull/{issue.number}/head", head_sha)
        now = self.clock.now()
        issue.state, issue.closed_at, issue.updated_at = "open", None, now
        self.emit("pull_request", self.payloads.pull_request("reopened", repo, issue, actor), repo)

    def mergeability(self, repo: Repo, issue: Issue) -> tuple[bool | None, str]:
        """(mergeable, mergeable_state), computed by really merging in memory."""
        pr = issue.pull
        assert pr is not None
        if issue.state != "open":
            return None, "unknown"
        key = (pr.base_sha, pr.head_sha)
        if pr.mergeable_key != key:
            tree, clean = repo.git.merge_tree(pr.base_sha, pr.head_sha)
            pr.mergeable, pr.mergeable_key = clean, key
            merge_ref = f"refs/pull/{issue.number}/merge"
            if clean and tree:
                bot = Person(*GITHUB_COMMITTER, int(self.clock.now()))
                message = f"Merge {pr.head_sha} into {pr.base_sha}\n"
                pr.test_merge_sha = repo.git.commit_tree(
                    tree, [pr.base_sha, pr.head_sha], message, bot, bot
                )
                repo.git.update_ref(merge_ref, pr.test_merge_sha)
            else:
                pr.test_merge_sha = None
                if repo.git.ref_sha(merge_ref):
                    repo.git.delete_ref(merge_ref)
        if pr.draft:
            return pr.mergeable, "draft"
        return pr.mergeable, "clean" if pr.mergeable else "dirty"

    def pull_stats(self, repo: Repo, issue: Issue) -> dict[str, int]:
        pr = issue.pull
        assert pr is not None
        base = repo.git.merge_base(pr.base_sha, pr.head_sha)
        commits = repo.git.rev_list(pr.head_sha, [pr.base_sha])
        files = repo.git.changes(base, pr.head_sha, with_patch=False) if base else []
        return {
            "commits": len(commits),
            "additions": sum(f.additions for f in files),
            "deletions": sum(f.deletions for f in files),
            "changed_files": len(files),
        }

    def merge_pull(
        self,
        repo: Repo,
        issue: Issue,
        actor: str,
        *,
        method: str = "merge",
        sha: str | None = None,
        commit_title: str | None = None,
        commit_message: str | None = None,
    ) -> str:
        """Merges for real in the bare repo and returns the new base-branch commit."""
        pr = issue.pull
        assert pr is not None
        if method not in MERGE_METHODS:
            raise validation_failed("PullRequest", "merge_method", "invalid")
        if issue.state != "open" or pr.merged:
            raise ApiError(405, "Pull Request is not mergeable", documentation_url=_DOC_MERGE)
        if sha is not None and sha != pr.head_sha:
            raise ApiError(
                409,
                "Head branch was modified. Review and try the merge again.",
                documentation_url=_DOC_MERGE,
            )
        base_sha = repo.git.ref_sha(f"refs/heads/{pr.base_ref}")
        if base_sha is None:
            raise ApiError(405, "Base branch was deleted", documentation_url=_DOC_MERGE)
        now = int(self.clock.now())
        committer = Person(*GITHUB_COMMITTER, now)
        new = self._merge_commit(
            repo, issue, actor, method, base_sha, committer, commit_title, commit_message
        )
        repo.git.update_ref(f"refs/heads/{pr.base_ref}", new, base_sha)
        pr.base_sha = base_sha
        self._mark_merged(repo, issue, actor, new, now)
        self.sync(repo, actor)
        return new

    def _merge_commit(
        self,
        repo: Repo,
        issue: Issue,
        actor: str,
        method: str,
        base_sha: str,
        committer: Person,
        title: str | None,
        message: str | None,
    ) -> str:
        pr = issue.pull
        assert pr is not None
        not_mergeable = ApiError(405, "Pull Request is not mergeable", documentation_url=_DOC_MERGE)
        git = repo.git
        if method == "rebase":
            tip = base_sha
            for commit in git.rev_list(pr.head_sha, [base_sha]):
                if len(git.commit_info(commit).parents) > 1:
                    continue
                picked = git.cherry_pick(commit, tip, committer)
                if picked is None:
                    raise not_mergeable
                tip = picked
            return tip
        tree, clean = git.merge_tree(base_sha, pr.head_sha)
        if not clean or tree is None:
            raise not_mergeable
        if method == "squash":
            commits = git.commit_infos(git.rev_list(pr.head_sha, [base_sha]))
            head = title or f"{issue.title} (#{issue.number})"
            body = (
                message if message is not None else "\n\n".join(f"* {c.message}" for c in commits)
            )
            author = self.person(issue.user, committer.epoch)
            return git.commit_tree(
                tree, [base_sha], f"{head}\n\n{body}".rstrip() + "\n", author, committer
            )
        head = title or f"Merge pull request #{issue.number} from {repo.owner}/{pr.head_ref}"
        body = message if message is not None else issue.title
        author = self.person(actor, committer.epoch)
        return git.commit_tree(
            tree, [base_sha, pr.head_sha], f"{head}\n\n{body}".rstrip() + "\n", author, committer
        )

    # -- comments and labels ----------------------------------------------------------------------

    def comments_of(self, repo: Repo, number: int) -> list[Comment]:
        return [
            c
            for c in self.comments.values()
            if c.repo == repo.full_name and c.issue_number == number
        ]

    def cross_references(self, repo: Repo, number: int) -> list[tuple[float, str, Issue]]:
        """(when, who, the referring issue) for each body or comment of another issue of the
        repository that mentions #number (or OWNER/NAME#number), as GitHub's timeline has
        them."""
        pattern = re.compile(
            rf"(?:(?<![\w/#]){re.escape(repo.full_name)}|(?<![\w/]))#{number}\b", re.IGNORECASE
        )
        found = [
            (other.created_at, other.user, other)
            for other in repo.issues.values()
            if other.number != number and pattern.search(other.body or "")
        ]
        found += [
            (c.created_at, c.user, repo.issues[c.issue_number])
            for c in self.comments.values()
            if c.repo == repo.full_name and c.issue_number != number and pattern.search(c.body)
        ]
        return sorted(found, key=lambda item: item[0])

    def add_comment(self, repo: Repo, issue: Issue, user: str, body: str) -> Comment:
        if not isinstance(body, str) or not body:
            raise validation_failed("IssueComment", "body", "missing_field")
        _check_comment_body(body)
        now = self.clock.now()
        self.user(user)
        comment = Comment(self._comment_ids(), repo.full_name, issue.number, user, body, now, now)
        self.comments[comment.id] = comment
        issue.updated_at = now
        self.emit(
            "issue_comment",
            self.payloads.issue_comment("created", repo, issue, comment, user),
            repo,
        )
        return comment

    def comment(self, repo: Repo, comment_id: int) -> Comment:
        found = self.comments.get(comment_id)
        if found is None or found.repo != repo.full_name:
            raise not_found()
        return found

    def edit_comment(self, repo: Repo, comment: Comment, body: str, actor: str) -> None:
        if not isinstance(body, str) or not body:
            raise validation_failed("IssueComment", "body", "missing_field")
        _check_comment_body(body)
        comment.body = body
        comment.updated_at = self.clock.now()

    def add_labels(self, repo: Repo, issue: Issue, names: list[str]) -> None:
        self.set_labels(repo, issue, names)

    def set_labels(
        self, repo: Repo, issue: Issue, names: list[str], *, replace: bool = False
    ) -> None:
        """Adds (or, with `replace`, sets) labels by name, creating the repository's missing
        ones as GitHub does (color ededed, no description)."""
        if replace:
            issue.labels = []
        for name in names:
            if name.lower() not in {n.lower() for n in repo.labels}:
                repo.labels[name] = Label(self._label_ids(), name)
            canonical = next(n for n in repo.labels if n.lower() == name.lower())
            if canonical not in issue.labels:
                issue.labels.append(canonical)
        issue.updated_at = self.clock.now()

    def remove_label(self, repo: Repo, issue: Issue, name: str) -> None:
        """GitHub: 404 "Label does not exist" when the issue does not have it."""
        found = next((n for n in issue.labels if n.lower() == name.lower()), None)
        if found is None:
            raise ApiError(404, "Label does not exist")
        issue.labels.remove(found)
        issue.updated_at = self.clock.now()

    # -- checks and statuses ----------------------------------------------------------------------

    def actions_app(self) -> App:
        if ACTIONS_APP_ID not in self.apps:
            self.user("github", type="Organization")
            self.apps[ACTIONS_APP_ID] = App(
                id=ACTIONS_APP_ID,
                slug="github-actions",
                name="GitHub Actions",
                owner="github",
                public_key=None,
                created_at=self.clock.now(),
                permissions={"checks": "write", "contents": "write", "metadata": "read"},
                events=["check_run", "check_suite", "push"],
            )
        return self.apps[ACTIONS_APP_ID]

    def create_check_run(self, repo: Repo, identity: Identity, data: dict[str, Any]) -> CheckRun:
        name, head_sha = data.get("name"), data.get("head_sha")
        if not isinstance(name, str) or not name:
            raise validation_failed("CheckRun", "name", "missing_field")
        if not isinstance(head_sha, str) or not head_sha:
            raise validation_failed("CheckRun", "head_sha", "missing_field")
        sha = repo.git.resolve(head_sha) if _is_sha(head_sha) else None
        if sha is None:
            raise ApiError(
                422, f"No commit found for SHA: {head_sha}", documentation_url=_DOC_CHECKS
            )
        app_id = identity.app_id if identity.app_id is not None else self.actions_app().id
        suite_key = (repo.full_name, sha, app_id)
        if suite_key not in self.check_suites:
            self.check_suites[suite_key] = self._suite_ids()
        run = CheckRun(
            id=self._check_ids(),
            repo=repo.full_name,
            name=name,
            head_sha=sha,
            app_id=app_id,
            check_suite_id=self.check_suites[suite_key],
            started_at=self.clock.now(),
        )
        self._apply_check_fields(run, data)
        self.check_runs[run.id] = run
        if run.status == "completed":
            self._check_completed(repo, run, identity)
        return run

    def update_check_run(
        self, repo: Repo, run: CheckRun, identity: Identity, data: dict[str, Any]
    ) -> None:
        was_completed = run.status == "completed"
        self._apply_check_fields(run, data)
        if run.status == "completed" and not was_completed:
            self._check_completed(repo, run, identity)

    def check_run(self, repo: Repo, run_id: int) -> CheckRun:
        found = self.check_runs.get(run_id)
        if found is None or found.repo != repo.full_name:
            raise not_found()
        return found

    def _apply_check_fields(self, run: CheckRun, data: dict[str, Any]) -> None:
        _check_output_size(data.get("output"))
        status = data.get("status", run.status)
        conclusion = data.get("conclusion", run.conclusion)
        if status not in CHECK_STATUSES:
            raise validation_failed("CheckRun", "status", "invalid")
        if conclusion is not None and conclusion not in CHECK_CONCLUSIONS:
            raise validation_failed("CheckRun", "conclusion", "invalid")
        if conclusion is not None or data.get("completed_at"):
            status = "completed"
        if status == "completed" and conclusion is None:
            raise validation_failed("CheckRun", "conclusion", "missing_field")
        for key in ("name", "details_url", "external_id"):
            if isinstance(data.get(key), str):
                setattr(run, key, data[key])
        if isinstance(data.get("output"), dict):
            run.output = {**run.output, **data["output"]}
        run.status, run.conclusion = status, conclusion
        if status == "completed" and run.completed_at is None:
            run.completed_at = self.clock.now()

    def rerequest_check_run(self, repo: Repo, run: CheckRun, user: str) -> None:
        """A user pressed "Re-run": check_run.rerequested goes to the hooks."""
        if run.status != "completed":
            raise ValueError("only completed check runs can be re-requested")
        self.emit("check_run", self.payloads.check_run("rerequested", repo, run, user), repo)

    def _check_completed(self, repo: Repo, run: CheckRun, identity: Identity) -> None:
        sender = identity.login or repo.owner
        self.emit("check_run", self.payloads.check_run("completed", repo, run, sender), repo)

    def create_status(
        self, repo: Repo, sha: str, data: dict[str, Any], creator: str
    ) -> CommitStatus:
        state = data.get("state")
        if state not in STATUS_STATES:
            raise validation_failed(
                "Status", "state", "missing_field" if state is None else "invalid"
            )
        resolved = repo.git.resolve(sha) if _is_sha(sha) else None
        if resolved is None:
            raise ApiError(422, f"No commit found for SHA: {sha}", documentation_url=_DOC_STATUSES)
        now = self.clock.now()
        status = CommitStatus(
            id=self._status_ids(),
            repo=repo.full_name,
            sha=resolved,
            state=state,
            context=data.get("context") or "default",
            creator=creator,
            created_at=now,
            updated_at=now,
            target_url=data.get("target_url"),
            description=data.get("description"),
        )
        repo.statuses.append(status)
        return status

    # -- apps and tokens ---------------------------------------------------------------------------

    def mint_token(self, installation: Installation, repos: set[str] | None) -> Token:
        app = self.apps[installation.app_id]
        self.user(app.bot_login, type="Bot")
        value = f"ghs_{self._token_serial():06d}{secrets.token_hex(15)}"
        token = Token(
            value=value,
            login=app.bot_login,
            installation_id=installation.id,
            expires_at=self.clock.now() + 3600,
            repos=repos,
            minted_at=self.clock.now(),
        )
        self.tokens[value] = token
        return token


def _check_issue_body(body: Any, docs: str | None = None) -> None:
    """Issue and PR bodies share GitHub's Issue resource and its 422."""
    if isinstance(body, str) and len(body) > MAX_BODY_CHARS:
        raise _too_long("Issue", "custom", "body", "body", docs or _DOC_PULLS)


def _check_comment_body(body: str) -> None:
    if len(body) > MAX_BODY_CHARS:
        raise _too_long("IssueComment", "unprocessable", "data", "Body", _DOC_COMMENTS)


def _too_long(resource: str, code: str, field: str, word: str, docs: str) -> ApiError:
    """GitHub's 422 for a text over MAX_BODY_CHARS; each endpoint words it its own way."""
    message = f"{word} is too long (maximum is {MAX_BODY_CHARS} characters)"
    error = {"resource": resource, "code": code, "field": field, "message": message}
    return ApiError(422, "Validation Failed", errors=[error], documentation_url=docs)


def _check_output_size(output: Any) -> None:
    if not isinstance(output, dict):
        return
    for field in ("summary", "text"):
        value = output.get(field)
        if isinstance(value, str) and len(value.encode()) > MAX_CHECK_OUTPUT_BYTES:
            raise ApiError(
                422,
                "Validation Failed",
                errors=[
                    {
                        "resource": "CheckRun",
                        "code": "custom",
                        "field": field,
                        "message": f"{field} exceeds a maximum bytesize of {MAX_CHECK_OUTPUT_BYTES}",
                    }
                ],
                documentation_url=_DOC_CHECKS,
            )


def _is_sha(value: str) -> bool:
    return 4 <= len(value) <= 40 and all(c in "0123456789abcdef" for c in value.lower())


_DOC_REFS = "https://docs.github.com/rest/git/refs"
_DOC_COMMITS = "https://docs.github.com/rest/commits/commits#get-a-commit"
_DOC_MERGE = "https://docs.github.com/rest/pulls/pulls#merge-a-pull-request"
_DOC_CHECKS = "https://docs.github.com/rest/checks/runs#create-a-check-run"
_DOC_PULLS = "https://docs.github.com/rest/pulls/pulls#create-a-pull-request"
_DOC_COMMENTS = "https://docs.github.com/rest/issues/comments#create-an-issue-comment"
_DOC_STATUSES = "https://docs.github.com/rest/commits/statuses#create-a-commit-status"
