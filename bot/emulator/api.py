"""REST routes. Each route names its OpenAPI path template, so the request log (and the
schema tests) know which operation answered."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import unquote, urlencode

from . import issues as rules
from .errors import ApiError, not_found, validation_failed
from .gitops import ZERO_SHA
from .hub import Hub
from .ratelimit import RateLimiter
from .state import Identity, Issue, Repo
from .util import iso

PUSH_ROLES = frozenset({"admin", "maintain", "write"})


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    body: bytes
    identity: Identity
    base_url: str

    def arg(self, name: str, default: str | None = None) -> str | None:
        values = self.query.get(name)
        return values[-1] if values else default

    def json(self) -> Any:
        if not self.body.strip():
            return None
        try:
            return json.loads(self.body)
        except ValueError as exc:
            raise ApiError(400, "Problems parsing JSON") from exc

    def json_object(self) -> dict[str, Any]:
        data = self.json()
        if data is None:
            return {}
        if not isinstance(data, dict):
            raise ApiError(400, "Problems parsing JSON")
        return data

    @property
    def actor(self) -> str:
        """The acting login; 401 for anonymous callers."""
        if self.identity.login is None:
            raise ApiError(401, "Requires authentication")
        return self.identity.login


@dataclass
class Reply:
    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


Handler = Callable[..., Reply]


@dataclass(frozen=True)
class Route:
    method: str
    template: str  # the OpenAPI path template
    pattern: re.Pattern[str]
    handler: Handler
    app_auth: bool = False  # answered only for App JWTs


class Router:
    def __init__(self) -> None:
        self.routes: list[Route] = []

    def add(
        self,
        method: str,
        template: str,
        handler: Handler,
        *,
        greedy: str = "",
        app_auth: bool = False,
    ) -> None:
        spelled = template.replace("{" + greedy + "}", "{" + greedy + "+}") if greedy else template
        pattern = _compile(spelled)
        self.routes.append(Route(method, template, pattern, handler, app_auth))

    def match(self, method: str, path: str) -> tuple[Route, dict[str, str]] | None:
        for route in self.routes:
            found = route.pattern.match(path)
            if found and route.method == method:
                return route, {k: unquote(v) for k, v in found.groupdict().items()}
        return None


def _compile(template: str) -> re.Pattern[str]:
    parts = []
    for token in re.split(r"(\{\w+\+?\})", template):
        if token.startswith("{"):
            name = token.strip("{}+")
            if token.endswith("+}"):
                parts.append(f"(?P<{name}>.+)")
            elif name.endswith(("_number", "_id")):
                parts.append(f"(?P<{name}>\\d+)")
            else:
                parts.append(f"(?P<{name}>[^/]+)")
        else:
            parts.append(re.escape(token))
    return re.compile("^" + "".join(parts) + "$")


def _require_app(req: Request) -> None:
    """Check-run writes are for GitHub Apps only ("To create a check run, you must use a GitHub
    App. OAuth apps and authenticated users are not able to create a check suite": REST docs,
    Create a check run); a personal token gets 403, an anonymous caller 401."""
    if req.identity.login is None:
        raise ApiError(401, "Requires authentication")
    if req.identity.kind != "installation":
        raise ApiError(
            403,
            "You must authenticate via a GitHub App.",
            documentation_url="https://docs.github.com/rest/checks/runs#create-a-check-run",
        )


def paginate(req: Request, items: list[Any]) -> tuple[list[Any], dict[str, str]]:
    """One page of items and the Link header GitHub would send (absolute URLs)."""
    try:
        per_page = min(max(int(req.arg("per_page") or 30), 1), 100)
        page = max(int(req.arg("page") or 1), 1)
    except ValueError:
        per_page, page = 30, 1
    last = max(math.ceil(len(items) / per_page), 1)
    chunk = items[(page - 1) * per_page : page * per_page]

    def url(number: int) -> str:
        query = {k: v[-1] for k, v in req.query.items() if k != "page"}
        query["page"] = str(number)
        return f"{req.base_url}{req.path}?{urlencode(query)}"

    links = []
    if page < last:
        links += [f'<{url(page + 1)}>; rel="next"', f'<{url(last)}>; rel="last"']
    if page > 1:
        links += [f'<{url(1)}>; rel="first"', f'<{url(min(page - 1, last))}>; rel="prev"']
    return chunk, ({"Link": ", ".join(links)} if links else {})


class RestApi:
    """The REST endpoints PyGithub uses, as listed in tests/data/github/rest/index.json
    (plus GET /users/{username})."""

    def __init__(self, hub: Hub, limiter: RateLimiter) -> None:
        self.hub = hub
        self.views = hub.views
        self.limiter = limiter
        self.router = Router()
        r = "/repos/{owner}/{repo}"
        add = self.router.add
        add("GET", "/rate_limit", self.rate_limit)
        add(
            "POST",
            "/app/installations/{installation_id}/access_tokens",
            self.create_token,
            app_auth=True,
        )
        add("GET", "/app/installations/{installation_id}", self.get_installation, app_auth=True)
        add("GET", r + "/installation", self.repo_installation, app_auth=True)
        add("GET", "/users/{username}", self.get_user)
        add("GET", r, self.get_repo)
        add("GET", r + "/git/ref/{ref}", self.get_ref, greedy="ref")
        add("GET", r + "/git/matching-refs/{ref}", self.matching_refs, greedy="ref")
        add("POST", r + "/git/refs", self.create_ref)
        add("PATCH", r + "/git/refs/{ref}", self.update_ref, greedy="ref")
        add("DELETE", r + "/git/refs/{ref}", self.delete_ref, greedy="ref")
        add("GET", r + "/pulls", self.list_pulls)
        add("POST", r + "/pulls", self.create_pull)
        add("GET", r + "/pulls/{pull_number}", self.get_pull)
        add("PATCH", r + "/pulls/{pull_number}", self.update_pull)
        add("PUT", r + "/pulls/{pull_number}/merge", self.merge_pull)
        add("GET", r + "/pulls/{pull_number}/merge", self.is_merged)
        add("GET", r + "/issues/comments/{comment_id}", self.get_comment)
        add("PATCH", r + "/issues/comments/{comment_id}", self.update_comment)
        add("GET", r + "/issues", self.list_issues)
        add("POST", r + "/issues", self.create_issue)
        add("GET", r + "/issues/{issue_number}", self.get_issue)
        add("PATCH", r + "/issues/{issue_number}", self.update_issue)
        add("POST", r + "/issues/{issue_number}/comments", self.create_comment)
        add("GET", r + "/issues/{issue_number}/comments", self.list_comments)
        add("GET", r + "/issues/{issue_number}/timeline", self.timeline)
        add("POST", r + "/issues/{issue_number}/labels", self.add_labels)
        add("DELETE", r + "/issues/{issue_number}/labels/{name}", self.remove_label)
        add("POST", r + "/check-runs", self.create_check_run)
        add("GET", r + "/check-runs/{check_run_id}", self.get_check_run)
        add("PATCH", r + "/check-runs/{check_run_id}", self.update_check_run)
        add("GET", r + "/commits/{ref}/check-runs", self.list_check_runs, greedy="ref")
        add("GET", r + "/commits/{ref}/status", self.combined_status, greedy="ref")
        add("GET", r + "/commits/{ref}", self.get_commit, greedy="ref")
        add("POST", r + "/statuses/{sha}", self.create_status)
        add("GET", r + "/compare/{basehead}", self.compare, greedy="basehead")
        add("GET", r + "/collaborators/{username}/permission", self.collaborator_permission)

    # -- dispatch -----------------------------------------------------------------------------

    def repo_for(self, req: Request, owner: str, repo: str) -> Repo:
        """The repository, if this caller may see it (404 otherwise, like GitHub)."""
        found = self.hub.repo(owner, repo)
        ident = req.identity
        if ident.kind == "installation":
            inst = self.hub.installations[ident.installation_id or 0]
            allowed = ident.token_repos
            if not inst.covers(found) or (
                allowed is not None and found.full_name.lower() not in allowed
            ):
                raise not_found()
        elif found.private and (
            ident.login is None or self.hub.permission(found, ident.login) == "none"
        ):
            raise not_found()
        self.hub.sync(found)
        return found

    # -- misc -----------------------------------------------------------------------------------

    def rate_limit(self, req: Request) -> Reply:
        core = self.limiter.window(req.identity.rate_key).as_dict()
        resources = {
            "core": core,
            "search": {"limit": 30, "remaining": 30, "reset": core["reset"], "used": 0},
            "graphql": {"limit": 5000, "remaining": 5000, "reset": core["reset"], "used": 0},
            "integration_manifest": {
                "limit": 5000,
                "remaining": 5000,
                "reset": core["reset"],
                "used": 0,
            },
            "code_search": {"limit": 10, "remaining": 10, "reset": core["reset"], "used": 0},
        }
        return Reply(200, {"resources": resources, "rate": core})

    def get_user(self, req: Request, username: str) -> Reply:
        if not self.hub.known_user(username):
            raise not_found()
        return Reply(200, self.views.user(username))

    # -- apps -----------------------------------------------------------------------------------

    def _own_installation(self, req: Request, installation_id: str) -> int:
        inst = self.hub.installations.get(int(installation_id))
        if inst is None or inst.app_id != req.identity.app_id:
            raise not_found()
        return inst.id

    def create_token(self, req: Request, installation_id: str) -> Reply:
        inst = self.hub.installations[self._own_installation(req, installation_id)]
        data = req.json_object()
        names = data.get("repositories")
        ids = data.get("repository_ids")
        restrict: set[str] | None = None
        if names or ids:
            restrict = set()
            covered = [r for r in self.hub.repos.values() if inst.covers(r)]
            for name in names or []:
                match = [r for r in covered if r.name.lower() == str(name).lower()]
                if not match:
                    raise validation_failed("Installation", "repositories", "invalid")
                restrict.add(match[0].full_name.lower())
            for rid in ids or []:
                match = [r for r in covered if r.id == rid]
                if not match:
                    raise validation_failed("Installation", "repository_ids", "invalid")
                restrict.add(match[0].full_name.lower())
        token = self.hub.mint_token(inst, restrict)
        app = self.hub.apps[inst.app_id]
        body: dict[str, Any] = {
            "token": token.value,
            "expires_at": iso(token.expires_at),
            "permissions": dict(app.permissions),
            "repository_selection": "selected"
            if restrict is not None or inst.repos is not None
            else "all",
        }
        if restrict is not None:
            body["repositories"] = [
                self.views.repository(r)
                for r in self.hub.repos.values()
                if r.full_name.lower() in restrict
            ]
        return Reply(201, body)

    def get_installation(self, req: Request, installation_id: str) -> Reply:
        return Reply(200, self.views.installation(self._own_installation(req, installation_id)))

    def repo_installation(self, req: Request, owner: str, repo: str) -> Reply:
        found = self.hub.repo(owner, repo)
        for inst in self.hub.installations.values():
            if inst.app_id == req.identity.app_id and inst.covers(found):
                return Reply(200, self.views.installation(inst.id))
        raise not_found()

    # -- repositories and refs ------------------------------------------------------------------

    def get_repo(self, req: Request, owner: str, repo: str) -> Reply:
        found = self.repo_for(req, owner, repo)
        return Reply(200, self.views.repository(found, viewer=req.identity.login))

    def get_ref(self, req: Request, owner: str, repo: str, ref: str) -> Reply:
        found = self.repo_for(req, owner, repo)
        full = f"refs/{ref}"
        sha = found.git.ref_sha(full)
        if sha is None:
            raise not_found()
        return Reply(200, self.views.git_ref(found, full, sha))

    def matching_refs(self, req: Request, owner: str, repo: str, ref: str) -> Reply:
        found = self.repo_for(req, owner, repo)
        prefix = f"refs/{ref}"
        refs = sorted(
            (name, sha) for name, sha in found.git.refs().items() if name.startswith(prefix)
        )
        items = [
            self.views.git_ref(found, name, sha)
            for name, sha in refs
            if not name.startswith("refs/pull/")
        ]
        page, headers = paginate(req, items)
        return Reply(200, page, headers)

    def create_ref(self, req: Request, owner: str, repo: str) -> Reply:
        found = self.repo_for(req, owner, repo)
        data = req.json_object()
        ref, sha = data.get("ref"), data.get("sha")
        if not isinstance(ref, str) or not isinstance(sha, str):
            raise validation_failed(
                "Reference", "ref" if not isinstance(ref, str) else "sha", "missing_field"
            )
        self.hub.create_ref(found, ref, sha, req.actor)
        body = self.views.git_ref(found, ref, sha)
        return Reply(201, body, {"Location": body["url"]})

    def update_ref(self, req: Request, owner: str, repo: str, ref: str) -> Reply:
        found = self.repo_for(req, owner, repo)
        data = req.json_object()
        sha = data.get("sha")
        if not isinstance(sha, str):
            raise validation_failed("Reference", "sha", "missing_field")
        full = f"refs/{ref}"
        self.hub.update_ref(found, full, sha, bool(data.get("force", False)), req.actor)
        return Reply(200, self.views.git_ref(found, full, sha))

    def delete_ref(self, req: Request, owner: str, repo: str, ref: str) -> Reply:
        found = self.repo_for(req, owner, repo)
        self.hub.delete_ref(found, f"refs/{ref}", req.actor)
        return Reply(204)

    # -- pulls -----------------------------------------------------------------------------------

    def list_pulls(self, req: Request, owner: str, repo: str) -> Reply:
        found = self.repo_for(req, owner, repo)
        state = req.arg("state", "open")
        if state not in ("open", "closed", "all"):
            raise validation_failed("PullRequest", "state", "invalid")
        pulls = [i for i in found.issues.values() if i.pull is not None]
        if state != "all":
            pulls = [i for i in pulls if i.state == state]
        head = req.arg("head")
        if head and ":" in head:  # GitHub ignores a head filter without the "user:" part
            user, _, branch = head.partition(":")
            pulls = [
                i
                for i in pulls
                if user.lower() == found.owner.lower()
                and (not branch or (i.pull and i.pull.head_ref == branch))
            ]
        base = req.arg("base")
        if base:
            pulls = [i for i in pulls if i.pull and i.pull.base_ref == base]
        sort = req.arg("sort", "created")
        key: Callable[[Issue], float] = (
            (lambda i: i.updated_at)
            if sort in ("updated", "popularity")
            else (lambda i: i.created_at)
        )
        default_direction = "desc" if sort == "created" else "asc"
        reverse = req.arg("direction", default_direction) == "desc"
        pulls.sort(key=lambda i: (key(i), i.number), reverse=reverse)
        page, headers = paginate(req, pulls)
        return Reply(200, [self.views.pull_simple(found, i) for i in page], headers)

    def create_pull(self, req: Request, owner: str, repo: str) -> Reply:
        found = self.repo_for(req, owner, repo)
        data = req.json_object()
        issue = self.hub.open_pull(
            found,
            head=str(data.get("head") or ""),
            base=str(data.get("base") or ""),
            title=data.get("title"),
            body=data.get("body"),
            user=req.actor,
            draft=bool(data.get("draft", False)),
            maintainer_can_modify=bool(data.get("maintainer_can_modify", False)),
        )
        body = self.views.pull(found, issue)
        return Reply(201, body, {"Location": body["url"]})

    def get_pull(self, req: Request, owner: str, repo: str, pull_number: str) -> Reply:
        found = self.repo_for(req, owner, repo)
        return Reply(200, self.views.pull(found, self.hub.pull(found, int(pull_number))))

    def update_pull(self, req: Request, owner: str, repo: str, pull_number: str) -> Reply:
        found = self.repo_for(req, owner, repo)
        issue = self.hub.pull(found, int(pull_number))
        data = req.json_object()
        self.hub.edit_pull(
            found,
            issue,
            req.actor,
            title=data.get("title"),
            body=data.get("body"),
            state=data.get("state"),
            base=data.get("base"),
        )
        return Reply(200, self.views.pull(found, issue))

    def merge_pull(self, req: Request, owner: str, repo: str, pull_number: str) -> Reply:
        found = self.repo_for(req, owner, repo)
        issue = self.hub.pull(found, int(pull_number))
        data = req.json_object()
        sha = self.hub.merge_pull(
            found,
            issue,
            req.actor,
            method=data.get("merge_method") or "merge",
            sha=data.get("sha"),
            commit_title=data.get("commit_title"),
            commit_message=data.get("commit_message"),
        )
        return Reply(
            200, {"sha": sha, "merged": True, "message": "Pull Request successfully merged"}
        )

    def is_merged(self, req: Request, owner: str, repo: str, pull_number: str) -> Reply:
        found = self.repo_for(req, owner, repo)
        issue = self.hub.pull(found, int(pull_number))
        assert issue.pull is not None
        return Reply(204 if issue.pull.merged else 404)

    # -- issues, comments, labels --------------------------------------------------------------

    def list_issues(self, req: Request, owner: str, repo: str) -> Reply:
        """Issues and pull requests alike, as GitHub lists them (a PR has `pull_request`)."""
        found = self.repo_for(req, owner, repo)
        select = rules.list_filter(req.arg, lambda i: len(self.hub.comments_of(found, i.number)))
        page, headers = paginate(req, select(list(found.issues.values())))
        return Reply(200, [self.views.issue(found, i) for i in page], headers)

    def create_issue(self, req: Request, owner: str, repo: str) -> Reply:
        found = self.repo_for(req, owner, repo)
        issue = self.hub.open_issue(found, req.identity, req.json_object())
        body = self.views.issue(found, issue)
        return Reply(201, body, {"Location": body["url"]})

    def get_issue(self, req: Request, owner: str, repo: str, issue_number: str) -> Reply:
        found = self.repo_for(req, owner, repo)
        return Reply(200, self.views.issue(found, self.hub.issue(found, int(issue_number))))

    def update_issue(self, req: Request, owner: str, repo: str, issue_number: str) -> Reply:
        found = self.repo_for(req, owner, repo)
        issue = self.hub.issue(found, int(issue_number))
        self.hub.update_issue(found, issue, req.identity, req.json_object())
        return Reply(200, self.views.issue(found, issue))

    def create_comment(self, req: Request, owner: str, repo: str, issue_number: str) -> Reply:
        found = self.repo_for(req, owner, repo)
        issue = self.hub.issue(found, int(issue_number))
        comment = self.hub.add_comment(found, issue, req.actor, req.json_object().get("body"))  # type: ignore[arg-type]
        body = self.views.comment(found, comment)
        return Reply(201, body, {"Location": body["url"]})

    def list_comments(self, req: Request, owner: str, repo: str, issue_number: str) -> Reply:
        found = self.repo_for(req, owner, repo)
        issue = self.hub.issue(found, int(issue_number))
        comments = sorted(self.hub.comments_of(found, issue.number), key=lambda c: c.id)
        since = req.arg("since")
        if since:
            try:
                cutoff = datetime.fromisoformat(since.replace("Z", "+00:00")).timestamp()
            except ValueError as exc:
                raise validation_failed("IssueComment", "since", "invalid") from exc
            comments = [c for c in comments if c.updated_at >= cutoff]
        page, headers = paginate(req, comments)
        return Reply(200, [self.views.comment(found, c) for c in page], headers)

    def timeline(self, req: Request, owner: str, repo: str, issue_number: str) -> Reply:
        found = self.repo_for(req, owner, repo)
        events = self.views.timeline(found, self.hub.issue(found, int(issue_number)))
        page, headers = paginate(req, events)
        return Reply(200, page, headers)

    def get_comment(self, req: Request, owner: str, repo: str, comment_id: str) -> Reply:
        found = self.repo_for(req, owner, repo)
        return Reply(200, self.views.comment(found, self.hub.comment(found, int(comment_id))))

    def update_comment(self, req: Request, owner: str, repo: str, comment_id: str) -> Reply:
        found = self.repo_for(req, owner, repo)
        comment = self.hub.comment(found, int(comment_id))
        self.hub.edit_comment(found, comment, req.json_object().get("body"), req.actor)  # type: ignore[arg-type]
        return Reply(200, self.views.comment(found, comment))

    def add_labels(self, req: Request, owner: str, repo: str, issue_number: str) -> Reply:
        found = self.repo_for(req, owner, repo)
        issue = self.hub.issue(found, int(issue_number))
        data = req.json()
        raw = data.get("labels") if isinstance(data, dict) else data
        if not isinstance(raw, list) or not raw:
            raise validation_failed("Label", "labels", "missing_field")
        names = []
        for item in raw:
            name = item.get("name") if isinstance(item, dict) else item
            if not isinstance(name, str) or not name:
                raise validation_failed("Label", "name", "invalid")
            names.append(name)
        self.hub.add_labels(found, issue, names)
        return Reply(200, self.views.labels_of(found, issue))

    def remove_label(
        self, req: Request, owner: str, repo: str, issue_number: str, name: str
    ) -> Reply:
        found = self.repo_for(req, owner, repo)
        issue = self.hub.issue(found, int(issue_number))
        self.hub.remove_label(found, issue, unquote(name))
        return Reply(200, self.views.labels_of(found, issue))

    # -- checks and statuses ---------------------------------------------------------------------

    def create_check_run(self, req: Request, owner: str, repo: str) -> Reply:
        found = self.repo_for(req, owner, repo)
        _require_app(req)
        run = self.hub.create_check_run(found, req.identity, req.json_object())
        return Reply(201, self.views.check_run(found, run))

    def get_check_run(self, req: Request, owner: str, repo: str, check_run_id: str) -> Reply:
        found = self.repo_for(req, owner, repo)
        return Reply(200, self.views.check_run(found, self.hub.check_run(found, int(check_run_id))))

    def update_check_run(self, req: Request, owner: str, repo: str, check_run_id: str) -> Reply:
        found = self.repo_for(req, owner, repo)
        _require_app(req)
        run = self.hub.check_run(found, int(check_run_id))
        self.hub.update_check_run(found, run, req.identity, req.json_object())
        return Reply(200, self.views.check_run(found, run))

    def list_check_runs(self, req: Request, owner: str, repo: str, ref: str) -> Reply:
        found = self.repo_for(req, owner, repo)
        sha = self.hub.resolve(found, ref)
        runs = sorted(
            (
                r
                for r in self.hub.check_runs.values()
                if r.repo == found.full_name and r.head_sha == sha
            ),
            key=lambda r: r.id,
            reverse=True,
        )
        if req.arg("check_name"):
            runs = [r for r in runs if r.name == req.arg("check_name")]
        if req.arg("status"):
            runs = [r for r in runs if r.status == req.arg("status")]
        if req.arg("app_id"):
            runs = [r for r in runs if str(r.app_id) == req.arg("app_id")]
        if req.arg("filter", "latest") == "latest":
            seen: set[str] = set()
            runs = [r for r in runs if not (r.name in seen or seen.add(r.name))]  # type: ignore[func-returns-value]
        page, headers = paginate(req, runs)
        body = {
            "total_count": len(runs),
            "check_runs": [self.views.check_run(found, r) for r in page],
        }
        return Reply(200, body, headers)

    def create_status(self, req: Request, owner: str, repo: str, sha: str) -> Reply:
        found = self.repo_for(req, owner, repo)
        status = self.hub.create_status(found, sha, req.json_object(), req.actor)
        body = self.views.status(found, status)
        return Reply(201, body, {"Location": body["url"]})

    def combined_status(self, req: Request, owner: str, repo: str, ref: str) -> Reply:
        found = self.repo_for(req, owner, repo)
        sha = found.git.resolve(ref)
        if sha is None:
            raise not_found()
        latest: dict[str, Any] = {}
        for status in sorted(
            (s for s in found.statuses if s.sha == sha), key=lambda s: s.id, reverse=True
        ):
            latest.setdefault(status.context, status)
        return Reply(200, self.views.combined_status(found, sha, list(latest.values())))

    # -- commits ------------------------------------------------------------------------------

    def get_commit(self, req: Request, owner: str, repo: str, ref: str) -> Reply:
        found = self.repo_for(req, owner, repo)
        sha = self.hub.resolve(found, ref)
        info = found.git.commit_info(sha)
        return Reply(200, self.views.commit(found, info, found.git.commit_changes(sha)))

    def compare(self, req: Request, owner: str, repo: str, basehead: str) -> Reply:
        found = self.repo_for(req, owner, repo)
        base_name, sep, head_name = basehead.partition("...")
        if not sep:
            raise not_found()
        base_sha, head_sha = (
            self._compare_side(found, base_name),
            self._compare_side(found, head_name),
        )
        git = found.git
        merge_base = git.merge_base(base_sha, head_sha)
        if merge_base is None:
            raise ApiError(404, f"No common ancestor between {base_name} and {head_name}.")
        ahead = git.rev_list(head_sha, [base_sha])
        behind = git.rev_list(base_sha, [head_sha])
        if base_sha == head_sha:
            status = "identical"
        elif not behind:
            status = "ahead"
        elif not ahead:
            status = "behind"
        else:
            status = "diverged"
        api, html = self.views.repo_api(found), self.views.repo_html(found)
        infos = {i.sha: i for i in git.commit_infos([base_sha, merge_base, *ahead[-250:]])}
        body = {
            "url": f"{api}/compare/{basehead}",
            "html_url": f"{html}/compare/{basehead}",
            "permalink_url": f"{html}/compare/{found.owner}:{base_sha[:7]}...{found.owner}:{head_sha[:7]}",
            "diff_url": f"{html}/compare/{basehead}.diff",
            "patch_url": f"{html}/compare/{basehead}.patch",
            "base_commit": self.views.commit(found, infos[base_sha]),
            "merge_base_commit": self.views.commit(found, infos[merge_base]),
            "status": status,
            "ahead_by": len(ahead),
            "behind_by": len(behind),
            "total_commits": len(ahead),
            "commits": [self.views.commit(found, infos[sha]) for sha in ahead[-250:]],
            "files": [
                self.views.diff_entry(found, head_sha, f) for f in git.changes(merge_base, head_sha)
            ],
        }
        return Reply(200, body)

    def _compare_side(self, repo: Repo, name: str) -> str:
        owner, sep, ref = name.partition(":")
        if sep and owner.lower() != repo.owner.lower():
            raise not_found()
        sha = repo.git.resolve(ref if sep else name)
        if sha is None or sha == ZERO_SHA:
            raise not_found()
        return sha

    def collaborator_permission(self, req: Request, owner: str, repo: str, username: str) -> Reply:
        found = self.repo_for(req, owner, repo)
        # Only callers with push access may ask (observed: a read-only token on nodejs/node
        # gets this 403; the OpenAPI description lists 200 and 404 only). An App's
        # installation token reads it through its metadata permission.
        ident = req.identity
        if ident.kind != "installation" and (
            ident.login is None or self.hub.permission(found, ident.login) not in PUSH_ROLES
        ):
            raise ApiError(403, "Must have push access to view collaborator permission.")
        if not self.hub.known_user(username):
            raise not_found()
        return Reply(200, self.views.collaborator_permission(found, username))
