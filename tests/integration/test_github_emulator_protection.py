"""The emulator refuses what a ruleset or a branch protection forbids, with GitHub's texts.

Real git pushes over HTTP into the emulator; the texts are GitHub's as its users recorded them
(bot/emulator/pre_receive.py names where): a ruleset's refusal is GH013 with "push declined due
to repository rule violations", a classic protection's GH006 with "protected branch hook
declined"."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bot.emulator import GitHubEmulator, generate_app_key
from harness.gitrepo import git

OWNER, NAME, TOKEN = "acme", "widget", "alice-token"
APP_ID, INSTALLATION_ID = 8080, 99


@pytest.fixture
def gh(tmp_path: Path) -> Iterator[GitHubEmulator]:
    seed = tmp_path / "seed"
    seed.mkdir()
    git(seed, "init", "-q", "-b", "main")
    (seed / "a.txt").write_text("one\n")
    git(seed, "add", "-A")
    git(seed, "commit", "-q", "-m", "one")
    git(seed, "branch", "topic")
    with GitHubEmulator(tmp_path / "gh") as emulator:
        emulator.create_repo(OWNER, NAME, from_path=seed)
        emulator.add_token(TOKEN, "alice")
        emulator.set_permission(OWNER, NAME, "alice", "write")
        emulator.add_token("owner-token", OWNER)
        yield emulator
        assert emulator.errors == []


def clone(gh: GitHubEmulator, tmp_path: Path, token: str = TOKEN) -> Path:
    work = tmp_path / f"work-{token}"
    git(tmp_path, "clone", "-q", gh.git_url(OWNER, NAME, token=token), str(work))
    return work


def commit(work: Path, text: str) -> str:
    (work / "a.txt").write_text(text)
    git(work, "commit", "-q", "-am", text.strip())
    return git(work, "rev-parse", "HEAD")


def push(work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "push", "--quiet", *args],
        cwd=work,
        capture_output=True,
        text=True,
        env={**os.environ, "GIT_TERMINAL_PROMPT": "0"},
        check=False,
    )


def remote_lines(stderr: str) -> list[str]:
    return [line.rstrip() for line in stderr.splitlines() if line.startswith("remote:")]


def test_a_ruleset_refuses_a_force_push_with_gh013_and_allows_a_fast_forward(
    gh: GitHubEmulator, tmp_path: Path
) -> None:
    gh.add_ruleset(OWNER, NAME, include=("~DEFAULT_BRANCH",), rules=("non_fast_forward",))
    work = clone(gh, tmp_path)
    first = git(work, "rev-parse", "HEAD")
    ahead = commit(work, "two\n")
    assert push(work, "origin", "main").returncode == 0  # a fast-forward passes
    assert gh.ref(OWNER, NAME, "refs/heads/main") == ahead

    git(work, "reset", "-q", "--hard", first)
    rewritten = commit(work, "two, rewritten\n")
    refused = push(work, "--force", "origin", "main")
    assert refused.returncode != 0
    assert remote_lines(refused.stderr) == [
        "remote: error: GH013: Repository rule violations found for refs/heads/main.",
        f"remote: Review all repository rules at {gh.hub.web_url}/{OWNER}/{NAME}/rules"
        "?ref=refs%2Fheads%2Fmain",
        "remote:",
        "remote: - Cannot force-push to this branch",
        "remote:",
    ]
    assert (
        " ! [remote rejected] main -> main (push declined due to repository rule violations)"
        in refused.stderr
    )
    assert gh.ref(OWNER, NAME, "refs/heads/main") == ahead != rewritten
    # a branch the ruleset does not name takes a force push
    git(work, "reset", "-q", "--hard", first)
    commit(work, "topic rewritten\n")
    assert push(work, "--force", "origin", "HEAD:topic").returncode == 0


def test_an_organization_ruleset_covers_its_repositories_and_its_bypass_app_passes(
    gh: GitHubEmulator, tmp_path: Path
) -> None:
    _private_key, public_key = generate_app_key()
    gh.add_app(APP_ID, public_key, slug="carry", installation_id=INSTALLATION_ID)
    gh.add_installation(APP_ID, INSTALLATION_ID, OWNER)
    gh.add_ruleset(OWNER, include=("refs/heads/carry/**",), rules=("non_fast_forward",))
    work = clone(gh, tmp_path)
    base = git(work, "rev-parse", "HEAD")
    commit(work, "carry one\n")
    assert push(work, "origin", "HEAD:refs/heads/carry/x").returncode == 0  # creation is fine
    git(work, "reset", "-q", "--hard", base)
    commit(work, "carry two\n")
    refused = push(work, "--force", "origin", "HEAD:refs/heads/carry/x")
    assert "GH013: Repository rule violations found for refs/heads/carry/x." in refused.stderr
    assert "- Cannot force-push to this branch" in refused.stderr

    gh.add_ruleset(OWNER, include=("refs/heads/carry/**",), bypass_apps=(APP_ID,), title="b")
    bot = clone(gh, tmp_path, gh.installation_token(INSTALLATION_ID))
    git(bot, "fetch", "-q", "origin", "carry/x")
    git(bot, "reset", "-q", "--hard", base)
    commit(bot, "carry by the app\n")
    # The first ruleset has no bypass for the App: still refused. Without it, the App passes.
    assert push(bot, "--force", "origin", "HEAD:refs/heads/carry/x").returncode != 0
    first = next(iter(gh.hub.protections.rulesets))
    gh.remove_ruleset(first)
    assert push(bot, "--force", "origin", "HEAD:refs/heads/carry/x").returncode == 0


def test_a_classic_protection_refuses_with_gh006_and_admins_pass_unless_enforced(
    gh: GitHubEmulator, tmp_path: Path
) -> None:
    gh.protect_branch(OWNER, NAME, "main")
    work = clone(gh, tmp_path)
    first = git(work, "rev-parse", "HEAD")
    commit(work, "two\n")
    assert push(work, "origin", "main").returncode == 0
    git(work, "reset", "-q", "--hard", first)
    commit(work, "rewritten\n")
    refused = push(work, "--force", "origin", "main")
    assert remote_lines(refused.stderr) == [
        "remote: error: GH006: Protected branch update failed for refs/heads/main.",
        "remote:",
        "remote: - Cannot force-push to this branch",
        "remote:",
    ]
    assert " ! [remote rejected] main -> main (protected branch hook declined)" in refused.stderr
    admin = clone(gh, tmp_path, "owner-token")
    git(admin, "reset", "-q", "--hard", first)
    commit(admin, "the owner rewrites\n")
    assert push(admin, "--force", "origin", "main").returncode == 0  # admins are not enforced
    gh.protect_branch(OWNER, NAME, "main", enforce_admins=True)
    git(admin, "reset", "-q", "--hard", first)
    commit(admin, "again\n")
    assert "GH006" in push(admin, "--force", "origin", "main").stderr


def test_required_status_checks_refuse_a_commit_that_has_not_passed_them(
    gh: GitHubEmulator, tmp_path: Path
) -> None:
    gh.protect_branch(OWNER, NAME, "main", required_checks=("ci/build",))
    work = clone(gh, tmp_path)
    fresh = commit(work, "untested\n")
    refused = push(work, "origin", "main")
    assert 'remote: - Required status check "ci/build" is expected.' in refused.stderr
    # the commit passes the check on another branch first, then it may go to main
    assert push(work, "origin", "HEAD:refs/heads/topic", "--force").returncode == 0
    api = httpx.Client(base_url=gh.base_url, headers={"Authorization": f"token {TOKEN}"})
    answer = api.post(
        f"/repos/{OWNER}/{NAME}/statuses/{fresh}", json={"state": "success", "context": "ci/build"}
    )
    assert answer.status_code == 201
    assert push(work, "origin", "main").returncode == 0

    gh.add_ruleset(OWNER, NAME, rules=(), required_checks=("lint", "test"))
    commit(work, "more\n")
    refused = push(work, "origin", "main")
    assert "remote: - 2 of 2 required status checks are expected." in refused.stderr
    assert "GH013" in refused.stderr


def test_protections_are_set_over_rest_as_github_documents(
    gh: GitHubEmulator, tmp_path: Path
) -> None:
    owner = httpx.Client(base_url=gh.base_url, headers={"Authorization": "token owner-token"})
    alice = httpx.Client(base_url=gh.base_url, headers={"Authorization": f"token {TOKEN}"})
    url = f"/repos/{OWNER}/{NAME}/branches/main/protection"
    assert owner.get(url).json()["message"] == "Branch not protected"
    missing = owner.put(url, json={"enforce_admins": True})
    assert missing.status_code == 422 and "required_status_checks" in missing.json()["message"]
    body = {
        "required_status_checks": None,
        "enforce_admins": True,
        "required_pull_request_reviews": None,
        "restrictions": None,
        "allow_force_pushes": False,
    }
    assert alice.put(url, json=body).status_code == 404  # admins only, others see nothing
    set_ = owner.put(url, json=body)
    assert set_.status_code == 200
    assert set_.json()["allow_force_pushes"] == {"enabled": False}
    assert owner.get(url).json()["enforce_admins"]["enabled"] is True

    ruleset = {
        "name": "no rewrites",
        "target": "branch",
        "enforcement": "active",
        "conditions": {"ref_name": {"include": ["refs/heads/topic"], "exclude": []}},
        "rules": [{"type": "non_fast_forward"}],
    }
    assert owner.post(f"/repos/{OWNER}/{NAME}/rulesets", json={"name": "x"}).status_code == 422
    created = owner.post(f"/repos/{OWNER}/{NAME}/rulesets", json=ruleset)
    assert created.status_code == 201
    assert created.json()["rules"] == [{"type": "non_fast_forward"}]
    assert created.json()["source_type"] == "Repository"
    listed = alice.get(f"/repos/{OWNER}/{NAME}/rulesets").json()
    assert [r["name"] for r in listed] == ["no rewrites"]
    work = clone(gh, tmp_path)
    git(work, "checkout", "-q", "topic")
    commit(work, "topic moves\n")
    assert push(work, "origin", "HEAD:topic").returncode == 0
    refused = push(work, "--force", "origin", "HEAD~1:topic")
    assert "GH013: Repository rule violations found for refs/heads/topic." in refused.stderr
    assert owner.delete(f"/repos/{OWNER}/{NAME}/rulesets/{created.json()['id']}").status_code == 204
