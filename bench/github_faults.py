"""`python -m bench.reliability --scenario github-faults`: GitHub's documented production behaviour,
injected into the emulator while a whole carry deployment runs (a `carry web` and a worker
process, a private redis-server, real git, the emulator's own signed webhook deliveries).

One row per fault, each saying what was lost, duplicated or left wrong on GitHub (all 0 when
carry copes) and whether carry's state and GitHub agree at the end (ok / WRONG):

- faults after the effect: carry's PR is opened and its branch pushed, but GitHub's answers
  are lost (502): carry reads back what GitHub has instead of opening a second PR or labelling
  a tree with a VERSION the branch does not carry;
- out-of-order pushes: two heads' push webhooks arrive newest first: the older head is
  recorded as behind, never rebased or published over the newer;
- a protected branch: an organization ruleset blocks force pushes to carry's branches
  (GitHub's GH013): the refresh is refused, said once, not retried, the branch left alone;
- a secondary-limit storm on CI reports: GitHub refuses the installation's next writes with
  403 and Retry-After while a run's rows change on four checks, with two workers reporting
  (both stay for the rows after it):
  every refused report and PR table edit is sent again until it lands, none is sent inside a
  wait GitHub asked for (the hold is the installation's, in Redis), none is sent twice;
- deliveries answered 503: carry web's Redis is down as a `/carry pause` comment is delivered;
  GitHub never redelivers by itself, carry's `carry.redeliver` asks it to once Redis is back;
- a rename and a transfer of the downstream repository: webhooks carry the new name with the
  same id; `/carry` commands, a publish and a person's close still reach the series;
- a person's close: a re-check of the same head opens no new PR and the series needs
  attention; `/carry reopen` opens one that links the closed PR.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx

from bench.reliability.common import tasks_sent_to
from bot.core.state import CiState, CiStatus
from bot.emulator import GitHubEmulator
from bot.local_redis import free_port
from bot.queue.celery_app import app as celery_app
from harness.carry_env import BODY, SECRET, SERIES, CarryEnv
from harness.gitrepo import git
from harness.redis_server import PrivateRedis
from workers.ci.rows import publish_rows

UP_OWNER, UP_NAME = "upstream-org", "engine"
DOWN_OWNER, DOWN_NAME = "downstream-org", "carry"
BRANCH = f"carry/{SERIES}"
FIX = {"mod.py": BODY.replace("compute(10)", "compute(10, safe=True)")}
REFUSED_MARKER = "<!-- carry:publish-refused -->"
WAIT_S = 90.0  # for one step of carry's (a rebase and a publish on a loaded machine)
OWNER_TOKEN = "owner-token"  # the downstream owner's: an admin may rename and transfer
NEW_NAME, NEW_OWNER = "carry-renamed", "new-home"

STORM_CHECKS = ("gaudi/has-fix", "gaudi/serve", "gb10/has-fix", "gb10/serve")
STORM_REFUSALS = 10  # GitHub's secondary limit refuses the installation's next 10 writes
STORM_RETRY_AFTER_S = 2  # each with Retry-After: 2
STORM_STATES = (CiStatus.QUEUED, CiStatus.RUNNING, CiStatus.SUCCESS)
IN_FLIGHT_S = 0.1  # a write this soon after a refusal was sent before its answer came

T = TypeVar("T")


@dataclass
class Outcome:
    """A fault's row: counts that must all be 0, and what was seen."""

    name: str
    done: str
    lost: list[str]
    duplicated: list[str]
    wrong: list[str]
    how: str

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.wrong)

    def cells(self) -> tuple[str, str, str, str, str, bool]:
        def said(items: list[str]) -> str:
            return f"{len(items)}" + (f" ({'; '.join(items)})" if items else "")

        verdict = "ok" if self.ok else "WRONG"
        recovered = f"{self.how}; left wrong on GitHub: {said(self.wrong)} -- {verdict}"
        return (
            self.name,
            self.done,
            said(self.lost),
            said(self.duplicated),
            recovered,
            self.ok,
        )


