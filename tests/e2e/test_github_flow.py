"""End to end against the GitHub emulator: real git, real Redis, real worker and web processes.

An upstream PR's head moves; carry rebases its series on it and proposes the result as one PR
on the downstream repository, updated in place, with nothing pushed when nothing changed.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from celery import Celery

from bot.emulator import GitHubEmulator
from bot.local_redis import free_port
from bot.store.series import history
from harness.carry_env import BODY, SECRET, SERIES, CarryEnv, lanes_empty, wait_for
from harness.gitrepo import git
from tests.support.paths import REPO_ROOT

UP_OWNER, UP_NAME = "upstream-org", "engine"
DOWN_OWNER, DOWN_NAME = "downstream-org", "carry"
BRANCH = f"carry/{SERIES}"
FIX = {"mod.py": BODY.replace("compute(10)", "compute(10, safe=True)")}
SNAPSHOT = Path(__file__).parent / "snapshots" / "pr_body_applies_moved.md"


class Flow:
    def __init__(self, env: CarryEnv, gh: GitHubEmulator, pull: int, url: str = ""):
        self.env, self.gh, self.pull, self.url = env, gh, pull, url

    def move_feature(self, files: dict[str, str | None], message: str) -> str:
        up = self.env.upstream
        up.checkout("feature")
        sha = up.commit(message, files)
        self.gh.push(UP_OWNER, UP_NAME, up.path, "feature", pusher="upstream-dev", force=True)
        up.checkout("main")
        return sha

    def approve_once(self, head: str) -> None:
        """The first push carry sees after it starts has no trusted or approved head under
        it (trust covers the range of pushes, issue 33): its runs wait until a maintainer
        approves it once; the trusted pushes on top of it run with no approval."""
        wait_for(
            lambda: (
                (s := self.env.state())
                and (row := s.ci.get("gaudi/has-fix"))
                and row.head_sha == head
                and row.state == "waiting-approval"
            ),
            60,
            f"the runs of {head[:12]} to wait for approval",
        )
        (pr,) = self.carry_pulls()
        self.gh.add_comment(
            DOWN_OWNER, DOWN_NAME, pr["number"], f"/carry approve {head}", user="maint"
        )

    def carry_pulls(self) -> list[dict]:
        return [p for p in self.gh.pulls(DOWN_OWNER, DOWN_NAME) if p["head"]["ref"] == BRANCH]

    def branch_sha(self) -> str | None:
        return self.gh.ref(DOWN_OWNER, DOWN_NAME, f"refs/heads/{BRANCH}")

    def branch_file(self, name: str) -> str | None:
        sha = self.branch_sha()
        if sha is None:
            return None
        bare = self.gh.repo_path(DOWN_OWNER, DOWN_NAME)
        proc = subprocess.run(
            ["git", "--git-dir", str(bare), "show", f"{sha}:patches/{SERIES}/{name}"],
            capture_output=True,
        )
        return proc.stdout.decode() if proc.returncode == 0 else None

    def published(self, head: str) -> dict:
        return wait_for(
            lambda: next(
                (e for e in self.env.history("published") if e["data"].get("head") == head), None
            ),
            60,
            f"publish for {head[:12]}",
        )


@pytest.fixture
def flow(tmp_path: Path, redis_url: str):
    yield from _flow(tmp_path, redis_url, runners=False)


@pytest.fixture
def flow_with_runner(tmp_path: Path, redis_url: str):
    yield from _flow(tmp_path, redis_url, runners=True)


@pytest.fixture
def held_flow(tmp_path: Path, redis_url: str):
    """Deliveries wait until the test sends them (gh.deliver_pending), in the order it picks."""
    yield from _flow(tmp_path, redis_url, runners=False, manual_webhooks=True)


@pytest.fixture
def flow_with_dashboard_issue(tmp_path: Path, redis_url: str):
    yield from _flow(tmp_path, redis_url, runners=False, settings={"dashboard_issue": True})


@pytest.fixture
def flow_with_hook_id(tmp_path: Path, redis_url: str):
    """The config names the repository webhook (web.hook_id), so carry can read its
    deliveries; carry's token has admin access, which GitHub requires for that."""
    yield from _flow(tmp_path, redis_url, runners=False, hook_id=1)


