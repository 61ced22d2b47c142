"""The GitHub emulator against its contract: REST schemas, octokit webhook schemas, real
PyGithub (token and App auth), real git over HTTP, real merges, faults and retries."""

from __future__ import annotations

import hmac
import json
import socket
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import jwt
import pytest
import requests
from github import (
    Auth,
    BadCredentialsException,
    Github,
    GithubException,
    GithubIntegration,
    RateLimitExceededException,
    UnknownObjectException,
)

from bot.emulator import GitHubEmulator, WebhookSink, generate_app_key, signature_256
from bot.local_redis import free_port
from harness.gitrepo import RepoBuilder, git
from tests.support.github_schema import RestSchemas, WebhookSchemas
from tests.support.paths import GITHUB_CONTRACT

OWNER, NAME = "acme", "widget"
REPO = f"{OWNER}/{NAME}"
TOKEN = "ghp_emulator_alice_0001"
APP_ID, INSTALLATION_ID = 4242, 77
BOT = "carry-test[bot]"
SECRET = "It's a Secret to Everybody"


@dataclass
class Upstream:
    """The source repository: main (c0, m1), topic (t1, t2) and conflict (x1), from c0."""

    builder: RepoBuilder
    c0: str
    t1: str
    t2: str
    m1: str
    x1: str


@pytest.fixture(scope="module")
def app_key() -> tuple[str, str]:
    return generate_app_key()


@pytest.fixture
def upstream(make_repo: Any) -> Upstream:
    up: RepoBuilder = make_repo("upstream")
    c0 = up.commit("init", {"README.md": "hello\n", "lib.py": "x = 1\n"})
    up.checkout(c0, new_branch="topic")
    t1 = up.commit("add feature", {"feature.txt": "one\n"})
    t2 = up.commit("bump x", {"lib.py": "x = 2\n"})
    up.checkout(c0, new_branch="conflict")
    x1 = up.commit("rewrite readme", {"README.md": "conflicting\n"})
    up.checkout("main")
    m1 = up.commit("greet the world", {"README.md": "hello world\n"})
    return Upstream(up, c0, t1, t2, m1, x1)


@pytest.fixture
def gh(tmp_path: Path, upstream: Upstream, app_key: tuple[str, str]) -> Iterator[GitHubEmulator]:
    with GitHubEmulator(tmp_path / "github") as emulator:
        emulator.create_repo(OWNER, NAME, from_path=upstream.builder.path)
        emulator.add_token(TOKEN, "alice")
        emulator.set_permission(OWNER, NAME, "alice", "write")
        emulator.add_app(
            APP_ID, app_key[1], slug="carry-test", installation_id=INSTALLATION_ID, account=OWNER
        )
        yield emulator
        assert emulator.errors == []


def client(gh: GitHubEmulator, auth: Any = None, **options: Any) -> Github:
    options.setdefault("retry", None)
    return Github(
        base_url=gh.base_url,
        auth=auth or Auth.Token(TOKEN),
        seconds_between_requests=None,
        seconds_between_writes=None,
        **options,
    )


def app_jwt(private_key: str, app_id: int = APP_ID) -> str:
    now = int(time.time())
    return jwt.encode({"iat": now - 60, "exp": now + 540, "iss": str(app_id)}, private_key, "RS256")


def raw(gh: GitHubEmulator) -> httpx.Client:
    return httpx.Client(base_url=gh.base_url, headers={"User-Agent": "emulator-tests"})


def bare_git(gh: GitHubEmulator, *args: str) -> str:
    return git(gh.repo_path(OWNER, NAME), *args)


# -- 1. every response kind against rest/*.json ---------------------------------------------------

EXPECTED_STATUSES = {
    "DELETE /repos/{owner}/{repo}/git/refs/{ref}": {204, 422},
    "GET /app/installations/{installation_id}": {200, 404},
    "GET /rate_limit": {200},
    "GET /repos/{owner}/{repo}": {200, 401, 403, 404},
    "GET /repos/{owner}/{repo}/check-runs/{check_run_id}": {200, 404},
    "GET /repos/{owner}/{repo}/collaborators/{username}/permission": {200, 404},
    "GET /repos/{owner}/{repo}/commits/{ref}": {200, 422},
    "GET /repos/{owner}/{repo}/commits/{ref}/check-runs": {200, 422},
    "GET /repos/{owner}/{repo}/commits/{ref}/status": {200, 404},
    "GET /repos/{owner}/{repo}/compare/{basehead}": {200, 404, 503},
    "GET /repos/{owner}/{repo}/git/matching-refs/{ref}": {200},
    "GET /repos/{owner}/{repo}/git/ref/{ref}": {200, 404},
    "GET /repos/{owner}/{repo}/installation": {200, 404},
    "GET /repos/{owner}/{repo}/issues/comments/{comment_id}": {200, 404},
    "GET /repos/{owner}/{repo}/issues": {200, 422},
    "POST /repos/{owner}/{repo}/issues": {201, 422},
    "GET /repos/{owner}/{repo}/issues/{issue_number}": {200, 404},
    "PATCH /repos/{owner}/{repo}/issues/{issue_number}": {200, 422},
    "GET /repos/{owner}/{repo}/issues/{issue_number}/comments": {200, 404},
    "GET /repos/{owner}/{repo}/pulls": {200, 422},
    "GET /repos/{owner}/{repo}/pulls/{pull_number}": {200, 403, 404, 429, 502},
    "GET /repos/{owner}/{repo}/pulls/{pull_number}/merge": {204, 404},
    "PATCH /repos/{owner}/{repo}/check-runs/{check_run_id}": {200, 403, 422},
    "PATCH /repos/{owner}/{repo}/git/refs/{ref}": {200, 422},
    "PATCH /repos/{owner}/{repo}/issues/comments/{comment_id}": {200, 422},
    "PATCH /repos/{owner}/{repo}/pulls/{pull_number}": {200, 422},
    "POST /app/installations/{installation_id}/access_tokens": {201, 401, 404, 422},
    "POST /repos/{owner}/{repo}/check-runs": {201, 403, 422},
    "POST /repos/{owner}/{repo}/git/refs": {201, 422},
    "POST /repos/{owner}/{repo}/issues/{issue_number}/comments": {201, 404, 422},
    "POST /repos/{owner}/{repo}/issues/{issue_number}/labels": {200, 404, 422},
    "DELETE /repos/{owner}/{repo}/issues/{issue_number}/labels/{name}": {200, 404},
    "POST /repos/{owner}/{repo}/pulls": {201, 401, 422},
    "POST /repos/{owner}/{repo}/statuses/{sha}": {201, 422},
    "PUT /repos/{owner}/{repo}/pulls/{pull_number}/merge": {200, 405, 409, 422},
    "GET /repos/{owner}/{repo}/hooks/{hook_id}/deliveries": {200, 400, 404, 422},
    "POST /repos/{owner}/{repo}/hooks/{hook_id}/deliveries/{delivery_id}/attempts": {202, 404},
    "GET /app/hook/deliveries": {200, 400},
    "POST /app/hook/deliveries/{delivery_id}/attempts": {202, 404},
}