def within(condition: Callable[[], T | None], timeout: float = WAIT_S) -> T | None:
    """condition()'s first true value within `timeout`, else None (the row says what)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    return None


@dataclass
class Deployment:
    env: CarryEnv
    gh: GitHubEmulator
    owner: str = DOWN_OWNER
    name: str = DOWN_NAME
    heads: int = 0
    port: int = 0  # carry web's, where the hook delivers

    def move_upstream(self) -> str:
        """Upstream main moves (a push on the emulated GitHub, delivered to carry)."""
        self.heads += 1
        headers = "".join(f"# header {i}\n" for i in range(self.heads))
        sha = self.env.upstream.commit(f"Header {self.heads}", {"mod.py": headers + BODY})
        self.gh.push(UP_OWNER, UP_NAME, self.env.upstream.path, "main", pusher="upstream-dev")
        return sha

    def published(self, head: str) -> dict[str, Any] | None:
        return within(
            lambda: next(
                (e for e in self.env.history("published") if e["data"].get("head") == head), None
            )
        )

    def pulls(self) -> list[dict[str, Any]]:
        return [p for p in self.gh.pulls(self.owner, self.name) if p["head"]["ref"] == BRANCH]

    def tip(self) -> str | None:
        return self.gh.ref(self.owner, self.name, f"refs/heads/{BRANCH}")

    def branch_version(self) -> str | None:
        tip = self.tip()
        if tip is None:
            return None
        bare = self.gh.repo_path(self.owner, self.name)
        return git(bare, "show", f"{tip}:patches/{SERIES}/VERSION").strip() or None

    def carry_comments(self, number: int) -> list[str]:
        return [
            c["body"]
            for c in self.gh.comments(self.owner, self.name, number)
            if c["user"]["login"] == "carry[bot]"
        ]

    def pushes(self) -> int:
        return sum(
            1
            for r in self.gh.requests
            if r.kind == "git" and r.method == "POST" and r.path.endswith("/git-receive-pack")
        )

    def api(self, method: str, path: str, body: dict[str, Any]) -> httpx.Response:
        headers = {"Authorization": f"token {OWNER_TOKEN}", "User-Agent": "carry-bench"}
        return httpx.request(method, f"{self.gh.base_url}{path}", json=body, headers=headers)

    def agreement(self) -> list[str]:
        """Where carry's state and GitHub disagree: its PR, and the VERSION on its branch."""
        state = self.env.state()
        wrong = []
        open_prs = [p for p in self.pulls() if p["state"] == "open"]
        if state is None or state.pr is None:
            return ["carry has no PR in its state"]
        if open_prs and open_prs[0]["number"] != state.pr.number:
            wrong.append(f"state names PR #{state.pr.number}, GitHub #{open_prs[0]['number']}")
        if self.branch_version() != state.version:
            wrong.append(f"VERSION {self.branch_version()} on the branch, {state.version} in state")
        return wrong


@contextlib.contextmanager
def deployment(root: Path) -> Iterator[Deployment]:
    server = PrivateRedis(root / "redis", persist=False).start()
    env = CarryEnv(root / "carry", server.url)
    env.carry_patches([FIX])
    git(env.downstream, "init", "-q", "-b", "main")
    git(env.downstream, "add", "-A")
    git(env.downstream, "commit", "-q", "-m", "carry the fix")
    try:
        with GitHubEmulator(root / "gh") as gh:
            gh.create_repo(UP_OWNER, UP_NAME, from_path=env.upstream.path)
            gh.create_repo(DOWN_OWNER, DOWN_NAME, from_path=env.downstream)
            gh.add_token(OWNER_TOKEN, DOWN_OWNER)
            gh.add_user(NEW_OWNER, type="Organization")
            gh.add_user("carry[bot]", type="Bot")
            gh.add_token("carry-token", "carry[bot]")
            gh.set_permission(DOWN_OWNER, DOWN_NAME, "carry[bot]", "write")
            gh.add_user("maint")
            gh.set_permission(DOWN_OWNER, DOWN_NAME, "maint", "write")
            env.write_config()
            config = env.config_path.read_text()
            upstream_url = gh.git_url(UP_OWNER, UP_NAME)
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            # a hook on each repository, as an owner sets them up (a repository hook's failed
            # deliveries can be listed and redelivered by its id)
            gh.add_webhook(f"{url}/webhooks/github", SECRET, owner=UP_OWNER, repo=UP_NAME)
            hook = gh.add_webhook(
                f"{url}/webhooks/github", SECRET, owner=DOWN_OWNER, repo=DOWN_NAME
            )
            written = json.loads(config.replace(str(env.upstream.path), upstream_url))
            written["web"] = {"hook_id": hook}  # carry asks GitHub to redeliver its failures
            env.config_path.write_text(json.dumps(written, indent=2))
            env.extra_env.update(
                {
                    "GITHUB_TOKEN": "carry-token",
                    "GITHUB_BASE_URL": gh.base_url,
                    "CARRY_DOWNSTREAM_DIR": "",
                    "CARRY_BOT_LOGIN": "carry[bot]",
                }
            )
            env.start_web(port)
            env.start_worker()
            yield Deployment(env, gh, port=port)
    finally:
        env.stop()
        server.stop(kill=True)


