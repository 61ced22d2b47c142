"""PyGithub behind a small port: the only module that talks to the GitHub REST API.

Works as a GitHub App (installation tokens) or with a token, against github.com or an
Enterprise server (`base_url`). Only idempotent requests are retried on any failure: PyGithub's
default also retries POST, which can open the same pull request twice. Writes are sent again only
after a rate-limit refusal, which GitHub answers before doing anything. No rate-limit wait is
longer than MAX_WAIT_S: a longer one is a RateLimited error saying when to retry, so that a worker
is not blocked for up to an hour. Every text sent is cut to GitHub's size limits (with a note
saying so), since GitHub refuses longer ones outright.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, Literal, cast
from urllib.parse import urlparse

import requests
from github import Auth, Github, GithubException, GithubIntegration, GithubRetry
from github.GithubException import RateLimitExceededExceedsMaxWait
from github.PaginatedList import PaginatedList
from github.Repository import Repository
from github.Requester import Requester
from urllib3 import Retry
from urllib3.response import BaseHTTPResponse, HTTPResponse

from bot.config import ConfigError, Settings
from bot.core.render import GITHUB_MAX_CHECK_OUTPUT_BYTES, fit_for_github

log = logging.getLogger("carry.github")

IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
TOKEN_MARGIN_S = 300.0  # a cached installation token is replaced 5 minutes before it expires
FRESH_TOKEN_S = 5.0  # a 401 on a token this young is GitHub's replication lag, not a refusal
WARMUP_WAIT_S = 1.0  # how long to wait before the one retry of such a 401
MAX_WAIT_S = 120.0  # the longest rate-limit wait carry sits out; beyond it, RateLimited
NO_RETRY_AFTER_WAIT_S = 60.0  # GitHub's docs: without Retry-After, wait at least a minute
MAX_WRITE_GATE_WAIT_S = 5.0  # a longer wait for the write budget is RateLimited
WRITE_RETRIES = 2  # how often a write refused by a rate limit is sent again

Sleep = Callable[[float], None]  # every wait of a Forge goes through its ForgeCaches.sleep


class ForgeError(RuntimeError):
    """A GitHub call failed; the message carries GitHub's status and answer."""


class RateLimited(ForgeError):
    """GitHub's rate limit refused a call for longer than carry waits in a worker."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class DraftsNotSupported(ForgeError):
    """GitHub refuses draft PRs in this repository (private repositories on Free and Pro)."""


DRAFTS_REFUSED = "Draft pull requests are not supported in this repository."


@dataclass(frozen=True)
class PullInfo:
    number: int
    url: str
    head_sha: str
    state: str
    draft: bool
    merged: bool
    title: str = ""
    body: str = ""
    labels: tuple[str, ...] = ()


REDIRECTS = frozenset({301, 302, 307, 308})
_MOVED_TO = re.compile(r"/repositories/(?P<id>\d+)(?:[/?]|$)")


class Redirected(Exception):
    """GitHub answered with a redirect, which carry follows itself (see Forge._moving): a
    repository asked for by an old name answers 301 (GET) or 307 (other methods, which
    PyGithub takes for success, so a write would be lost without a word)."""

    def __init__(self, status: int, location: str) -> None:
        super().__init__(f"{status} redirect to {location or '(no Location)'}")
        self.status, self.location = status, location

    @property
    def repository_id(self) -> int | None:
        match = _MOVED_TO.search(urlparse(self.location).path)
        return int(match["id"]) if match else None


class CappedRetry(GithubRetry):
    """PyGithub's retry (5xx, 429 with Retry-After and rate-limit 403s, for idempotent methods)
    with no wait over MAX_WAIT_S, and its waits through `wait` (ForgeCaches.sleep). PyGithub's own
    cap (max_rate_limit_wait) covers the reset of a primary limit and the wait for a secondary
    one; a Retry-After over the cap is refused here, as urllib3 would sleep it out. A rate limit's
    Retry-After also holds the installation's writes (`hold`, as Forge._hold)."""

    def __init__(
        self, wait: Sleep = time.sleep, hold: Callable[[float], object] | None = None, **kwargs: Any
    ) -> None:
        self.wait = wait
        self.hold = hold
        super().__init__(**kwargs)

    def new(self, **kw: Any) -> CappedRetry:
        kw["wait"] = self.wait
        kw["hold"] = self.hold
        return cast(CappedRetry, super().new(**kw))

    def is_retry(self, method: str, status_code: int, has_retry_after: bool = False) -> bool:
        # A redirect goes to increment (any method), which raises Redirected.
        return status_code in REDIRECTS or super().is_retry(method, status_code, has_retry_after)

    def increment(  # type: ignore[override]
        self,
        method: str | None = None,
        url: str | None = None,
        response: HTTPResponse | None = None,
        *args: Any,
        **kwargs: Any,
    ) -> Retry:
        if response is not None and response.status in REDIRECTS:
            raise Redirected(response.status, response.headers.get("Location", ""))
        if response is not None and response.status in (403, 429):
            wait = _retry_after(response.headers.get("Retry-After"))
            if wait is not None and wait > 0 and self.hold is not None:
                self.hold(wait)
            if wait is not None and wait > MAX_WAIT_S:
                raise RateLimitExceededExceedsMaxWait(
                    response.status, None, dict(response.headers), wait=wait
                )
        return super().increment(method, url, response, *args, **kwargs)

    def sleep(self, response: BaseHTTPResponse | None = None) -> None:
        if self.respect_retry_after_header and response is not None:
            retry_after = self.get_retry_after(response)
            if retry_after:
                self.wait(retry_after)
                return
        backoff = self.get_backoff_time()
        if backoff > 0:
            self.wait(backoff)


