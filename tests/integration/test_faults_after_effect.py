"""Faults after the effect, and durable notices (issue 34, items 6 and 8).

GitHub (or a proxy in front of it) can answer 502 to a request that took effect: the push moved
the branch, the comment was posted. carry reads back what GitHub has instead of assuming: the
VERSION carry's branch carries, the check run a create made, the notice comment by its marker.
What carry must say (commits kept on a backup branch) is recorded before it is said and said
until GitHub has it, exactly once.

The emulator's own tests come first; then carry with real `carry web` and worker processes,
real git, real Redis and the emulator's webhooks (a retry is the Celery task's own retry).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import requests
from github import Auth, Github, GithubException

from bot.core.render import NOTICE_MARKER, next_version
from bot.core.state import CiState, SeriesState
from bot.emulator import GitHubEmulator
from bot.github.forge import ForgeError
from harness.carry_env import BODY, SECRET, SERIES, CarryEnv, wait_for
from harness.gitrepo import git
from tests.support.deployment import (
    CHECK,
    DOWN_NAME,
    DOWN_OWNER,
    MOVED,
    UP_NAME,
    UP_OWNER,
    Deploy,
    deployments,
    pr,
)
from workers import publish
from workers.ci import github as hardware
from workers.rebase import rebase_series

BRANCH = f"carry/{SERIES}"
FIX = {"mod.py": BODY.replace("compute(10)", "compute(10, safe=True)")}
RECEIVE_PACK = f"/{DOWN_OWNER}/{DOWN_NAME}.git/git-receive-pack"


# -- the emulator: a fault after the effect -------------------------------------------------------


@pytest.fixture
def gh(tmp_path: Path) -> Iterator[GitHubEmulator]:
    work = tmp_path / "work"
    git(tmp_path, "init", "-q", "-b", "main", str(work))
    (work / "README.md").write_text("hello\n")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "init")
    with GitHubEmulator(tmp_path / "github") as emulator:
        emulator.create_repo(DOWN_OWNER, DOWN_NAME, from_path=work)
        emulator.add_user("writer")
        emulator.add_token("writer-token", "writer")
        emulator.set_permission(DOWN_OWNER, DOWN_NAME, "writer", "write")
        yield emulator
        assert emulator.errors == []


def test_a_comment_posted_then_answered_502_is_on_github(gh: GitHubEmulator) -> None:
    number = gh.open_issue(DOWN_OWNER, DOWN_NAME, title="A bug", user="writer")
    path = f"/repos/{DOWN_OWNER}/{DOWN_NAME}/issues/{number}/comments"
    fault = gh.inject_fault("server_error", method="POST", path=path, after=True)
    client = Github(base_url=gh.base_url, auth=Auth.Token("writer-token"), retry=None)
    with pytest.raises(GithubException) as raised:
        client.get_repo(f"{DOWN_OWNER}/{DOWN_NAME}").get_issue(number).create_comment("once")
    assert raised.value.status == 502
    (post,) = gh.api_requests("POST", path)
    assert (post.status, post.effect_status, post.fault) == (502, 201, "server_error")
    assert [c["body"] for c in gh.comments(DOWN_OWNER, DOWN_NAME, number)] == ["once"]
    assert fault.remaining == 0


def test_a_connection_dropped_after_the_effect_leaves_the_comment_posted(
    gh: GitHubEmulator,
) -> None:
    number = gh.open_issue(DOWN_OWNER, DOWN_NAME, title="A bug", user="writer")
    path = f"/repos/{DOWN_OWNER}/{DOWN_NAME}/issues/{number}/comments"
    gh.inject_fault("disconnect", method="POST", path=path, after=True)
    client = Github(base_url=gh.base_url, auth=Auth.Token("writer-token"), retry=None)
    with pytest.raises(requests.ConnectionError):
        client.get_repo(f"{DOWN_OWNER}/{DOWN_NAME}").get_issue(number).create_comment("once")
    (post,) = gh.api_requests("POST", path)
    assert (post.status, post.effect_status, post.fault) == (None, 201, "disconnect")
    assert [c["body"] for c in gh.comments(DOWN_OWNER, DOWN_NAME, number)] == ["once"]


def test_a_push_that_landed_then_answered_502_moved_the_branch(
    gh: GitHubEmulator, tmp_path: Path
) -> None:
    work = tmp_path / "clone"
    url = gh.git_url(DOWN_OWNER, DOWN_NAME, token="writer-token")
    git(tmp_path, "clone", "-q", url, str(work))
    (work / "NEW.md").write_text("new\n")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "new")
    sha = git(work, "rev-parse", "HEAD")
    gh.inject_fault("server_error", scope="git", method="POST", path=RECEIVE_PACK, after=True)
    pushed = subprocess.run(
        ["git", "-C", str(work), "push", "-q", "origin", "HEAD:refs/heads/topic"],
        capture_output=True,
        text=True,
    )
    assert pushed.returncode != 0 and "502" in pushed.stderr
    assert gh.ref(DOWN_OWNER, DOWN_NAME, "refs/heads/topic") == sha
    (post,) = [r for r in gh.requests if r.kind == "git" and r.path == RECEIVE_PACK]
    assert (post.status, post.effect_status) == (502, 200)


def test_only_a_server_error_or_a_disconnect_comes_after_the_effect(gh: GitHubEmulator) -> None:
    # GitHub refuses a rate-limited request before it acts on it
    with pytest.raises(ValueError, match="after=True"):
        gh.inject_fault("secondary_rate_limit", after=True)


# -- a check run created, then answered 502 ---------------------------------------------------


@pytest.fixture
def deploy(tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Deploy]:
    with deployments(tmp_path, redis_url, monkeypatch) as start:
        yield start


def test_a_check_run_created_then_answered_502_is_found_not_created_again(
    deploy: Deploy,
) -> None:
    d = deploy(auth="app")
    state = d.propose(MOVED, "Add a header")
    d.gh.inject_fault("server_error", method="POST", path="/repos/*/check-runs", after=True)
    d.report(state, CiState(runner=CHECK, state="running", run_id="r1"))
    assert len(d.history("ci-report-failed")) == 1  # the 502: the report is still owed
    # the task's retry finds the run GitHub made and moves it on
    failed = hardware.report_on_github(SERIES, CiState(runner=CHECK, state="running", run_id="r1"))
    assert failed is None
    (run,) = d.gh.check_runs(DOWN_OWNER, DOWN_NAME)
    assert (run["name"], run["status"], run["head_sha"]) == (
        f"carry/{CHECK}",
        "in_progress",
        pr(state).head_sha,
    )
    assert d.gh.api_requests("POST", f"/repos/{DOWN_OWNER}/{DOWN_NAME}/check-runs")[0].fault


def test_a_pull_request_opened_then_answered_502_is_found_not_opened_again(
    deploy: Deploy,
) -> None:
    d = deploy()
    head = d.env.upstream.commit("Add a header", MOVED)
    finished = rebase_series(d.rt, SERIES, head, "refs/heads/main")
    assert finished is not None
    d.gh.inject_fault("server_error", method="POST", path="/repos/*/pulls", after=True)
    args = (d.rt, SERIES, finished.head_sha, finished.digest, finished.changed)
    with pytest.raises(ForgeError, match="502"):
        publish.publish(*args)
    publish.publish(*args)  # the task's retry
    (pull,) = d.gh.pulls(DOWN_OWNER, DOWN_NAME)
    state = d.env.state()
    assert state is not None and pr(state).number == pull["number"]
    version = state.version
    assert version is not None and f"Release VERSION: `{version}`" in pull["body"]


# -- carry: real web and worker processes --------------------------------------------------------


@dataclass
class Flow:
    env: CarryEnv
    gh: GitHubEmulator

    def move_upstream(self, files: dict[str, str], message: str) -> str:
        """Upstream main moves (a push on the emulated GitHub, delivered to carry)."""
        sha = self.env.upstream.commit(message, files)
        self.gh.push(UP_OWNER, UP_NAME, self.env.upstream.path, "main", pusher="upstream-dev")
        return sha

    def published(self, head: str, *, pushed: bool | None = None) -> dict[str, Any]:
        def found() -> dict[str, Any] | None:
            for entry in self.env.history("published"):
                data = entry["data"]
                if data.get("head") == head and pushed in (None, data.get("pushed")):
                    return entry
            return None

        return wait_for(found, 60, f"publish for {head[:12]}")

    def pull(self) -> dict[str, Any]:
        (pull,) = [p for p in self.gh.pulls(DOWN_OWNER, DOWN_NAME) if p["head"]["ref"] == BRANCH]
        return pull

    def branch_file(self, name: str) -> str:
        sha = self.gh.ref(DOWN_OWNER, DOWN_NAME, f"refs/heads/{BRANCH}")
        bare = self.gh.repo_path(DOWN_OWNER, DOWN_NAME)
        return git(bare, "show", f"{sha}:patches/{SERIES}/{name}")

    def state(self) -> SeriesState:
        state = self.env.state()
        assert state is not None
        return state


@pytest.fixture
def flow(tmp_path: Path, redis_url: str) -> Iterator[Flow]:
    env = CarryEnv(tmp_path, redis_url)
    env.carry_patches([FIX])
    git(env.downstream, "init", "-q", "-b", "main")
    git(env.downstream, "add", "-A")
    git(env.downstream, "commit", "-q", "-m", "carry the fix")
    with GitHubEmulator(tmp_path / "gh") as gh:
        gh.create_repo(UP_OWNER, UP_NAME, from_path=env.upstream.path)
        gh.create_repo(DOWN_OWNER, DOWN_NAME, from_path=env.downstream)
        gh.add_user("carry[bot]", type="Bot")
        gh.add_token("carry-token", "carry[bot]")
        gh.set_permission(DOWN_OWNER, DOWN_NAME, "carry[bot]", "write")
        gh.add_user("alice")
        gh.set_permission(DOWN_OWNER, DOWN_NAME, "alice", "write")
        env.write_config()
        config = env.config_path.read_text()
        upstream_url = gh.git_url(UP_OWNER, UP_NAME)
        env.config_path.write_text(config.replace(str(env.upstream.path), upstream_url))
        env.extra_env.update(
            {
                "GITHUB_TOKEN": "carry-token",
                "GITHUB_BASE_URL": gh.base_url,
                "CARRY_DOWNSTREAM_DIR": "",
                "CARRY_BOT_LOGIN": "carry[bot]",
            }
        )
        url = env.start_web()
        env.start_worker()
        gh.add_webhook(f"{url}/webhooks/github", secret=SECRET)
        yield Flow(env, gh)
        env.stop()
        assert gh.errors == []


def test_a_push_that_landed_but_answered_502_records_the_version_on_the_branch(
    flow: Flow,
) -> None:
    """Before: the retry pushed nothing, the state kept the version before while the branch had
    the new one, and the next refresh labelled another tree with the same number. Here the
    first two refreshes' pushes land and answer 502 (the first PR's, and an update's), the
    third goes through: each tree gets its own number, and state, branch and PR agree."""
    today = datetime.now(UTC).date()
    versions: list[str] = []
    for n, faulted in enumerate([True, True, False], 1):
        if faulted:
            flow.gh.inject_fault(
                "server_error", scope="git", method="POST", path=RECEIVE_PACK, after=True
            )
        headers = "".join(f"# header {i}\n" for i in range(n))
        head = flow.move_upstream({"mod.py": headers + BODY}, f"Header {n}")
        flow.published(head, pushed=None if faulted else True)
        version = flow.branch_file("VERSION")
        assert version == next_version(versions[-1] if versions else None, today)
        assert flow.state().version == version
        assert f"Release VERSION: `{version}`" in flow.pull()["body"]
        versions.append(version)
    assert len(set(versions)) == 3
    failed = flow.env.history("publish-failed")
    assert len(failed) == 2 and all("502" in f["data"]["error"] for f in failed)
    read_back = flow.env.history("push-read-back")
    assert sorted(r["data"]["version"] for r in read_back) == versions[:2]
    assert all(r["data"]["landed"] for r in read_back)
    pushes = [r for r in flow.gh.requests if r.kind == "git" and r.path == RECEIVE_PACK]
    assert [(p.status, p.effect_status) for p in pushes] == [(502, 200), (502, 200), (200, None)]
    assert len(flow.gh.pulls(DOWN_OWNER, DOWN_NAME)) == 1


def _alice_commits_on_carrys_branch(flow: Flow, tmp_path: Path) -> str:
    work = tmp_path / "alice-clone"
    git(tmp_path, "clone", "-q", str(flow.gh.repo_path(DOWN_OWNER, DOWN_NAME)), str(work))
    git(work, "checkout", "-q", BRANCH)
    (work / "NOTES.md").write_text("why the fix needs a follow-up\n")
    git(work, "add", "NOTES.md")
    git(work, "commit", "-q", "-m", "Note the follow-up the fix needs")
    flow.gh.push(DOWN_OWNER, DOWN_NAME, work, f"HEAD:refs/heads/{BRANCH}", pusher="alice")
    return git(work, "rev-parse", "HEAD")


@pytest.mark.parametrize("after", [False, True], ids=["comment-lost", "comment-landed-then-502"])
def test_the_backup_branch_notice_is_said_exactly_once_despite_a_failed_comment(
    flow: Flow, tmp_path: Path, after: bool
) -> None:
    """Before: the notice was said in the publish that pushed; when that one comment failed,
    the retry pushed nothing and found nothing to say (no comment, no history entry), and a
    comment that landed but answered 502 was never recorded."""
    head1 = flow.move_upstream({"mod.py": "# header\n" + BODY}, "Add a header")
    flow.published(head1)
    number = flow.pull()["number"]
    sha = _alice_commits_on_carrys_branch(flow, tmp_path)
    comments = f"/repos/{DOWN_OWNER}/{DOWN_NAME}/issues/{number}/comments"
    fault = flow.gh.inject_fault("server_error", method="POST", path=comments, after=after)

    head2 = flow.move_upstream({"mod.py": "# header\n# second\n" + BODY}, "Second header")
    (said,) = wait_for(
        lambda: flow.env.history("branch-commits-kept"), 60, "the backup branch notice"
    )
    backup = f"carry-backup/{SERIES}/{sha[:12]}"
    assert flow.gh.ref(DOWN_OWNER, DOWN_NAME, f"refs/heads/{backup}") == sha
    assert fault.remaining == 0 and len(flow.env.history("publish-failed")) == 1
    flow.published(head2, pushed=False)  # the retry, which pushed nothing
    marker = NOTICE_MARKER.format(id=f"commits-kept-{sha[:12]}")
    (comment,) = [c for c in flow.gh.comments(DOWN_OWNER, DOWN_NAME, number) if marker in c["body"]]
    assert backup in comment["body"] and sha[:12] in comment["body"]
    posts = flow.gh.api_requests("POST", comments)
    assert [(p.status, p.effect_status) for p in posts] == (
        [(502, 201)] if after else [(502, None), (201, None)]
    )
    assert said["data"]["backup"] == backup and said["data"]["commits"] == [sha]
    assert said["data"]["comment_id"] == comment["id"] and said["data"]["pr"] == number
    (notice,) = flow.state().notices
    assert (notice.due, notice.comment_id, notice.pr) == (False, comment["id"], number)
    # later refreshes say nothing again
    head3 = flow.move_upstream({"mod.py": "# header\n# third\n" + BODY}, "Third header")
    flow.published(head3, pushed=True)
    assert len(flow.env.history("branch-commits-kept")) == 1
    assert [c for c in flow.gh.comments(DOWN_OWNER, DOWN_NAME, number) if marker in c["body"]] == [
        comment
    ]