# --------------------------------------------------------------------------- the faults


def after_the_effect(d: Deployment) -> Outcome:
    """carry's first PR is opened, then GitHub's answer is lost (502); a refresh's push lands,
    then its answer is lost (502 from git's receive-pack)."""
    lost, duplicated = [], []
    d.gh.inject_fault("server_error", method="POST", path="/repos/*/pulls", after=True)
    first = d.move_upstream()
    if d.published(first) is None:
        lost.append(f"head {first[:12]} never published")
    receive = f"/{d.owner}/{d.name}.git/git-receive-pack"
    d.gh.inject_fault("server_error", scope="git", method="POST", path=receive, after=True)
    second = d.move_upstream()
    if d.published(second) is None:
        lost.append(f"head {second[:12]} never published")
    if len(d.pulls()) > 1:
        duplicated.append(f"{len(d.pulls())} PRs opened for one series")
    faulted = [r for r in d.gh.requests if r.effect_status is not None]
    read_back = len(d.env.history("push-read-back"))
    return Outcome(
        "GitHub faults after the effect",
        f"the first PR opened then answered 502; a refresh's push landed then answered 502 "
        f"({len(faulted)} requests took effect and lost their answer)",
        lost,
        duplicated,
        d.agreement(),
        f"the PR found, not opened again; the pushed VERSION read back ({read_back} read-back)",
    )


def out_of_order_pushes(d: Deployment) -> Outcome:
    """Two pushes of upstream main reach carry newest first (GitHub promises no order; a
    redelivery always comes after newer deliveries): the older head is recorded as behind,
    never rebased or published over the newer one."""
    with d.gh.deliveries_held(newest_first=True):
        older = d.move_upstream()
        newer = d.move_upstream()
    lost, duplicated, wrong = [], [], []
    if d.published(newer) is None:
        lost.append(f"the newest head {newer[:12]} was never published")
    stale = within(lambda: [e for e in d.env.history("record_stale_head")], 30) or []
    time.sleep(2)  # a rebase of the older head would have come by now
    rebased = [e for e in d.env.history("rebased") if e["data"].get("head") == older]
    if rebased:
        wrong.append(f"the older head {older[:12]} was rebased")
    if any(e["data"].get("head") == older for e in d.env.history("published")):
        wrong.append(f"the older head {older[:12]} was published over the newer")
    state = d.env.state()
    if state is None or state.checked_head != newer:
        wrong.append(
            f"the series is on {(state.checked_head if state else None)!s:.12}, not the newest head"
        )
    wrong += d.agreement()
    return Outcome(
        "out-of-order pushes",
        f"heads {older[:12]} then {newer[:12]} pushed; their push webhooks delivered newest first",
        lost,
        duplicated,
        wrong,
        f"the older head recorded as behind ({len(stale)} entry), the newer one published",
    )


def protected_branch(d: Deployment) -> Outcome:
    """The organization's ruleset blocks force pushes to carry's branches; a refresh comes."""
    ruleset = d.gh.add_ruleset(d.owner, include=("refs/heads/carry/**",))
    before_tip, before_pushes = d.tip(), d.pushes()
    head = d.move_upstream()
    refused = within(lambda: d.env.history("publish-refused"))
    time.sleep(2)  # a retry of the refused push would have come by now
    lost, duplicated, wrong = [], [], []
    if refused is None:
        lost.append("the refusal was never recorded")
    pushes = d.pushes() - before_pushes
    if pushes > 1:
        duplicated.append(f"the refused push sent {pushes} times")
    if d.tip() != before_tip:
        wrong.append("carry's branch moved despite the ruleset")
    state = d.env.state()
    number = state.pr.number if state and state.pr else 0
    said = within(lambda: [b for b in d.carry_comments(number) if REFUSED_MARKER in b], 30)
    if not said:
        lost.append("no PR comment names the setting")
    elif len(said) > 1:
        duplicated.append(f"{len(said)} refusal comments")
    if state is None or state.publish_refused is None:
        wrong.append("the state does not say the push is refused")
    code = refused[0]["data"].get("code") if refused else None
    d.gh.remove_ruleset(ruleset)
    return Outcome(
        "protected branch (ruleset)",
        f"an organization ruleset blocks force pushes to carry/**; head {head[:12]} refreshes",
        lost,
        duplicated,
        wrong,
        f"refused ({code}) once, said in {len(said or [])} PR comment, not retried",
    )