def test_every_response_matches_its_rest_schema(
    gh: GitHubEmulator, upstream: Upstream, app_key: tuple[str, str]
) -> None:
    r = f"/repos/{REPO}"
    token = {"Authorization": f"token {TOKEN}"}
    bearer = {"Authorization": f"Bearer {app_jwt(app_key[0])}"}
    gh.add_user("mallory")
    gh.add_user("root")
    gh.add_token("root-token", "root")
    gh.set_permission(OWNER, NAME, "root", "admin")
    nobody = f"http://127.0.0.1:{free_port()}/hook"  # every delivery fails: nobody listens
    hook = gh.add_webhook(nobody, SECRET, owner=OWNER, repo=NAME)
    gh.add_webhook(nobody, SECRET, app_id=APP_ID)
    with raw(gh) as http:

        def call(method: str, path: str, status: int, body: Any = None, headers: Any = None) -> Any:
            response = http.request(method, path, json=body, headers=headers or token)
            assert response.status_code == status, (method, path, response.text)
            return response.json() if response.content else None

        call("GET", r, 200)
        call("GET", "/repos/acme/missing", 404)
        call("GET", r, 401, headers={"Authorization": "token nope"})
        assert http.get(r, headers={**token, "User-Agent": ""}).status_code == 403
        # git refs
        call("GET", f"{r}/git/ref/heads/topic", 200)
        call("GET", f"{r}/git/ref/heads/nope", 404)
        call("GET", f"{r}/git/matching-refs/heads/", 200)
        call("POST", f"{r}/git/refs", 201, {"ref": "refs/heads/f1", "sha": upstream.t1})
        call("POST", f"{r}/git/refs", 422, {"ref": "refs/heads/f1", "sha": upstream.t1})
        call("PATCH", f"{r}/git/refs/heads/f1", 200, {"sha": upstream.t2})
        call("PATCH", f"{r}/git/refs/heads/f1", 422, {"sha": upstream.m1})  # not a fast forward
        call("DELETE", f"{r}/git/refs/heads/f1", 204)
        call("DELETE", f"{r}/git/refs/heads/f1", 422)
        # pulls
        pr = call("POST", f"{r}/pulls", 201, {"head": "acme:topic", "base": "main", "title": "T"})
        call("POST", f"{r}/pulls", 422, {"head": "acme:topic", "base": "main", "title": "T"})
        conflict = call(
            "POST", f"{r}/pulls", 201, {"head": "conflict", "base": "main", "title": "X"}
        )
        call("GET", f"{r}/pulls?state=all&per_page=1", 200)
        call("GET", f"{r}/pulls/{pr['number']}", 200)
        call("GET", f"{r}/pulls/999", 404)
        call("PATCH", f"{r}/pulls/{pr['number']}", 200, {"title": "T2"})
        call("PATCH", f"{r}/pulls/{pr['number']}", 422, {"state": "bogus"})
        call("GET", f"{r}/pulls/{pr['number']}/merge", 404)
        call("PUT", f"{r}/pulls/{pr['number']}/merge", 409, {"sha": upstream.t1})
        call("PUT", f"{r}/pulls/{pr['number']}/merge", 422, {"merge_method": "octopus"})
        call("PUT", f"{r}/pulls/{conflict['number']}/merge", 405)
        call("PUT", f"{r}/pulls/{pr['number']}/merge", 200, {"merge_method": "merge"})
        call("GET", f"{r}/pulls/{pr['number']}/merge", 204)
        # issues, comments, labels
        n = pr["number"]
        call("GET", f"{r}/issues/{n}", 200)
        call("GET", f"{r}/issues/999", 404)
        issue = call("POST", f"{r}/issues", 201, {"title": "Dashboard", "labels": ["carry"]})
        call("POST", f"{r}/issues", 422, {"body": "no title"})
        call("PATCH", f"{r}/issues/{issue['number']}", 200, {"body": "- [x] ticked"})
        call("PATCH", f"{r}/issues/{issue['number']}", 422, {"state": "bogus"})
        call("GET", f"{r}/issues?state=all&labels=carry", 200)
        call("GET", f"{r}/issues?state=bogus", 422)
        comment = call("POST", f"{r}/issues/{n}/comments", 201, {"body": "hi"})
        call("POST", f"{r}/issues/{n}/comments", 422, {"body": ""})
        call("POST", f"{r}/issues/999/comments", 404, {"body": "hi"})
        call("GET", f"{r}/issues/{n}/comments", 200)
        call("GET", f"{r}/issues/comments/{comment['id']}", 200)
        call("GET", f"{r}/issues/comments/999", 404)
        call("PATCH", f"{r}/issues/comments/{comment['id']}", 200, {"body": "edited"})
        call("PATCH", f"{r}/issues/comments/{comment['id']}", 422, {})
        call("POST", f"{r}/issues/{n}/labels", 200, ["bug", "ui"])
        call("POST", f"{r}/issues/{n}/labels", 200, {"labels": [{"name": "ci"}]})
        call("POST", f"{r}/issues/{n}/labels", 422, [])
        call("POST", f"{r}/issues/999/labels", 404, ["bug"])
        call("DELETE", f"{r}/issues/{n}/labels/ui", 200)
        call("DELETE", f"{r}/issues/{n}/labels/ui", 404)  # GitHub: "Label does not exist"
        call("GET", f"{r}/issues/999/comments", 404)
        call("GET", f"{r}/pulls?state=bogus", 422)
        call(
            "POST", f"{r}/pulls", 401, {"head": "topic", "base": "main"}, {"X-Anon": "1"}
        )  # anonymous
        # checks (writes need an App installation token) and statuses
        app = {"Authorization": f"token {gh.installation_token(INSTALLATION_ID)}"}
        ci = {"name": "ci", "head_sha": upstream.t2}
        run = call("POST", f"{r}/check-runs", 201, ci, app)
        call("POST", f"{r}/check-runs", 403, ci)
        call("POST", f"{r}/check-runs", 422, {"name": "ci", "head_sha": "f" * 40}, app)
        call("GET", f"{r}/check-runs/{run['id']}", 200)
        call("GET", f"{r}/check-runs/999", 404)
        call("PATCH", f"{r}/check-runs/{run['id']}", 403, {"conclusion": "success"})
        call("PATCH", f"{r}/check-runs/{run['id']}", 200, {"conclusion": "success"}, app)
        call("PATCH", f"{r}/check-runs/{run['id']}", 422, {"status": "weird"}, app)
        call("GET", f"{r}/commits/topic/check-runs?check_name=ci", 200)
        call("GET", f"{r}/commits/nope/check-runs", 422)
        call("POST", f"{r}/statuses/{upstream.t2}", 201, {"state": "success", "context": "ci/x"})
        call("POST", f"{r}/statuses/{upstream.t2}", 422, {"state": "great"})
        call("GET", f"{r}/commits/{upstream.t2}/status", 200)
        call("GET", f"{r}/commits/nope/status", 404)
        # commits, compare, permissions, rate limit
        call("GET", f"{r}/commits/{upstream.t2}?page=1", 200)
        call("GET", f"{r}/commits/{upstream.c0}", 200)
        call("GET", f"{r}/commits/nope", 422)
        call("GET", f"{r}/compare/main...conflict?page=1", 200)
        call("GET", f"{r}/compare/main...nope", 404)
        call("GET", f"{r}/collaborators/alice/permission", 200)
        call("GET", f"{r}/collaborators/nobody/permission", 404)
        call("GET", "/rate_limit", 200)
        # apps
        call(
            "POST",
            f"/app/installations/{INSTALLATION_ID}/access_tokens",
            201,
            {"permissions": {}},
            bearer,
        )
        call("POST", f"/app/installations/{INSTALLATION_ID}/access_tokens", 401, {}, token)
        call("POST", "/app/installations/1/access_tokens", 404, {}, bearer)
        call(
            "POST",
            f"/app/installations/{INSTALLATION_ID}/access_tokens",
            422,
            {"repositories": ["nope"]},
            bearer,
        )
        restricted = call(
            "POST",
            f"/app/installations/{INSTALLATION_ID}/access_tokens",
            201,
            {"repositories": [NAME]},
            bearer,
        )
        assert [repo["full_name"] for repo in restricted["repositories"]] == [REPO]
        call("GET", f"/app/installations/{INSTALLATION_ID}", 200, headers=bearer)
        call("GET", "/app/installations/1", 404, headers=bearer)
        call("GET", f"{r}/installation", 200, headers=bearer)
        call("GET", "/repos/acme/missing/installation", 404, headers=bearer)
        user = call("GET", "/users/mallory", 200)
        # a hook's deliveries: listed (admins, the App's JWT) and redelivered
        gh.wait_for_deliveries()
        root = {"Authorization": "token root-token"}
        deliveries = f"{r}/hooks/{hook}/deliveries"
        (failed,) = call("GET", f"{deliveries}?per_page=1&status=failure", 200, headers=root)
        call("GET", f"{deliveries}?cursor=nonsense", 400, headers=root)
        call("GET", f"{deliveries}?status=fine", 422, headers=root)
        call("GET", deliveries, 404)  # alice may write, but only admins see hooks
        call("POST", f"{deliveries}/{failed['id']}/attempts", 202, headers=root)
        call("POST", f"{deliveries}/999999/attempts", 404, headers=root)
        (app_failed,) = call("GET", "/app/hook/deliveries?per_page=1", 200, headers=bearer)
        call("GET", "/app/hook/deliveries?cursor=v1_x", 400, headers=bearer)
        call("POST", f"/app/hook/deliveries/{app_failed['id']}/attempts", 202, headers=bearer)
        call("POST", "/app/hook/deliveries/999999/attempts", 404, headers=bearer)
        gh.wait_for_deliveries()
        # injected faults
        for kind, status in [
            ("server_error", 502),
            ("too_many_requests", 429),
            ("primary_rate_limit", 403),
            ("secondary_rate_limit", 403),
        ]:
            gh.inject_fault(kind)
            call("GET", f"{r}/pulls/{n}", status)
        gh.inject_fault("server_error", status=503)
        call("GET", f"{r}/compare/main...topic", 503)

    schemas = RestSchemas()
    schemas.validate_component("simple-user", user)
    covered: set[tuple[str, str, int]] = set()
    for entry in gh.api_requests():
        assert entry.operation is not None and entry.status is not None
        if entry.operation == "/users/{username}":
            continue
        assert schemas.template_for(entry.method, entry.path) == entry.operation
        checked = schemas.validate(entry.method, entry.operation, entry.status, entry.response_json)
        assert checked.documented or entry.status >= 400
        assert "X-RateLimit-Remaining" in entry.response_headers
        covered.add((entry.method, entry.operation, entry.status))
    index = json.loads((GITHUB_CONTRACT / "rest" / "index.json").read_text())
    every_operation = {tuple(op.split(" ", 1)) for ops in index.values() for op in ops}
    assert {(m, t) for m, t, status in covered if status < 300} == every_operation
    statuses: dict[str, set[int]] = {}
    for method, template, status in covered:
        statuses.setdefault(f"{method} {template}", set()).add(status)
    assert statuses == EXPECTED_STATUSES