def _retry(wait: Sleep, hold: Callable[[float], object] | None = None) -> GithubRetry:
    return CappedRetry(
        wait,
        hold,
        total=5,
        backoff_factor=0.5,
        allowed_methods=IDEMPOTENT,
        secondary_rate_wait=NO_RETRY_AFTER_WAIT_S,
        max_rate_limit_wait=MAX_WAIT_S,
    )


def _retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (GitHub sends whole seconds)."""
    if value is None or not value.strip().isdigit():
        return None
    return float(value.strip())


def _header(err: GithubException, name: str) -> str | None:
    for key, value in (err.headers or {}).items():
        if key.lower() == name:
            return str(value)
    return None


def _message(err: GithubException) -> str:
    data = err.data
    return str(data.get("message", "")) if isinstance(data, dict) else str(data or "")


def rate_limit_wait(err: GithubException) -> float | None:
    """How long GitHub asks to wait before sending a refused request again (its docs, "Handle
    rate limit errors appropriately"): Retry-After; else until X-RateLimit-Reset when no calls
    remain; else at least a minute. None when the refusal is not a rate limit."""
    retry_after = _retry_after(_header(err, "retry-after"))
    is_limit = err.status == 429 or (
        err.status == 403 and (retry_after is not None or Requester.isRateLimitError(_message(err)))
    )
    if not is_limit:
        return None
    if retry_after is not None:
        return retry_after
    reset = _header(err, "x-ratelimit-reset")
    if _header(err, "x-ratelimit-remaining") == "0" and reset is not None and reset.isdigit():
        return max(float(reset) - time.time(), 0.0) + 1  # +1: when in that second is unknown
    return NO_RETRY_AFTER_WAIT_S


def _too_long(what: str, wait: float) -> RateLimited:
    when = datetime.fromtimestamp(time.time() + wait, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return RateLimited(
        f"GitHub: {what} was refused by a rate limit for {wait:.0f} s (carry waits at most "
        f"{MAX_WAIT_S:.0f} s); retry after {when}",
        wait,
    )


@dataclass(frozen=True)
class InstallationToken:
    value: str
    expires_at: float  # epoch seconds, from GitHub's `expires_at`
    minted_at: float  # epoch seconds, this process's clock


TokenKey = tuple[str, int, int]  # (API base URL, App id, installation id)


class InstallationTokens:
    """Installation tokens of this process, by installation: GitHub's live an hour, so one
    serves every task until shortly before it expires instead of a mint per task."""

    def __init__(self) -> None:
        self.now: Callable[[], float] = time.time
        self._tokens: dict[TokenKey, InstallationToken] = {}
        self._lock = threading.Lock()

    def get(self, key: TokenKey, mint: Callable[[], InstallationToken]) -> InstallationToken:
        # Minting under the lock: threads that need a token at once share one mint.
        with self._lock:
            found = self._tokens.get(key)
            if found is not None and found.expires_at - TOKEN_MARGIN_S > self.now():
                return found
            token = mint()
            self._tokens[key] = token
            return token

    def forget(self, key: TokenKey, value: str) -> None:
        """Drops a token GitHub refused, so that the next task mints a new one."""
        with self._lock:
            if key in self._tokens and self._tokens[key].value == value:
                del self._tokens[key]

    def is_fresh(self, token: InstallationToken) -> bool:
        return self.now() - token.minted_at < FRESH_TOKEN_S


class CachedInstallationAuth(Auth.Auth):
    """PyGithub auth with the installation's token from `tokens`, taken at first use (so that a
    failed mint surfaces in a request, as a ForgeError) and kept for this Forge's life."""

    def __init__(
        self, key: TokenKey, mint: Callable[[], InstallationToken], tokens: InstallationTokens
    ) -> None:
        self.key = key
        self.tokens = tokens
        self._mint = mint
        self.current: InstallationToken | None = None

    @property
    def token_type(self) -> str:
        return "token"

    @property
    def token(self) -> str:
        if self.current is None:
            self.current = self.tokens.get(self.key, self._mint)
        return self.current.value

    @property
    def _masked_token(self) -> str:
        return "token (installation token removed)"


class PermissionUnknown(ForgeError):
    """GitHub would not say what a user may do (carry's token lacks push access)."""


PERMISSION_TTL_S = 60.0


class PermissionCache:
    """Users' roles by (API, repository, user) for PERMISSION_TTL_S, in this process."""

    def __init__(self) -> None:
        self.now: Callable[[], float] = time.time
        self._roles: dict[tuple[str, str, str], tuple[str, float]] = {}
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str, str], look_up: Callable[[], str]) -> str:
        with self._lock:
            found = self._roles.get(key)
        if found is not None and found[1] > self.now():
            return found[0]
        role = look_up()  # not under the lock: a slow lookup must not hold up other users
        with self._lock:
            self._roles[key] = (role, self.now() + PERMISSION_TTL_S)
        return role


class Validators:
    """What carry last read with each conditional GET, in this process: (API, path, query) ->
    (ETag, answer). A 304 to the stored ETag costs no rate limit and reuses the answer; GitHub's
    ETags change with the answer's content, so a stored answer is never stale under its tag."""

    MAX_ENTRIES = 1024

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, str, str], tuple[str, Any]] = {}

    def get(self, key: tuple[str, str, str]) -> tuple[str, Any] | None:
        with self._lock:
            return self._seen.get(key)

    def put(self, key: tuple[str, str, str], etag: str, answer: Any) -> None:
        with self._lock:
            if len(self._seen) >= self.MAX_ENTRIES:
                self._seen.clear()
            self._seen[key] = (etag, answer)


