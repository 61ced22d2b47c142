"""The HTTP front door: one ThreadingHTTPServer answering REST calls and smart-HTTP git,
recording every request, adding rate-limit headers and applying injected faults."""

from __future__ import annotations

import hashlib
import json
import re
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from . import protection
from .api import Reply, Request, RestApi, Route
from .auth import ANONYMOUS, identify
from .errors import ApiError
from .faults import SECONDARY_MESSAGE, FaultTable
from .git_http import GIT_PATH, is_push, run_backend
from .hub import Hub
from .ratelimit import ContentLimiter, RateLimiter, Window
from .state import WRITE_ROLES, Identity, Repo

KEPT_HEADERS = (
    "authorization",
    "user-agent",
    "accept",
    "content-type",
    "content-encoding",
    "x-github-api-version",
    "git-protocol",
    "if-none-match",
)
UA_MESSAGE = (
    "Request forbidden by administrative rules. Please make sure your request has a User-Agent "
    "header (https://docs.github.com/rest/overview/resources-in-the-rest-api#user-agent-required)."
)
RATE_DOCS = "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"
WRITE_METHODS = frozenset({"POST", "PATCH", "PUT", "DELETE"})
REDIRECT_DOCS = "https://docs.github.com/rest/using-the-rest-api/best-practices-for-using-the-rest-api#follow-redirects"
REPO_PATH = re.compile(r"^/repos/(?P<owner>[^/]+)/(?P<name>[^/]+)(?P<rest>/.*)?$")
BY_ID = re.compile(r"^/repositories/(?P<id>\d+)(?P<rest>/.*)?$")


@dataclass
class RecordedRequest:
    """One request as the emulator saw it, with what it answered."""

    seq: int
    kind: str  # "api" or "git"
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-case names; only KEPT_HEADERS
    body: bytes
    status: int | None = None
    operation: str | None = None  # OpenAPI path template of the answering route
    identity: str | None = None
    fault: str | None = None
    # with a fault injected after the effect: the status the request had before the fault
    # replaced its answer (201 for a comment that was posted, 200 for a push that landed)
    effect_status: int | None = None
    response_headers: dict[str, str] = field(default_factory=dict)
    at: float = field(default_factory=time.monotonic)  # when the emulator received it
    response_json: Any = None

    @property
    def json(self) -> Any:
        if self.kind != "api" or not self.body.strip():
            return None
        try:
            return json.loads(self.body)
        except ValueError:
            return None


@dataclass
class Outcome:
    status: int
    headers: dict[str, str]
    body: bytes
    disconnect: bool = False


def etag_of(reply: Reply) -> str:
    """A weak validator of the answer's content, as github.com sends them (`W/"<hex>"` in
    PyGithub's recordings, tests/ReplayData/Environment.testEnvironmentSecrets.txt)."""
    body = b"" if reply.body is None else json.dumps(reply.body).encode()
    return 'W/"' + hashlib.sha1(body).hexdigest() + '"'


def etag_matches(if_none_match: str, etag: str) -> bool:
    """RFC 9110's weak comparison for If-None-Match: a list of tags, W/ ignored, or `*`."""
    wanted = etag.removeprefix("W/")
    for candidate in if_none_match.split(","):
        candidate = candidate.strip()
        if candidate == "*" or candidate.removeprefix("W/") == wanted:
            return True
    return False