def _flow(
    tmp_path: Path,
    redis_url: str,
    *,
    runners: bool,
    settings: dict | None = None,
    manual_webhooks: bool = False,
    hook_id: int | None = None,
):
    env = CarryEnv(tmp_path, redis_url)
    env.upstream.checkout("main", new_branch="feature")
    env.upstream.commit("Start the feature", {"feature.py": "enabled = True\n"})
    env.upstream.checkout("main")
    names = env.carry_patches([FIX])
    downstream = env.downstream
    git(downstream, "init", "-q", "-b", "main")
    git(downstream, "add", "-A")
    git(downstream, "commit", "-q", "-m", "carry the fix")
    with GitHubEmulator(tmp_path / "gh", manual_webhooks=manual_webhooks) as gh:
        gh.create_repo(UP_OWNER, UP_NAME, from_path=env.upstream.path)
        # With runners, the downstream is private, as a team's release repository is: the
        # runner holds no credential, so the job must carry the series itself.
        gh.create_repo(DOWN_OWNER, DOWN_NAME, from_path=downstream, private=runners, plan="team")
        gh.add_user("carry[bot]", type="Bot")
        gh.add_token("carry-token", "carry[bot]")
        carry_role = "admin" if hook_id is not None else "write"
        gh.set_permission(DOWN_OWNER, DOWN_NAME, "carry[bot]", carry_role)
        gh.add_user("maint")
        gh.set_permission(DOWN_OWNER, DOWN_NAME, "maint", "write")
        gh.add_user("visitor")
        gh.set_permission(DOWN_OWNER, DOWN_NAME, "visitor", "read")
        gh.add_user("triager")
        gh.set_permission(DOWN_OWNER, DOWN_NAME, "triager", "triage")
        pull = gh.open_pull(
            UP_OWNER, UP_NAME, head="feature", base="main", title="Feature", user="upstream-dev"
        )
        extra: dict = {}
        if runners:
            extra = {
                "runners": ["gaudi"],
                "checks": ["has-fix"],
                "trusted_authors": ["upstream-dev"],
            }
        env.write_config(base={"pull": pull}, downstream=settings, **extra)
        if runners:
            add_runner_config(env, tmp_path / "runner")
        config = env.config_path.read_text().replace(
            str(env.upstream.path), gh.git_url(UP_OWNER, UP_NAME)
        )
        if hook_id is not None:
            config = json.dumps(json.loads(config) | {"web": {"hook_id": hook_id}})
        env.config_path.write_text(config)
        env.extra_env.update(
            {
                "GITHUB_TOKEN": "carry-token",
                "GITHUB_BASE_URL": gh.base_url,
                "CARRY_DOWNSTREAM_DIR": "",
                "CARRY_BOT_LOGIN": "carry[bot]",
            }
        )
        env.extra_env["CARRY_CI_DEBOUNCE_S"] = "0"
        url = env.start_web()
        env.start_worker()
        if runners:
            env.start_runner("gaudi")
        hook_url = f"{url}/webhooks/github"
        if hook_id is None:
            gh.add_webhook(hook_url, secret=SECRET)
        else:  # a hook on each repository, as their admins would add them
            added = gh.add_webhook(hook_url, secret=SECRET, owner=DOWN_OWNER, repo=DOWN_NAME)
            assert added == hook_id, "the config names the emulator's first hook"
            gh.add_webhook(hook_url, secret=SECRET, owner=UP_OWNER, repo=UP_NAME)
        yield Flow(env, gh, pull, url)
        env.stop()
    assert names


def normalized(body: str) -> str:
    return re.sub(r"\d{8}\.\d+", "YYYYMMDD.N", body)