def answered_503(d: Deployment) -> Outcome:
    """carry's web process loses its Redis and answers a `/carry pause` comment's delivery 503
    (GitHub records the failure and never redelivers it by itself); once Redis is back, carry's
    `carry.redeliver` task (the beat's, run at once here) asks GitHub for it again."""
    number = next(p for p in d.pulls() if p["state"] == "open")["number"]
    before = len(d.gh.deliveries)
    d.env.stop_web()
    dead = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there: Redis is down
    d.env.start_web(d.port, env={"REDIS_URL": dead})
    d.gh.add_comment(d.owner, d.name, number, "/carry pause", user="maint")
    failed = within(lambda: [x for x in d.gh.deliveries[before:] if x.status_code == 503], 30) or []
    d.env.stop_web()
    d.env.start_web(d.port)
    # GitHub shows a repository hook's deliveries to admins only (README, step 4)
    d.gh.set_permission(d.owner, d.name, "carry[bot]", "admin")
    started = time.monotonic()
    with tasks_sent_to(d.env.redis_url):
        celery_app.send_task("carry.redeliver")
    paused = within(lambda: (s := d.env.state()) and s.paused_by == "maint")
    seconds = time.monotonic() - started
    d.gh.set_permission(d.owner, d.name, "carry[bot]", "write")
    lost, duplicated, wrong = [], [], []
    if not failed:
        wrong.append("no delivery was answered 503")
    if paused is None:
        lost.append("the /carry pause answered 503")
    time.sleep(2)  # a second redelivery or answer would have come by now
    replies = [a for a in d.carry_comments(number) if a.startswith("Paused:")]
    if len(replies) > 1:
        duplicated.append(f"'Paused:' answered {len(replies)} times")
    asked = len([x for x in d.gh.deliveries[before:] if x.redelivery])
    d.gh.add_comment(d.owner, d.name, number, "/carry resume", user="maint")
    within(lambda: (s := d.env.state()) and s.paused_by is None, 30)
    return Outcome(
        "deliveries answered 503",
        f"carry web's Redis down: a `/carry pause` delivery answered "
        f"{failed[0].status_code if failed else '?'}; Redis back, the beat's carry.redeliver run",
        lost,
        duplicated,
        wrong,
        f"GitHub asked for {asked} redelivery; the pause taken "
        f"{seconds:.1f} s after the run was queued, answered {len(replies)} time(s)",
    )


def rename_and_transfer(d: Deployment) -> Outcome:
    """The downstream is renamed over REST, then transferred to another organization; webhooks
    carry the new names with the same id. Commands, a publish and a person's close follow."""
    lost, duplicated, wrong = [], [], []
    number = d.pulls()[0]["number"]
    renamed = d.api("PATCH", f"/repos/{d.owner}/{d.name}", {"name": NEW_NAME})
    d.name = NEW_NAME
    d.gh.add_comment(d.owner, d.name, number, "/carry pause", user="maint")
    if within(lambda: (s := d.env.state()) and s.paused_by == "maint") is None:
        lost.append("/carry pause under the new name")
    moved = d.api("POST", f"/repos/{d.owner}/{d.name}/transfer", {"new_owner": NEW_OWNER})
    d.owner = NEW_OWNER
    d.gh.add_comment(d.owner, d.name, number, "/carry resume", user="maint")
    if within(lambda: (s := d.env.state()) and s.paused_by is None) is None:
        lost.append("/carry resume after the transfer")
    head = d.move_upstream()
    if d.published(head) is None:
        lost.append(f"head {head[:12]} never published to the moved repository")
    answers = d.carry_comments(number)
    for said in ("Paused:", "Resumed."):
        count = sum(1 for a in answers if a.startswith(said))
        if count > 1:
            duplicated.append(f"{said!r} answered {count} times")
    if len(d.pulls()) > 1:
        duplicated.append(f"{len(d.pulls())} PRs in the moved repository")
    wrong += d.agreement()
    d.gh.close_pull(d.owner, d.name, number, user="maint")
    if within(lambda: (s := d.env.state()) and s.closed_pr and s.closed_pr.by == "maint") is None:
        lost.append("the person's close of the PR")
    told = [e["data"]["how"] for e in d.env.history("repository-moved")]
    if sorted(told) != ["renamed", "transferred"]:
        wrong.append(f"history says {told or 'nothing'} of the two moves")
    return Outcome(
        "downstream renamed, then transferred",
        f"PATCH /repos/... name ({renamed.status_code}), POST .../transfer "
        f"({moved.status_code}); /carry pause and resume, a new head and a person's close "
        "under the new names",
        lost,
        duplicated,
        wrong,
        f"matched by repository id; each move said once in the history ({len(told)})",
    )