class Service:
    """Everything behind the socket; the handler only does HTTP I/O."""

    def __init__(self, hub: Hub, api: RestApi, limiter: RateLimiter, faults: FaultTable) -> None:
        self.hub = hub
        self.api = api
        self.limiter = limiter
        self.faults = faults
        self.content = ContentLimiter(hub.clock)  # the secondary limit on content creation
        self.log: list[RecordedRequest] = []
        self.errors: list[str] = []  # tracebacks of unexpected exceptions (emulator bugs)
        self._log_lock = threading.Lock()
        self._hooks: Path | None = None  # the pre-receive hook's directory, made on first use

    def record(
        self, kind: str, method: str, target: str, headers: dict[str, str], body: bytes
    ) -> RecordedRequest:
        split = urlsplit(target)
        with self._log_lock:
            entry = RecordedRequest(
                seq=len(self.log) + 1,
                kind=kind,
                method=method,
                path=split.path,
                query=parse_qs(split.query, keep_blank_values=True),
                headers={k: v for k, v in headers.items() if k in KEPT_HEADERS},
                body=body,
            )
            self.log.append(entry)
        return entry

    def handle(self, method: str, target: str, headers: dict[str, str], body: bytes) -> Outcome:
        path = urlsplit(target).path
        kind = "git" if GIT_PATH.match(path) else "api"
        prefix = self.hub.api_prefix
        if kind == "api" and prefix:
            if path != prefix and not path.startswith(prefix + "/"):
                self.record("web", method, target, headers, body).status = 404
                return Outcome(404, {"Content-Type": "text/html"}, b"<h1>Not Found</h1>")
            target = target[len(prefix) :] or "/"
        target = self._by_id(target) if kind == "api" else target
        entry = self.record(kind, method, target, headers, body)
        try:
            moved = self._moved(kind, method, target)
            if moved is not None:
                outcome = moved
            elif kind == "git":
                outcome = self._git(entry, target, headers)
            else:
                outcome = self._api(entry, headers)
        except Exception as exc:  # an emulator bug: answer 500 and keep the traceback for tests
            self.errors.append(traceback.format_exc())
            body_json = {"message": f"Emulator error: {type(exc).__name__}: {exc}"}
            outcome = Outcome(
                500, {"Content-Type": "application/json"}, json.dumps(body_json).encode()
            )
        entry.status = None if outcome.disconnect else outcome.status
        entry.response_headers = dict(outcome.headers)
        return outcome

    # -- renamed repositories ---------------------------------------------------------------------

    def _by_id(self, target: str) -> str:
        """/repositories/<id>/... is the repository's current /repos/<owner>/<name>/..."""
        parts = urlsplit(target)
        match = BY_ID.match(parts.path)
        if match is None:
            return target
        with self.hub.lock:
            try:
                repo = self.hub.repo_by_id(int(match["id"]))
            except ApiError:
                return target
        path = f"/repos/{repo.full_name}{match['rest'] or ''}"
        return path + (f"?{parts.query}" if parts.query else "")

    def _moved(self, kind: str, method: str, target: str) -> Outcome | None:
        """GitHub's answer to a request that names a repository by a name it was renamed away
        from: 301 for GET and HEAD, 307 (repeat the request there) for other methods."""
        parts = urlsplit(target)
        match = (GIT_PATH if kind == "git" else REPO_PATH).match(parts.path)
        if match is None:
            return None
        with self.hub.lock:
            repo = self.hub.moved_repo(match["owner"], match["name"])
        if repo is None:
            return None
        rest = match["rest"] or ""
        if kind == "git":
            location = f"{self.hub.web_url}/{repo.full_name}.git{rest}"
        else:
            location = f"{self.hub.base_url}/repositories/{repo.id}{rest}"
        if parts.query:
            location += f"?{parts.query}"
        status = 301 if method in ("GET", "HEAD") else 307
        message = "Moved Permanently" if status == 301 else "Temporary Redirect"
        body = {"message": message, "url": location, "documentation_url": REDIRECT_DOCS}
        headers = {"Content-Type": "application/json; charset=utf-8", "Location": location}
        return Outcome(status, headers, json.dumps(body).encode())

    # -- REST -------------------------------------------------------------------------------------

    def _api(self, entry: RecordedRequest, headers: dict[str, str]) -> Outcome:
        request_id = f"{entry.seq:04X}:{entry.seq * 7919:06X}:EMU"
        found = self.api.router.match(entry.method, entry.path)
        entry.operation = found[0].template if found else None
        if not headers.get("user-agent"):
            window = self.limiter.window(self._quiet_identity(headers).rate_key)
            forbidden = Reply(403, ApiError(403, UA_MESSAGE).body())
            return self._reply(entry, forbidden, window, request_id)
        fault = self.faults.take("api", entry.method, entry.path, entry.seq)
        if fault is None:
            return self._answer(entry, headers, found, request_id)
        if fault.after:  # the request takes effect; its answer is lost on the way back
            entry.effect_status = self._answer(entry, headers, found, request_id).status
        entry.fault = fault.kind
        if fault.kind == "disconnect":
            return Outcome(0, {}, b"", disconnect=True)
        who = self._who(self._quiet_identity(headers))
        status, body, extra = fault.response(request_id, who)
        window = self.limiter.window(self._quiet_identity(headers).rate_key)
        if fault.kind == "primary_rate_limit":
            reset = int(self.hub.clock.now()) + fault.reset_in
            window = Window(limit=window.limit, used=window.limit, reset=reset)
        return self._reply(entry, Reply(status, body, extra), window, request_id)

    def _answer(
        self,
        entry: RecordedRequest,
        headers: dict[str, str],
        found: tuple[Route, dict[str, str]] | None,
        request_id: str,
    ) -> Outcome:
        with self.hub.lock:
            identity: Identity = ANONYMOUS
            counted: Window | None = None
            try:
                identity = identify(self.hub, headers.get("authorization"))
                entry.identity = identity.rate_key
                reply, counted = self._route(entry, identity, found)
            except ApiError as exc:
                reply = Reply(exc.status, exc.body(), exc.headers)
            unchanged = self._not_modified(entry, reply, headers.get("if-none-match"))
            if unchanged and counted is not None and identity.kind != "anonymous":
                # GitHub's docs: a 304 to a correctly authorized conditional request does not
                # count against the primary rate limit (anonymous ones still do).
                counted = self.limiter.refund(identity.rate_key)
            current = counted or self.limiter.window(identity.rate_key)
            return self._reply(entry, reply, current, request_id, not_modified=unchanged)

    @staticmethod
    def _not_modified(entry: RecordedRequest, reply: Reply, if_none_match: str | None) -> bool:
        if entry.method != "GET" or reply.status != 200 or not if_none_match:
            return False
        return etag_matches(if_none_match, etag_of(reply))

    def _route(
        self, entry: RecordedRequest, identity: Identity, found: tuple[Route, dict[str, str]] | None
    ) -> tuple[Reply, Window | None]:
        window = None
        if found is None or found[0].template != "/rate_limit":
            window, allowed = self.limiter.consume(identity.rate_key)
            if not allowed:
                message = f"API rate limit exceeded for {self._who(identity)}."
                raise ApiError(403, message, documentation_url=RATE_DOCS)
        if found is None:
            raise ApiError(404, "Not Found")
        route, params = found
        if route.app_auth and identity.kind != "app":
            raise ApiError(401, "A JSON web token could not be decoded")
        if not route.app_auth and identity.kind == "app":
            raise ApiError(401, "Bad credentials")
        if entry.method in WRITE_METHODS and identity.login is None:
            raise ApiError(401, "Requires authentication")
        if entry.method in WRITE_METHODS and identity.kind != "app":
            retry_after = self.content.take(identity.rate_key)
            if retry_after is not None:
                request_id = f"{entry.seq:04X}:{entry.seq * 7919:06X}:EMU"
                raise ApiError(
                    403,
                    SECONDARY_MESSAGE.format(request_id=request_id),
                    documentation_url=RATE_DOCS,
                    headers={"Retry-After": str(retry_after)},
                )
        request = Request(
            entry.method, entry.path, entry.query, entry.body, identity, self.hub.base_url
        )
        return route.handler(request, **params), window

    def _quiet_identity(self, headers: dict[str, str]) -> Identity:
        try:
            with self.hub.lock:
                return identify(self.hub, headers.get("authorization"))
        except ApiError:
            return ANONYMOUS

    @staticmethod
    def _who(identity: Identity) -> str:
        if identity.kind == "installation":
            return f"installation ID {identity.installation_id}"
        if identity.kind == "anonymous":
            return "127.0.0.1"
        return f"user ID {identity.login}"

    def _reply(
        self,
        entry: RecordedRequest,
        reply: Reply,
        window: Window | None,
        request_id: str,
        *,
        not_modified: bool = False,
    ) -> Outcome:
        headers = {
            "Content-Type": "application/json; charset=utf-8",
            "X-GitHub-Media-Type": "github.v3; format=json",
            "X-GitHub-Api-Version-Selected": "2022-11-28",
            "X-GitHub-Request-Id": request_id,
        }
        if window is not None:
            headers.update(window.headers())
        headers.update(reply.headers)
        entry.response_json = reply.body
        body = b"" if reply.body is None else json.dumps(reply.body).encode()
        if entry.method == "GET" and reply.status == 200:
            headers["ETag"] = etag_of(reply)
            if not_modified:
                # The recorded 304 repeats the tag without its W/ prefix.
                headers["ETag"] = headers["ETag"].removeprefix("W/")
                entry.response_json = None
                return Outcome(304, headers, b"")
        return Outcome(reply.status, headers, body)

    # -- git --------------------------------------------------------------------------------------

    def _git(self, entry: RecordedRequest, target: str, headers: dict[str, str]) -> Outcome:
        fault = self.faults.take("git", entry.method, entry.path, entry.seq)
        if fault is None:
            return self._git_answer(entry, target, headers)
        if fault.after:  # the push lands (the ref moves); its answer is lost on the way back
            entry.effect_status = self._git_answer(entry, target, headers).status
        entry.fault = fault.kind
        if fault.kind == "disconnect":
            return Outcome(0, {}, b"", disconnect=True)
        return Outcome(fault.status or 502, {"Content-Type": "text/plain"}, b"fault injected\n")

    def _git_answer(self, entry: RecordedRequest, target: str, headers: dict[str, str]) -> Outcome:
        text = {"Content-Type": "text/plain"}
        match = GIT_PATH.match(entry.path)
        assert match is not None
        challenge = {**text, "WWW-Authenticate": 'Basic realm="GitHub"'}
        with self.hub.lock:
            try:
                identity = identify(self.hub, headers.get("authorization"), rest=False)
                repo = self.hub.repo(match["owner"], match["name"])
            except ApiError as exc:
                if exc.status == 401:
                    return Outcome(401, challenge, b"Invalid username or token.\n")
                return Outcome(404, text, b"Repository not found.\n")
            entry.identity = identity.rate_key
            query = urlsplit(target).query
            pushing = is_push(entry.path, query)
            denied = self._git_denied(repo, identity, pushing)
            if denied is not None:
                status, message = denied
                return Outcome(status, challenge if status == 401 else text, message.encode())
        path_info = f"/{repo.owner}/{repo.name}.git{match['rest'] or ''}"
        pushing = pushing and entry.method == "POST"

        def backend(extra_env: dict[str, str] | None = None) -> Outcome:
            result = run_backend(
                self.hub.root,
                path_info,
                method=entry.method,
                query=query,
                headers=headers,
                body=entry.body,
                remote_user=identity.login,
                extra_env=extra_env,
            )
            return Outcome(result.status, dict(result.headers), result.body)

        if not pushing:
            return backend()
        with self.hub.lock:
            policy = self._push_policy(repo, identity, entry.body, headers)
            if policy is None:
                outcome = backend()
            else:
                outcome = backend(protection.hook_env(self.hooks_dir(), policy))
                outcome.body = protection.github_reasons(outcome.body)
            self.hub.sync(repo, identity.login or repo.owner)
            return outcome

    def hooks_dir(self) -> Path:
        if self._hooks is None:
            self._hooks = protection.install_hook(self.hub.root / ".emulator-hooks")
        return self._hooks

    def _push_policy(
        self, repo: Repo, identity: Identity, body: bytes, headers: dict[str, str]
    ) -> dict[str, Any] | None:
        """What the pre-receive hook must enforce on this push (None: no rule covers it)."""
        protections = self.hub.protections
        if not protections.any_for(repo):
            return None
        app_id = None
        if identity.kind == "installation":
            app_id = self.hub.installations[identity.installation_id or 0].app_id
            role = "write"
        else:
            role = self.hub.permission(repo, identity.login or "")
        refs = {}
        for _old, new, ref in protection.push_commands(body, headers.get("content-encoding")):
            passed = protection.passed_contexts(repo, list(self.hub.check_runs.values()), new)
            rules = protection.rules_for(
                protections,
                repo,
                ref,
                new,
                identity=identity,
                role=role,
                app_id=app_id,
                passed=passed,
            )
            if rules:
                refs[ref] = rules
        if not refs:
            return None
        return {"refs": refs, "rules_url": f"{self.hub.web_url}/{repo.full_name}/rules"}

    def _git_denied(self, repo: Repo, identity: Identity, pushing: bool) -> tuple[int, str] | None:
        """GitHub's rules: anonymous reads of public repos only; pushes need write access."""
        if identity.login is None:
            if pushing or repo.private:
                return 401, "Authentication required.\n"
            return None
        if identity.kind == "installation":
            installation = self.hub.installations[identity.installation_id or 0]
            return None if installation.covers(repo) else (404, "Repository not found.\n")
        role = self.hub.permission(repo, identity.login)
        if role == "none":
            return 404, "Repository not found.\n"
        if pushing and role not in WRITE_ROLES:
            return 403, f"Permission to {repo.full_name}.git denied to {identity.login}.\n"
        return None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: EmulatorHTTPServer

    def do_GET(self) -> None:
        self._handle()

    do_POST = do_PATCH = do_PUT = do_DELETE = do_HEAD = do_GET

    def _handle(self) -> None:
        body = self._read_body()
        headers = {k.lower(): v for k, v in self.headers.items()}
        outcome = self.server.service.handle(self.command, self.path, headers, body)
        if outcome.disconnect:
            self.close_connection = True
            return
        self.send_response(outcome.status)
        for name, value in outcome.headers.items():
            if name.lower() != "content-length":
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(outcome.body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(outcome.body)

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline().strip():
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the request log has it all
        pass


class EmulatorHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], service: Service) -> None:
        self.service = service
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (it reset a kept-alive connection, e.g. after a redirect whose
        body it did not read) is no error of the server's, as on GitHub: nothing is printed.
        Anything else is, with socketserver's traceback."""
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            return
        super().handle_error(request, client_address)