# -- 2. webhooks against the octokit schemas ------------------------------------------------------


def test_every_webhook_matches_octokit_schemas_and_is_signed(
    gh: GitHubEmulator, upstream: Upstream, sink: WebhookSink
) -> None:
    repo_hook = gh.add_webhook(sink.url, SECRET, owner=OWNER, repo=NAME, ping=True)
    app_hook = gh.add_webhook(sink.url, SECRET, app_id=APP_ID, ping=True)
    g = client(gh)
    repo = g.get_repo(REPO)
    pr = repo.create_pull(base="main", head="topic", title="Feature", body="b")
    pr.edit(title="Feature (edited)")
    repo.get_git_ref("heads/topic").edit(upstream.t1, force=True)  # push (forced) + synchronize
    pr.create_issue_comment("LGTM")
    issue_number = gh.open_issue(OWNER, NAME, title="A bug", user="mallory")
    gh.add_comment(OWNER, NAME, issue_number, "me too", user="mallory")
    as_app = client(gh, Auth.Token(gh.installation_token(INSTALLATION_ID))).get_repo(REPO)
    run = as_app.create_check_run(
        name="ci", head_sha=upstream.t1, conclusion="success", status="completed"
    )
    gh.rerequest_check_run(OWNER, NAME, run.id, user="mallory")
    pr.edit(state="closed")
    pr.edit(state="open")
    pr.merge(merge_method="merge")
    repo.create_git_ref("refs/tags/v1", upstream.c0)
    repo.get_git_ref("heads/conflict").delete()

    deliveries = gh.wait_for_deliveries()
    received = sink.wait_for(len(deliveries))
    schemas = WebhookSchemas()
    kinds = {schemas.validate(d.event, d.payload) for d in deliveries}
    assert kinds == {
        "ping$event",
        "push$event",
        "pull_request$opened",
        "pull_request$edited",
        "pull_request$synchronize",
        "pull_request$closed",
        "pull_request$reopened",
        "issue_comment$created",
        "issues$opened",
        "check_run$completed",
        "check_run$rerequested",
    }
    assert all(d.status_code == 200 for d in deliveries)
    assert {d.hook_id for d in deliveries} == {repo_hook, app_hook}

    # One GUID per event, shared by both hooks (GitHub's REST docs: "Unique identifier for the
    # event (shared with all deliveries for all webhooks that subscribe to this event)"); each
    # delivery has its own numeric id.
    per_guid: dict[str, list[int]] = {}
    for delivery in deliveries:
        per_guid.setdefault(delivery.guid, []).append(delivery.hook_id)
    shared = [hooks for hooks in per_guid.values() if len(hooks) > 1]
    assert shared and all(sorted(hooks) == sorted({repo_hook, app_hook}) for hooks in shared)
    assert len({d.id for d in deliveries}) == len(deliveries)
    by_guid = {
        (item.headers["x-github-delivery"], item.headers["x-github-hook-id"]): item
        for item in received
    }
    assert len(by_guid) == len(received)
    for delivery in deliveries:
        item = by_guid[delivery.guid, str(delivery.hook_id)]
        headers = item.headers
        expected = signature_256(SECRET, item.body)
        assert hmac.compare_digest(headers["x-hub-signature-256"], expected)
        assert expected == "sha256=" + hmac.new(SECRET.encode(), item.body, "sha256").hexdigest()
        assert headers["x-github-event"] == delivery.event
        assert uuid.UUID(headers["x-github-delivery"])
        assert headers["user-agent"].startswith("GitHub-Hookshot/")
        assert headers["content-type"] == "application/json"
        assert headers["x-github-hook-id"] == str(delivery.hook_id)
        target = (
            ("integration", APP_ID) if delivery.hook_id == app_hook else ("repository", repo.id)
        )
        assert headers["x-github-hook-installation-target-type"] == target[0]
        assert headers["x-github-hook-installation-target-id"] == str(target[1])
        payload = json.loads(item.body)
        if delivery.event != "ping":
            assert payload["installation"]["id"] == INSTALLATION_ID
            assert payload["repository"]["full_name"] == REPO

    comments = [
        d.payload for d in deliveries if d.event == "issue_comment" and d.hook_id == repo_hook
    ]
    assert ["pull_request" in p["issue"] for p in comments] == [True, False]
    closes = [d.payload for d in deliveries if d.action == "closed" and d.hook_id == repo_hook]
    assert [p["pull_request"]["merged"] for p in closes] == [False, True]
    sync = next(d.payload for d in deliveries if d.action == "synchronize")
    assert (sync["before"], sync["after"]) == (upstream.t2, upstream.t1)
    pushes = {
        d.payload["ref"]: d.payload
        for d in deliveries
        if d.event == "push" and d.hook_id == repo_hook
    }
    assert pushes["refs/heads/topic"]["forced"] is True
    assert pushes["refs/tags/v1"]["created"] is True
    assert pushes["refs/heads/conflict"]["deleted"] is True
    assert pushes["refs/heads/main"]["after"] == closes[1]["pull_request"]["merge_commit_sha"]


def test_signature_matches_the_documented_test_vector() -> None:
    expected = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    assert hmac.compare_digest(signature_256(SECRET, b"Hello, World!"), expected)


