"""A protected branch is understood (issue 34, item 4).

A real deployment: `carry web` and `carry worker` processes, a Redis, and the GitHub emulator
holding the upstream and downstream repositories, carry authenticated as a GitHub App. The
downstream organization has a ruleset that blocks force pushes to `carry/**` (GitHub's `GH013`).
carry's first PR goes through (creating a branch is no force push); its refresh is refused:
carry says so once, in one PR comment naming the setting and the fix, and on the dashboard,
and does not retry. With `publish: {mode: append}` the refresh is a new commit on top of the
branch, which the ruleset lets through, and the comment says the refusal is over.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from bot.emulator import GitHubEmulator, generate_app_key
from harness.carry_env import BODY, SERIES, CarryEnv, wait_for
from harness.gitrepo import git

UP_OWNER, UP_NAME = "upstream-org", "engine"
DOWN_OWNER, DOWN_NAME = "downstream-org", "carry"
APP_ID, INSTALLATION_ID = 4243, 78
FIX = {"mod.py": BODY.replace("compute(10)", "compute(10, safe=True)")}
DASHBOARD_TOKEN = "dash-protected-branch-test"
MARKER = "<!-- carry:publish-refused -->"


@dataclass
class Deployment:
    env: CarryEnv
    gh: GitHubEmulator
    url: str
    moves: int = 0

    def move_upstream(self) -> str:
        """Upstream gains header lines above the patched code: the patch is refreshed."""
        self.moves += 1
        up = self.env.upstream
        before = up.head()
        after = up.commit(f"upstream move {self.moves}", {"mod.py": "# h\n" * self.moves + BODY})
        self.gh.push(UP_OWNER, UP_NAME, up.path, "main", pusher=UP_OWNER)
        answer = self.env.deliver(self.url, "push", self.env.push_payload(after, before))
        assert answer.status_code == 202, answer.text
        return after

    def pushes(self) -> list[Any]:
        """carry's pushes to the downstream repository (git receive-pack POSTs)."""
        return [
            r
            for r in self.gh.requests
            if r.kind == "git"
            and r.method == "POST"
            and r.path == f"/{DOWN_OWNER}/{DOWN_NAME}.git/git-receive-pack"
        ]

    def comments(self, number: int) -> list[dict[str, Any]]:
        return self.gh.comments(DOWN_OWNER, DOWN_NAME, number)

    def refusal_comments(self, number: int) -> list[str]:
        return [c["body"] for c in self.comments(number) if MARKER in c["body"]]

    def api(self, path: str) -> Any:
        headers = {"Authorization": f"Bearer {DASHBOARD_TOKEN}"}
        answer = httpx.get(f"{self.url}{path}", headers=headers, timeout=10)
        assert answer.status_code == 200, answer.text
        return answer

    def write_config(self, **series: Any) -> None:
        self.env.write_config(**series)
        self.env.config_path.write_text(
            self.env.config_path.read_text().replace(
                str(self.env.upstream.path), self.gh.git_url(UP_OWNER, UP_NAME)
            )
        )

    def restart_worker(self) -> None:
        """The worker reads its configuration once: a new one for a changed configuration.
        It is stopped once idle: a task it was running when stopped would run again on the new
        worker, in the new configuration (acks_late), and the test could not say which head
        the new configuration first published."""
        log = self.env.root / "worker.log"
        wait_for(lambda: _tasks_in_flight(log.read_text()) == set(), 30, "the worker idle")
        worker = self.env.procs[-1]
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=20)
        self.env.procs.remove(worker)
        self.env.start_carry_worker(name="worker-2")


def _tasks_in_flight(log: str) -> set[str]:
    """The task ids the worker's log says it received and has not finished."""
    said = re.findall(r"Task [\w.]+\[([0-9a-f-]+)\] (received|succeeded|failed|retry|raised)", log)
    received = {task for task, what in said if what == "received"}
    return received - {task for task, what in said if what != "received"}


@pytest.fixture
def deployment(tmp_path: Path, redis_url: str) -> Iterator[Deployment]:
    env = CarryEnv(tmp_path, redis_url)
    env.carry_patches([FIX])
    git(env.downstream, "init", "-q", "-b", "main")
    git(env.downstream, "add", "-A")
    git(env.downstream, "commit", "-q", "-m", "carry the fix")
    private_key, public_key = generate_app_key()
    with GitHubEmulator(tmp_path / "gh") as gh:
        gh.create_repo(UP_OWNER, UP_NAME, from_path=env.upstream.path)
        gh.create_repo(DOWN_OWNER, DOWN_NAME, from_path=env.downstream)
        gh.add_app(APP_ID, public_key, slug="carry", installation_id=INSTALLATION_ID)
        gh.add_installation(APP_ID, INSTALLATION_ID, DOWN_OWNER)
        # the organization's ruleset: no force pushes to carry's branches, for anyone
        gh.add_ruleset(DOWN_OWNER, include=("refs/heads/carry/**",), rules=("non_fast_forward",))
        env.extra_env.update(
            {
                "GITHUB_APP_ID": str(APP_ID),
                "GITHUB_APP_PRIVATE_KEY": private_key,
                "GITHUB_INSTALLATION_ID": str(INSTALLATION_ID),
                "GITHUB_BASE_URL": gh.base_url,
                "CARRY_DOWNSTREAM_DIR": "",  # the series come from the emulated GitHub
                "CARRY_BOT_LOGIN": "carry[bot]",
                "CARRY_DASHBOARD_TOKEN": DASHBOARD_TOKEN,
                "CARRY_CI_DEBOUNCE_S": "0",
            }
        )
        d = Deployment(env, gh, "")
        d.write_config()
        try:
            d.url = env.start_web()
            env.start_carry_worker()
            yield d
        finally:
            env.stop()
        assert gh.errors == []