@dataclass
class ForgeCaches:
    """What the Forges of one process share, held by its runtime (workers.runtime.Runtime) and
    passed to Forge.connect: installation tokens, users' roles, repositories GitHub moved,
    conditional-GET validators, and the one way a Forge waits (a test records instead)."""

    tokens: InstallationTokens = field(default_factory=InstallationTokens)
    permissions: PermissionCache = field(default_factory=PermissionCache)
    # (API base URL, configured name in lower case) -> the name GitHub moved the repository
    # to, as this process found it: later connections use the new name from their first request
    renames: dict[tuple[str, str], str] = field(default_factory=dict)
    validators: Validators = field(default_factory=Validators)
    sleep: Sleep = time.sleep


RateLimitSink = Callable[[int | None], None]  # told the remaining REST quota after each call
# takes a content-creating request's turn; else seconds to wait. Its argument: the epoch second
# up to which this Forge has already waited out a hold (None: none), so that a hold it sat out is
# not waited again while one another worker set later is
WriteGate = Callable[[float | None], float]
# told how long GitHub asked the installation to wait after a rate-limit refusal: every write
# of the installation, in every worker, waits it out (bot.store.write_budget.hold_writes)
WriteHold = Callable[[float], object]


class Forge:
    def __init__(
        self,
        github: Github,
        repo_name: str,
        auth: Auth.Auth,
        on_rate_limit: RateLimitSink | None = None,
        budget: int | None = None,
        write_gate: WriteGate | None = None,
        caches: ForgeCaches | None = None,
        write_hold: WriteHold | None = None,
    ):
        self.github = github
        self.caches = caches or ForgeCaches()
        self.repo_name = repo_name
        self._auth = auth
        self._on_rate_limit = on_rate_limit
        # at most this many calls for the task that connected (a loop over pages or PRs stops
        # with a clear error instead of spending the installation's whole hourly quota)
        self._budget = budget
        # asked before each content-creating request: seconds to wait for room in GitHub's
        # secondary limits, shared by every worker of the installation (bot.store.write_budget)
        self._write_gate = write_gate
        self._write_hold = write_hold
        self._waited_until: float | None = None  # the holds this Forge has sat out end by then
        self.calls = 0
        self._repo: Repository | None = None
        self.renamed_from: str | None = None  # the configured name, once GitHub moved it
        self.configured_name = repo_name  # as the config names it (connect sets it)
        self._app_github: Github | None = None  # the App itself (JWT), for its hook

    @classmethod
    def connect(
        cls,
        settings: Settings,
        repo_name: str,
        *,
        on_rate_limit: RateLimitSink | None = None,
        write_gate: WriteGate | None = None,
        write_hold: WriteHold | None = None,
        caches: ForgeCaches,
    ) -> Forge:
        base_url = settings.github_base_url.rstrip("/")
        auth = _auth(settings, base_url, caches)
        github = Github(
            base_url=base_url,
            auth=auth,
            retry=_retry(caches.sleep, write_hold),
            seconds_between_requests=None,
            seconds_between_writes=settings.github_write_pause_s or None,
            timeout=30,
            # An object is fetched only when one of its fields is read: editing a PR, or
            # commenting on it, needs its URL, not a GET of it first.
            lazy=True,
            per_page=100,  # GitHub's maximum: fewer pages of comments (its default is 30)
        )
        known = caches.renames.get((github.requester.base_url, repo_name.lower()), repo_name)
        forge = cls(
            github,
            known,
            auth,
            on_rate_limit,
            settings.github_request_budget,
            write_gate,
            caches,
            write_hold,
        )
        forge.configured_name = repo_name
        if settings.github_auth == "app":
            forge._app_github = _app_github(settings, base_url, caches.sleep, write_hold)
        return forge

    @property
    def repo(self) -> Repository:
        if self._repo is None:
            self._repo = self.github.get_repo(self.repo_name)  # lazy: no request
        return self._repo

    @property
    def owner(self) -> str:
        return self.repo_name.split("/")[0]

    @property
    def token(self) -> str:
        """A token for git over HTTPS (the installation token for an App)."""
        return str(getattr(self._auth, "token", ""))

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Runs one PyGithub call; lists are read in full here, so every failure (GitHub's
        answer, or a connection that died after the retries) becomes a ForgeError. `fn`
        reaches the repository through self.repo, so that it can run again once a rename of
        the repository has been followed."""
        self._spend(what)
        try:
            result = self._moving(what, lambda: self._limited(what, fn, *args, **kwargs))
        except RateLimitExceededExceedsMaxWait as err:
            self._hold(err.wait or MAX_WAIT_S)
            raise _too_long(what, err.wait or MAX_WAIT_S) from err
        except GithubException as err:
            raise ForgeError(f"GitHub: {what} failed ({err.status}): {err.data}") from err
        except requests.RequestException as err:
            raise ForgeError(f"GitHub: {what} failed: {type(err).__name__}: {err}") from err
        if self._on_rate_limit is not None:
            self._on_rate_limit(self.rate_remaining)
        return result

    def _write(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A content-creating request (POST, PATCH, PUT, DELETE): each send of it, a send again
        after a rate limit included, waits for the installation's turn (bot.store.write_budget:
        room in the write budget, no hold from a refusal); a short wait is sat out, a longer one
        is RateLimited, so that the task is retried then instead of GitHub refusing it."""

        def in_turn(*a: Any, **kw: Any) -> Any:
            self._take_turn(what)
            return fn(*a, **kw)

        return self._call(what, in_turn, *args, **kwargs)

    def _take_turn(self, what: str) -> None:
        while self._write_gate is not None and (wait := self._write_gate(self._waited_until)) > 0:
            if wait > MAX_WRITE_GATE_WAIT_S:
                raise RateLimited(
                    f"GitHub: {what} not sent: carry's budget of content-creating requests "
                    f"(GitHub's secondary limits: 80 a minute, 500 an hour, and the waits it "
                    f"asks for) is spent for {wait:.0f} s",
                    wait,
                )
            self._sit_out(wait)

    def _sit_out(self, wait: float) -> None:
        """Waits `wait` seconds; a hold that ends by then has been waited out."""
        until = time.time() + wait
        self.caches.sleep(wait)
        self._waited_until = max(self._waited_until or 0.0, until)

    def _spend(self, what: str) -> None:
        self.calls += 1
        if self._budget is not None and self.calls > self._budget:
            raise ForgeError(
                f"GitHub: {what} not sent: this task has made its {self._budget} calls "
                "(CARRY_GITHUB_REQUEST_BUDGET); it stops here instead of spending the rate limit"
            )

    def _moving(self, what: str, run: Callable[[], Any]) -> Any:
        """Runs `run`; when GitHub says this repository has a new name, follows it (once) and
        runs it again there. Any other redirect is a ForgeError that names it."""
        try:
            return run()
        except Redirected as err:
            moved_to = self._new_name(err)
            if moved_to is None or self.renamed_from is not None:
                raise ForgeError(f"GitHub: {what} was redirected ({err}); not followed") from err
        log.warning(
            "GitHub: %s is now %s; carry follows the rename (set downstream.repo to it)",
            self.repo_name,
            moved_to,
        )
        self.caches.renames[(self.github.requester.base_url, self.configured_name.lower())] = (
            moved_to
        )
        self.renamed_from, self.repo_name, self._repo = self.repo_name, moved_to, None
        return run()

    def _new_name(self, err: Redirected) -> str | None:
        """The repository's name now, when `err` is GitHub's redirect for a renamed one."""
        if err.repository_id is None:
            return None
        try:
            _headers, data = self.github.requester.requestJsonAndCheck(
                "GET", f"/repositories/{err.repository_id}"
            )
        except (GithubException, Redirected, requests.RequestException):
            return None
        name = str((data or {}).get("full_name") or "")
        return name if name and name.lower() != self.repo_name.lower() else None

    def _limited(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Sends a call again after a rate-limit refusal, waiting as GitHub asks. PyGithub has
        already done so for reads (but for a 429 without Retry-After), so what arrives here is
        mostly a write (POST, PATCH). Sending it again is safe, pull requests and comments
        included: GitHub answers 403/429 for a rate limit before acting, so the refused write
        did not happen, and no other failure of a write is sent again."""
        retries = 0
        while True:
            try:
                return self._attempt(fn, *args, **kwargs)
            except RateLimitExceededExceedsMaxWait:
                raise
            except GithubException as err:
                self._hold(rate_limit_wait(err))
                wait = self._wait_for_limit(what, err, retries)
            log.warning("GitHub: %s hit a rate limit; retrying in %gs", what, wait)
            self._sit_out(wait)
            retries += 1

    def _hold(self, wait: float | None) -> None:
        """A rate limit refused a call and GitHub asked to wait `wait` seconds: the writes of
        the whole installation are held that long, in every worker (None: not a rate limit)."""
        if wait is not None and wait > 0 and self._write_hold is not None:
            log.warning("GitHub: a rate limit holds this installation's writes for %gs", wait)
            self._write_hold(wait)

    @staticmethod
    def _wait_for_limit(what: str, err: GithubException, retries: int) -> float:
        """How long to wait before sending a refused call again; raises `err` when it was
        not refused by a rate limit, RateLimited when the wait is too long or no retry is left."""
        wait = rate_limit_wait(err)
        if wait is None:
            raise err
        if wait > MAX_WAIT_S:
            raise _too_long(what, wait) from err
        if retries >= WRITE_RETRIES:
            raise RateLimited(
                f"GitHub: {what} still refused by a rate limit after {retries} retries "
                f"({err.status}); retry after {wait:.0f} s",
                wait,
            ) from err
        return wait

    def _attempt(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return _complete(fn(*args, **kwargs))
        except GithubException as err:
            if err.status != 401 or not self._wait_for_new_token():
                raise
        return _complete(fn(*args, **kwargs))

    def _wait_for_new_token(self) -> bool:
        """After a 401: True (having waited) when the token is new enough for the 401 to be
        GitHub's replication lag and the request is worth one more try. A refused older
        token leaves the cache, so the next task mints a new one."""
        auth = self._auth
        if not isinstance(auth, CachedInstallationAuth) or auth.current is None:
            return False
        if not auth.tokens.is_fresh(auth.current):
            auth.tokens.forget(auth.key, auth.current.value)
            return False
        log.info("a new installation token got 401; trying again in %gs", WARMUP_WAIT_S)
        self.caches.sleep(WARMUP_WAIT_S)
        return True

    def find_open_pull(self, branch: str) -> PullInfo | None:
        """carry's open PR from `branch`, through a conditional request: unchanged since the
        last publish, it is a free 304."""
        pulls = self._conditional_get(
            "list pulls",
            lambda: f"/repos/{self.repo_name}/pulls",
            # the head's owner is the repository's owner now (a transfer moves carry's branch)
            lambda: {"state": "open", "head": f"{self.owner}:{branch}"},
        )
        return _info_of(pulls[0]) if pulls else None

    def _conditional_get(
        self, what: str, path: Callable[[], str], params: Callable[[], dict[str, str]]
    ) -> Any:
        """The JSON answer of a GET of carry's own repository (`path` and `params` name it
        anew after a rename is followed), sent with the ETag of the last answer to the same
        request."""

        self._spend(what)

        def get() -> Any:
            query = params()
            key = (self.github.requester.base_url, path(), json.dumps(query, sort_keys=True))
            known = self.caches.validators.get(key)
            headers = {"If-None-Match": known[0]} if known else None
            status, answer_headers, body = self._send_get(what, key[1], query, headers)
            if status == 401 and self._wait_for_new_token():
                status, answer_headers, body = self._send_get(what, key[1], query, headers)
            if status == 304 and known is not None:
                return known[1]
            if status >= 400:
                raise ForgeError(f"GitHub: {what} failed ({status}): {body[:300]}")
            answer = json.loads(body)
            if answer_headers.get("etag"):
                self.caches.validators.put(key, answer_headers["etag"], answer)
            return answer

        result = self._moving(what, get)
        if self._on_rate_limit is not None:
            self._on_rate_limit(self.rate_remaining)
        return result

    def _send_get(
        self, what: str, path: str, query: dict[str, str], headers: dict[str, str] | None
    ) -> tuple[int, dict[str, Any], str]:
        try:
            sent: tuple[int, dict[str, Any], str] = self.github.requester.requestJson(
                "GET", path, parameters=query, headers=headers
            )
            return sent
        except RateLimitExceededExceedsMaxWait as err:
            raise _too_long(what, err.wait or MAX_WAIT_S) from err
        except requests.RequestException as err:
            raise ForgeError(f"GitHub: {what} failed: {type(err).__name__}: {err}") from err

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
        """Opens a PR; DraftsNotSupported when GitHub refuses a draft in this repository."""
        try:
            fitted = fit_for_github(body, series)
            pull = self._write(
                "create pull",
                lambda: self.repo.create_pull(
                    base=base, head=branch, title=title, body=fitted, draft=draft
                ),
            )
        except ForgeError as err:
            if draft and _refuses_drafts(err.__cause__):
                raise DraftsNotSupported(str(err)) from err
            raise
        return _info_of(pull.raw_data)  # the answer to the POST: no further request

    def update_pull(
        self,
        number: int,
        title: str,
        body: str,
        *,
        current: PullInfo | None = None,
        series: str | None = None,
    ) -> bool:
        """Edits the PR's title and body; sends nothing (False) when `current`, the PR as just
        read, already has them."""
        fitted = fit_for_github(body, series)
        if current is not None and (current.title, current.body) == (title, fitted):
            return False
        # lazy: get_pull sends no request, edit sends the PATCH
        self._write("edit pull", lambda: self.repo.get_pull(number).edit(title=title, body=fitted))
        return True

    def add_labels(
        self, number: int, labels: list[str], *, current: PullInfo | None = None
    ) -> None:
        """Adds the labels `current` (the PR as just read) does not have yet."""
        missing = [label for label in labels if current is None or label not in current.labels]
        if missing:
            self._write("add labels", lambda: self.repo.get_issue(number).add_to_labels(*missing))

    def remove_label(self, number: int, label: str) -> None:
        self._write("remove label", lambda: self.repo.get_issue(number).remove_from_labels(label))

    def upsert_comment(
        self,
        number: int,
        marker: str,
        body: str,
        *,
        only_existing: bool = False,
        series: str | None = None,
    ) -> int | None:
        """Edits carry's comment holding `marker`, or creates it (unless `only_existing`):
        one report per PR, updated in place."""
        body = fit_for_github(body, series)
        # get_issue is lazy (no request); the comments listed carry their own URLs
        comments = self._call("list comments", lambda: self.repo.get_issue(number).get_comments())
        for comment in comments:
            if marker in (comment.body or ""):
                if comment.body != body:
                    self._write("edit comment", comment.edit, body)
                return int(comment.id)
        if only_existing:
            return None
        return int(
            self._write("comment", lambda: self.repo.get_issue(number).create_comment(body)).id
        )

    def comment(self, number: int, body: str, *, series: str | None = None) -> int:
        text = fit_for_github(body, series)
        return int(
            self._write("comment", lambda: self.repo.get_issue(number).create_comment(text)).id
        )

    def find_issue(self, label: str, creator: str) -> int | None:
        """The lowest-numbered open issue (not a PR) with `label` that `creator` opened."""
        issues = self._call(
            "list issues", lambda: self.repo.get_issues(state="open", labels=[label])
        )
        mine = [
            int(i.number)
            for i in issues
            if i.pull_request is None and (i.user.login or "").lower() == creator.lower()
        ]
        return min(mine, default=None)

    def create_issue(self, title: str, body: str, labels: list[str]) -> int:
        text = fit_for_github(body)
        created = self._write(
            "create issue", lambda: self.repo.create_issue(title=title, body=text, labels=labels)
        )
        return int(created.number)

    def edit_issue(self, number: int, body: str) -> bool:
        """Writes the issue's body; False when GitHub has no such issue any more (deleted,
        or transferred to another repository)."""
        text = fit_for_github(body)
        try:
            # lazy: get_issue sends no request, edit sends the PATCH
            self._write("edit issue", lambda: self.repo.get_issue(number).edit(body=text))
        except ForgeError as err:
            if isinstance(err.__cause__, GithubException) and err.__cause__.status in (404, 410):
                return False
            raise
        return True

    def permission(self, user: str) -> str:
        """The user's role on the repository (admin, maintain, write, triage, read, none),
        remembered for PERMISSION_TTL_S: one person's burst of comments costs one lookup."""
        key = (self.github.requester.base_url, self.repo_name, user.lower())
        return self.caches.permissions.get(key, lambda: self._look_up_permission(user))

    def _look_up_permission(self, user: str) -> str:
        def ask() -> dict[str, Any]:
            login = urllib.parse.quote(user, safe="")
            _headers, data = self.github.requester.requestJsonAndCheck(
                "GET", f"/repos/{self.repo_name}/collaborators/{login}/permission"
            )
            return dict(data)

        what = f"permission of {user}"
        self._spend(what)
        try:
            # the same retries as every other call: a new token's 401, a rate limit, a rename
            return _role(self._moving(what, lambda: self._limited(what, ask)))
        except RateLimitExceededExceedsMaxWait as err:
            raise _too_long(what, err.wait or MAX_WAIT_S) from err
        except requests.RequestException as err:
            raise ForgeError(f"GitHub: {what} failed: {type(err).__name__}: {err}") from err
        except GithubException as err:
            if err.status == 404:
                return "none"
            if err.status == 403:
                raise PermissionUnknown(
                    f"GitHub: carry's credentials cannot read permissions on {self.repo_name} "
                    f"(403: the token needs push access); {user}'s command was not acted on"
                ) from err
            raise ForgeError(
                f"GitHub: permission of {user} failed ({err.status}): {err.data}"
            ) from err

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
        """A check run (GitHub Apps only: a personal token gets 403); `external_id` names the
        run it reports, so that it can be found again (find_check_run)."""
        data = _check_run_fields(status, conclusion, title, summary, series)
        data.update(name=name, head_sha=head_sha)
        if external_id:
            data["external_id"] = external_id
        created = self._write(
            "create check run",
            lambda: self.github.requester.requestJsonAndCheck(
                "POST", f"/repos/{self.repo_name}/check-runs", input=data
            ),
        )
        return int(created[1]["id"])

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
        """Moves a check run on (queued, in progress, completed) and rewrites its output."""
        data = _check_run_fields(status, conclusion, title, summary, series)
        self._write(
            "update check run",
            lambda: self.github.requester.requestJsonAndCheck(
                "PATCH", f"/repos/{self.repo_name}/check-runs/{check_run_id}", input=data
            ),
        )

    def find_check_run(self, head_sha: str, name: str, external_id: str) -> int | None:
        """The id of the newest check run of `name` on the commit that carries `external_id`
        (one a request created although its answer was lost), None when there is none."""
        query = {"check_name": name, "filter": "all", "per_page": "100"}
        _headers, data = self._call(
            "list check runs",
            lambda: self.github.requester.requestJsonAndCheck(
                "GET", f"/repos/{self.repo_name}/commits/{head_sha}/check-runs", parameters=query
            ),
        )
        ids = [
            int(run["id"])
            for run in (data or {}).get("check_runs", [])
            if run.get("external_id") == external_id and run.get("name") == name
        ]
        return max(ids, default=None)

    def create_status(
        self, sha: str, context: str, state: str, description: str, target_url: str = ""
    ) -> None:
        """A commit status: what a personal token may report CI with (check runs need an App)."""
        data = {"state": state, "context": context, "description": _short(description)}
        if target_url:
            data["target_url"] = target_url
        self._write(
            "create status",
            lambda: self.github.requester.requestJsonAndCheck(
                "POST", f"/repos/{self.repo_name}/statuses/{sha}", input=data
            ),
        )

    def pull_state(
        self, repo: str, number: int, etag: str | None
    ) -> tuple[PullState | None, str | None]:
        """A PR's state through a conditional request: (None, etag) when unchanged (304, which
        costs no rate limit), else the new state and its ETag."""
        # Sent back exactly as GitHub gave it (weak, `W/"..."`).
        headers = {"If-None-Match": etag} if etag else None
        own = self._is_own(repo)

        def get() -> tuple[int, dict[str, Any], str]:
            target = self.repo_name if own else repo  # carry's own: under its name now
            try:
                return self.github.requester.requestJson(
                    "GET", f"/repos/{target}/pulls/{number}", headers=headers
                )
            except RateLimitExceededExceedsMaxWait as err:
                raise _too_long(f"get {repo}#{number}", err.wait or MAX_WAIT_S) from err
            except Redirected as err:
                if own:
                    raise  # carry's own repository moved: _moving follows it
                raise self._moved_elsewhere(repo, err) from err  # its name is config's
            except requests.RequestException as err:  # after the retries: this PR only
                raise ForgeError(
                    f"GitHub: get {repo}#{number} failed: {type(err).__name__}: {err}"
                ) from err

        def get_own() -> tuple[int, dict[str, Any], str]:
            answer: tuple[int, dict[str, Any], str] = self._moving(f"get {repo}#{number}", get)
            return answer

        fetch = get_own if own else get
        status, answer_headers, body = fetch()
        if status == 401 and self._wait_for_new_token():
            status, answer_headers, body = fetch()
        if status == 304:
            return None, etag
        if status >= 400:
            raise ForgeError(f"GitHub: get {repo}#{number} failed ({status}): {body[:300]}")
        data = json.loads(body)
        state: Literal["open", "merged", "closed_unmerged"] = "open"
        if data.get("merged"):
            state = "merged"
        elif data.get("state") == "closed":
            state = "closed_unmerged"
        found = PullState(
            state=state,
            head_sha=data["head"]["sha"],
            base_ref=data["base"]["ref"],
            merge_commit=data.get("merge_commit_sha") if data.get("merged") else None,
            merged_by=(data.get("merged_by") or {}).get("login"),
        )
        return found, answer_headers.get("etag")

    def repository_id(self, repo: str) -> int:
        """GitHub's id of `repo`, which a rename or a transfer keeps: asked for by an old name,
        GitHub answers with a redirect to /repositories/<id>, which names it."""
        what = f"get repository {repo}"
        self._spend(what)
        try:
            _headers, data = self.github.requester.requestJsonAndCheck("GET", f"/repos/{repo}")
        except Redirected as err:
            if err.repository_id is None:
                raise ForgeError(f"GitHub: {what} was redirected ({err}); not followed") from err
            return err.repository_id
        except GithubException as err:
            raise ForgeError(f"GitHub: {what} failed ({err.status}): {err.data}") from err
        except requests.RequestException as err:
            raise ForgeError(f"GitHub: {what} failed: {type(err).__name__}: {err}") from err
        found = (data or {}).get("id")
        if not isinstance(found, int):
            raise ForgeError(f"GitHub: {what} answered no id")
        return found

    def _is_own(self, repo: str) -> bool:
        """Whether `repo` names carry's repository: the config's name, or the one a rename or
        transfer was followed to."""
        names = (self.repo_name, self.renamed_from, self.configured_name)
        return repo.lower() in {name.lower() for name in names if name}

    def _moved_elsewhere(self, repo: str, err: Redirected) -> ForgeError:
        """A repository named in carry's config (an upstream) answers with a redirect."""
        saved, self.repo_name = self.repo_name, repo
        try:
            now = self._new_name(err)
        finally:
            self.repo_name = saved
        if now is None:
            return ForgeError(f"GitHub: {repo} was redirected ({err}); not followed")
        return ForgeError(f"GitHub: {repo} is now {now}: update the config's upstream repo")

    def timeline(self, repo: str, number: int) -> list[dict[str, Any]]:
        """The first 100 events of an issue's or PR's timeline (cross-references, comments)."""

        own = self._is_own(repo)

        def get() -> Any:
            target = self.repo_name if own else repo  # carry's own: under its name now
            try:
                return self.github.requester.requestJsonAndCheck(
                    "GET",
                    f"/repos/{target}/issues/{number}/timeline",
                    parameters={"per_page": 100},
                )
            except Redirected as err:
                if own:
                    raise  # carry's own repository moved: _call follows it
                raise self._moved_elsewhere(repo, err) from err

        _headers, data = self._call(f"timeline of {repo}#{number}", get)
        return list(data or [])

    # -- the webhook's deliveries ------------------------------------------------------------

    def hook_deliveries(
        self, hook_id: int | None, cursor: str | None = None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """One page (newest first) of the webhook's delivery attempts, and the cursor of the
        next page (None on the last): the repository hook `hook_id`, or the App's hook (None,
        with the App's JWT). GitHub keeps them 3 days and never redelivers one by itself."""
        parameters: dict[str, Any] = {"per_page": 100}
        if cursor:
            parameters["cursor"] = cursor

        def get() -> tuple[dict[str, Any], Any]:
            requester, path = self._hook_requester(hook_id)
            answer: tuple[dict[str, Any], Any] = requester.requestJsonAndCheck(
                "GET", f"{path}/deliveries", parameters=parameters
            )
            return answer

        headers, data = self._call(f"list deliveries of {self._hook_name(hook_id)}", get)
        return list(data or []), _next_cursor(headers)

    def redeliver(self, hook_id: int | None, delivery_id: int) -> None:
        """Asks GitHub to deliver `delivery_id` again (same X-GitHub-Delivery; 202). A POST:
        it takes its turn in the write budget and waits out a hold like any other write."""

        def post() -> Any:
            requester, path = self._hook_requester(hook_id)
            return requester.requestJsonAndCheck(
                "POST", f"{path}/deliveries/{int(delivery_id)}/attempts"
            )

        self._write(f"redeliver {delivery_id} of {self._hook_name(hook_id)}", post)

    def _hook_name(self, hook_id: int | None) -> str:
        return f"hook {hook_id} of {self.repo_name}" if hook_id else "the App's hook"

    def _hook_requester(self, hook_id: int | None) -> tuple[Requester, str]:
        """Who asks, and where: the App's hook needs the App's own JWT (not an installation
        token); a repository hook is read with carry's token (admin, or an App's Webhooks
        permission)."""
        if hook_id is not None:
            return self.github.requester, f"/repos/{self.repo_name}/hooks/{int(hook_id)}"
        if self._app_github is None:
            raise ConfigError(
                [
                    "config: web.hook_id is needed to redeliver without a GitHub App (it has no "
                    "App hook): the id of the repository's webhook"
                ]
            )
        return self._app_github.requester, "/app/hook"

    def issues_writable(self) -> bool | None:
        """Whether carry's credentials may write issues on the repository: an App's
        installation needs `issues: write` (GET /repos/{repo}/installation, with the App's
        JWT); a token's user needs triage or more (GitHub's `permissions` of GET
        /repos/{repo}). None when GitHub does not say (no answer, or no permissions given)."""
        if self._app_github is not None:
            requester, path = self._app_github.requester, f"/repos/{self.repo_name}/installation"
        else:
            requester, path = self.github.requester, f"/repos/{self.repo_name}"
        try:
            _headers, data = requester.requestJsonAndCheck("GET", path)
        except (GithubException, requests.RequestException) as err:
            log.info("GitHub: cannot read carry's permissions on %s: %s", self.repo_name, err)
            return None
        granted = data.get("permissions") if isinstance(data, dict) else None
        if not isinstance(granted, dict):
            return None
        if self._app_github is not None:
            return granted.get("issues") == "write"
        return bool(granted.get("triage") or granted.get("push") or granted.get("admin"))

    @property
    def rate_remaining(self) -> int | None:
        # The requester's figures from the last answer; Github.rate_limiting would send a
        # GET /rate_limit of its own before the first request.
        remaining, _limit = self.github.requester.rate_limiting
        return remaining if remaining >= 0 else None


@dataclass(frozen=True)
class PullState:
    state: Literal["open", "merged", "closed_unmerged"]
    head_sha: str
    base_ref: str
    merge_commit: str | None
    merged_by: str | None


MAX_STATUS_DESCRIPTION = 140  # GitHub's limit for a commit status description


# The five roles GitHub names in `role_name`; an organization's custom role is named there
# too, and then the legacy `permission` (admin, write, read, none) gives the role it builds on.
ROLES: Final = ("admin", "maintain", "write", "triage", "read")


def _role(data: dict[str, Any]) -> str:
    """The collaborator's role from GitHub's permission answer."""
    role = data.get("role_name")
    return str(role) if role in ROLES else str(data.get("permission") or "none")


def _short(text: str) -> str:
    if len(text) <= MAX_STATUS_DESCRIPTION:
        return text
    return text[: MAX_STATUS_DESCRIPTION - 1] + "\u2026"


def _refuses_drafts(cause: BaseException | None) -> bool:
    return (
        isinstance(cause, GithubException)
        and cause.status == 422
        and DRAFTS_REFUSED in json.dumps(cause.data)
    )


def _info_of(pull: dict[str, Any]) -> PullInfo:
    """A PR as the REST API lists it."""
    return PullInfo(
        int(pull["number"]),
        str(pull["html_url"]),
        str(pull["head"]["sha"]),
        str(pull["state"]),
        bool(pull.get("draft")),
        pull.get("merged_at") is not None,
        pull.get("title") or "",
        pull.get("body") or "",
        tuple(label["name"] for label in pull.get("labels") or ()),
    )


def _complete(result: Any) -> Any:
    """A list is read in full, so that a failure on a later page happens here."""
    return list(result) if isinstance(result, PaginatedList) else result


def _auth(settings: Settings, base_url: str, caches: ForgeCaches) -> Auth.Auth:
    if settings.github_auth == "app":
        return _installation_auth(settings, base_url, caches)
    if settings.github_token is not None:
        return Auth.Token(settings.github_token.get_secret_value())
    raise ConfigError(["environment: no GitHub credentials (GITHUB_TOKEN or a GitHub App)"])


def _app_github(
    settings: Settings, base_url: str, wait: Sleep, hold: WriteHold | None = None
) -> Github | None:
    """The App itself, authenticated with its JWT (PyGithub signs a new one as needed); a rate
    limit's Retry-After on its hook's requests holds the installation's writes too (`hold`)."""
    key = settings.app_private_key()
    if key is None or settings.github_app_id is None:
        return None
    return Github(
        base_url=base_url,
        auth=Auth.AppAuth(int(settings.github_app_id), key.get_secret_value()),
        retry=_retry(wait, hold),
        seconds_between_requests=None,
        seconds_between_writes=settings.github_write_pause_s or None,
        timeout=30,
    )


_NEXT_LINK = re.compile(r'<(?P<url>[^>]+)>\s*;\s*rel="next"')


def _next_cursor(headers: dict[str, Any]) -> str | None:
    """The `cursor` of the Link header's next page, if there is one."""
    link = next((str(v) for k, v in (headers or {}).items() if k.lower() == "link"), "")
    found = _NEXT_LINK.search(link)
    if found is None:
        return None
    values = urllib.parse.parse_qs(urlparse(found["url"]).query).get("cursor")
    return values[-1] if values else None


def _installation_auth(
    settings: Settings, base_url: str, caches: ForgeCaches
) -> CachedInstallationAuth:
    """The installation's cached token, minted (one POST) when none is valid."""
    key = settings.app_private_key()
    if key is None or settings.github_installation_id is None or settings.github_app_id is None:
        raise ConfigError(
            ["environment: a GitHub App needs GITHUB_INSTALLATION_ID and a private key"]
        )
    app_id, installation_id = int(settings.github_app_id), settings.github_installation_id
    app_auth = Auth.AppAuth(app_id, key.get_secret_value())

    def mint() -> InstallationToken:
        integration = GithubIntegration(
            base_url=base_url, auth=app_auth, retry=_retry(caches.sleep), timeout=30
        )
        try:
            granted = integration.get_access_token(installation_id)
        except GithubException as err:
            raise ForgeError(
                f"GitHub: installation token for {installation_id} failed ({err.status}): "
                f"{err.data}"
            ) from err
        except requests.RequestException as err:
            raise ForgeError(
                f"GitHub: installation token for {installation_id} failed: "
                f"{type(err).__name__}: {err}"
            ) from err
        now = caches.tokens.now()
        expires = granted.expires_at.timestamp() if granted.expires_at else now + 3600
        return InstallationToken(granted.token, expires, now)

    return CachedInstallationAuth((base_url, app_id, installation_id), mint, caches.tokens)


def _check_run_fields(
    status: str, conclusion: str | None, title: str, summary: str, series: str | None
) -> dict[str, Any]:
    fitted = fit_for_github(summary, series, limit=GITHUB_MAX_CHECK_OUTPUT_BYTES, in_bytes=True)
    data: dict[str, Any] = {"status": status, "output": {"title": title, "summary": fitted}}
    if conclusion:
        data["conclusion"] = conclusion
    return data


def retry_delay(err: Exception, attempts: int) -> float:
    """Seconds before a failed task tries again: what GitHub's rate limit asks, else a backoff."""
    backoff = float(min(300, 2**attempts))
    return max(err.retry_after_s, backoff) if isinstance(err, RateLimited) else backoff