def test_pr_lifecycle_on_a_moving_upstream_pr(flow: Flow):
    # 1. The PR head moves: carry rebases and opens one PR whose body matches the snapshot.
    head1 = flow.move_feature({"mod.py": "# header\n" + BODY}, "Add a header")
    flow.published(head1)
    (pr,) = flow.carry_pulls()
    body = normalized(pr["body"])
    if not SNAPSHOT.exists():
        SNAPSHOT.parent.mkdir(parents=True, exist_ok=True)
        SNAPSHOT.write_text(body)
    assert body == SNAPSHOT.read_text()
    first_push = flow.branch_sha()
    assert "+value_10 = compute(10, safe=True)" in flow.branch_file(pr_patch_name(flow))

    # 2. A second move updates the same PR, even with the delivery redelivered at once.
    head2 = flow.move_feature({"mod.py": "# header\n# second\n" + BODY}, "Second header line")
    synchronize = [
        d
        for d in flow.gh.deliveries
        if d.event == "pull_request" and d.payload.get("after") == head2
    ]
    flow.gh.redeliver(synchronize[-1])
    flow.published(head2)
    assert len(flow.carry_pulls()) == 1
    second_push = flow.branch_sha()
    assert second_push != first_push

    # 3. A move that leaves the refreshed series identical pushes nothing.
    head3 = flow.move_feature({"notes.txt": "unrelated\n"}, "Unrelated file")
    flow.published(head3)
    assert flow.branch_sha() == second_push
    assert len(flow.carry_pulls()) == 1

    # 4. Upstream takes the fix: the PR now drops the patch, with the evidence in its body.
    head4 = flow.move_feature(
        {"mod.py": "# header\n# second\n" + FIX["mod.py"]}, "Take the fix upstream"
    )
    flow.published(head4)
    (pr,) = flow.carry_pulls()
    assert flow.branch_file(pr_patch_name(flow)) is None
    assert "Dropped: upstream contains them" in pr["body"] and "reverse-apply ok" in pr["body"]
    assert pr_patch_name(flow) not in (flow.branch_file("series") or "")

    # 5. Upstream reverts it: the patch is carried again.
    head5 = flow.move_feature(
        {"mod.py": "# header\n# second\n" + BODY}, 'Revert "Take the fix upstream"'
    )
    flow.published(head5)
    assert "+value_10 = compute(10, safe=True)" in (flow.branch_file(pr_patch_name(flow)) or "")

    # 6. A conflicting upstream change produces a conflict report on the PR.
    head6 = flow.move_feature(
        {"mod.py": "# header\n# second\n" + BODY.replace("compute(10)", "other(10)")}, "Rework 10"
    )
    flow.published(head6)
    (pr,) = flow.carry_pulls()
    report = wait_for(
        lambda: next(
            (
                c
                for c in flow.gh.comments(DOWN_OWNER, DOWN_NAME, pr["number"])
                if "carry:conflict-report" in c["body"]
            ),
            None,
        ),
        30,
        "conflict report",
    )
    assert "does not apply" in report["body"] and "git am -3" in report["body"]

    # 7. A command from someone without write access is refused politely.
    flow.gh.add_comment(DOWN_OWNER, DOWN_NAME, pr["number"], "/carry rebase", user="visitor")
    refusal = wait_for(
        lambda: next(
            (
                c
                for c in flow.gh.comments(DOWN_OWNER, DOWN_NAME, pr["number"])
                if "write access" in c["body"]
            ),
            None,
        ),
        30,
        "refusal",
    )
    assert "@visitor" in refusal["body"]


def add_runner_config(env: CarryEnv, workdir: Path) -> None:
    import json

    config = json.loads(env.config_path.read_text())
    config["runners"] = {
        "gaudi": {
            "queue": "hw.gaudi",
            "workdir": str(workdir),
            "checks": {
                "has-fix": {"run": ["sh", "-c", "grep -q 'safe=True' mod.py"], "timeout_s": 60}
            },
        }
    }
    env.config_path.write_text(json.dumps(config, indent=2))


def ci_statuses(flow: Flow, sha: str) -> list[dict]:
    """carry runs with a token here, and GitHub lets only Apps write check runs: CI results
    reach the PR as commit statuses."""
    return flow.gh.statuses(DOWN_OWNER, DOWN_NAME, sha)


def test_hardware_ci_runs_the_exact_tree_and_gates_untrusted_heads(flow_with_runner: Flow):
    flow = flow_with_runner
    head1 = flow.move_feature({"mod.py": "# header\n" + BODY}, "Add a header")
    flow.published(head1)
    flow.approve_once(head1)
    (pr,) = flow.carry_pulls()
    pr_head = flow.branch_sha()
    done = wait_for(
        lambda: [s for s in ci_statuses(flow, pr_head) if s["state"] != "pending"],
        90,
        "commit status",
    )
    assert done[-1]["state"] == "success" and done[-1]["context"] == "carry/gaudi/has-fix"
    state = flow.env.state()
    assert state.ci["gaudi/has-fix"].state == "success"

    # A head pushed by someone outside trusted_authors waits for /carry approve <sha>.
    up = flow.env.upstream
    up.checkout("feature")
    head2 = up.commit("Stranger moves context", {"mod.py": "# header\n# stranger\n" + BODY})
    flow.gh.push(UP_OWNER, UP_NAME, up.path, "feature", pusher="stranger", force=True)
    up.checkout("main")
    flow.published(head2)
    waiting = wait_for(
        lambda: (
            (s := flow.env.state())
            and s.ci.get("gaudi/has-fix")
            and s.ci["gaudi/has-fix"].state == "waiting-approval"
            and s
        ),
        60,
        "waiting for approval",
    )
    assert waiting.ci["gaudi/has-fix"].head_sha == head2
    flow.gh.add_comment(
        DOWN_OWNER, DOWN_NAME, pr["number"], f"/carry approve {head2}", user="maint"
    )
    wait_for(
        lambda: (
            (s := flow.env.state())
            and s.ci["gaudi/has-fix"].state == "success"
            and s.ci["gaudi/has-fix"].head_sha == head2
        ),
        90,
        "approved run",
    )