def persons_close(d: Deployment) -> Outcome:
    """A person closed carry's PR (the row before ends so): a `/carry rebase` of the same head
    opens no new PR and the series needs attention; `/carry reopen` opens one, linking the
    closed PR."""
    lost, duplicated, wrong = [], [], []
    state = d.env.state()
    closed = state.closed_pr if state else None
    if state is None or closed is None:
        return Outcome(
            "a person's close",
            "no close recorded by the row before",
            ["the person's close"],
            [],
            [],
            "nothing to check",
        )
    head = state.checked_head
    d.gh.add_comment(d.owner, d.name, closed.number, "/carry rebase", user="maint")

    def held() -> list[dict[str, Any]]:
        return [
            e
            for e in d.env.history("published")
            if e["data"].get("head") == head and e["data"].get("step") == "held"
        ]

    if within(held) is None:
        lost.append("the re-check of the same head was never held back")
    time.sleep(2)  # a PR opened despite the close would be there by now
    opened = [p for p in d.pulls() if p["number"] != closed.number]
    if opened:
        wrong.append(f"PR #{opened[0]['number']} opened although a person closed #{closed.number}")
    attention = (d.env.state() or state).needs_attention
    if not any(f"PR #{closed.number} was closed by @{closed.by}" in a for a in attention):
        lost.append("the close is not under Needs attention")
    d.gh.add_comment(d.owner, d.name, closed.number, "/carry reopen", user="maint")
    new = within(lambda: [p for p in d.pulls() if p["number"] != closed.number])
    if not new:
        lost.append("/carry reopen opened no PR")
    time.sleep(2)  # a second PR would be there by now
    new = [p for p in d.pulls() if p["number"] != closed.number]
    if len(new) > 1:
        duplicated.append(f"{len(new)} PRs opened after one /carry reopen")
    linked = bool(new) and f"Replaces #{closed.number}, closed by @{closed.by}." in new[0]["body"]
    if new and not linked:
        wrong.append(f"PR #{new[0]['number']} does not link the closed #{closed.number}")
    if new:
        wrong += d.agreement()
    return Outcome(
        "a person's close",
        f"PR #{closed.number} closed by @{closed.by}; `/carry rebase` of the same head, "
        "then `/carry reopen`",
        lost,
        duplicated,
        wrong,
        f"held back on the same head ({len(held())} entry), under Needs attention; "
        f"{len(new)} new PR after /carry reopen, linking the closed one: {linked}",
    )


def _table_states(body: str) -> dict[str, str]:
    """The CI table of a PR body: check -> state."""
    cells = [line.split("|") for line in body.splitlines() if line.startswith("| ")]
    return {
        c[1].strip(): c[2].strip() for c in cells if len(c) > 3 and c[1].strip() in STORM_CHECKS
    }


def _storm_agreement(d: Deployment, sha: str, number: int) -> list[str]:
    """Where GitHub does not show carry's word for the storm's checks: each check's newest
    commit status, the PR's CI table, and carry's own record that GitHub has it."""
    wrong = []
    newest: dict[str, str] = {}
    for status in sorted(d.gh.statuses(d.owner, d.name, sha), key=lambda s: s["id"]):
        newest[status["context"]] = status["state"]
    table = _table_states(d.gh.pull(d.owner, d.name, number)["body"])
    state = d.env.state()
    for check in STORM_CHECKS:
        if newest.get(f"carry/{check}") != "success":
            wrong.append(f"{check}: GitHub's status {newest.get(f'carry/{check}')}")
        if table.get(check) != "success":
            wrong.append(f"{check}: the PR's CI table says {table.get(check)}")
        row = state.ci.get(check) if state else None
        if row is None or not row.on_github:
            wrong.append(f"{check}: carry still owes GitHub its row")
    if state is None or state.pr is None or state.pr.ci_table_owed:
        wrong.append("carry still owes the PR's CI table an edit")
    return wrong