def test_a_refused_refresh_is_said_once_and_append_mode_gets_through(
    deployment: Deployment,
) -> None:
    d, env = deployment, deployment.env
    branch_ref = f"refs/heads/carry/{SERIES}"
    # 1. The first PR: creating carry's branch is no force push.
    d.move_upstream()
    (pull,) = wait_for(lambda: d.gh.pulls(DOWN_OWNER, DOWN_NAME), 90, "carry's first PR")
    number = pull["number"]
    first_tip = d.gh.ref(DOWN_OWNER, DOWN_NAME, branch_ref)
    assert len(d.pushes()) == 1

    # 2. The refresh force-pushes, and the ruleset refuses it: recorded, said, not retried.
    second = d.move_upstream()
    (entry,) = wait_for(lambda: env.history("publish-refused"), 90, "the refused publish")
    refused = entry["data"]
    assert refused["code"] == "GH013" and refused["source"] == "ruleset"
    assert refused["branch"] == f"carry/{SERIES}" and refused["blocks"] == ["force-push"]
    assert refused["head"] == second
    assert "publish: {mode: append}" in refused["fix"]
    assert env.history("publish-failed") == []  # not a failure to retry six times
    time.sleep(2)  # a retry would have pushed again by now
    assert len(d.pushes()) == 2, "the refused push was retried"
    assert d.gh.ref(DOWN_OWNER, DOWN_NAME, branch_ref) == first_tip
    state = env.state()
    assert state is not None and state.publish_refused is not None
    assert state.publish_refused.pr == number and state.phase != "error"
    (said,) = wait_for(lambda: d.refusal_comments(number), 30, "the PR comment")
    assert '"Block force pushes" in a ruleset' in said and "bypass list" in said
    assert "> Cannot force-push to this branch" in said
    # the dashboard: under "needs attention", with the setting that blocks carry
    series = d.api(f"/api/v1/series/{SERIES}").json()
    (reason,) = [r for r in series["needs_attention"] if "refused carry's push" in r]
    assert "GH013" in reason and '"Block force pushes"' in reason
    assert '"Block force pushes"' in d.api("/").text.replace("&#34;", '"').replace("&quot;", '"')

    # 3. Refused again at the next head: the same comment is edited, none is added.
    d.move_upstream()
    wait_for(lambda: len(env.history("publish-refused")) == 2, 90, "the second refusal")
    wait_for(lambda: "Refused 2 times" in d.refusal_comments(number)[0], 30, "the edit")
    assert len(d.refusal_comments(number)) == 1
    assert len(d.pushes()) == 3 and env.history("publish-failed") == []

    # 4. Publish mode append: a new commit on top of carry's branch, which the ruleset takes.
    #    The downstream branch moved meanwhile: the commit merges it, so the PR shows only the
    #    series.
    (env.downstream / "README.md").write_text("downstream moves on\n")
    git(env.downstream, "add", "-A")
    git(env.downstream, "commit", "-q", "-m", "downstream moves on")
    d.gh.push(DOWN_OWNER, DOWN_NAME, env.downstream, "main", pusher=DOWN_OWNER)
    main_tip = d.gh.ref(DOWN_OWNER, DOWN_NAME, "refs/heads/main")
    d.write_config(publish={"mode": "append"})
    d.restart_worker()
    fourth = d.move_upstream()
    wait_for(
        lambda: d.gh.ref(DOWN_OWNER, DOWN_NAME, branch_ref) != first_tip, 90, "the appended push"
    )
    tip = d.gh.ref(DOWN_OWNER, DOWN_NAME, branch_ref)
    parents = git(d.gh.repo_path(DOWN_OWNER, DOWN_NAME), "log", "-1", "--format=%P", tip)
    assert parents.split() == [first_tip, main_tip]  # on top of the branch: history kept
    wait_for(lambda: (s := env.state()) and s.publish_refused is None, 30, "the refusal cleared")
    (recovered,) = wait_for(
        lambda: [b for b in d.refusal_comments(number) if "takes carry's pushes again" in b],
        30,
        "the comment saying it is resolved",
    )
    assert fourth[:12] in recovered
    assert len(d.refusal_comments(number)) == 1
    series = d.api(f"/api/v1/series/{SERIES}").json()
    assert not [r for r in series["needs_attention"] if "refused carry's push" in r]
    # the PR shows the refreshed series, and nothing of main's: the tip's tree is main's with
    # the series refreshed
    (pull,) = d.gh.pulls(DOWN_OWNER, DOWN_NAME)
    assert pull["state"] == "open" and pull["head"]["sha"] == tip
    bare = d.gh.repo_path(DOWN_OWNER, DOWN_NAME)
    changed = git(bare, "diff", "--name-only", "main", tip).split()
    assert changed and all(name.startswith(f"patches/{SERIES}/") for name in changed)
    assert git(bare, "diff", "--name-only", first_tip, tip).split()  # the series moved on
    assert git(bare, "merge-base", "--is-ancestor", "main", tip) == ""
