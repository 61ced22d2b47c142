"""InMemoryForge: a ForgePort for unit tests, with GitHub's state in dicts and no HTTP.

It is at least as strict as the real `Forge` on GitHub (or on bot.emulator): what GitHub
refuses, it refuses with the exception the real `Forge` raises, a ForgeError whose message
carries GitHub's status ("... failed (422): ..."). Texts are cut to GitHub's limits as `Forge`
cuts them. tests/integration/test_forge_contract.py runs the same scenarios on both.

Besides the port's methods it has the calls a test sets GitHub up with, as other people
(or GitHub) would act: `push`, `add_user`, `set_permission`, `open_pull`, `open_issue`,
`add_comment`, `merge`, `close`, `rename`, `limit_writes`; and what a test reads back:
`head`, `pull`, `issue_body`, `comments`, `labels`, `check_runs`, `statuses`, `writes`.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from bot.core.render import GITHUB_MAX_CHECK_OUTPUT_BYTES, fit_for_github
from bot.emulator.hub import (
    CHECK_CONCLUSIONS,
    CHECK_STATUSES,
    MAX_BODY_CHARS,
    NO_PRIVATE_DRAFTS,
    STATUS_STATES,
)
from bot.emulator.issues import MAX_TITLE_CHARS
from bot.emulator.state import PERMISSIONS as ROLES
from bot.emulator.state import TRIAGE_ROLES, WRITE_ROLES
from bot.github.forge import (
    DRAFTS_REFUSED,
    MAX_WAIT_S,
    WRITE_RETRIES,
    DraftsNotSupported,
    ForgeCaches,
    ForgeError,
    PermissionCache,
    PermissionUnknown,
    PullInfo,
    PullState,
    RateLimited,
    _short,
)

if TYPE_CHECKING:
    from bot.github.port import ForgePort

Auth = Literal["token", "app"]
WEB = "https://github.com"
API = "https://api.github.com"


@dataclass
class _Pull:
    head_ref: str
    head_sha: str
    base_ref: str
    draft: bool
    merged: bool = False
    merge_commit: str | None = None
    merged_by: str | None = None


@dataclass
class _Thread:
    """An issue, or a pull request's issue side (they share numbers, labels and comments)."""

    number: int
    title: str
    body: str
    user: str
    created: int
    labels: list[str] = field(default_factory=list)
    state: str = "open"
    pull: _Pull | None = None
    version: int = 0  # bumped on every change: the ETag of a conditional GET


@dataclass
class _Comment:
    id: int
    number: int
    user: str
    body: str
    created: int


_REPO_IDS = itertools.count(600_001)  # GitHub's repository ids: one each, never reused


@dataclass
class _Repo:
    full_name: str
    private: bool
    plan: str
    branches: dict[str, str] = field(default_factory=dict)
    parents: dict[str, tuple[str, ...]] = field(default_factory=dict)  # commit -> parents
    threads: dict[int, _Thread] = field(default_factory=dict)
    comments: list[_Comment] = field(default_factory=list)
    roles: dict[str, str] = field(default_factory=dict)  # lower-case login -> role
    label_names: dict[str, str] = field(default_factory=dict)  # lower-case -> as created
    check_runs: list[dict[str, Any]] = field(default_factory=list)
    statuses: list[dict[str, Any]] = field(default_factory=list)
    id: int = field(default_factory=lambda: next(_REPO_IDS))

    @property
    def owner(self) -> str:
        return self.full_name.split("/")[0]

    def ancestors(self, sha: str) -> set[str]:
        found: set[str] = set()
        todo = [sha]
        while todo:
            at = todo.pop()
            if at not in found:
                found.add(at)
                todo += self.parents.get(at, ())
        return found

    def commit(self, sha: str) -> str | None:
        """The full sha of a commit named by its sha or a prefix of it, as GitHub resolves it."""
        if not 4 <= len(sha) <= 40:
            return None
        return next((c for c in self.parents if c.startswith(sha.lower())), None)