def ci_report_storm(d: Deployment) -> Outcome:
    """GitHub's secondary limit refuses the installation's next writes (403, Retry-After) while
    a run's rows change on four checks; a second worker reports beside the first."""
    pull = next(p for p in d.pulls() if p["state"] == "open")
    number, sha = pull["number"], pull["head"]["sha"]
    state = d.env.state()
    head = (state.checked_head if state else None) or ""
    # another worker of the same installation; it stays for the later rows (a rename told by
    # both workers is said once: bot.store.series.append_history_once)
    d.env.start_worker("w2")
    first_seq = len(d.gh.requests)
    d.gh.secondary_limit(next_n_writes=STORM_REFUSALS, retry_after_s=STORM_RETRY_AFTER_S)
    started = time.monotonic()
    with tasks_sent_to(d.env.redis_url):
        for word in STORM_STATES:
            rows = [
                CiState(runner=c, state=word, run_id=f"storm-{c}", head_sha=head, commit_sha=sha)
                for c in STORM_CHECKS
            ]
            publish_rows(
                d.env.client, celery_app, SERIES, rows, replace_rows=word is CiStatus.QUEUED
            )
    agreed = within(lambda: not _storm_agreement(d, sha, number), 120)
    seconds = time.monotonic() - started
    time.sleep(2)  # a report sent again for nothing would have come by now
    sent = [r for r in d.gh.requests[first_seq:] if r.kind == "api" and r.method != "GET"]
    refused = [r for r in sent if r.fault == "secondary_rate_limit"]
    # a write sent inside a wait GitHub asked for (GitHub refuses it too, and warns that an
    # integration that goes on may be banned); one that reached GitHub within IN_FLIGHT_S of a
    # refusal was on its way before the refusal's answer reached any worker
    landed = [w for w in sent if w.fault is None]
    inside = [
        w
        for w in landed
        if any(r.at + IN_FLIGHT_S < w.at < r.at + STORM_RETRY_AFTER_S - 0.05 for r in refused)
    ]
    in_flight = [w for w in landed if any(r.at < w.at <= r.at + IN_FLIGHT_S for r in refused)]
    landed_statuses = Counter(
        (r.path, (r.json or {}).get("context"), (r.json or {}).get("description"))
        for r in sent
        if r.fault is None and r.path.startswith(f"/repos/{d.owner}/{d.name}/statuses/")
    )
    lost, duplicated, wrong = [], [], _storm_agreement(d, sha, number)
    if not agreed:
        lost.append("GitHub never showed every check's last word")
    duplicated += [
        f"{ctx} {words!r} sent {n} times"
        for (_p, ctx, words), n in landed_statuses.items()
        if n > 1
    ]
    if inside:
        first = inside[0]
        into = first.at - max(r.at for r in refused if r.at < first.at)
        wrong.append(
            f"{len(inside)} writes sent inside GitHub's Retry-After (the first, "
            f"{first.method} {first.path.rsplit('/', 1)[0]}/..., {into:.2f} s into it)"
        )
    edits = [r for r in sent if r.fault is None and r.method == "PATCH" and "/pulls/" in r.path]
    return Outcome(
        "secondary-limit storm on CI reports",
        f"{len(STORM_CHECKS)} checks through {len(STORM_STATES)} states, 2 workers; the "
        f"installation's next {STORM_REFUSALS} writes refused (403, Retry-After: "
        f"{STORM_RETRY_AFTER_S})",
        lost,
        duplicated,
        wrong,
        f"{len(refused)} refused and sent again after the installation's hold; "
        f"{len(inside)} sent inside it ({len(in_flight)} on their way as GitHub refused); "
        f"{sum(landed_statuses.values())} statuses and "
        f"{len(edits)} table edits landed; agree after {seconds:.1f} s",
    )


FAULTS: tuple[Callable[[Deployment], Outcome], ...] = (
    after_the_effect,
    out_of_order_pushes,
    protected_branch,
    ci_report_storm,
    answered_503,
    rename_and_transfer,
    persons_close,
)


def run(root: Path) -> list[Outcome]:
    """The faults one after another on one deployment (each starts where the last left)."""
    outcomes = []
    with deployment(root) as d:
        for fault in FAULTS:
            outcomes.append(fault(d))
    return outcomes