def test_a_ci_result_github_refuses_is_sent_again_until_it_lands(flow_with_runner: Flow):
    """Issue 34 item 2, with real processes (web, worker, runner): GitHub's secondary limit
    refuses carry's status writes, with Retry-After, from the moment the run is on its way:
    the report task comes back after the wait, the result lands, and until then the API says
    the row is not on GitHub yet. On 6bda570 the refused result stays lost (pending on GitHub,
    'timed out after 90s waiting for the result on GitHub') while the dashboard says success."""
    flow = flow_with_runner
    head = flow.move_feature({"mod.py": "# header\n" + BODY}, "Add a header")
    flow.published(head)
    flow.approve_once(head)
    pr_head = flow.branch_sha()
    wait_for(lambda: ci_statuses(flow, pr_head), 60, "a first status")
    flow.gh.secondary_limit(
        next_n_writes=15, retry_after_s=3, path=f"/repos/{DOWN_OWNER}/{DOWN_NAME}/statuses/*"
    )
    wait_for(lambda: flow.env.history("ci-report-failed"), 90, "a refused report")
    done = wait_for(
        lambda: [s for s in ci_statuses(flow, pr_head) if s["state"] != "pending"],
        90,
        "the result on GitHub",
    )
    assert done[-1]["state"] == "success"
    row = wait_for(
        lambda: (
            (r := httpx.get(f"{flow.url}/api/v1/series/{SERIES}", timeout=10).json())
            and r["ci"]["gaudi/has-fix"]["on_github"]
            and r["ci"]["gaudi/has-fix"]
        ),
        30,
        "the row on GitHub",
    )
    assert row["state"] == "success"


def pr_patch_name(flow: Flow) -> str:
    return next(p.name for p in (flow.env.downstream / "patches" / SERIES).glob("*.patch"))


def test_repo_root_is_importable():
    assert (REPO_ROOT / "bot").is_dir()


def test_github_outage_is_retried_and_visible_and_never_duplicates(flow: Flow):
    """Failure stories 5 and 6: a GitHub 5xx while opening the PR is retried (no POST is retried
    blindly by the client), the failure shows in the history, and exactly one PR results, even
    with a /carry rebase command racing the retry."""
    flow.gh.inject_fault(
        "server_error", times=2, method="POST", path=f"/repos/{DOWN_OWNER}/{DOWN_NAME}/pulls"
    )
    head = flow.move_feature({"mod.py": "# header\n" + BODY}, "Add a header")
    failures = wait_for(
        lambda: flow.env.history("publish-failed"), 60, "the failure to be recorded"
    )
    assert "502" in failures[-1]["data"]["error"] or "500" in failures[-1]["data"]["error"]
    flow.published(head)
    (pr,) = flow.carry_pulls()
    flow.gh.add_comment(DOWN_OWNER, DOWN_NAME, pr["number"], "/carry rebase", user="maint")
    wait_for(
        lambda: (
            len([e for e in flow.env.history("published") if e["data"].get("head") == head]) >= 2
        ),
        60,
        "the commanded re-check to publish",
    )
    assert len(flow.carry_pulls()) == 1
    posts = flow.gh.api_requests(method="POST", path=f"/repos/{DOWN_OWNER}/{DOWN_NAME}/pulls")
    assert [r.status for r in posts] == [500, 500, 201] or [r.status for r in posts][-1] == 201
    assert sum(1 for r in posts if r.status == 201) == 1


def test_broken_metadata_is_reported_on_the_pr_and_nothing_is_dropped(flow: Flow, tmp_path: Path):
    """Failure story 3: a fix page missing a field is rejected loudly, never dropped or skipped."""
    head1 = flow.move_feature({"mod.py": "# header\n" + BODY}, "Add a header")
    flow.published(head1)
    (pr,) = flow.carry_pulls()
    before = flow.branch_file(pr_patch_name(flow))
    work = tmp_path / "maintainer"
    bare = flow.gh.repo_path(DOWN_OWNER, DOWN_NAME)
    git(tmp_path, "clone", "-q", str(bare), str(work))
    page = work / "patches" / SERIES / "the-fix.md"
    page.write_text(
        "\n".join(
            line for line in page.read_text().splitlines() if not line.startswith("| Upstream")
        )
        + "\n"
    )
    git(work, "commit", "-q", "-am", "edit the fix page by hand")
    flow.gh.push(DOWN_OWNER, DOWN_NAME, work, "HEAD:main", pusher="maint")
    flow.move_feature({"mod.py": "# header\n# two\n" + BODY}, "Second header line")
    comment = wait_for(
        lambda: next(
            (
                c
                for c in flow.gh.comments(DOWN_OWNER, DOWN_NAME, pr["number"])
                if "carry:series-invalid" in c["body"]
            ),
            None,
        ),
        60,
        "the invalid-series report",
    )
    assert "the-fix.md" in comment["body"] and "Upstream" in comment["body"]
    assert flow.env.state().phase == "error"
    assert flow.branch_file(pr_patch_name(flow)) == before  # nothing dropped or rewritten