def test_redelivery_reuses_guid_and_log_keeps_statuses(gh: GitHubEmulator) -> None:
    with WebhookSink(status=500) as failing:
        gh.add_webhook(failing.url, SECRET)
        number = gh.open_pull(OWNER, NAME, head="topic", title="x")
        [first] = gh.wait_for_deliveries()
        assert (first.event, first.action, first.status_code) == ("pull_request", "opened", 500)
        failing.status = 202
        again = gh.redeliver(first.guid)
        gh.wait_for_deliveries()
        received = failing.wait_for(2)
    assert again.redelivery and again.guid == first.guid and again.status_code == 202
    assert received[0].body == received[1].body
    assert received[0].headers["x-hub-signature-256"] == received[1].headers["x-hub-signature-256"]
    assert received[1].headers["x-github-delivery"] == first.guid
    assert json.loads(received[0].body)["number"] == number


def test_manual_webhooks_are_sent_only_when_asked(
    tmp_path: Path, upstream: Upstream, sink: WebhookSink
) -> None:
    with GitHubEmulator(tmp_path / "gh", manual_webhooks=True) as gh:
        gh.create_repo(OWNER, NAME, from_path=upstream.builder.path)
        gh.add_webhook(sink.url)
        gh.open_pull(OWNER, NAME, head="topic", title="x")
        assert sink.received == [] and gh.deliveries[0].status_code is None
        assert gh.deliver_pending() == 1
        assert "x-hub-signature-256" not in sink.wait_for(1)[0].headers  # no secret, no signature


# -- 2. real PyGithub: token and App installation auth ----------------------------------------------


def exercise_observed_calls(
    g: Github, gh: GitHubEmulator, up: Upstream, checks: Github | None = None
) -> dict[str, Any]:
    """Every call of pygithub/observed-requests.json (and README §6), checked against state.
    Check runs are written through `checks` (default `g`): only an App may write them."""
    repo = g.get_repo(REPO)
    checks_repo = (checks or g).get_repo(REPO)
    assert (repo.full_name, repo.default_branch, repo.url) == (
        REPO,
        "main",
        f"{gh.base_url}/repos/{REPO}",
    )
    pr = repo.create_pull(base="main", head=f"{OWNER}:topic", title="t", body="b")
    assert (pr.head.sha, pr.head.ref, pr.base.ref, pr.state, pr.merged) == (
        up.t2,
        "topic",
        "main",
        "open",
        False,
    )
    assert pr.url == f"{gh.base_url}/repos/{REPO}/pulls/{pr.number}"
    assert [p.number for p in repo.get_pulls(state="open", head=f"{OWNER}:topic", base="main")] == [
        pr.number
    ]
    listed = repo.get_pulls(head=f"{OWNER}:topic")[0]
    assert (listed.head.sha, listed.merged) == (up.t2, False)  # `merged` is lazy: GET pulls/{n}
    assert repo.get_pull(pr.number).title == "t"
    pr.edit(title="new", body="nb")
    comment = pr.create_issue_comment("hello")
    comment.edit("hello2")
    assert [(c.id, c.body) for c in pr.get_issue_comments()] == [(comment.id, "hello2")]
    pr.add_to_labels("bug", "ui")
    assert gh.labels(OWNER, NAME, pr.number) == ["bug", "ui"]
    assert pr.as_issue().pull_request is not None
    run = checks_repo.create_check_run(
        name="mighty_readme",
        head_sha=up.t2,
        status="in_progress",
        output={"title": "T", "summary": "S"},
    )
    run.edit(status="completed", conclusion="success")
    runs = list(repo.get_commit(up.t2).get_check_runs(check_name="mighty_readme"))
    assert [(r.id, r.status, r.conclusion) for r in runs] == [(run.id, "completed", "success")]
    assert repo.get_check_run(run.id).conclusion == "success"
    status = repo.get_commit(up.t2).create_status(
        "success", target_url="https://ci.example/1", description="ok", context="ci/x"
    )
    assert (status.state, status.context) == ("success", "ci/x")
    assert repo.get_commit(up.t2).get_combined_status().state == "success"
    assert repo.get_collaborator_permission(OWNER) == "admin"
    ref = repo.create_git_ref("refs/heads/featureA", up.t1)
    assert repo.get_git_ref("heads/featureA").object.sha == up.t1
    ref.edit(up.x1, force=True)
    assert gh.ref(OWNER, NAME, "refs/heads/featureA") == up.x1
    assert [r.ref for r in repo.get_git_matching_refs("heads/feature")] == ["refs/heads/featureA"]
    comparison = repo.compare("main", "topic")
    assert (comparison.status, comparison.ahead_by, comparison.behind_by) == ("diverged", 2, 1)
    assert [c.sha for c in comparison.commits] == [up.t1, up.t2]
    assert sorted(f.filename for f in comparison.files) == ["feature.txt", "lib.py"]
    assert g.get_rate_limit().resources.core.remaining < 5000
    other = repo.create_pull(base="main", head="featureA", title="other")
    other.edit(state="closed")
    assert (repo.get_pull(other.number).state, repo.get_pull(other.number).merged) == (
        "closed",
        False,
    )
    result = pr.merge(merge_method="squash", sha=up.t2)
    assert result.merged and pr.is_merged() and not other.is_merged()
    merged = repo.get_pull(pr.number)
    assert (merged.state, merged.merged, merged.merge_commit_sha) == ("closed", True, result.sha)
    return {"pr": merged, "run": run}


def test_pygithub_with_token_auth(gh: GitHubEmulator, upstream: Upstream) -> None:
    app = client(gh, Auth.Token(gh.installation_token(INSTALLATION_ID)))
    result = exercise_observed_calls(client(gh), gh, upstream, checks=app)
    assert result["pr"].user.login == "alice"
    assert result["run"].app.id == APP_ID


def test_pygithub_with_app_installation_auth(
    gh: GitHubEmulator, upstream: Upstream, app_key: tuple[str, str]
) -> None:
    app_auth = Auth.AppAuth(APP_ID, app_key[0])
    result = exercise_observed_calls(
        client(gh, app_auth.get_installation_auth(INSTALLATION_ID)), gh, upstream
    )
    assert result["pr"].user.login == BOT and result["run"].app.id == APP_ID

    token_posts = gh.api_requests("POST", f"/app/installations/{INSTALLATION_ID}/access_tokens")
    assert len(token_posts) == 1  # a future expires_at: PyGithub never re-mints
    assert token_posts[0].headers["authorization"].startswith("Bearer ")
    assert token_posts[0].json == {"permissions": {}}
    token = token_posts[0].response_json["token"]
    later = [
        r
        for r in gh.api_requests()
        if r.seq > token_posts[0].seq and not r.path.startswith("/app/")
    ]
    assert later and all(r.headers["authorization"] == f"token {token}" for r in later)

    integration = GithubIntegration(
        auth=app_auth,
        base_url=gh.base_url,
        seconds_between_requests=None,
        seconds_between_writes=None,
    )
    installation = integration.get_repo_installation(OWNER, NAME)
    assert (installation.id, installation.app_id) == (INSTALLATION_ID, APP_ID)
    assert integration.get_app_installation(INSTALLATION_ID).id == INSTALLATION_ID
    access = integration.get_access_token(INSTALLATION_ID)
    assert access.expires_at > datetime.now(UTC)
    assert integration.get_github_for_installation(INSTALLATION_ID).get_repo(REPO).id > 0

    forged = Auth.AppAuth(APP_ID, generate_app_key()[0]).get_installation_auth(INSTALLATION_ID)
    with pytest.raises(GithubException) as wrong_key:
        client(gh, forged).get_repo(REPO)
    assert wrong_key.value.status == 401


def test_expired_installation_token_is_refused(gh: GitHubEmulator) -> None:
    token = gh.installation_token(INSTALLATION_ID)
    g = client(gh, Auth.Token(token))
    assert g.get_repo(REPO).name == NAME
    gh.advance_time(3601)
    with pytest.raises(BadCredentialsException):
        g.get_repo(REPO)


