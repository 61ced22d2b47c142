"""GitHubEmulator: the server plus the Python API tests use to set up and inspect state."""

from __future__ import annotations

import contextlib
import subprocess
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import quote

from cryptography.hazmat.primitives.serialization import load_pem_public_key

from .api import RestApi
from .errors import ApiError
from .faults import Fault, FaultTable
from .gitops import GitError, git_env
from .hook_deliveries import HookDeliveries
from .hub import Hub
from .protection import BranchProtection, parse_ruleset
from .ratelimit import RateLimiter, Window
from .repo_moves import RepoMoves
from .rules_api import RulesApi
from .server import EmulatorHTTPServer, RecordedRequest, Service
from .state import App, Identity, Installation, Repo, Token
from .util import Clock
from .webhooks import Delivery, Dispatcher, Hook

T = TypeVar("T")


def _web(login: str) -> Identity:
    """Who acts in the Python API: a signed-in user of the web UI."""
    return Identity(kind="user", login=login)


def _as_user(login: str, what: str, act: Callable[[], T]) -> T:
    """Runs a web-UI action; GitHub's refusal of it (403, or 404 for a repository the user
    cannot see) becomes a PermissionError naming the user and the action."""
    try:
        return act()
    except ApiError as exc:
        if exc.status in (403, 404):
            raise PermissionError(f"{login} may not {what} (GitHub: {exc.message})") from exc
        raise