def test_the_dashboard_issue_shows_every_series_and_a_tick_acts_as_the_command(
    flow_with_dashboard_issue: Flow,
):
    """Renovate's Dependency Dashboard, for patch series: one issue on the downstream
    repository, written by carry and kept current; ticking a box there is the `/carry`
    command by whoever ticked it, with the same permission check, answered on the issue."""
    flow = flow_with_dashboard_issue
    head = flow.move_feature({"mod.py": "# header\n" + BODY}, "Add a header")
    flow.published(head)
    beat = Celery(broker=flow.env.redis_url)
    beat.send_task("carry.dashboard_issue", queue="carry")  # what the beat sends every interval

    def board() -> dict | None:
        issues = flow.gh.issues(DOWN_OWNER, DOWN_NAME)
        return issues[0] if issues else None

    issue = wait_for(board, 60, "the dashboard issue")
    assert issue["title"] == "carry: patch series dashboard"
    assert issue["user"]["login"] == "carry[bot]"
    assert [label["name"] for label in issue["labels"]] == ["carry-dashboard"]
    assert f"## `{SERIES}`" in issue["body"] and head[:12] in issue["body"]
    number = issue["number"]

    def tick(body: str, action: str) -> str:
        (line,) = [x for x in body.splitlines() if f"carry-action:{action} " in x]
        return body.replace(line, line.replace("- [ ]", "- [x]", 1))

    def answers() -> list[str]:
        return [c["body"] for c in flow.gh.comments(DOWN_OWNER, DOWN_NAME, number)]

    # Someone who may edit issues (triage) but may not command carry: refused, like a comment.
    flow.gh.edit_issue(
        DOWN_OWNER, DOWN_NAME, number, body=tick(issue["body"], f"pause:{SERIES}"), user="triager"
    )
    (refusal,) = wait_for(answers, 60, "the refusal")
    # carry reads the role (role_name), not the legacy permission that names triage "read"
    assert refusal.startswith("Sorry @triager") and "(your permission: triage)" in refusal
    wait_for(
        lambda: "- [x]" not in flow.gh.issue(DOWN_OWNER, DOWN_NAME, number)["body"],
        60,
        "the box to be unticked",
    )
    assert flow.env.state().paused_by is None

    # A maintainer's tick pauses the series, is answered, and the box comes back as "Resume".
    flow.gh.edit_issue(
        DOWN_OWNER, DOWN_NAME, number, body=tick(issue["body"], f"pause:{SERIES}"), user="maint"
    )
    wait_for(lambda: len(answers()) == 2, 60, "the answer to the tick")
    assert answers()[1] == "Paused: carry will not act on its own."
    assert flow.env.state().paused_by == "maint"

    def offers_resume() -> str | None:
        body = str(flow.gh.issue(DOWN_OWNER, DOWN_NAME, number)["body"])
        return body if f"carry-action:resume:{SERIES} " in body else None

    written = wait_for(offers_resume, 60, "the issue to offer Resume")
    assert "- [x]" not in written and "paused by `maint`" in written

    # Nothing changed: the next interval writes nothing. (First let carry finish what the tick
    # set off: a refresh already queued or running may still write the new state.)
    def patches() -> int:
        return len(
            flow.gh.api_requests("PATCH", f"/repos/{DOWN_OWNER}/{DOWN_NAME}/issues/{number}")
        )

    def settled() -> int | None:
        before, client = patches(), flow.env.client
        idle = client.llen("carry") + client.llen("carry.git") == 0
        time.sleep(1)
        return before if idle and patches() == before else None

    edits = wait_for(settled, 60, "carry to finish writing the issue")
    beat.send_task("carry.dashboard_issue", queue="carry")
    wait_for(lambda: flow.env.client.llen("carry") == 0, 30, "the refresh to be taken")
    time.sleep(1)
    assert patches() == edits
    assert len(flow.gh.issues(DOWN_OWNER, DOWN_NAME)) == 1


def test_pushes_delivered_out_of_order_never_move_a_series_back(held_flow: Flow):
    """Issue 34, item 1: GitHub promises no order of deliveries. The upstream PR's head moves
    twice and the newer move is delivered first: carry checks and publishes the newer head,
    and records the older one as behind, without checking or publishing it."""
    flow = held_flow
    head1 = flow.move_feature({"mod.py": "# header\n" + BODY}, "Add a header")
    flow.gh.deliver_pending()
    flow.published(head1)
    head2 = flow.move_feature({"mod.py": "# header\n# second\n" + BODY}, "Second header line")
    head3 = flow.move_feature({"mod.py": "# header\n# third\n" + BODY}, "Third header line")
    assert flow.gh.deliver_pending(newest_first=True) >= 2

    def checks_of(head: str) -> list[dict]:
        return [e for e in flow.env.history("rebased") if e["data"].get("head") == head]

    def handled() -> list[dict]:
        stale = [e for e in flow.env.history("record_stale_head") if e["data"]["head_sha"] == head2]
        return stale or checks_of(head2)

    (outcome,) = wait_for(handled, 60, "carry to handle the older head's delivery")
    flow.published(head3)
    wait_for(lambda: lanes_empty(flow.env.client), 60, "carry to finish")
    assert outcome["kind"] == "record_stale_head", f"the older head was checked: {outcome}"
    assert head3[:12] in outcome["data"]["reason"]
    state = flow.env.state()
    assert (state.head_sha, state.checked_head) == (head3, head3)
    assert checks_of(head2) == [] and len(checks_of(head3)) == 1
    heads = [e["data"].get("head") for e in flow.env.history("published")]
    assert head2 not in heads and heads[0] == head3