def test_default_retry_on_502_creates_exactly_one_pull(gh: GitHubEmulator) -> None:
    fault = gh.inject_fault("server_error", times=2, method="POST", path=f"/repos/{REPO}/pulls")
    g = Github(
        base_url=gh.base_url,
        auth=Auth.Token(TOKEN),
        seconds_between_requests=None,
        seconds_between_writes=None,
    )  # default GithubRetry
    pr = g.get_repo(REPO).create_pull(base="main", head="topic", title="once")
    posts = gh.api_requests("POST", f"/repos/{REPO}/pulls")
    assert [(p.status, p.fault) for p in posts] == [
        (502, "server_error"),
        (502, "server_error"),
        (201, None),
    ]
    assert fault.remaining == 0 and fault.hits == [p.seq for p in posts[:2]]
    assert [p["number"] for p in gh.pulls(OWNER, NAME)] == [pr.number]


def test_default_retry_honours_retry_after_without_duplicates(gh: GitHubEmulator) -> None:
    number = gh.open_pull(OWNER, NAME, head="topic", title="x")
    path = f"/repos/{REPO}/issues/{number}/comments"
    gh.inject_fault("secondary_rate_limit", method="POST", path=path, retry_after=0)
    g = Github(
        base_url=gh.base_url,
        auth=Auth.Token(TOKEN),
        seconds_between_requests=None,
        seconds_between_writes=None,
    )
    g.get_repo(REPO).get_pull(number).create_issue_comment("once")
    assert [r.status for r in gh.api_requests("POST", path)] == [403, 201]
    assert [c["body"] for c in gh.comments(OWNER, NAME, number)] == ["once"]


def test_retry_none_raises_on_5xx(gh: GitHubEmulator) -> None:
    gh.inject_fault("server_error", method="POST", path="/repos/*/pulls", status=500)
    with pytest.raises(GithubException) as raised:
        client(gh).get_repo(REPO).create_pull(base="main", head="topic", title="x")
    assert raised.value.status == 500
    assert gh.pulls(OWNER, NAME) == []


# -- faults, errors and rate limits ------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind", ["server_error", "primary_rate_limit", "secondary_rate_limit", "too_many_requests"]
)
def test_faulted_writes_have_no_side_effects(
    gh: GitHubEmulator, upstream: Upstream, sink: WebhookSink, kind: str
) -> None:
    gh.add_webhook(sink.url, SECRET)
    number = gh.open_pull(OWNER, NAME, head="topic", title="x")
    gh.wait_for_deliveries()
    before = len(gh.deliveries)
    repo = client(gh).get_repo(REPO)
    pr = repo.get_pull(number)
    writes = [
        lambda: repo.create_pull(base="main", head="conflict", title="y"),
        lambda: pr.create_issue_comment("hi"),
        lambda: pr.add_to_labels("bug"),
        lambda: repo.create_git_ref("refs/heads/new", upstream.t1),
        lambda: repo.get_git_ref("heads/topic").edit(upstream.t1, force=True),
        lambda: pr.merge(),
        lambda: pr.edit(state="closed"),
        lambda: repo.create_check_run(name="ci", head_sha=upstream.t2),
        lambda: repo.get_commit(upstream.t2).create_status("success"),
    ]
    for write in writes:  # PyGithub may GET first; only the write itself is faulted
        for method in ("POST", "PATCH", "PUT"):
            gh.inject_fault(kind, method=method, path=f"/repos/{REPO}/*")
        with pytest.raises(GithubException):
            write()
        gh.clear_faults()
    gh.wait_for_deliveries()
    assert len(gh.deliveries) == before
    [only] = gh.pulls(OWNER, NAME)
    assert (only["state"], only["merged"], only["head"]["sha"], only["labels"]) == (
        "open",
        False,
        upstream.t2,
        [],
    )
    assert gh.comments(OWNER, NAME, number) == [] and gh.check_runs(OWNER, NAME) == []
    assert (
        gh.statuses(OWNER, NAME, upstream.t2) == []
        and gh.ref(OWNER, NAME, "refs/heads/new") is None
    )
    assert gh.ref(OWNER, NAME, "refs/heads/main") == upstream.m1


def test_error_statuses_map_to_pygithub_exceptions(gh: GitHubEmulator) -> None:
    g = client(gh)
    gh.inject_fault("primary_rate_limit")
    with pytest.raises(RateLimitExceededException) as primary:
        g.get_repo(REPO)
    assert (
        primary.value.headers is not None and primary.value.headers["x-ratelimit-remaining"] == "0"
    )
    gh.inject_fault("secondary_rate_limit", retry_after=3)
    with pytest.raises(RateLimitExceededException) as secondary:
        g.get_repo(REPO)
    assert secondary.value.headers is not None and secondary.value.headers["retry-after"] == "3"
    gh.inject_fault("too_many_requests", retry_after=7)
    with pytest.raises(GithubException) as too_many:
        g.get_repo(REPO)
    assert too_many.value.status == 429 and too_many.value.headers is not None
    assert too_many.value.headers["retry-after"] == "7"
    gh.inject_fault("disconnect")
    with pytest.raises(requests.ConnectionError):
        g.get_repo(REPO)
    with pytest.raises(BadCredentialsException):
        client(gh, Auth.Token("wrong")).get_repo(REPO)
    with pytest.raises(UnknownObjectException):
        g.get_repo("acme/absent")
    with pytest.raises(UnknownObjectException):
        g.get_repo(REPO).get_collaborator_permission("ghost")
    with pytest.raises(GithubException) as exists:
        g.get_repo(REPO).create_pull(base="main", head="main", title="x")
    assert exists.value.status == 422
    assert all((r.status is None) == (r.fault == "disconnect") for r in gh.api_requests())
    with raw(gh) as http:
        assert http.get(f"/repos/{REPO}", headers={"User-Agent": ""}).status_code == 403
        assert http.post(f"/repos/{REPO}/pulls", json={}).status_code == 401  # anonymous write


def test_rate_limit_headers_count_down_and_exhaust(gh: GitHubEmulator) -> None:
    g = client(gh)
    repo = g.get_repo(REPO)
    first = int(gh.api_requests()[-1].response_headers["X-RateLimit-Remaining"])
    g.get_rate_limit()
    g.get_rate_limit()
    assert gh.rate_limit(token=TOKEN).remaining == first  # /rate_limit does not count
    assert repo.get_pulls().totalCount == 0
    headers = gh.api_requests()[-1].response_headers
    assert int(headers["X-RateLimit-Remaining"]) == first - 1
    assert (
        headers["X-RateLimit-Resource"] == "core"
        and int(headers["X-RateLimit-Reset"]) > time.time()
    )
    assert g.rate_limiting == (first - 1, 5000)
    gh.set_rate_limit(token=TOKEN, remaining=0)
    with pytest.raises(RateLimitExceededException):
        g.get_repo(REPO)


# -- 3. git over HTTP ------------------------------------------------------------------------