def _refused(what: str, status: int, message: str) -> ForgeError:
    return ForgeError(f"GitHub: {what} failed ({status}): {{'message': {message!r}}}")


def _not_found(what: str) -> ForgeError:
    return _refused(what, 404, "Not Found")


def _is_not_found(err: ForgeError) -> bool:
    return "failed (404)" in str(err)


class InMemoryForge:
    def __init__(
        self,
        repo_name: str = "acme/widget",
        *,
        login: str = "carry[bot]",
        auth: Auth = "token",
        private: bool = False,
        plan: str = "free",
        caches: ForgeCaches | None = None,
    ) -> None:
        self.repo_name = repo_name
        self.caches = caches or ForgeCaches()  # its waits, as a Forge's
        self.renamed_from: str | None = None
        self.login = login
        self.auth = auth
        self.writes: list[str] = []  # what carry sent, in order ("create pull", "comment", ...)
        self._repos: dict[str, _Repo] = {}
        self._moved: dict[str, str] = {}  # lower-case old name -> new name
        self._users: dict[str, str] = {}  # lower-case login -> login
        self._clock = itertools.count(1)
        self._ids = itertools.count(1000)
        self._refusals: list[float] = []  # Retry-After of the next refused writes
        self._roles = PermissionCache()
        self.add_repo(repo_name, private=private, plan=plan)
        self.add_user(login)
        if auth == "token":
            self.set_permission(login, "write")

    # -- GitHub's side: what a test sets up ----------------------------------------------------

    def add_repo(self, full_name: str, *, private: bool = False, plan: str = "free") -> str:
        """A repository whose `main` has one commit; returns that commit."""
        repo = _Repo(full_name, private, plan)
        self._repos[full_name.lower()] = repo
        self.add_user(repo.owner)
        return self.push("main", repo=full_name)

    def add_user(self, login: str) -> None:
        self._users.setdefault(login.lower(), login)

    def set_permission(self, login: str, role: str, *, repo: str | None = None) -> None:
        if role not in ROLES:
            raise ValueError(f"permission must be one of {ROLES}, not {role!r}")
        self.add_user(login)
        self._world(repo).roles[login.lower()] = role

    def push(self, branch: str, *, on: str | None = None, repo: str | None = None) -> str:
        """A new commit on `branch`, on top of branch `on` (default: `branch` itself, or
        main for a new branch); returns its sha."""
        where = self._world(repo)
        parent = where.branches.get(on or branch) or where.branches.get("main")
        return self._commit_on(where, branch, (parent,) if parent else ())

    def _commit_on(self, where: _Repo, branch: str, parents: tuple[str, ...]) -> str:
        sha = hashlib.sha1(f"{where.full_name}:{next(self._ids)}".encode()).hexdigest()
        where.parents[sha] = parents
        where.branches[branch] = sha
        for thread in where.threads.values():
            if thread.pull and thread.state == "open" and thread.pull.head_ref == branch:
                thread.pull.head_sha = sha
                thread.version += 1
        return sha

    def open_pull(
        self,
        branch: str,
        *,
        base: str = "main",
        title: str = "Pull request",
        body: str = "",
        user: str | None = None,
        repo: str | None = None,
    ) -> int:
        where = self._world(repo)
        return self._new_pull(where, base, branch, title, body, False, user or where.owner).number

    def open_issue(
        self,
        title: str,
        *,
        user: str,
        body: str = "",
        labels: tuple[str, ...] = (),
        repo: str | None = None,
    ) -> int:
        """An issue opened by `user` in the web UI; its labels stay only with push access."""
        where = self._world(repo)
        self.add_user(user)
        kept = list(labels) if self._role(where, user) in WRITE_ROLES else []
        return self._new_thread(where, title, body, user, kept).number

    def add_comment(self, number: int, body: str, *, user: str, repo: str | None = None) -> int:
        where = self._world(repo)
        self.add_user(user)
        return self._new_comment(where, self._thread(where, number, "comment"), body, user)

    def merge(self, number: int, *, user: str | None = None, repo: str | None = None) -> str:
        """Merges the PR (a merge commit on its base); returns the merge commit."""
        where = self._world(repo)
        thread = self._pull_thread(where, number, "merge")
        pull = thread.pull
        assert pull is not None
        parents = (where.branches[pull.base_ref], pull.head_sha)
        merged = self._commit_on(where, pull.base_ref, parents)
        pull.merged, pull.merge_commit = True, merged
        pull.merged_by = user or where.owner
        thread.state = "closed"
        thread.version += 1
        return merged

    def close(self, number: int, *, repo: str | None = None) -> None:
        thread = self._thread(self._world(repo), number, "close")
        thread.state = "closed"
        thread.version += 1

    def rename(self, new_name: str, *, repo: str | None = None) -> None:
        """The repository's settings page renames it: its old name redirects."""
        where = self._world(repo)
        old = where.full_name
        where.full_name = f"{where.owner}/{new_name}"
        del self._repos[old.lower()]
        self._repos[where.full_name.lower()] = where
        self._moved[old.lower()] = where.full_name

    def limit_writes(self, times: int, retry_after_s: float) -> None:
        """GitHub's secondary rate limit refuses the next `times` writes."""
        self._refusals += [retry_after_s] * times

    # -- what a test reads back ------------------------------------------------------------------

    def pull(self, number: int, *, repo: str | None = None) -> PullInfo:
        where = self._world(repo)
        return self._info(where, self._pull_thread(where, number, "get pull"))

    def head(self, branch: str, *, repo: str | None = None) -> str | None:
        return self._world(repo).branches.get(branch)

    def issue_body(self, number: int) -> str:
        return self._thread(self._world(None), number, "get issue").body

    def comments(self, number: int) -> list[tuple[str, str]]:
        """(author, body) of the issue's comments, oldest first."""
        return [(c.user, c.body) for c in self._world(None).comments if c.number == number]

    def labels(self, number: int) -> list[str]:
        return list(self._thread(self._world(None), number, "get issue").labels)

    def check_runs(self, sha: str) -> list[dict[str, Any]]:
        return [r for r in self._world(None).check_runs if r["head_sha"] == sha]

    def statuses(self, sha: str) -> list[dict[str, Any]]:
        return [s for s in self._world(None).statuses if s["sha"] == sha]

    # -- ForgePort ---------------------------------------------------------------------------------

    @property
    def token(self) -> str:
        return f"fake-token-of-{self.login}"

    def find_open_pull(self, branch: str) -> PullInfo | None:
        repo = self._own("list pulls")
        mine = [
            t
            for t in repo.threads.values()
            if t.pull and t.state == "open" and t.pull.head_ref == branch
        ]
        newest = max(mine, key=lambda t: t.created, default=None)
        return self._info(repo, newest) if newest else None

    def create_pull(
        self,
        base: str,
        branch: str,
        title: str,
        body: str,
        draft: bool,
        *,
        series: str | None = None,
    ) -> PullInfo:
        repo = self._own_write("create pull")
        fitted = fit_for_github(body, series)
        return self._info(
            repo, self._new_pull(repo, base, branch, title, fitted, draft, self.login)
        )

    def update_pull(
        self,
        number: int,
        title: str,
        body: str,
        *,
        current: PullInfo | None = None,
        series: str | None = None,
    ) -> bool:
        fitted = fit_for_github(body, series)
        if current is not None and (current.title, current.body) == (title, fitted):
            return False
        repo = self._own_write("edit pull")
        thread = self._pull_thread(repo, number, "edit pull")
        _check_body("edit pull", fitted)
        thread.title, thread.body = title, fitted
        thread.version += 1
        return True

    def add_labels(
        self, number: int, labels: list[str], *, current: PullInfo | None = None
    ) -> None:
        missing = [label for label in labels if current is None or label not in current.labels]
        if not missing:
            return
        repo = self._own_write("add labels")
        thread = self._thread(repo, number, "add labels")
        if not all(name.strip() for name in missing):
            raise _refused("add labels", 422, "Validation Failed")
        self._label(repo, thread, missing)

    def remove_label(self, number: int, label: str) -> None:
        repo = self._own_write("remove label")
        thread = self._thread(repo, number, "remove label")
        found = next((n for n in thread.labels if n.lower() == label.lower()), None)
        if found is None:
            raise _refused("remove label", 404, "Label does not exist")
        thread.labels.remove(found)
        thread.version += 1

    def upsert_comment(
        self,
        number: int,
        marker: str,
        body: str,
        *,
        only_existing: bool = False,
        series: str | None = None,
    ) -> int | None:
        text = fit_for_github(body, series)
        repo = self._own("list comments")
        thread = self._thread(repo, number, "list comments")
        for comment in [c for c in repo.comments if c.number == number]:
            if marker in comment.body:
                if comment.body != text:
                    self._spend_refusals("edit comment")
                    _check_comment("edit comment", text)
                    comment.body = text
                return comment.id
        if only_existing:
            return None
        self._spend_refusals("comment")
        return self._new_comment(repo, thread, text, self.login)

    def comment(self, number: int, body: str, *, series: str | None = None) -> int:
        repo = self._own_write("comment")
        thread = self._thread(repo, number, "comment")
        return self._new_comment(repo, thread, fit_for_github(body, series), self.login)

    def find_issue(self, label: str, creator: str) -> int | None:
        repo = self._own("list issues")
        return min(
            (
                t.number
                for t in repo.threads.values()
                if t.pull is None
                and t.state == "open"
                and label.lower() in {n.lower() for n in t.labels}
                and t.user.lower() == creator.lower()
            ),
            default=None,
        )

    def create_issue(self, title: str, body: str, labels: list[str]) -> int:
        repo = self._own_write("create issue")
        if self.auth == "token" and self._role(repo, self.login) == "none":
            raise _not_found("create issue")
        if not title.strip() or len(title) > MAX_TITLE_CHARS:
            raise _refused("create issue", 422, "Validation Failed")
        if not all(name.strip() for name in labels):
            raise _refused("create issue", 422, "Validation Failed")
        text = fit_for_github(body)
        _check_body("create issue", text)
        thread = self._new_thread(repo, title, text, self.login, [])
        if self._may_push(repo):  # GitHub drops the labels of anyone else, without a word
            self._label(repo, thread, labels)
        return thread.number

    def edit_issue(self, number: int, body: str) -> bool:
        text = fit_for_github(body)
        try:
            repo = self._own_write("edit issue")
        except ForgeError as err:
            if _is_not_found(err):
                return False
            raise
        thread = repo.threads.get(number)
        if thread is None or (self.auth == "token" and self._role(repo, self.login) == "none"):
            return False
        may_edit = (
            self.auth == "app"
            or thread.user.lower() == self.login.lower()
            or self._role(repo, self.login) in TRIAGE_ROLES
        )
        if not may_edit:
            raise _refused("edit issue", 403, "Must have admin rights to Repository.")
        _check_body("edit issue", text)
        thread.body = text
        thread.version += 1
        return True

    def issues_writable(self) -> bool | None:
        """The in-memory repository takes every issue write carry makes."""
        return True

    def permission(self, user: str) -> str:
        key = (API, self.repo_name, user.lower())
        return self._roles.get(key, lambda: self._look_up_permission(user))

    def create_check_run(
        self,
        head_sha: str,
        name: str,
        status: str,
        conclusion: str | None,
        title: str,
        summary: str,
        *,
        series: str | None = None,
        external_id: str = "",
    ) -> int:
        what = "create check run"
        repo = self._own_write(what)
        if self.auth != "app":
            raise _refused(what, 403, "You must authenticate via a GitHub App.")
        sha = repo.commit(head_sha)
        if not name or sha is None:
            raise _refused(what, 422, "Validation Failed")
        ends = conclusion or None
        if status not in CHECK_STATUSES or (ends is not None and ends not in CHECK_CONCLUSIONS):
            raise _refused(what, 422, "Validation Failed")
        status = "completed" if ends is not None else status
        if status == "completed" and ends is None:
            raise _refused(what, 422, "Validation Failed")
        fitted = fit_for_github(summary, series, limit=GITHUB_MAX_CHECK_OUTPUT_BYTES, in_bytes=True)
        run_id = next(self._ids)
        run = {
            "id": run_id,
            "head_sha": sha,
            "name": name,
            "status": status,
            "conclusion": ends,
            "output": {"title": title, "summary": fitted},
            "external_id": external_id,
        }
        repo.check_runs.append(run)
        return run_id

    def update_check_run(
        self,
        check_run_id: int,
        status: str,
        conclusion: str | None,
        title: str,
        summary: str,
        *,
        series: str | None = None,
    ) -> None:
        what = "update check run"
        repo = self._own_write(what)
        if self.auth != "app":
            raise _refused(what, 403, "You must authenticate via a GitHub App.")
        run = next((r for r in repo.check_runs if r["id"] == check_run_id), None)
        if run is None:
            raise _refused(what, 404, "Not Found")
        ends = conclusion or None
        if status not in CHECK_STATUSES or (ends is not None and ends not in CHECK_CONCLUSIONS):
            raise _refused(what, 422, "Validation Failed")
        if status == "completed" and ends is None:
            raise _refused(what, 422, "Validation Failed")
        fitted = fit_for_github(summary, series, limit=GITHUB_MAX_CHECK_OUTPUT_BYTES, in_bytes=True)
        run.update(
            status="completed" if ends is not None else status,
            conclusion=ends,
            output={"title": title, "summary": fitted},
        )

    def find_check_run(self, head_sha: str, name: str, external_id: str) -> int | None:
        repo = self._own("list check runs")
        sha = repo.commit(head_sha)
        ids = [
            int(r["id"])
            for r in repo.check_runs
            if (r["head_sha"], r["name"], r.get("external_id")) == (sha, name, external_id)
        ]
        return max(ids, default=None)

    def create_status(
        self, sha: str, context: str, state: str, description: str, target_url: str = ""
    ) -> None:
        repo = self._own_write("create status")
        commit = repo.commit(sha)
        if state not in STATUS_STATES or commit is None:
            raise _refused("create status", 422, "Validation Failed")
        status = {
            "sha": commit,
            "context": context or "default",
            "state": state,
            "description": _short(description),
            "target_url": target_url or None,
        }
        repo.statuses.append(status)

    def repository_id(self, repo: str) -> int:
        name = self._moved.get(repo.lower(), repo)
        return self._visible(name, f"get repository {repo}").id

    def pull_state(
        self, repo: str, number: int, etag: str | None
    ) -> tuple[PullState | None, str | None]:
        what = f"get {repo}#{number}"
        where = self._other(repo, what)
        pull = where.threads.get(number)
        if pull is None or pull.pull is None:
            raise _not_found(what)
        tag = 'W/"' + hashlib.sha1(f"{repo}#{number}@{pull.version}".encode()).hexdigest() + '"'
        if etag is not None and etag.removeprefix("W/") == tag.removeprefix("W/"):
            return None, etag
        return _state(pull, pull.pull), tag

    def timeline(self, repo: str, number: int) -> list[dict[str, Any]]:
        what = f"timeline of {repo}#{number}"
        where = self._other(repo, what)
        self._thread(where, number, what)
        events = [(c.created, _commented(c)) for c in where.comments if c.number == number]
        events += self._cross_references(where, number)
        return [event for _, event in sorted(events, key=lambda e: e[0])][:100]

    # -- the rules -------------------------------------------------------------------------------

    def _world(self, repo: str | None) -> _Repo:
        """A repository as GitHub holds it (setup calls: no permission applies)."""
        return self._repos[(repo or self.repo_name).lower()]

    def _own(self, what: str) -> _Repo:
        """carry's repository for a read; a rename is followed once, as Forge follows it."""
        moved = self._moved.get(self.repo_name.lower())
        if moved is not None:
            if self.renamed_from is not None:
                raise ForgeError(f"GitHub: {what} was redirected; not followed")
            self.renamed_from, self.repo_name = self.repo_name, moved
        return self._visible(self.repo_name, what)

    def _own_write(self, what: str) -> _Repo:
        self._spend_refusals(what)
        return self._own(what)

    def _other(self, repo: str, what: str) -> _Repo:
        """A repository named in a call (an upstream's, or carry's own)."""
        moved = self._moved.get(repo.lower())
        if moved is not None:
            raise ForgeError(f"GitHub: {repo} is now {moved}: update the config's upstream repo")
        return self._visible(repo, what)

    def _visible(self, name: str, what: str) -> _Repo:
        repo = self._repos.get(name.lower())
        if repo is None:
            raise _not_found(what)
        if self.auth == "app":  # the installation is on the account of carry's repository
            if repo.owner.lower() != self.repo_name.split("/")[0].lower():
                raise _not_found(what)
        elif repo.private and self._role(repo, self.login) == "none":
            raise _not_found(what)
        return repo

    def _spend_refusals(self, what: str) -> None:
        """A write meets the rate limit's refusals: Forge waits out a short Retry-After and
        sends it again (up to WRITE_RETRIES times); a longer one is RateLimited at once."""
        retries = 0
        while self._refusals:
            wait = self._refusals.pop(0)
            if wait > MAX_WAIT_S:
                raise RateLimited(f"GitHub: {what} was refused by a rate limit", wait)
            if retries >= WRITE_RETRIES:
                raise RateLimited(f"GitHub: {what} still refused by a rate limit", wait)
            self.caches.sleep(wait)
            retries += 1
        self.writes.append(what)

    def _role(self, repo: _Repo, login: str) -> str:
        if login.lower() == repo.owner.lower():
            return "admin"
        explicit = repo.roles.get(login.lower())
        if explicit is not None:
            return explicit
        if self.auth == "app" and login.lower() == self.login.lower():
            return "write"
        return "none" if repo.private else "read"

    def _may_push(self, repo: _Repo) -> bool:
        return self.auth == "app" or self._role(repo, self.login) in WRITE_ROLES

    def _look_up_permission(self, user: str) -> str:
        try:
            repo = self._own(f"permission of {user}")
        except ForgeError as err:
            if _is_not_found(err):
                return "none"
            raise
        if self.auth == "token" and not self._may_push(repo):
            raise PermissionUnknown(
                f"GitHub: carry's credentials cannot read permissions on {self.repo_name} "
                f"(403: the token needs push access); {user}'s command was not acted on"
            )
        if user.lower() not in self._users:
            return "none"
        return self._role(repo, user)

    def _thread(self, repo: _Repo, number: int, what: str) -> _Thread:
        found = repo.threads.get(number)
        if found is None:
            raise _not_found(what)
        return found

    def _pull_thread(self, repo: _Repo, number: int, what: str) -> _Thread:
        found = self._thread(repo, number, what)
        if found.pull is None:
            raise _not_found(what)
        return found

    def _new_thread(
        self, repo: _Repo, title: str, body: str, user: str, labels: list[str]
    ) -> _Thread:
        number = max(repo.threads, default=0) + 1
        thread = _Thread(number, title, body, user, next(self._clock))
        repo.threads[number] = thread
        self._label(repo, thread, labels)
        return thread

    def _new_pull(
        self, repo: _Repo, base: str, branch: str, title: str, body: str, draft: bool, user: str
    ) -> _Thread:
        what = "create pull"
        if not (branch and base and title):
            raise _refused(what, 422, "Validation Failed")
        _check_body(what, body)
        if draft and repo.private and repo.plan in NO_PRIVATE_DRAFTS:
            raise DraftsNotSupported(f"GitHub: {what} failed (422): {DRAFTS_REFUSED}")
        head_sha, base_sha = repo.branches.get(branch), repo.branches.get(base)
        if head_sha is None or base_sha is None:
            raise _refused(what, 422, "Validation Failed")
        for other in repo.threads.values():
            p = other.pull
            if p and other.state == "open" and (p.head_ref, p.base_ref) == (branch, base):
                raise _refused(what, 422, f"A pull request already exists for {branch}.")
        if head_sha in repo.ancestors(base_sha):
            raise _refused(what, 422, f"No commits between {base} and {branch}")
        thread = self._new_thread(repo, title, body, user, [])
        thread.pull = _Pull(branch, head_sha, base, draft)
        return thread

    def _new_comment(self, repo: _Repo, thread: _Thread, body: str, user: str) -> int:
        _check_comment("comment", body)
        comment = _Comment(next(self._ids), thread.number, user, body, next(self._clock))
        repo.comments.append(comment)
        return comment.id

    def _label(self, repo: _Repo, thread: _Thread, names: list[str]) -> None:
        """Adds labels by name; a name the repository lacks is created, as GitHub does."""
        for name in names:
            canonical = repo.label_names.setdefault(name.strip().lower(), name.strip())
            if canonical not in thread.labels:
                thread.labels.append(canonical)
        thread.version += 1

    def _info(self, repo: _Repo, thread: _Thread) -> PullInfo:
        pull = thread.pull
        assert pull is not None
        return PullInfo(
            thread.number,
            f"{WEB}/{repo.full_name}/pull/{thread.number}",
            pull.head_sha,
            thread.state,
            pull.draft,
            pull.merged,
            thread.title,
            thread.body,
            tuple(thread.labels),
        )

    def _cross_references(self, repo: _Repo, number: int) -> list[tuple[int, dict[str, Any]]]:
        """Bodies and comments of the repository's other issues that mention #number."""
        mention = re.compile(
            rf"(?:(?<![\w/#]){re.escape(repo.full_name)}|(?<![\w/]))#{number}\b", re.IGNORECASE
        )
        texts = [(t.created, t.user, t, t.body) for t in repo.threads.values()]
        texts += [(c.created, c.user, repo.threads[c.number], c.body) for c in repo.comments]
        return [
            (when, _cross_referenced(repo, source, who))
            for when, who, source, text in texts
            if source.number != number and mention.search(text)
        ]