def test_a_command_whose_permission_cannot_be_read_is_answered_and_retried(flow: Flow):
    """Issue 34, item 5: GitHub fails the permission lookup (5xx past PyGithub's retries): the
    commenter is told carry is trying again, the failure is recorded, and the command is
    carried out once the lookup works; it was dropped without a word."""
    head = flow.move_feature({"mod.py": "# header\n" + BODY}, "Add a header")
    flow.published(head)
    (pr,) = flow.carry_pulls()
    path = f"/repos/{DOWN_OWNER}/{DOWN_NAME}/collaborators/*/permission"
    flow.gh.inject_fault("server_error", times=6, method="GET", path=path)
    flow.gh.add_comment(DOWN_OWNER, DOWN_NAME, pr["number"], "/carry pause", user="maint")

    def answers() -> list[str]:
        return [
            c["body"]
            for c in flow.gh.comments(DOWN_OWNER, DOWN_NAME, pr["number"])
            if c["user"]["login"] == "carry[bot]"
        ]

    wait_for(
        lambda: any("could not check your permission; trying again" in a for a in answers()),
        90,
        "the answer that carry tries again",
    )
    wait_for(lambda: "Paused: carry will not act on its own." in answers(), 90, "the command")
    assert flow.env.state().paused_by == "maint"
    (failed,) = flow.env.history("command-not-checked")
    assert failed["data"]["author"] == "maint" and failed["data"]["final"] is False


def _carry_answers(flow: Flow, number: int) -> list[str]:
    return [
        c["body"]
        for c in flow.gh.comments(DOWN_OWNER, DOWN_NAME, number)
        if c["user"]["login"] == "carry[bot]"
    ]


def _published_entries(flow: Flow, head: str) -> list[dict]:
    return [e for e in flow.env.history("published") if e["data"].get("head") == head]


def test_a_pr_a_person_closed_is_not_reopened_until_upstream_moves_or_reopen(flow: Flow):
    """Issue 34, item 9: a person closes carry's PR; a re-check of the same head opens no new
    PR (it opened PR #2 without a word), the series needs attention, and `/carry reopen` opens
    a new PR that links the closed one."""
    head = flow.move_feature({"mod.py": "# header\n" + BODY}, "Add a header")
    flow.published(head)
    (pr,) = flow.carry_pulls()
    flow.gh.close_pull(DOWN_OWNER, DOWN_NAME, pr["number"], user="maint")
    wait_for(lambda: flow.env.history("record_carry_pr"), 30, "the close to be recorded")

    flow.gh.add_comment(DOWN_OWNER, DOWN_NAME, pr["number"], "/carry rebase", user="maint")
    held = wait_for(
        lambda: [e for e in _published_entries(flow, head) if e["data"].get("step") == "held"],
        60,
        "the re-check to hold back the PR",
    )
    assert held[0]["data"]["closed_pr"] == pr["number"]
    assert [p["number"] for p in flow.carry_pulls()] == [pr["number"]]
    state = flow.env.state()
    assert state is not None
    assert (
        f"carry's PR #{pr['number']} was closed by @maint; carry opens no new PR until "
        "upstream moves or `/carry reopen`"
    ) in state.needs_attention
    web = flow.gh.deliveries[0].url.removesuffix("/webhooks/github")
    shown = httpx.get(f"{web}/api/v1/series/{SERIES}", timeout=10).json()["attention"]
    (row,) = [a for a in shown if a["reason"].startswith(f"carry's PR #{pr['number']}")]
    assert row["since"] is not None
    overview = httpx.get(f"{web}/", timeout=10).text
    assert f"carry&#39;s PR #{pr['number']} was closed by @maint" in overview

    flow.gh.add_comment(DOWN_OWNER, DOWN_NAME, pr["number"], "/carry reopen", user="maint")
    wait_for(lambda: len(flow.carry_pulls()) == 2, 60, "a new PR after /carry reopen")
    new = next(p for p in flow.carry_pulls() if p["number"] != pr["number"])
    assert new["state"] == "open"
    assert f"Replaces #{pr['number']}, closed by @maint." in new["body"]
    assert any("carry opens a new PR" in a for a in _carry_answers(flow, pr["number"]))
    wait_for(lambda: not (flow.env.state() or state).needs_attention, 30, "nothing to attend")