class GitHubEmulator:
    """A local GitHub: REST on base_url, git over HTTP at git_url(), webhooks to your URLs.

    Use as a context manager (`with GitHubEmulator(tmp_path) as gh:`) or start()/stop().
    """

    def __init__(
        self,
        root: Path | str,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        manual_webhooks: bool = False,
        rate_limit: int = 5000,
        token_warmup_s: float = 0.0,
        enterprise: bool = False,
    ) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.clock = Clock()
        self.hub = Hub(self.root, self.clock)
        self.hub.token_warmup_s = token_warmup_s
        self.limiter = RateLimiter(self.clock, limit=rate_limit)
        self.faults = FaultTable()
        self.dispatcher = Dispatcher(manual=manual_webhooks, now=self.clock.now)
        self.hub.sink = self._on_event
        rest = RestApi(self.hub, self.limiter)
        HookDeliveries(rest, self.dispatcher)  # a hook's deliveries and redeliveries over REST
        RulesApi(rest)  # branch protection and rulesets over REST
        RepoMoves(rest)  # renames and transfers over REST
        self.hub.on_move.append(self._hooks_follow)
        self._service = Service(self.hub, rest, self.limiter, self.faults)
        self._server = EmulatorHTTPServer((host, port), self._service)
        self.host = host
        self.port = self._server.server_address[1]
        # An Enterprise Server answers its REST API under /api/v3; pages and git are on the host.
        self.hub.web_url = f"http://{host}:{self.port}"
        self.hub.api_prefix = "/api/v3" if enterprise else ""
        self.hub.base_url = self.hub.web_url + self.hub.api_prefix
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> GitHubEmulator:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.server_close()
        self.dispatcher.close()

    def __enter__(self) -> GitHubEmulator:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def serve_forever(self) -> None:
        """Blocks serving requests (for `python -m bot.emulator`)."""
        self._server.serve_forever(poll_interval=0.2)

    @property
    def base_url(self) -> str:
        return self.hub.base_url

    # -- users, tokens, apps ----------------------------------------------------------------------

    def add_user(
        self, login: str, *, type: str = "User", name: str | None = None, email: str | None = None
    ) -> int:
        """Registers a user (or Organization / Bot); returns its id."""
        with self.hub.lock:
            user = self.hub.user(login, type=type)
            user.name, user.email = name or user.name, email or user.email
            return user.id

    def add_token(self, token: str, login: str) -> None:
        """Accepts `Authorization: token <token>` (or Bearer/Basic) as `login`."""
        with self.hub.lock:
            self.hub.user(login)
            self.hub.tokens[token] = Token(value=token, login=login)

    def add_app(
        self,
        app_id: int,
        public_key_pem: str | bytes,
        *,
        slug: str | None = None,
        name: str | None = None,
        owner: str = "app-owner",
        installation_id: int | None = None,
        account: str | None = None,
        repos: Iterable[str] | None = None,
        permissions: dict[str, str] | None = None,
        events: Iterable[str] = ("check_run", "issue_comment", "pull_request", "push"),
    ) -> None:
        """Registers a GitHub App (its JWTs verify with public_key_pem) and, optionally, one
        installation on `account` for `repos` ("owner/name"; None = all of the account's)."""
        key = load_pem_public_key(
            public_key_pem.encode() if isinstance(public_key_pem, str) else public_key_pem
        )
        with self.hub.lock:
            self.hub.user(owner)
            slug = slug or f"app-{app_id}"
            self.hub.apps[app_id] = App(
                id=app_id,
                slug=slug,
                name=name or slug,
                owner=owner,
                public_key=key,
                created_at=self.clock.now(),
                permissions=permissions
                or {
                    "checks": "write",
                    "contents": "write",
                    "issues": "write",
                    "metadata": "read",
                    "pull_requests": "write",
                    "statuses": "write",
                },
                events=list(events),
            )
            self.hub.user(f"{slug}[bot]", type="Bot")
        if installation_id is not None:
            self.add_installation(app_id, installation_id, account or owner, repos=repos)

    def add_installation(
        self, app_id: int, installation_id: int, account: str, *, repos: Iterable[str] | None = None
    ) -> None:
        with self.hub.lock:
            self.hub.user(account)
            self.hub.installations[installation_id] = Installation(
                id=installation_id,
                app_id=app_id,
                account=account,
                repos={r.lower() for r in repos} if repos is not None else None,
                created_at=self.clock.now(),
            )

    def installation_token(self, installation_id: int) -> str:
        """Mints an installation token directly (without the JWT round trip)."""
        with self.hub.lock:
            return self.hub.mint_token(self.hub.installations[installation_id], None).value

    # -- repositories -----------------------------------------------------------------------------

    def create_repo(
        self,
        owner: str,
        name: str,
        *,
        from_path: Path | str | None = None,
        default_branch: str = "main",
        private: bool = False,
        description: str | None = None,
        plan: str = "free",
    ) -> Path:
        """A bare repository (branches and tags copied from from_path); returns its path.
        `plan` is the owner's GitHub plan: private repositories of free/pro refuse drafts."""
        with self.hub.lock:
            repo = self.hub.create_repo(
                owner,
                name,
                from_path=Path(from_path) if from_path is not None else None,
                default_branch=default_branch,
                private=private,
                description=description,
                plan=plan,
            )
            return repo.path

    def rename_repo(self, owner: str, name: str, new_name: str) -> Path:
        """Renames owner/name to owner/new_name, as the repository's settings page does: API
        calls and git requests that use the old name are redirected (GitHub: 301 for GET and
        HEAD, 307 for other methods, to /repositories/<id>), and a `repository` `renamed`
        event goes out under the new name with the same id; returns the new path."""
        with self.hub.lock:
            return self.hub.rename_repo(owner, name, new_name).path

    def transfer_repo(
        self, owner: str, name: str, new_owner: str, *, new_name: str | None = None
    ) -> Path:
        """Transfers owner/name to new_owner (an account the emulator knows), as GitHub does
        once the new owner accepted it: the old name redirects, the id stays, and a
        `repository` `transferred` event goes out; returns the new path."""
        with self.hub.lock:
            return self.hub.transfer_repo(owner, name, new_owner, new_name=new_name).path

    def _hooks_follow(self, old: str, new: str) -> None:
        """A repository's hooks belong to it, not to its name."""
        for hook in self.dispatcher.hooks.values():
            if hook.repo is not None and hook.repo.lower() == old.lower():
                hook.repo = new

    def repo_path(self, owner: str, name: str) -> Path:
        return self._repo(owner, name).path

    def git_url(self, owner: str, name: str, *, token: str | None = None) -> str:
        """The http clone URL; with a token it carries `x-access-token:<token>@` credentials."""
        repo = self._repo(owner, name)
        if token is None:
            return f"{self.hub.web_url}/{repo.full_name}.git"
        return f"http://x-access-token:{quote(token, safe='')}@{self.host}:{self.port}/{repo.full_name}.git"

    def ref(self, owner: str, name: str, ref: str) -> str | None:
        """sha of a ref ("refs/heads/main", "refs/pull/1/head") or None."""
        return self._repo(owner, name).git.ref_sha(ref)

    def push(
        self,
        owner: str,
        name: str,
        work_tree: Path | str,
        *refspecs: str,
        pusher: str,
        force: bool = False,
    ) -> None:
        """`git push` from a local repository straight into the bare one, as `pusher`'s push.
        The lock is held from the push to its sync: a REST call in between would otherwise
        notice the moved refs first and credit the push to the repository's owner."""
        with self.hub.lock:
            repo = self._repo(owner, name)
            argv = ["git", "-C", str(work_tree), "push", "-q", *(["--force"] if force else [])]
            proc = subprocess.run(
                [*argv, str(repo.git.path), *refspecs],
                capture_output=True,
                text=True,
                env=git_env(),
            )
            if proc.returncode != 0:
                raise GitError(f"git push {' '.join(refspecs)}: {proc.stderr.strip()}")
            self.hub.sync(repo, pusher)

    def sync(self, owner: str, name: str, *, pusher: str | None = None) -> None:
        """Picks up ref moves made directly in the bare repository (e.g. a push by path)."""
        with self.hub.lock:
            self.hub.sync(self._repo(owner, name), pusher)

    def set_permission(self, owner: str, name: str, user: str, permission: str) -> None:
        """admin / maintain / write / triage / read / none for user on owner/name."""
        with self.hub.lock:
            self.hub.set_permission(self._repo(owner, name), user, permission)

    def protect_branch(
        self,
        owner: str,
        name: str,
        branch: str,
        *,
        allow_force_pushes: bool = False,
        required_checks: tuple[str, ...] = (),
        enforce_admins: bool = False,
    ) -> None:
        """A classic branch protection, as an admin sets it on the settings page (the REST
        endpoint is PUT /repos/{o}/{r}/branches/{branch}/protection)."""
        with self.hub.lock:
            repo = self.hub.repo(owner, name)
            self.hub.protections.classic[(repo.full_name.lower(), branch)] = BranchProtection(
                branch=branch,
                required_contexts=list(required_checks),
                enforce_admins=enforce_admins,
                allow_force_pushes=allow_force_pushes,
            )

    def add_ruleset(
        self,
        owner: str,
        name: str | None = None,
        *,
        include: tuple[str, ...] = ("~DEFAULT_BRANCH",),
        rules: tuple[str, ...] = ("non_fast_forward",),
        required_checks: tuple[str, ...] = (),
        bypass_apps: tuple[int, ...] = (),
        title: str = "protect",
    ) -> int:
        """An active branch ruleset of repository owner/name, or of organization `owner` (for
        all its repositories) when name is None; returns its id. `rules` are rule types
        (non_fast_forward, deletion); required_checks adds a required_status_checks rule."""
        data = {
            "name": title,
            "enforcement": "active",
            "conditions": {"ref_name": {"include": list(include), "exclude": []}},
            "rules": [{"type": kind} for kind in rules],
            "bypass_actors": [
                {"actor_id": app, "actor_type": "Integration", "bypass_mode": "always"}
                for app in bypass_apps
            ],
        }
        if required_checks:
            checks = [{"context": c} for c in required_checks]
            data["rules"].append(  # type: ignore[attr-defined]
                {
                    "type": "required_status_checks",
                    "parameters": {
                        "required_status_checks": checks,
                        "strict_required_status_checks_policy": False,
                    },
                }
            )
        with self.hub.lock:
            store = self.hub.protections
            if name is None:
                data["conditions"]["repository_name"] = {"include": ["~ALL"], "exclude": []}  # type: ignore[index]
                kind, source = "Organization", owner
            else:
                kind, source = "Repository", self.hub.repo(owner, name).full_name
            ruleset = parse_ruleset(data, kind, source, store.next_id, self.clock.now())
            store.rulesets[ruleset.id] = ruleset
            store.next_id += 1
            return ruleset.id

    def remove_ruleset(self, ruleset_id: int) -> None:
        with self.hub.lock:
            del self.hub.protections.rulesets[ruleset_id]

    def _repo(self, owner: str, name: str) -> Repo:
        with self.hub.lock:
            return self.hub.repo(owner, name)

    # -- pull requests, issues, comments ------------------------------------------------------

    def open_pull(
        self,
        owner: str,
        name: str,
        *,
        head: str,
        base: str | None = None,
        title: str = "Pull request",
        body: str | None = None,
        user: str | None = None,
        draft: bool = False,
    ) -> int:
        with self.hub.lock:
            repo = self._synced(owner, name)
            issue = self.hub.open_pull(
                repo,
                head=head,
                base=base or repo.default_branch,
                title=title,
                body=body,
                user=user or repo.owner,
                draft=draft,
            )
            return issue.number

    def open_issue(
        self,
        owner: str,
        name: str,
        *,
        title: str,
        body: str | None = None,
        user: str | None = None,
        labels: Iterable[str] = (),
    ) -> int:
        """An issue opened by `user` (default: the owner) as in the web UI; sends
        issues.opened. Labels stick only if `user` has push access, as on GitHub."""
        data: dict[str, Any] = {"title": title, "body": body, "labels": list(labels)}
        with self.hub.lock:
            repo = self._synced(owner, name)
            login = user or repo.owner
            opened = _as_user(
                login,
                f"open an issue on {repo.full_name}",
                lambda: self.hub.open_issue(repo, _web(login), data),
            )
            return opened.number

    def edit_issue(
        self,
        owner: str,
        name: str,
        number: int,
        *,
        body: str | None = None,
        title: str | None = None,
        state: str | None = None,
        user: str,
    ) -> None:
        """`user` edits issue `number` in the web UI (its author, or triage access or more):
        sends issues.edited (changes.body/title.from) and issues.closed / reopened; on a pull
        request, the pull_request events. PermissionError when GitHub would refuse."""
        data = {"body": body, "title": title, "state": state}
        with self.hub.lock:
            repo = self._synced(owner, name)
            issue = self.hub.issue(repo, number)
            _as_user(
                user,
                f"edit {repo.full_name}#{number}",
                lambda: self.hub.update_issue(repo, issue, _web(user), data),
            )

    def issue(self, owner: str, name: str, number: int) -> dict[str, Any]:
        """The issue (or a PR's issue side) as GET /issues/{n} returns it."""
        with self.hub.lock:
            repo = self._synced(owner, name)
            return self.hub.views.issue(repo, self.hub.issue(repo, number))

    def issues(self, owner: str, name: str, *, state: str = "open") -> list[dict[str, Any]]:
        """Issues only (no pull requests) in `state` (open / closed / all), by number."""
        if state not in ("open", "closed", "all"):
            raise ValueError(f"state must be open, closed or all, not {state!r}")
        with self.hub.lock:
            repo = self._synced(owner, name)
            found = [
                i for i in repo.issues.values() if i.pull is None and state in ("all", i.state)
            ]
            return [self.hub.views.issue(repo, i) for i in sorted(found, key=lambda i: i.number)]

    def merge_pull(
        self, owner: str, name: str, number: int, *, method: str = "merge", user: str | None = None
    ) -> str:
        """Merges like the REST call does; returns the merge commit sha."""
        with self.hub.lock:
            repo = self._synced(owner, name)
            return self.hub.merge_pull(
                repo, self.hub.pull(repo, number), user or repo.owner, method=method
            )

    def close_pull(self, owner: str, name: str, number: int, *, user: str | None = None) -> None:
        with self.hub.lock:
            repo = self._synced(owner, name)
            self.hub.edit_pull(
                repo, self.hub.pull(repo, number), user or repo.owner, state="closed"
            )

    def reopen_pull(self, owner: str, name: str, number: int, *, user: str | None = None) -> None:
        with self.hub.lock:
            repo = self._synced(owner, name)
            self.hub.edit_pull(repo, self.hub.pull(repo, number), user or repo.owner, state="open")

    def edit_pull(
        self, owner: str, name: str, number: int, *, user: str | None = None, **changes: str
    ) -> None:
        """title= / body= / base= changes, sending pull_request.edited."""
        with self.hub.lock:
            repo = self._synced(owner, name)
            self.hub.edit_pull(repo, self.hub.pull(repo, number), user or repo.owner, **changes)

    def add_comment(self, owner: str, name: str, number: int, body: str, *, user: str) -> int:
        """A comment by `user` on issue/PR `number` (sends issue_comment.created); its id."""
        with self.hub.lock:
            repo = self._synced(owner, name)
            return self.hub.add_comment(repo, self.hub.issue(repo, number), user, body).id

    def pull(self, owner: str, name: str, number: int) -> dict[str, Any]:
        """The PR as GET /pulls/{n} would return it."""
        with self.hub.lock:
            repo = self._synced(owner, name)
            return self.hub.views.pull(repo, self.hub.pull(repo, number))

    def pulls(self, owner: str, name: str, *, state: str = "all") -> list[dict[str, Any]]:
        with self.hub.lock:
            repo = self._synced(owner, name)
            issues = [i for i in repo.issues.values() if i.pull and state in ("all", i.state)]
            return [self.hub.views.pull(repo, i) for i in sorted(issues, key=lambda i: i.number)]

    def comments(self, owner: str, name: str, number: int) -> list[dict[str, Any]]:
        with self.hub.lock:
            repo = self._synced(owner, name)
            return [self.hub.views.comment(repo, c) for c in self.hub.comments_of(repo, number)]

    def labels(self, owner: str, name: str, number: int) -> list[str]:
        with self.hub.lock:
            return list(self.hub.issue(self._repo(owner, name), number).labels)

    def check_runs(self, owner: str, name: str, *, sha: str | None = None) -> list[dict[str, Any]]:
        with self.hub.lock:
            repo = self._repo(owner, name)
            runs = [
                r
                for r in self.hub.check_runs.values()
                if r.repo == repo.full_name and sha in (None, r.head_sha)
            ]
            return [self.hub.views.check_run(repo, r) for r in runs]

    def rerequest_check_run(
        self, owner: str, name: str, run_id: int, *, user: str | None = None
    ) -> None:
        """Simulates a user re-running a completed check run (check_run.rerequested)."""
        with self.hub.lock:
            repo = self._repo(owner, name)
            self.hub.rerequest_check_run(repo, self.hub.check_run(repo, run_id), user or repo.owner)

    def statuses(self, owner: str, name: str, sha: str) -> list[dict[str, Any]]:
        with self.hub.lock:
            repo = self._repo(owner, name)
            return [self.hub.views.status(repo, s) for s in repo.statuses if s.sha == sha]

    def _synced(self, owner: str, name: str) -> Repo:
        repo = self.hub.repo(owner, name)
        self.hub.sync(repo)
        return repo

    # -- webhooks ---------------------------------------------------------------------------------

    def add_webhook(
        self,
        url: str,
        secret: str | None = None,
        *,
        events: Iterable[str] = ("*",),
        owner: str | None = None,
        repo: str | None = None,
        app_id: int | None = None,
        content_type: str = "json",
        ping: bool = False,
    ) -> int:
        """A hook for one repository (owner+repo), for an App (app_id: its installations'
        repositories) or for every repository (neither). Returns the hook id."""
        full = f"{owner}/{repo}" if owner and repo else None
        hook = self.dispatcher.add_hook(
            url,
            secret,
            events=frozenset(events),
            repo=full,
            app_id=app_id,
            content_type=content_type,
        )
        if ping:
            with self.hub.lock:
                target_repo = self.hub.repo(owner, repo) if owner and repo else None
                hook_type = "App" if app_id is not None else "Repository"
                hook_url = (
                    f"{self.base_url}/repos/{full}/hooks/{hook.id}"
                    if full
                    else f"{self.base_url}/app/hook"
                )
                payload = self.hub.payloads.ping(
                    hook.id, hook_type, sorted(hook.events), url, hook_url, app_id
                )
            self.dispatcher.enqueue(
                "ping", payload, hooks=[hook], target=self._target_for(target_repo)
            )
        return hook.id

    @property
    def deliveries(self) -> list[Delivery]:
        return list(self.dispatcher.deliveries)

    def wait_for_deliveries(self, timeout: float = 10.0) -> list[Delivery]:
        """Waits until every queued delivery was attempted; returns the whole delivery log."""
        self.dispatcher.wait_idle(timeout)
        return self.deliveries

    def deliveries_held(
        self, *, newest_first: bool = False
    ) -> contextlib.AbstractContextManager[None]:
        """Webhook deliveries made inside the block wait, then go out the newest first if
        asked: GitHub promises no order (a redelivery comes after newer deliveries)."""
        return self.dispatcher.held(newest_first=newest_first)

    def deliver_pending(self, *, newest_first: bool = False) -> int:
        """Sends the held deliveries (manual_webhooks=True), oldest first unless
        `newest_first` (GitHub does not promise an order)."""
        return self.dispatcher.deliver_pending(newest_first=newest_first)

    def redeliver(self, delivery: Delivery | str, *, hook_id: int | None = None) -> Delivery:
        """Redelivers a past delivery (by object, or by GUID: the event's first delivery, to
        `hook_id` if given, as one GUID is shared by every hook the event went to) with the
        same GUID and body."""
        if isinstance(delivery, str):
            delivery = next(
                d
                for d in self.dispatcher.deliveries
                if d.guid == delivery and hook_id in (None, d.hook_id)
            )
        return self.dispatcher.redeliver(delivery)

    def _on_event(self, event: str, payload: dict[str, Any], repo: Repo | None) -> None:
        if repo is not None:
            inst = self.hub.installation_for(repo)
            if inst is not None:
                payload["installation"] = self.hub.payloads.installation_lite(inst.id)
        hooks = [
            h
            for h in self.dispatcher.hooks.values()
            if h.wants(event) and self._hook_covers(h, repo)
        ]
        if hooks:
            self.dispatcher.enqueue(event, payload, hooks=hooks, target=self._target_for(repo))

    def _hook_covers(self, hook: Hook, repo: Repo | None) -> bool:
        if repo is None:
            return True
        if hook.repo is not None:
            return hook.repo.lower() == repo.full_name.lower()
        if hook.app_id is not None:
            return any(
                i.app_id == hook.app_id and i.covers(repo) for i in self.hub.installations.values()
            )
        return True

    def _target_for(self, repo: Repo | None) -> Any:
        def target(hook: Hook) -> tuple[str, int]:
            if hook.app_id is not None:
                return "integration", hook.app_id
            return "repository", repo.id if repo is not None else 0

        return target

    # -- faults, request log, rate limit, clock ------------------------------------------------

    def inject_fault(
        self,
        kind: str,
        *,
        times: int = 1,
        method: str | None = None,
        path: str | None = None,
        status: int | None = None,
        retry_after: int | None = None,
        reset_in: int = 60,
        scope: str = "api",
        after: bool = False,
    ) -> Fault:
        """The next `times` matching requests fail before any side effect. kind: server_error,
        too_many_requests, primary_rate_limit, secondary_rate_limit, disconnect; path is a glob.
        `after` (server_error or disconnect): each takes effect first (a git push lands, an
        object is created, a comment posted, webhooks sent) and only its answer is the fault's,
        as when a proxy's 502 or a dropped connection loses GitHub's answer."""
        fault = Fault(kind, times, method, path, status, retry_after, reset_in, scope)
        fault.after = after
        return self.faults.add(fault)

    def secondary_limit(
        self,
        *,
        next_n_writes: int = 1,
        retry_after_s: int | None = None,
        status: int = 403,
        path: str | None = None,
    ) -> Fault:
        """GitHub's secondary rate limit on content creation, for the next `next_n_writes` REST
        writes (any method but GET/HEAD): 403 (or `status=429`) "You have exceeded a secondary
        rate limit...", with `Retry-After: retry_after_s` when given (GitHub sends it on some
        refusals, not all). The refused writes have no effect, as on GitHub."""
        if status not in (403, 429):
            raise ValueError("GitHub answers a secondary rate limit with 403 or 429")
        fault = Fault(
            "secondary_rate_limit",
            next_n_writes,
            path=path,
            status=status,
            retry_after=retry_after_s,
            writes_only=True,
        )
        return self.faults.add(fault)

    def set_content_limits(self, *, per_minute: int = 80, per_hour: int = 500) -> None:
        """GitHub's secondary limit on content creation (default: its documented 80 writes a
        minute and 500 an hour per user or installation), smaller for a test; every REST write
        over it is refused with 403, GitHub's secondary-limit message and Retry-After."""
        self._service.content.limits = ((60, per_minute), (3600, per_hour))

    def content_writes(
        self, *, token: str | None = None, installation_id: int | None = None
    ) -> int:
        """The writes counted against the content-creation limit in the last hour."""
        return self._service.content.writes(self._rate_key(token, installation_id))

    def clear_faults(self) -> None:
        self.faults.clear()

    @property
    def requests(self) -> list[RecordedRequest]:
        return list(self._service.log)

    def api_requests(
        self, method: str | None = None, path: str | None = None
    ) -> list[RecordedRequest]:
        """Logged REST requests, optionally by method and exact path."""
        return [
            r
            for r in self._service.log
            if r.kind == "api" and method in (None, r.method) and path in (None, r.path)
        ]

    @property
    def errors(self) -> list[str]:
        """Tracebacks of unexpected exceptions inside the emulator (answered as 500s)."""
        return list(self._service.errors)

    def clear_requests(self) -> None:
        self._service.log.clear()

    def rate_limit(self, *, token: str | None = None, installation_id: int | None = None) -> Window:
        return self.limiter.window(self._rate_key(token, installation_id))

    def set_rate_limit(
        self,
        *,
        token: str | None = None,
        installation_id: int | None = None,
        remaining: int | None = None,
        limit: int | None = None,
    ) -> Window:
        """Sets the primary limit window of a token's user or an installation."""
        return self.limiter.set(
            self._rate_key(token, installation_id), remaining=remaining, limit=limit
        )

    def _rate_key(self, token: str | None, installation_id: int | None) -> str:
        if installation_id is not None:
            return f"installation:{installation_id}"
        if token is not None:
            found = self.hub.tokens[token]
            if found.installation_id is not None:
                return f"installation:{found.installation_id}"
            return f"user:{found.login}"
        return "anonymous:None"

    def advance_time(self, seconds: float) -> None:
        """Moves the emulator clock (token expiry, timestamps); real time is untouched."""
        self.clock.advance(seconds)