def _check_body(what: str, body: str) -> None:
    if len(body) > MAX_BODY_CHARS:
        raise _refused(what, 422, "Validation Failed: body is too long")


def _check_comment(what: str, body: str) -> None:
    if not body:
        raise _refused(what, 422, "Validation Failed: body is missing")
    if len(body) > MAX_BODY_CHARS:
        raise _refused(what, 422, "Validation Failed: Body is too long")


def _state(thread: _Thread, pull: _Pull) -> PullState:
    state: Literal["open", "merged", "closed_unmerged"] = "open"
    if pull.merged:
        state = "merged"
    elif thread.state == "closed":
        state = "closed_unmerged"
    return PullState(state, pull.head_sha, pull.base_ref, pull.merge_commit, pull.merged_by)


def _commented(comment: _Comment) -> dict[str, Any]:
    who = {"login": comment.user}
    return {"event": "commented", "id": comment.id, "body": comment.body, "user": who, "actor": who}


def _cross_referenced(repo: _Repo, source: _Thread, who: str) -> dict[str, Any]:
    issue: dict[str, Any] = {
        "number": source.number,
        "title": source.title,
        "state": source.state,
        "body": source.body,
        "repository_url": f"{API}/repos/{repo.full_name}",
    }
    if source.pull is not None:
        issue["pull_request"] = {"url": f"{API}/repos/{repo.full_name}/pulls/{source.number}"}
    return {
        "event": "cross-referenced",
        "actor": {"login": who},
        "source": {"type": "issue", "issue": issue},
    }


if TYPE_CHECKING:  # mypy checks that the fake has every member of the port
    _fake_fits: type[ForgePort] = InMemoryForge