def test_a_deleted_branch_counts_as_a_close_until_upstream_moves(flow: Flow):
    """Issue 34, item 9: a person deletes carry's branch (GitHub closes its PR, the deleter as
    sender); a re-check of the same head opens no new PR; a new upstream head does, linking
    the closed one."""
    head = flow.move_feature({"mod.py": "# header\n" + BODY}, "Add a header")
    flow.published(head)
    (pr,) = flow.carry_pulls()
    flow.gh.push(
        DOWN_OWNER, DOWN_NAME, flow.env.downstream, f":refs/heads/{BRANCH}", pusher="maint"
    )
    wait_for(lambda: flow.env.history("record_carry_pr"), 30, "the close to be recorded")

    flow.gh.add_comment(DOWN_OWNER, DOWN_NAME, pr["number"], "/carry rebase", user="maint")
    wait_for(
        lambda: [e for e in _published_entries(flow, head) if e["data"].get("step") == "held"],
        60,
        "the re-check to hold back the PR",
    )
    assert [p["number"] for p in flow.carry_pulls()] == [pr["number"]]
    assert flow.branch_sha() is None

    head2 = flow.move_feature({"mod.py": "# header\n# second\n" + BODY}, "Second header line")
    flow.published(head2)
    new = next(p for p in flow.carry_pulls() if p["number"] != pr["number"])
    assert new["state"] == "open"
    assert f"Replaces #{pr['number']}, closed by @maint." in new["body"]


def test_a_close_whose_webhook_was_lost_is_still_respected(held_flow: Flow):
    """Issue 34, item 9: the close's delivery never arrives (GitHub does not redeliver a
    failed one); a `/carry rebase` of the same head still opens no new PR: the publisher finds
    carry's PR closed on GitHub and records the close."""
    flow = held_flow
    head = flow.move_feature({"mod.py": "# header\n" + BODY}, "Add a header")
    flow.gh.deliver_pending()
    flow.published(head)
    (pr,) = flow.carry_pulls()
    flow.gh.deliver_pending()
    flow.gh.close_pull(DOWN_OWNER, DOWN_NAME, pr["number"], user="maint")  # held: never sent
    flow.gh.add_comment(DOWN_OWNER, DOWN_NAME, pr["number"], "/carry rebase", user="maint")
    command = flow.gh.deliveries[-1]
    assert command.event == "issue_comment"
    answer = httpx.post(command.url, content=command.body, headers=command.headers, timeout=10)
    assert answer.status_code in (200, 202)

    held = wait_for(
        lambda: [e for e in _published_entries(flow, head) if e["data"].get("step") == "held"],
        60,
        "the re-check to hold back the PR",
    )
    assert held[0]["data"]["closed_pr"] == pr["number"]
    (found,) = flow.env.history("carry-pr-found-closed")
    assert found["data"] == {"pr": pr["number"], "state": "closed_unmerged"}
    assert [p["number"] for p in flow.carry_pulls()] == [pr["number"]]
    state = flow.env.state()
    assert (
        state is not None
        and (
            f"carry's PR #{pr['number']} was closed by someone; carry opens no new PR until "
            "upstream moves or `/carry reopen`"
        )
        in state.needs_attention
    )


