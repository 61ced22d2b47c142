"""The emulator renames and transfers a repository as GitHub documents it (issue 34, item 7):
`PATCH /repos/{owner}/{repo}` with a new `name`, `POST /repos/{owner}/{repo}/transfer` with
`new_owner` (202), both for an admin only; afterwards the old name redirects (301 for GET), the
repository keeps its id, its own hooks stay with it, and webhooks carry the new name."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bot.emulator import GitHubEmulator, WebhookSink
from bot.emulator.receiver import Received
from harness.gitrepo import RepoBuilder

OWNER, NAME = "acme", "widget"
ADMIN = {"Authorization": "token admin-token", "User-Agent": "tests"}
WRITER = {"Authorization": "token writer-token", "User-Agent": "tests"}


@pytest.fixture
def gh(tmp_path: Path) -> Iterator[GitHubEmulator]:
    repo = RepoBuilder(tmp_path / "widget")
    repo.commit("init", {"README.md": "hello\n"})
    with GitHubEmulator(tmp_path / "github") as emulator:
        emulator.create_repo(OWNER, NAME, from_path=repo.path)
        for login, role in (("admin", "admin"), ("writer", "write")):
            emulator.add_user(login)
            emulator.add_token(f"{login}-token", login)
            emulator.set_permission(OWNER, NAME, login, role)
        emulator.add_user("new-home", type="Organization")
        yield emulator
        assert emulator.errors == []


def payload(received: Received) -> dict:
    return json.loads(received.body)


def test_a_rename_over_rest_keeps_the_id_hooks_and_redirects_the_old_name(
    gh: GitHubEmulator,
) -> None:
    with WebhookSink() as sink:
        gh.add_webhook(sink.url, "s3cret", owner=OWNER, repo=NAME)  # the repository's own hook
        api = httpx.Client(base_url=gh.base_url, timeout=10)
        repo_id = api.get(f"/repos/{OWNER}/{NAME}", headers=ADMIN).json()["id"]
        refused = api.patch(f"/repos/{OWNER}/{NAME}", json={"name": "gadget"}, headers=WRITER)
        assert refused.status_code == 403
        assert refused.json()["message"] == "Must have admin rights to Repository."
        answer = api.patch(f"/repos/{OWNER}/{NAME}", json={"name": "gadget"}, headers=ADMIN)
        assert answer.status_code == 200
        assert (answer.json()["full_name"], answer.json()["id"]) == (f"{OWNER}/gadget", repo_id)
        old = api.get(f"/repos/{OWNER}/{NAME}/pulls", headers=ADMIN)
        assert old.status_code == 301
        assert old.headers["Location"] == f"{gh.base_url}/repositories/{repo_id}/pulls"
        gh.open_issue(OWNER, "gadget", title="after the rename", user="writer")
        got = sink.wait_for(lambda items: {r.event for r in items} >= {"repository", "issues"})
        (moved,) = [payload(r) for r in got if r.event == "repository"]
        assert moved["action"] == "renamed"
        assert moved["changes"] == {"repository": {"name": {"from": NAME}}}
        assert (moved["repository"]["full_name"], moved["repository"]["id"]) == (
            f"{OWNER}/gadget",
            repo_id,
        )
        assert moved["sender"]["login"] == "admin"
        (issue,) = [payload(r) for r in got if r.event == "issues"]
        assert (issue["repository"]["full_name"], issue["repository"]["id"]) == (
            f"{OWNER}/gadget",
            repo_id,
        )
        taken = api.patch(f"/repos/{OWNER}/gadget", json={"name": "gadget"}, headers=ADMIN)
        assert taken.status_code == 200  # the same name: nothing to do


def test_a_transfer_over_rest_moves_the_repository_to_its_new_owner(gh: GitHubEmulator) -> None:
    with WebhookSink() as sink:
        gh.add_webhook(sink.url, "s3cret")
        api = httpx.Client(base_url=gh.base_url, timeout=10)
        repo_id = api.get(f"/repos/{OWNER}/{NAME}", headers=ADMIN).json()["id"]
        path = f"/repos/{OWNER}/{NAME}/transfer"
        assert api.post(path, json={"new_owner": "new-home"}, headers=WRITER).status_code == 403
        missing = api.post(path, json={}, headers=ADMIN)
        assert missing.status_code == 422
        answer = api.post(path, json={"new_owner": "new-home"}, headers=ADMIN)
        assert answer.status_code == 202
        assert (answer.json()["full_name"], answer.json()["id"]) == (f"new-home/{NAME}", repo_id)
        assert api.get(f"/repos/{OWNER}/{NAME}", headers=ADMIN).status_code == 301
        assert api.get(f"/repos/new-home/{NAME}", headers=ADMIN).json()["id"] == repo_id
        got = sink.wait_for(lambda items: any(r.event == "repository" for r in items))
        (moved,) = [payload(r) for r in got if r.event == "repository"]
        assert moved["action"] == "transferred"
        assert moved["changes"]["owner"]["from"]["user"]["login"] == OWNER
        assert moved["repository"]["full_name"] == f"new-home/{NAME}"
        assert moved["repository"]["id"] == repo_id