def test_git_clone_fetch_pull_head_and_push_move_the_pull(
    gh: GitHubEmulator, upstream: Upstream, sink: WebhookSink, tmp_path: Path
) -> None:
    gh.add_webhook(sink.url, SECRET)
    number = gh.open_pull(OWNER, NAME, head="topic", title="x")
    git(tmp_path, "clone", "-q", gh.git_url(OWNER, NAME, token=TOKEN), "clone")
    work = RepoBuilder(tmp_path / "clone")  # re-init is harmless and pins the env
    assert work.head("origin/main") == upstream.m1
    work.git("fetch", "-q", "origin", f"refs/pull/{number}/head")
    assert work.head("FETCH_HEAD") == upstream.t2

    work.checkout("FETCH_HEAD", new_branch="topic")
    pushed = work.commit("more", {"lib.py": "x = 3\n"})
    work.git("push", "-q", "origin", "topic")
    assert gh.pull(OWNER, NAME, number)["head"]["sha"] == pushed
    assert gh.ref(OWNER, NAME, f"refs/pull/{number}/head") == pushed

    work.git("push", "-q", "origin", "HEAD:refs/heads/brand-new")
    work.git("push", "-q", "--force", "origin", f"{upstream.t1}:topic")
    assert client(gh).get_repo(REPO).get_pull(number).head.sha == upstream.t1

    deliveries = gh.wait_for_deliveries()
    syncs = [
        (d.payload["before"], d.payload["after"]) for d in deliveries if d.action == "synchronize"
    ]
    assert syncs == [(upstream.t2, pushed), (pushed, upstream.t1)]
    pushes = [
        (d.payload["ref"], d.payload["created"], d.payload["forced"])
        for d in deliveries
        if d.event == "push"
    ]
    assert pushes == [
        ("refs/heads/topic", False, False),
        ("refs/heads/brand-new", True, False),
        ("refs/heads/topic", False, True),
    ]
    assert {d.payload["sender"]["login"] for d in deliveries if d.event == "push"} == {"alice"}
    git_requests = [r for r in gh.requests if r.kind == "git"]
    assert any(r.path.endswith("/git-receive-pack") and r.status == 200 for r in git_requests)


def test_git_push_needs_write_access(gh: GitHubEmulator, tmp_path: Path) -> None:
    gh.add_token("reader-token", "reader")
    refs = git(tmp_path, "ls-remote", gh.git_url(OWNER, NAME))  # anonymous reads are fine
    assert refs.count("refs/heads/") == 3
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", gh.git_url(OWNER, NAME), str(clone))
    for url, refusal in [
        (gh.git_url(OWNER, NAME), "could not read Username"),  # 401 challenge, no credentials
        (gh.git_url(OWNER, NAME, token="nope"), "Authentication failed"),
        (gh.git_url(OWNER, NAME, token="reader-token"), "403"),
    ]:
        with pytest.raises(AssertionError, match=refusal):
            git(clone, "push", "-q", url, "HEAD:refs/heads/sneaky")
    assert gh.ref(OWNER, NAME, "refs/heads/sneaky") is None
    git(clone, "push", "-q", gh.git_url(OWNER, NAME, token=TOKEN), "HEAD:refs/heads/sneaky")
    assert gh.ref(OWNER, NAME, "refs/heads/sneaky") is not None


# -- merges, mergeability, state transitions -----------------------------------------------------


@pytest.mark.parametrize("method", ["merge", "squash", "rebase"])
def test_merge_really_merges_in_the_bare_repo(
    gh: GitHubEmulator, upstream: Upstream, method: str
) -> None:
    number = gh.open_pull(OWNER, NAME, head="topic", title="Topic")
    pr = client(gh).get_repo(REPO).get_pull(number)
    assert (pr.mergeable, pr.mergeable_state) == (True, "clean")
    assert (pr.commits, pr.changed_files, pr.additions, pr.deletions) == (2, 2, 2, 1)
    result = pr.merge(merge_method=method)
    sha = result.sha
    assert bare_git(gh, "rev-parse", "refs/heads/main") == sha
    assert bare_git(gh, "cat-file", "-t", sha) == "commit"
    assert bare_git(gh, "merge-base", "--is-ancestor", upstream.m1, sha) == ""
    parents = bare_git(gh, "rev-list", "--parents", "-n1", sha).split()[1:]
    tree = {
        path: bare_git(gh, "show", f"{sha}:{path}")
        for path in ("README.md", "lib.py", "feature.txt")
    }
    assert tree == {"README.md": "hello world", "lib.py": "x = 2", "feature.txt": "one"}
    if method == "merge":
        assert parents == [upstream.m1, upstream.t2]
    elif method == "squash":
        assert parents == [upstream.m1]
        assert bare_git(gh, "log", "-1", "--format=%s", sha) == f"Topic (#{number})"
    else:
        assert bare_git(gh, "log", "--format=%s", f"{upstream.m1}..{sha}").splitlines() == [
            "bump x",
            "add feature",
        ]
    merged = gh.pull(OWNER, NAME, number)
    assert (merged["state"], merged["merged"], merged["merge_commit_sha"]) == ("closed", True, sha)
    assert (
        merged["merged_by"]["login"] == "alice"
        and merged["merged_at"]
        and merged["mergeable"] is None
    )


def test_conflicting_pull_is_not_mergeable(gh: GitHubEmulator, upstream: Upstream) -> None:
    number = gh.open_pull(OWNER, NAME, head="conflict", title="x")
    pr = client(gh).get_repo(REPO).get_pull(number)
    assert (pr.mergeable, pr.mergeable_state) == (False, "dirty")
    assert gh.ref(OWNER, NAME, f"refs/pull/{number}/merge") is None
    with pytest.raises(GithubException) as refused:
        pr.merge()
    assert refused.value.status == 405
    assert gh.ref(OWNER, NAME, "refs/heads/main") == upstream.m1
    clean = gh.open_pull(OWNER, NAME, head="topic", title="y")
    test_merge = gh.ref(OWNER, NAME, f"refs/pull/{clean}/merge")
    assert gh.pull(OWNER, NAME, clean)["merge_commit_sha"] == test_merge


def test_close_reopen_branch_delete_and_implicit_merge(
    gh: GitHubEmulator, upstream: Upstream
) -> None:
    repo = client(gh).get_repo(REPO)
    pr = repo.create_pull(base="main", head="topic", title="x")
    pr.edit(state="closed")
    closed = gh.pull(OWNER, NAME, pr.number)
    assert (
        closed["state"],
        closed["merged"],
        closed["merged_at"],
        closed["closed_at"] is not None,
    ) == (
        "closed",
        False,
        None,
        True,
    )
    pr.edit(state="open")
    assert repo.get_pull(pr.number).state == "open"
    # Pushing the head commits into the base marks the PR merged, as on GitHub.
    repo.get_git_ref("heads/main").edit(upstream.t2, force=True)
    merged = repo.get_pull(pr.number)
    assert (merged.state, merged.merged) == ("closed", True)
    # Deleting the head branch closes an open PR.
    other = repo.create_pull(base="main", head="conflict", title="y")
    repo.get_git_ref("heads/conflict").delete()
    assert repo.get_pull(other.number).state == "closed"


def test_a_push_by_path_is_credited_to_its_pusher_even_if_a_rest_call_comes_first(
    gh: GitHubEmulator, upstream: Upstream, sink: WebhookSink
) -> None:
    """A REST call syncs the repository and credits any move it notices to the owner. The bare
    repository's hook makes one in the middle of the push (as a poller would); `push` holds the
    lock until its own sync, so that call waits (and times out) and the pusher gets the credit."""
    hook = gh.repo_path(OWNER, NAME) / "hooks" / "post-receive"
    hook.write_text(f"#!/bin/sh\ncurl -s -m 2 -o /dev/null {gh.base_url}/repos/{REPO}\nexit 0\n")
    hook.chmod(0o755)
    gh.add_webhook(sink.url)
    upstream.builder.checkout("topic")
    moved = upstream.builder.commit("topic moves", {"feature.txt": "two\n"})
    gh.push(OWNER, NAME, upstream.builder.path, "topic", pusher="alice")
    [push] = [d for d in gh.wait_for_deliveries() if d.event == "push"]
    assert (push.payload["after"], push.payload["sender"]["login"]) == (moved, "alice")
    assert push.payload["pusher"]["name"] == "alice"
    with pytest.raises(Exception, match="git push nowhere"):
        gh.push(OWNER, NAME, upstream.builder.path, "nowhere", pusher="alice")