def test_a_command_delivered_while_carry_was_down_is_redelivered_and_carried_out_once(
    flow_with_hook_id: Flow,
):
    """Issue 34, item 3: GitHub does not redeliver a failed delivery by itself. `carry web`
    is down when a maintainer comments `/carry pause`: the delivery fails and the command is
    lost for good (polling brings back heads and PR states, never comments). carry's
    redelivery task lists the hook's failed deliveries and asks GitHub for them again: the
    command is carried out, once, however often the task runs. The same for a delivery
    answered 503 because carry web's Redis did not answer."""
    flow = flow_with_hook_id
    head = flow.move_feature({"mod.py": "# header\n" + BODY}, "Add a header")
    flow.published(head)
    (pr,) = flow.carry_pulls()
    assert flow.env.web is not None
    port = int(flow.env.web.args[-1])  # carry web ... --port PORT
    flow.env.stop_web()
    flow.gh.add_comment(DOWN_OWNER, DOWN_NAME, pr["number"], "/carry pause", user="maint")
    flow.gh.wait_for_deliveries()
    (lost,) = [d for d in flow.gh.deliveries if d.event == "issue_comment"]
    assert lost.status_code is None and lost.error  # nobody answered
    flow.env.start_web(port)

    def answers() -> list[str]:
        return [
            c["body"]
            for c in flow.gh.comments(DOWN_OWNER, DOWN_NAME, pr["number"])
            if c["user"]["login"] == "carry[bot]"
        ]

    time.sleep(1)  # GitHub sends nothing again by itself
    assert [d.guid for d in flow.gh.deliveries].count(lost.guid) == 1
    assert flow.env.state().paused_by is None

    beat = Celery(broker=flow.env.redis_url)
    beat.send_task("carry.redeliver", queue="carry")  # what the beat sends every interval
    wait_for(lambda: "Paused: carry will not act on its own." in answers(), 60, "the command")
    assert flow.env.state().paused_by == "maint"
    (asked,) = history(flow.env.client, None, kind="delivery-redelivered")
    assert asked["data"]["guid"] == lost.guid and asked["data"]["status_code"] == 502

    # Run again: the event has a 2xx attempt now, nothing more is asked for or done.
    beat.send_task("carry.redeliver", queue="carry")
    wait_for(lambda: lanes_empty(flow.env.client), 60, "carry to finish")
    time.sleep(1)
    flow.gh.wait_for_deliveries()
    attempts = [d for d in flow.gh.deliveries if d.guid == lost.guid]
    assert [(d.redelivery, d.status_code) for d in attempts] == [(False, None), (True, 202)]
    assert answers().count("Paused: carry will not act on its own.") == 1

    # carry web up but its Redis unreachable: the delivery is answered 503, then asked for.
    flow.env.stop_web()
    flow.env.start_web(port, env={"REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"})
    flow.gh.add_comment(DOWN_OWNER, DOWN_NAME, pr["number"], "/carry resume", user="maint")
    flow.gh.wait_for_deliveries()
    (refused,) = [
        d for d in flow.gh.deliveries if d.payload.get("comment", {}).get("body") == "/carry resume"
    ]
    assert refused.status_code == 503
    flow.env.stop_web()
    flow.env.start_web(port)
    beat.send_task("carry.redeliver", queue="carry")
    wait_for(lambda: flow.env.state().paused_by is None, 60, "the resume command")
    redelivered = [d for d in flow.gh.deliveries if d.guid == refused.guid]
    assert [(d.redelivery, d.status_code) for d in redelivered] == [(False, 503), (True, 202)]


def test_a_renamed_then_transferred_downstream_is_still_matched_by_its_id(flow: Flow):
    """Issue 34, item 7: after a rename, deliveries name the repository by its new name
    (same id); `/carry pause` was answered "not on a pull request of the downstream
    repository" and a person's close was not recorded. carry matches deliveries by
    `repository.id`, says once per move what changed and that the config still names the old
    name, and goes on; a transfer to another owner is followed the same way."""
    head = flow.move_feature({"mod.py": "# header\n" + BODY}, "Add a header")
    flow.published(head)
    (pr,) = flow.carry_pulls()
    renamed = "carry-renamed"
    flow.gh.rename_repo(DOWN_OWNER, DOWN_NAME, renamed)
    flow.gh.add_comment(DOWN_OWNER, renamed, pr["number"], "/carry pause", user="maint")

    def answers(owner: str, name: str) -> list[str]:
        return [
            c["body"]
            for c in flow.gh.comments(owner, name, pr["number"])
            if c["user"]["login"] == "carry[bot]"
        ]

    wait_for(
        lambda: "Paused: carry will not act on its own." in answers(DOWN_OWNER, renamed),
        60,
        "the pause command under the new name",
    )
    assert flow.env.state().paused_by == "maint"
    (moved,) = flow.env.history("repository-moved")
    assert moved["data"]["how"] == "renamed"
    assert (moved["data"]["was"], moved["data"]["now"]) == (
        f"{DOWN_OWNER}/{DOWN_NAME}",
        f"{DOWN_OWNER}/{renamed}",
    )
    assert moved["data"]["action"] == f"set downstream.repo to {DOWN_OWNER}/{renamed} in the config"

    flow.gh.add_user("new-home", type="Organization")
    flow.gh.transfer_repo(DOWN_OWNER, renamed, "new-home")
    flow.gh.add_comment("new-home", renamed, pr["number"], "/carry resume", user="maint")
    wait_for(
        lambda: "Resumed." in "\n".join(answers("new-home", renamed)),
        60,
        "the resume command after the transfer",
    )
    assert flow.env.state().paused_by is None
    flow.gh.close_pull("new-home", renamed, pr["number"], user="maint")
    wait_for(
        lambda: (closed := flow.env.state().closed_pr) is not None and closed.by == "maint",
        60,
        "the person's close to be recorded",
    )
    transferred = [e for e in flow.env.history("repository-moved") if e["data"]["how"] != "renamed"]
    assert [e["data"]["now"] for e in transferred] == [f"new-home/{renamed}"]
    assert transferred[0]["data"]["action"] == (
        f"set downstream.repo to new-home/{renamed} in the config"
    )