def test_pagination_link_headers_and_lists(gh: GitHubEmulator) -> None:
    number = gh.open_pull(OWNER, NAME, head="topic", title="x")
    for i in range(25):
        gh.add_comment(OWNER, NAME, number, f"comment {i}", user="bob")
    g = client(gh, per_page=10)
    comments = g.get_repo(REPO).get_pull(number).get_issue_comments()
    assert [c.body for c in comments] == [f"comment {i}" for i in range(25)]
    assert comments.totalCount == 25
    pages = gh.api_requests("GET", f"/repos/{REPO}/issues/{number}/comments")
    link = pages[0].response_headers["Link"]
    assert (
        f'<{gh.base_url}/repos/{REPO}/issues/{number}/comments?per_page=10&page=2>; rel="next"'
        in link
    )
    assert 'page=3>; rel="last"' in link
    with raw(gh) as http:
        assert (
            http.get(f"/repos/{REPO}/pulls?head=topic&base=main&unknown=1").json()[0]["number"]
            == number
        )
        assert http.get(f"/repos/{REPO}/pulls?head=acme:nope").json() == []


def test_collaborator_permissions_are_per_user(gh: GitHubEmulator) -> None:
    repo = client(gh).get_repo(REPO)
    for role, legacy in [
        ("admin", "admin"),
        ("maintain", "write"),
        ("write", "write"),
        ("triage", "read"),
        ("read", "read"),
        ("none", "none"),
    ]:
        gh.set_permission(OWNER, NAME, "carol", role)
        assert repo.get_collaborator_permission("carol") == legacy
    gh.add_user("dave")
    assert repo.get_collaborator_permission("dave") == "read"  # public repo, not a collaborator
    assert repo.get_collaborator_permission(BOT) == "write"
    with raw(gh) as http:
        body = http.get(
            f"/repos/{REPO}/collaborators/carol/permission",
            headers={"Authorization": f"token {TOKEN}"},
        ).json()
    assert (body["permission"], body["role_name"], body["user"]["login"]) == (
        "none",
        "none",
        "carol",
    )


def test_runs_standalone(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bot.emulator",
            "--port",
            "0",
            "--root",
            str(tmp_path),
            "--token",
            "t=alice",
            "--repo",
            "acme/empty",
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        base_url = line.split()[3]
        response = httpx.get(
            f"{base_url}/repos/acme/empty", headers={"User-Agent": "t", "Authorization": "token t"}
        )
        assert response.status_code == 200 and response.json()["full_name"] == "acme/empty"
        assert (tmp_path / "acme" / "empty.git" / "HEAD").is_file()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# -- 9. GitHub's rules that a lenient double would hide (issue 15) ---------------------------------


def test_check_run_writes_need_a_github_app(gh: GitHubEmulator, upstream: Upstream) -> None:
    """REST docs, Create a check run: "To create a check run, you must use a GitHub App. OAuth
    apps and authenticated users are not able to create a check suite." A personal token gets
    403 {"message": "You must authenticate via a GitHub App."}; commit statuses stay open to it."""
    r = f"/repos/{REPO}"
    token = {"Authorization": f"token {TOKEN}"}
    app = {"Authorization": f"token {gh.installation_token(INSTALLATION_ID)}"}
    ci = {"name": "ci", "head_sha": upstream.t2, "status": "in_progress"}
    with raw(gh) as http:
        refused = http.post(f"{r}/check-runs", json=ci, headers=token)
        assert refused.status_code == 403
        assert refused.json() == {
            "message": "You must authenticate via a GitHub App.",
            "documentation_url": "https://docs.github.com/rest/checks/runs#create-a-check-run",
            "status": "403",
        }
        assert http.post(f"{r}/check-runs", json=ci).status_code == 401
        run = http.post(f"{r}/check-runs", json=ci, headers=app).json()
        done = {"conclusion": "success"}
        assert (
            http.patch(f"{r}/check-runs/{run['id']}", json=done, headers=token).status_code == 403
        )
        assert (
            http.get(f"{r}/check-runs/{run['id']}", headers=token).json()["status"] == "in_progress"
        )
        status = {"state": "success", "context": "carry/gaudi"}
        assert (
            http.post(f"{r}/statuses/{upstream.t2}", json=status, headers=token).status_code == 201
        )
    assert [s["context"] for s in gh.statuses(OWNER, NAME, upstream.t2)] == ["carry/gaudi"]


@pytest.mark.parametrize(
    ("private", "plan", "draft_allowed"),
    [(True, "free", False), (True, "pro", False), (True, "team", True), (False, "free", True)],
)
def test_drafts_are_refused_on_private_repos_of_free_and_pro_plans(
    gh: GitHubEmulator, upstream: Upstream, private: bool, plan: str, draft_allowed: bool
) -> None:
    """REST docs, Create a pull request, `draft`: drafts are available "in public repositories
    with GitHub Free and GitHub Free for organizations, GitHub Pro ... and in public and private
    repositories with GitHub Team and GitHub Enterprise Cloud". Elsewhere GitHub answers 422
    "Draft pull requests are not supported in this repository." (recorded in
    SWE-agent/SWE-agent#179), with no `errors` list."""
    gh.create_repo(OWNER, "plan", from_path=upstream.builder.path, private=private, plan=plan)
    gh.set_permission(OWNER, "plan", "alice", "write")
    pulls = f"/repos/{OWNER}/plan/pulls"
    token = {"Authorization": f"token {TOKEN}"}
    draft = {"head": "topic", "base": "main", "title": "T", "draft": True}
    with raw(gh) as http:
        answer = http.post(pulls, json=draft, headers=token)
        if draft_allowed:
            assert answer.status_code == 201 and answer.json()["draft"] is True
            return
        assert answer.status_code == 422
        assert answer.json() == {
            "message": "Draft pull requests are not supported in this repository.",
            "documentation_url": "https://docs.github.com/rest/pulls/pulls#create-a-pull-request",
            "status": "422",
        }
        assert gh.pulls(OWNER, "plan") == []
        ready = http.post(pulls, json={**draft, "draft": False}, headers=token)
        assert ready.status_code == 201 and ready.json()["draft"] is False
    with pytest.raises(ValueError, match="plan must be one of"):
        gh.create_repo(OWNER, "other", plan="gold")


def test_bodies_comments_and_check_output_have_githubs_size_limits(
    gh: GitHubEmulator, upstream: Upstream
) -> None:
    """PR bodies and comments hold at most 65536 characters, check-run output.summary and
    output.text at most 65535 (REST docs: "Maximum length: 65535 characters"; GitHub counts
    UTF-8 bytes). The 422 bodies are GitHub's as recorded in renovatebot/renovate#2032 (PR
    body), easybuilders/easybuild-easyconfigs#24647 (comment) and github/docs#35252 (summary)."""
    r = f"/repos/{REPO}"
    token = {"Authorization": f"token {TOKEN}"}
    app = {"Authorization": f"token {gh.installation_token(INSTALLATION_ID)}"}
    at_limit, over = "x" * 65536, "x" * 65537
    with raw(gh) as http:

        def refused(method: str, path: str, body: Any, headers: Any = token) -> dict[str, Any]:
            answer = http.request(method, path, json=body, headers=headers)
            assert answer.status_code == 422, answer.text
            data = answer.json()
            assert data["message"] == "Validation Failed" and data["status"] == "422"
            (error,) = data["errors"]
            return error

        pull = {"head": "topic", "base": "main", "title": "T"}
        assert refused("POST", f"{r}/pulls", {**pull, "body": over}) == {
            "resource": "Issue",
            "code": "custom",
            "field": "body",
            "message": "body is too long (maximum is 65536 characters)",
        }
        assert gh.pulls(OWNER, NAME) == []
        pr = http.post(f"{r}/pulls", json={**pull, "body": at_limit}, headers=token).json()
        assert refused("PATCH", f"{r}/pulls/{pr['number']}", {"body": over})["field"] == "body"
        comments = f"{r}/issues/{pr['number']}/comments"
        assert refused("POST", comments, {"body": over}) == {
            "resource": "IssueComment",
            "code": "unprocessable",
            "field": "data",
            "message": "Body is too long (maximum is 65536 characters)",
        }
        comment = http.post(comments, json={"body": at_limit}, headers=token).json()
        edit = f"{r}/issues/comments/{comment['id']}"
        assert refused("PATCH", edit, {"body": over})["resource"] == "IssueComment"
        run = {"name": "ci", "head_sha": upstream.t2, "output": {"title": "t"}}
        for field in ("summary", "text"):
            output = {"title": "t", "summary": "s", field: "é" * 32768}  # 65536 UTF-8 bytes
            assert refused("POST", f"{r}/check-runs", {**run, "output": output}, app) == {
                "resource": "CheckRun",
                "code": "custom",
                "field": field,
                "message": f"{field} exceeds a maximum bytesize of 65535",
            }
        fits = {"title": "t", "summary": "x" * 65535, "text": "y" * 65535}
        made = http.post(f"{r}/check-runs", json={**run, "output": fits}, headers=app)
        assert made.status_code == 201, made.text
        too_big = {"output": {"title": "t", "summary": over}}
        assert refused("PATCH", f"{r}/check-runs/{made.json()['id']}", too_big, app)
    assert [c["body"] for c in gh.comments(OWNER, NAME, pr["number"])] == [at_limit]
    assert gh.pull(OWNER, NAME, pr["number"])["body"] == at_limit


def test_an_enterprise_server_answers_its_api_under_api_v3(
    tmp_path: Path, upstream: Upstream
) -> None:
    """GitHub Enterprise Server: "the REST API is at http(s)://HOSTNAME/api/v3" (REST docs,
    About the REST API; PyGithub's `base_url` for GHE), while web pages and git stay on the host
    itself. A path without the prefix is not the API."""
    with GitHubEmulator(tmp_path / "ghe", enterprise=True) as ghe:
        ghe.create_repo(OWNER, NAME, from_path=upstream.builder.path)
        ghe.add_token(TOKEN, "alice")
        ghe.set_permission(OWNER, NAME, "alice", "write")
        host = f"http://{ghe.host}:{ghe.port}"
        assert ghe.base_url == f"{host}/api/v3"
        repo = client(ghe).get_repo(REPO)
        assert repo.url == f"{host}/api/v3/repos/{REPO}"
        assert (repo.html_url, repo.clone_url) == (f"{host}/{REPO}", f"{host}/{REPO}.git")
        assert repo.get_git_ref("heads/main").object.sha == upstream.m1
        with httpx.Client(headers={"User-Agent": "emulator-tests"}) as http:
            assert http.get(f"{host}/repos/{REPO}").status_code == 404
            assert http.get(f"{host}/api/v3/repos/{REPO}").status_code == 200
        git(tmp_path, "clone", "-q", ghe.git_url(OWNER, NAME), str(tmp_path / "clone"))
        assert git(tmp_path / "clone", "rev-parse", "HEAD") == upstream.m1
        assert ghe.errors == []


def test_an_issue_timeline_lists_cross_references_and_comments(
    gh: GitHubEmulator, upstream: Upstream
) -> None:
    """REST docs, "List timeline events for an issue" and "Issue event types": a
    `cross-referenced` event (no id or url; `source: {type: issue, issue}`) appears on an issue
    when another issue or PR of the repository mentions it, in its body or a comment; comments
    are `commented` events. A PR's timeline is its issue's."""
    closed = gh.open_pull(OWNER, NAME, head="topic", title="First try", user="alice")
    gh.add_comment(OWNER, NAME, closed, "Closing in favor of the next one.", user="alice")
    successor = gh.open_pull(
        OWNER, NAME, head="conflict", title="Second try", body=f"Continues #{closed}.", user="bob"
    )
    gh.open_issue(OWNER, NAME, title="Unrelated", body=f"Not #{closed}0 or x#{closed}")
    gh.close_pull(OWNER, NAME, closed)
    with raw(gh) as http:
        answer = http.get(
            f"/repos/{REPO}/issues/{closed}/timeline", headers={"Authorization": f"token {TOKEN}"}
        )
    assert answer.status_code == 200
    events = answer.json()
    assert [e["event"] for e in events] == ["commented", "cross-referenced"]
    commented, referenced = events
    assert commented["body"] == "Closing in favor of the next one."
    assert commented["user"]["login"] == "alice" and commented["actor"]["login"] == "alice"
    assert set(referenced) == {"event", "actor", "created_at", "updated_at", "source"}
    assert referenced["actor"]["login"] == "bob" and referenced["source"]["type"] == "issue"
    source = referenced["source"]["issue"]
    assert source["number"] == successor and "pull_request" in source
    # PyGithub reads the same answer.
    issue = client(gh).get_repo(REPO).get_issue(closed)
    assert [e.event for e in issue.get_timeline()] == ["commented", "cross-referenced"]


def test_the_emulator_refuses_content_creation_over_githubs_limit(tmp_path: Path) -> None:
    """GitHub's docs ("Rate limits for the REST API", secondary rate limits): in general no
    more than 80 content-generating requests a minute and 500 an hour; over them a 403 (or 429)
    whose message says a secondary rate limit was exceeded, with Retry-After when GitHub says
    how long to wait. Reads do not count."""
    with GitHubEmulator(tmp_path / "gh") as gh:
        gh.create_repo("alice", "notes")
        gh.add_token("t0ken", "alice")
        headers = {"User-Agent": "carry-test", "Authorization": "token t0ken"}
        url = f"{gh.base_url}/repos/alice/notes/issues"
        answers = [
            requests.post(url, json={"title": f"n{i}"}, headers=headers, timeout=10)
            for i in range(81)
        ]
        assert [a.status_code for a in answers[:80]] == [201] * 80
        refused = answers[80]
        assert refused.status_code == 403
        assert refused.json()["message"].startswith("You have exceeded a secondary rate limit.")
        assert 1 <= int(refused.headers["Retry-After"]) <= 60
        assert requests.get(url, headers=headers, timeout=10).status_code == 200
        assert gh.content_writes(token="t0ken") == 80
        gh.advance_time(61)
        for i in range(420):
            gh.advance_time(0.8)  # 75 a minute: under the minute's limit, not the hour's
            ok = requests.post(url, json={"title": f"m{i}"}, headers=headers, timeout=10)
            assert ok.status_code == 201, (i, ok.text)
        over_the_hour = requests.post(url, json={"title": "x"}, headers=headers, timeout=10)
        assert over_the_hour.status_code == 403
        assert int(over_the_hour.headers["Retry-After"]) > 60


def test_a_client_that_resets_its_connection_is_no_server_error(
    gh: GitHubEmulator, capfd: pytest.CaptureFixture[str]
) -> None:
    """A client that drops a kept-alive connection with its answer unread (as urllib3 does
    after a redirect it raises on, in the github-faults bench's rename row) sends a reset; the
    emulator printed socketserver's traceback for it, as if it were the server's own error."""
    where = urlsplit(gh.base_url)
    for _ in range(2):
        sock = socket.create_connection((where.hostname or "127.0.0.1", where.port or 80))
        sock.sendall(
            f"GET /repos/{REPO} HTTP/1.1\r\nHost: x\r\nUser-Agent: t\r\n"
            f"Authorization: token {TOKEN}\r\n\r\n".encode()
        )
        assert sock.recv(12).startswith(b"HTTP/1.")  # answered; the rest left unread
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()  # a reset, not a FIN
    time.sleep(0.5)  # the server's threads read the reset
    assert requests.get(f"{gh.base_url}/repos/{REPO}", timeout=10).status_code in (200, 401)
    err = capfd.readouterr().err
    assert "ConnectionResetError" not in err and "Traceback" not in err  # fails on the old code
