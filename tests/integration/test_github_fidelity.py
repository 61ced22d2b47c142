"""carry against GitHub's rules that a lenient double would hide (issue 15): check runs are
App-only, private Free/Pro repositories refuse drafts, and bodies, comments and check-run
summaries have size limits. The emulator enforces each rule (tests/integration/
test_github_emulator.py cites where each is documented); these tests run carry's real publish
and CI-report code in this process against it, with real git, Redis and PyGithub."""

from __future__ import annotations

import dataclasses
import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import requests

from bot.core.events import ZERO_SHA as ZERO
from bot.core.events import HeadMoved
from bot.core.github_payloads import normalize
from bot.core.state import CiState
from bot.emulator import GitHubEmulator, WebhookSink
from bot.github import forge as forge_module
from bot.github.forge import ForgeError
from bot.queue.celery_app import app as celery_app
from bot.store import series as store
from bot.store.metrics import GITHUB_KEY
from harness.carry_env import BODY, SERIES, CarryEnv, queued_tasks
from harness.gitrepo import git
from tests.support.broker import point_at
from tests.support.deployment import (
    APP_ID,
    CHECK,
    CONFLICTING,
    DOWN_NAME,
    DOWN_OWNER,
    FIX,
    MOVED,
    SECOND,
    UP_NAME,
    UP_OWNER,
    Deploy,
    Deployment,
    deployments,
    pr,
)
from workers import poller, publish, tasks
from workers import runtime as runtime_module
from workers.ci import github as hardware
from workers.rebase import rebase_series


@pytest.fixture
def deploy(
    request: pytest.FixtureRequest, tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Deploy]:
    waits = request.getfixturevalue("waits") if "waits" in request.fixturenames else None
    with deployments(tmp_path, redis_url, monkeypatch, waits=waits) as start:
        yield start


# -- 1. check runs need a GitHub App ------------------------------------------------------------


def test_with_a_token_ci_is_reported_as_commit_statuses_and_in_the_pr(deploy: Deploy) -> None:
    d = deploy(auth="token")
    state = d.propose(MOVED, "Add a header")
    d.report(state, CiState(runner=CHECK, state="success", detail="passed in 3 s"))
    (status,) = d.gh.statuses(DOWN_OWNER, DOWN_NAME, pr(state).head_sha)
    assert (status["context"], status["state"]) == (f"carry/{CHECK}", "success")
    assert status["description"] == "success: passed in 3 s"
    assert d.gh.check_runs(DOWN_OWNER, DOWN_NAME) == []
    assert f"| {CHECK} | success | passed in 3 s |" in d.pull()["body"]
    assert d.history("ci-report-failed") == [] and d.history("ci-table-failed") == []


def test_the_ci_table_is_updated_even_when_the_result_cannot_be_posted(deploy: Deploy) -> None:
    d = deploy(auth="token")
    state = d.propose(MOVED, "Add a header")
    d.gh.inject_fault("server_error", times=1, method="POST", path="/repos/*/statuses/*")
    d.report(state, CiState(runner=CHECK, state="failure", detail="exit 1"))
    assert "502" in d.history("ci-report-failed")[0]["data"]["error"]
    assert f"| {CHECK} | failure | exit 1 |" in d.pull()["body"]


def test_as_an_app_ci_is_reported_as_check_runs(deploy: Deploy) -> None:
    d = deploy(auth="app")
    state = d.propose(MOVED, "Add a header")
    d.report(state, CiState(runner=CHECK, state="running"))
    (run,) = d.gh.check_runs(DOWN_OWNER, DOWN_NAME, sha=pr(state).head_sha)
    assert (run["name"], run["status"], run["app"]["id"]) == (
        f"carry/{CHECK}",
        "in_progress",
        APP_ID,
    )
    assert f"| {CHECK} | running |" in d.pull()["body"]


# -- 1b. a result goes on the commit it tested, and only the newest word on a run counts ------------


def _latest(d: Deployment, sha: str) -> tuple[str, str]:
    """What GitHub shows for carry's check on a commit: the newest status of the context, or the
    newest check run of the name."""
    name = f"carry/{CHECK}"
    runs = [r for r in d.gh.check_runs(DOWN_OWNER, DOWN_NAME, sha=sha) if r["name"] == name]
    if runs:
        return runs[-1]["status"], str(runs[-1]["conclusion"])
    statuses = [s for s in d.gh.statuses(DOWN_OWNER, DOWN_NAME, sha) if s["context"] == name]
    return ("status", statuses[-1]["state"]) if statuses else ("none", "")


@pytest.mark.parametrize("auth", ["token", "app"])
def test_an_old_runs_late_end_goes_on_the_commit_it_tested_not_on_the_new_head(
    deploy: Deploy, auth: str
) -> None:
    d = deploy(auth=auth)
    first = d.propose(MOVED, "Add a header")
    old_head = pr(first).head_sha
    d.report(first, CiState(runner=CHECK, state="running", run_id="r1", commit_sha=old_head))
    second = d.propose({"mod.py": "# header\n# more\n" + BODY}, "Add another header")
    new_head = pr(second).head_sha
    assert new_head != old_head
    d.report(second, CiState(runner=CHECK, state="success", run_id="r2", commit_sha=new_head))
    shown = _latest(d, new_head)
    # The old run is cancelled late (its runner was killing the step): workers.ci.rows keeps
    # the newer run's row and reports the old one, which lost its place.
    ended = CiState(runner=CHECK, state="cancelled", run_id="r1", commit_sha=old_head)
    hardware.report_on_github(SERIES, ended)
    assert _latest(d, new_head) == shown  # the new head still shows its own run's success
    assert _latest(d, old_head) != ("status", "pending")  # the old commit's check ended there
    assert _latest(d, old_head) != ("in_progress", "None")


@pytest.mark.parametrize("auth", ["token", "app"])
def test_a_report_that_arrives_after_a_newer_one_of_its_run_does_not_undo_it(
    deploy: Deploy, auth: str
) -> None:
    d = deploy(auth=auth)
    state = d.propose(MOVED, "Add a header")
    head = pr(state).head_sha
    running = CiState(runner=CHECK, state="running", run_id="r1", commit_sha=head)
    d.report(state, CiState(runner=CHECK, state="success", run_id="r1", commit_sha=head))
    shown = _latest(d, head)
    hardware.report_on_github(SERIES, running)  # its task ran late: the row is success by now
    assert _latest(d, head) == shown
    assert f"| {CHECK} | success |" in d.pull()["body"]


def test_a_retest_on_the_same_commit_owns_its_check_against_the_older_runs_late_end(
    deploy: Deploy,
) -> None:
    d = deploy(auth="app")
    state = d.propose(MOVED, "Add a header")
    head = pr(state).head_sha
    d.report(state, CiState(runner=CHECK, state="running", run_id="r1", commit_sha=head))
    d.report(state, CiState(runner=CHECK, state="queued", run_id="r2", commit_sha=head))
    hardware.report_on_github(
        SERIES, CiState(runner=CHECK, state="cancelled", run_id="r1", commit_sha=head)
    )
    assert _latest(d, head) == ("queued", "None")


# -- 5. drafts on private Free/Pro repositories ---------------------------------------------------


def test_where_github_refuses_drafts_a_labelled_ready_pr_says_why(deploy: Deploy) -> None:
    d = deploy(private=True, plan="free", patches=(FIX, SECOND))
    state = d.propose(CONFLICTING, "Rework 10")
    assert state.outcome == "conflict"
    pull = d.pull()
    assert pull["draft"] is False and pr(state).draft is False
    assert [label["name"] for label in pull["labels"]] == ["carry:conflict"]
    assert "does not allow draft pull requests in this repository" in pull["body"]
    assert d.history("draft-refused")
    # A later publish keeps saying that this PR needs a human.
    d.propose({"mod.py": "# second header\n" + CONFLICTING["mod.py"]}, "Add a header")
    assert "needs a human before merging: see the `carry:conflict` label" in d.pull()["body"]


def test_a_conflict_label_goes_once_the_series_applies_again(deploy: Deploy) -> None:
    """carry:conflict tells a maintainer the PR needs a human; once a later head applies
    cleanly, the label must not keep saying so."""
    d = deploy(patches=(FIX, SECOND))
    state = d.propose(CONFLICTING, "Rework 10")
    assert state.outcome == "conflict"
    assert [label["name"] for label in d.pull()["labels"]] == ["carry:conflict"]
    d.gh.add_user("maint")
    d.gh.add_token("maint-token", "maint")
    d.gh.set_permission(DOWN_OWNER, DOWN_NAME, "maint", "write")
    labelled = requests.post(
        f"{d.gh.base_url}/repos/{DOWN_OWNER}/{DOWN_NAME}/issues/{pr(state).number}/labels",
        json=["keep-me"],
        headers={"User-Agent": "carry-test", "Authorization": "token maint-token"},
        timeout=10,
    )
    assert labelled.status_code == 200
    again = d.propose({"mod.py": "# header\n# back\n" + BODY}, "Undo the rework")
    assert again.outcome != "conflict"
    # carry's own outcome label goes; a label someone else set stays.
    assert [label["name"] for label in d.pull()["labels"]] == ["keep-me"]
    assert d.history("label-removed")[0]["data"]["label"] == "carry:conflict"
    # The PR is still the draft carry opened for the conflict; GitHub's REST API cannot make
    # it ready, so the body says to.
    assert d.pull()["draft"] is True
    assert 'Press "Ready for review" to take it out of draft.' in d.pull()["body"]


# -- 6. size limits ---------------------------------------------------------------------------------


def test_an_oversized_pr_body_is_cut_with_a_note_pointing_at_the_dashboard(deploy: Deploy) -> None:
    d = deploy(auth="token")
    state = d.propose(MOVED, "Add a header")
    d.report(state, CiState(runner=CHECK, state="failure", detail="E" * 70_000))
    body = d.pull()["body"]
    assert len(body) <= 65536 and body.startswith(f"<!-- carry:series={SERIES} -->")
    assert body.rstrip().endswith(
        f"Full text on the page of series `{SERIES}` (`/series/{SERIES}`) on carry's dashboard."
    )
    assert d.history("ci-table-failed") == []


def test_an_oversized_check_run_summary_is_cut_to_githubs_byte_limit(deploy: Deploy) -> None:
    d = deploy(auth="app")
    state = d.propose(MOVED, "Add a header")
    d.report(state, CiState(runner=CHECK, state="failure", detail="é" * 40_000))
    (run,) = d.gh.check_runs(DOWN_OWNER, DOWN_NAME, sha=pr(state).head_sha)
    summary = run["output"]["summary"]
    assert len(summary.encode()) <= 65535 and "Truncated by carry" in summary
    assert d.history("ci-report-failed") == []


def test_an_oversized_command_reply_is_cut_with_a_note(deploy: Deploy) -> None:
    d = deploy(auth="token")
    state = d.propose(MOVED, "Add a header")
    tasks.reply(SERIES, pr(state).number, "help line\n" * 20_000)
    (comment,) = d.gh.comments(DOWN_OWNER, DOWN_NAME, pr(state).number)
    assert len(comment["body"]) <= 65536 and comment["body"].startswith("help line\n")
    assert comment["body"].rstrip().endswith("Full text on carry's dashboard.")


# -- 2. conditional requests: weak ETags, free 304s ---------------------------------------------


def _get(gh: GitHubEmulator, path: str, **headers: str) -> requests.Response:
    return requests.get(
        gh.base_url + path, headers={"User-Agent": "carry-test", **headers}, timeout=10
    )


def test_the_emulator_sends_weak_etags_and_a_304_costs_no_rate_limit(tmp_path: Path) -> None:
    """As PyGithub's recording of api.github.com shows (tests/ReplayData/
    Environment.testEnvironmentSecrets.txt: a 200 with `ETag: W/"170ee1..."`, then the same
    GET with that If-None-Match answered 304 with X-RateLimit-Used still 164) and GitHub's
    docs say ("Making a conditional request does not count against your primary rate limit if
    a 304 response is returned and the request was made while correctly authorized")."""
    with GitHubEmulator(tmp_path / "gh") as gh:
        gh.create_repo(UP_OWNER, UP_NAME)
        gh.add_token("t0ken", "alice")
        auth = {"Authorization": "token t0ken"}
        path = f"/repos/{UP_OWNER}/{UP_NAME}"
        first = _get(gh, path, **auth)
        etag = first.headers["ETag"]
        assert first.status_code == 200 and etag.startswith('W/"') and etag.endswith('"')
        used = int(first.headers["X-RateLimit-Used"])
        again = _get(gh, path, **auth, **{"If-None-Match": etag})
        assert again.status_code == 304 and again.content == b""
        assert int(again.headers["X-RateLimit-Used"]) == used
        assert gh.rate_limit(token="t0ken").used == used
        # A weak comparison, as RFC 9110 asks of If-None-Match: the opaque tag decides.
        assert _get(gh, path, **auth, **{"If-None-Match": etag[2:]}).status_code == 304
        assert _get(gh, path, **auth, **{"If-None-Match": '"other", ' + etag}).status_code == 304
        assert _get(gh, path, **auth, **{"If-None-Match": 'W/"other"'}).status_code == 200
        assert gh.rate_limit(token="t0ken").used == used + 1
        # Only an authorized conditional request is free.
        anonymous = _get(gh, path)
        anonymous_again = _get(gh, path, **{"If-None-Match": anonymous.headers["ETag"]})
        assert anonymous_again.status_code == 304
        assert int(anonymous_again.headers["X-RateLimit-Used"]) == (
            int(anonymous.headers["X-RateLimit-Used"]) + 1
        )


# -- 8. annotated tags ------------------------------------------------------------------------------


def _push_annotated_tag(env: CarryEnv, gh: GitHubEmulator, tag: str) -> tuple[str, str]:
    """Tags upstream main with an annotated tag and pushes it to the emulated GitHub;
    (tag object sha, commit sha)."""
    env.upstream.git("tag", "-a", tag, "-m", f"Release {tag}", "main")
    gh.push(UP_OWNER, UP_NAME, env.upstream.path, f"refs/tags/{tag}", pusher="release-manager")
    return env.upstream.head(f"refs/tags/{tag}"), env.upstream.head(f"{tag}^{{commit}}")


def test_a_push_of_an_annotated_tag_names_the_tag_object_and_its_commit(tmp_path: Path) -> None:
    """GitHub's push payload for an annotated tag has the tag object's SHA in `after` and the
    commit it points to in `head_commit` (a real delivery, open-build-service#13500; GitHub's
    changelog 2021-10-01 "The push webhook payload provides a consistent head_commit on tag
    creation"), and no commits for a tag on a commit GitHub already has."""
    env = CarryEnv(tmp_path, "redis://unused")
    with GitHubEmulator(tmp_path / "gh") as gh, WebhookSink() as sink:
        gh.create_repo(UP_OWNER, UP_NAME, from_path=env.upstream.path)
        gh.add_webhook(sink.url)
        tag_object, commit = _push_annotated_tag(env, gh, "v1.0")
        gh.wait_for_deliveries()
        (push,) = [d.payload for d in gh.deliveries if d.event == "push"]
        assert gh.errors == []
    assert tag_object != commit
    assert (push["ref"], push["after"], push["before"]) == ("refs/tags/v1.0", tag_object, ZERO)
    assert push["head_commit"]["id"] == commit and push["commits"] == []
    assert push["created"] is True and push["forced"] is False


def test_an_annotated_tag_is_peeled_so_webhook_and_poller_rebase_it_once(
    tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The webhook names the tag object, the poller (ls-remote, peeled) the commit: both must
    become the same event, on the commit, or one tag is rebased twice."""
    env = CarryEnv(tmp_path, redis_url)
    env.carry_patches([FIX])
    env.write_config(base={"tag": "v1.0"})
    for key, value in env.env.items():
        monkeypatch.setenv(key, value)
    runtime_module.reset()
    broker = celery_app.conf.broker_url
    point_at(celery_app, redis_url)  # rebases are queued into the test's Redis
    try:
        rt = runtime_module.runtime()
        with GitHubEmulator(tmp_path / "gh") as gh, WebhookSink() as sink:
            gh.create_repo(UP_OWNER, UP_NAME, from_path=env.upstream.path)
            gh.add_webhook(sink.url)
            tag_object, commit = _push_annotated_tag(env, gh, "v1.0")
            gh.wait_for_deliveries()
            (delivery,) = [d for d in gh.deliveries if d.event == "push"]
        pushed = normalize("push", delivery.guid, delivery.payload)
        tasks.handle_event(rt, pushed)

        for polled in poller.head_events(rt):
            tasks.handle_event(rt, polled)
        queued = queued_tasks(rt.redis)
        rebases = [m for m in queued if m["headers"]["task"] == "carry.rebase"]
        assert len(rebases) == 1, rebases
        assert isinstance(pushed, HeadMoved) and pushed.after == commit
        assert commit in json.dumps(rebases) and tag_object not in json.dumps(rebases)
    finally:
        point_at(celery_app, broker)
        runtime_module.reset()


# -- 4. installation tokens: cached until near expiry, a fresh one may need a moment -----------


def _mints(gh: GitHubEmulator) -> int:
    return len(
        [
            r
            for r in gh.api_requests(method="POST")
            if r.operation and r.path.endswith("/access_tokens")
        ]
    )


def test_an_installation_token_is_reused_until_five_minutes_before_it_expires(
    deploy: Deploy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GitHub's installation tokens live an hour ("expires_at"): a publish and a CI report
    share one, and a new one is minted only shortly before the first expires."""
    d = deploy(auth="app")
    state = d.propose(MOVED, "Add a header")
    d.report(state, CiState(runner=CHECK, state="running"))
    assert _mints(d.gh) == 1
    # 56 minutes later (on both clocks) the token has 4 minutes left: carry takes a new one.
    d.gh.advance_time(56 * 60)
    monkeypatch.setattr(d.rt.forge_caches.tokens, "now", lambda: time.time() + 56 * 60)
    d.report(state, CiState(runner=CHECK, state="success", detail="ok"))
    assert _mints(d.gh) == 2
    assert d.history("ci-report-failed") == [] and d.history("ci-table-failed") == []


def test_a_fresh_installation_token_that_gets_401_is_retried_once_after_a_pause(
    deploy: Deploy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A just-created installation token can get 401 for a moment (replication lag: octokit/
    auth-app.js#65 and #161 retry such 401s for 5 s); carry waits once and tries again."""
    d = deploy(auth="app")
    d.gh.hub.token_warmup_s = 0.5
    forge = d.forge()
    assert forge.find_open_pull("carry/nothing") is None
    listed = "/repos/{owner}/{repo}/pulls"
    statuses = [r.status for r in d.gh.api_requests() if r.operation == listed]
    assert statuses == [401, 200]
    # An older token that gets 401 was refused (here: revoked): no retry, and the next task
    # mints a new one.
    monkeypatch.setattr(d.rt.forge_caches.tokens, "now", lambda: time.time() + 60)
    with d.gh.hub.lock:
        d.gh.hub.tokens.clear()
    d.gh.hub.token_warmup_s = 0
    d.gh.clear_requests()
    with pytest.raises(ForgeError, match=r"\(401\)"):
        d.forge().find_open_pull("x")
    assert [r.status for r in d.gh.api_requests()] == [401]
    assert d.forge().find_open_pull("x") is None
    assert _mints(d.gh) == 1


# -- 7. permission lookups ----------------------------------------------------------------------

PERMISSION_OP = "/repos/{owner}/{repo}/collaborators/{username}/permission"


def test_the_emulator_refuses_a_permission_lookup_without_push_access(tmp_path: Path) -> None:
    """GitHub answers `GET .../collaborators/{user}/permission` only to callers with push
    access: a read-only token on a public repository gets 403 "Must have push access to view
    collaborator permission." (observed on nodejs/node; undeclared in the OpenAPI description,
    which lists 200 and 404 only)."""
    with GitHubEmulator(tmp_path / "gh") as gh:
        gh.create_repo(UP_OWNER, UP_NAME)
        gh.add_token("reader", "reader")
        gh.add_token("writer", "writer")
        gh.set_permission(UP_OWNER, UP_NAME, "writer", "write")
        path = f"/repos/{UP_OWNER}/{UP_NAME}/collaborators/writer/permission"
        refused = _get(gh, path, Authorization="token reader")
        assert refused.status_code == 403
        assert refused.json()["message"] == "Must have push access to view collaborator permission."
        allowed = _get(gh, path, Authorization="token writer")
        assert allowed.status_code == 200 and allowed.json()["permission"] == "write"


def test_carry_says_its_credentials_cannot_read_permissions_instead_of_no_permission(
    deploy: Deploy,
) -> None:
    d = deploy()
    d.gh.set_permission(DOWN_OWNER, DOWN_NAME, "carry[bot]", "read")
    forge = d.forge()
    with pytest.raises(forge_module.PermissionUnknown, match="needs push access"):
        forge.permission("maintainer")


def test_a_commenters_permission_is_looked_up_once_per_minute(
    deploy: Deploy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Twenty comments by one person made twenty lookups; a minute-long cache makes one."""
    d = deploy()
    d.gh.add_user("maintainer")
    d.gh.set_permission(DOWN_OWNER, DOWN_NAME, "maintainer", "write")
    for _ in range(3):
        assert d.forge().permission("maintainer") == "write"
    assert len([r for r in d.gh.api_requests() if r.operation == PERMISSION_OP]) == 1
    later = time.time() + forge_module.PERMISSION_TTL_S + 1
    monkeypatch.setattr(d.rt.forge_caches.permissions, "now", lambda: later)
    d.forge().permission("maintainer")
    assert len([r for r in d.gh.api_requests() if r.operation == PERMISSION_OP]) == 2


def test_a_command_whose_author_cannot_be_checked_is_said_so_on_the_dashboard(
    deploy: Deploy,
) -> None:
    d = deploy()
    d.gh.set_permission(DOWN_OWNER, DOWN_NAME, "carry[bot]", "read")
    # Called directly, the task's retry (issue 34: never dropped, tried again) raises the error.
    with pytest.raises(forge_module.PermissionUnknown):
        tasks.check_permission(SERIES, 1, 7, "maintainer", "/carry pause")
    (entry,) = d.history("command-not-checked")
    assert entry["data"]["author"] == "maintainer" and "needs push access" in entry["data"]["error"]
    state = store.load_series(d.rt.redis, SERIES)
    assert state is None or state.paused_by is None  # nothing was acted on


# -- 3. rate limits on writes -------------------------------------------------------------------
# GitHub's docs ("Rate limits for the REST API", "Handle rate limit errors appropriately"): with
# `Retry-After`, do not retry before that many seconds; without it, wait at least a minute. A
# secondary limit refuses the write before it happens, so carry may send it again.


@pytest.fixture
def waits() -> list[float]:
    """The waits carry's GitHub port asks for, recorded instead of slept (deploy passes it)."""
    return []


def _comment_posts(d: Deployment, number: int) -> list[int | None]:
    path = f"/repos/{DOWN_OWNER}/{DOWN_NAME}/issues/{number}/comments"
    return [r.status for r in d.gh.api_requests("POST", path)]


def test_a_comment_refused_by_a_secondary_limit_is_sent_again_after_retry_after(
    deploy: Deploy, waits: list[float]
) -> None:
    d = deploy()
    number = d.open_pr()
    d.gh.secondary_limit(next_n_writes=1, retry_after_s=1)
    d.forge().comment(number, "rebased")
    assert waits == [1]
    assert _comment_posts(d, number) == [403, 201]
    assert [c["body"] for c in d.gh.comments(DOWN_OWNER, DOWN_NAME, number)] == ["rebased"]


def test_without_retry_after_a_refused_write_waits_a_minute(
    deploy: Deploy, waits: list[float]
) -> None:
    d = deploy()
    number = d.open_pr()
    d.gh.secondary_limit(next_n_writes=1, status=429)
    forge = d.forge()
    forge.update_pull(number, "carry: new title", "new body")
    assert waits == [60]
    assert d.pull()["title"] == "carry: new title"
    patches = d.gh.api_requests("PATCH", f"/repos/{DOWN_OWNER}/{DOWN_NAME}/pulls/{number}")
    assert [r.status for r in patches] == [429, 200]


def test_a_limit_longer_than_carry_waits_is_a_forge_error_that_says_when_to_retry(
    deploy: Deploy, waits: list[float]
) -> None:
    d = deploy()
    number = d.open_pr()
    d.gh.secondary_limit(next_n_writes=1, retry_after_s=600)
    forge = d.forge()
    with pytest.raises(ForgeError, match=r"comment .*rate limit.* 600 s .*retry after") as raised:
        forge.comment(number, "rebased")
    assert isinstance(raised.value, forge_module.RateLimited)
    assert raised.value.retry_after_s == 600
    assert waits == [] and _comment_posts(d, number) == [403]
    assert d.gh.comments(DOWN_OWNER, DOWN_NAME, number) == []


def test_a_write_still_refused_after_the_retries_is_a_forge_error(
    deploy: Deploy, waits: list[float]
) -> None:
    d = deploy()
    number = d.open_pr()
    d.gh.secondary_limit(next_n_writes=10, retry_after_s=2)
    forge = d.forge()
    with pytest.raises(forge_module.RateLimited, match="still refused"):
        forge.comment(number, "rebased")
    assert waits == [2] * forge_module.WRITE_RETRIES
    assert _comment_posts(d, number) == [403] * (forge_module.WRITE_RETRIES + 1)


def test_a_primary_limit_an_hour_away_is_not_slept_on(deploy: Deploy, waits: list[float]) -> None:
    """PyGithub's GithubRetry sleeps until X-RateLimit-Reset (+1 s) by default: an hour with a
    worker blocked. carry waits at most forge.MAX_WAIT_S and otherwise says when to retry."""
    d = deploy()
    d.gh.inject_fault("primary_rate_limit", method="GET", reset_in=3600)
    forge = d.forge()
    started = time.monotonic()
    with pytest.raises(forge_module.RateLimited, match=r"list pulls .*rate limit") as raised:
        forge.find_open_pull("carry/nothing")
    assert time.monotonic() - started < 10
    assert all(wait <= forge_module.MAX_WAIT_S for wait in waits)
    assert 3590 <= raised.value.retry_after_s <= 3610
    # A shorter secondary limit on a read is waited out, through the same recorded sleep.
    d.gh.inject_fault("secondary_rate_limit", method="GET", retry_after=5)
    assert forge.find_open_pull("carry/nothing") is None
    assert waits[-1] == 5


def test_a_reply_refused_for_longer_than_a_worker_waits_is_rescheduled_for_then(
    deploy: Deploy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A secondary limit asking for 10 minutes: the reply task asks Celery to run it again in
    that long (the broker holds it) instead of failing or blocking the worker."""
    d = deploy()
    d.propose(MOVED, "Add a header")
    d.gh.secondary_limit(next_n_writes=1, retry_after_s=600)
    asked: list[dict[str, Any]] = []

    class Rescheduled(Exception):
        pass

    def retry(**kwargs: Any) -> Exception:
        asked.append(kwargs)
        return Rescheduled()

    monkeypatch.setattr(tasks.reply, "retry", retry)
    with pytest.raises(Rescheduled):
        tasks.reply(SERIES, 1, "Paused.")
    assert [a["countdown"] for a in asked] == [600]
    assert isinstance(asked[0]["exc"], forge_module.RateLimited)


# -- 10. a person's commits on carry's branch -------------------------------------------------------


def _push_to_carry_branch(d: Deployment, tmp_path: Path, who: str) -> tuple[str, str]:
    """`who` clones the downstream repository, commits on carry's branch and pushes it, as a
    maintainer fixing a PR by hand would; returns (sha, subject)."""
    work = tmp_path / f"{who}-clone"
    git(tmp_path, "clone", "-q", str(d.gh.repo_path(DOWN_OWNER, DOWN_NAME)), str(work))
    git(work, "checkout", "-q", f"carry/{SERIES}")
    (work / "NOTES.md").write_text("why the fix needs a follow-up\n")
    subject = "Note the follow-up the fix needs"
    git(work, "add", "NOTES.md")
    git(work, "commit", "-q", "-m", subject)
    d.gh.push(DOWN_OWNER, DOWN_NAME, work, f"HEAD:refs/heads/carry/{SERIES}", pusher=who)
    return git(work, "rev-parse", "HEAD"), subject


def test_a_persons_commits_on_carrys_branch_are_kept_on_a_backup_branch_and_named_on_the_pr(
    deploy: Deploy, tmp_path: Path
) -> None:
    """Renovate stops when someone else pushed to its branch; carry's branch is derived from the
    series, so carry refreshes it, but only after keeping the person's commits on a branch of
    their own and saying so on the PR (they were silently overwritten)."""
    d = deploy()
    number = d.open_pr()
    sha, subject = _push_to_carry_branch(d, tmp_path, "alice")
    d.propose({"mod.py": "# header\n# second header\n" + BODY}, "Add a second header")
    backup = f"carry-backup/{SERIES}/{sha[:12]}"
    assert d.gh.ref(DOWN_OWNER, DOWN_NAME, f"refs/heads/{backup}") == sha
    branch_head = d.gh.ref(DOWN_OWNER, DOWN_NAME, f"refs/heads/carry/{SERIES}")
    assert branch_head != sha
    (entry,) = d.history("branch-commits-kept")
    assert entry["data"]["backup"] == backup and entry["data"]["commits"] == [sha]
    (said,) = [
        c["body"] for c in d.gh.comments(DOWN_OWNER, DOWN_NAME, number) if backup in c["body"]
    ]
    assert sha[:12] in said and subject in said
    # carry's own refresh is not a person's commit: the next head makes no second backup.
    d.propose({"mod.py": "# header\n# second header\n# third\n" + BODY}, "Add a third header")
    assert len(d.history("branch-commits-kept")) == 1


# -- 9. GitHub Enterprise ---------------------------------------------------------------------------


@pytest.mark.parametrize("auth", ["token", "app"])
def test_carry_works_against_an_enterprise_server(deploy: Deploy, auth: str) -> None:
    """GITHUB_BASE_URL=http(s)://HOST/api/v3: the REST API under the prefix, the downstream
    repository cloned and pushed on the host itself; carry opens its PR and reports CI there."""
    d = deploy(auth=auth, enterprise=True)
    assert d.rt.settings.github_base_url.endswith("/api/v3")
    state = d.propose(MOVED, "Add a header")
    assert d.pull()["head"]["ref"] == f"carry/{SERIES}"
    d.report(state, CiState(runner=CHECK, state="success", detail="passed in 3 s"))
    sha = pr(state).head_sha
    if auth == "app":
        (run,) = d.gh.check_runs(DOWN_OWNER, DOWN_NAME, sha=sha)
        assert run["name"] == f"carry/{CHECK}"
    else:
        (status,) = d.gh.statuses(DOWN_OWNER, DOWN_NAME, sha)
        assert status["context"] == f"carry/{CHECK}"
    assert f"| {CHECK} | success | passed in 3 s |" in d.pull()["body"]
    assert {e.kind for e in d.gh.requests} <= {"api", "git"}  # nothing missed the prefix


# -- 10. requests per publish cycle -----------------------------------------------------------------


def _api_calls(d: Deployment, since: int) -> list[str]:
    return [f"{r.method} {r.operation or r.path}" for r in d.gh.requests[since:] if r.kind == "api"]


@pytest.mark.parametrize("auth", ["token", "app"])
def test_a_publish_that_changes_nothing_sends_no_write_and_reads_the_pr_once(
    deploy: Deploy, auth: str
) -> None:
    """A publish retried with nothing new (same head, same patches, same report) used to PATCH
    the PR with the body it already had and fetch the same PR three times."""
    d = deploy(auth=auth, patches=(FIX, SECOND))
    state = d.propose(CONFLICTING, "Rework 10")  # a conflict: labels and the report comment too
    assert state.outcome == "conflict"
    since = len(d.gh.requests)
    publish.publish(d.rt, SERIES, state.checked_head or "", state.checked_digest or "", False)
    # Before: GET the repository, list pulls, GET the PR 4 times, PATCH it with the body it
    # had, POST the labels it had, list comments: 9 calls, 2 of them writes.
    assert _api_calls(d, since) == [
        "GET /repos/{owner}/{repo}/pulls",  # carry's open PR, with its title, body and labels
        "GET /repos/{owner}/{repo}/issues/{issue_number}/comments",  # the conflict report
    ]


@pytest.mark.parametrize("auth", ["token", "app"])
def test_carrys_pr_is_read_with_a_conditional_request_answered_304_when_unchanged(
    deploy: Deploy, auth: str
) -> None:
    """The publish path sent no conditional request: every cycle's read of carry's PR was a
    full 200 against the rate limit. GitHub answers a matching If-None-Match with 304, which
    costs nothing (docs: rate limits, conditional requests)."""
    d = deploy(auth=auth, patches=(FIX, SECOND))
    state = d.propose(CONFLICTING, "Rework 10")
    args = (d.rt, SERIES, state.checked_head or "", state.checked_digest or "", False)
    publish.publish(*args)  # reads the PR as the last write left it: a 200 with its ETag
    since = len(d.gh.requests)
    publish.publish(*args)
    (listed,) = [r for r in d.gh.requests[since:] if r.operation == "/repos/{owner}/{repo}/pulls"]
    assert listed.headers.get("if-none-match") and listed.status == 304
    # what the 304 stood for is what carry acts on: nothing to change, no write
    assert all(r.method == "GET" for r in d.gh.requests[since:] if r.kind == "api")
    someone = d.gh.pulls(DOWN_OWNER, DOWN_NAME)[0]["number"]
    d.gh.edit_pull(DOWN_OWNER, DOWN_NAME, someone, body="edited by hand")
    since = len(d.gh.requests)
    publish.publish(*args)  # the PR changed: a 200, and carry writes its body back
    (listed,) = [r for r in d.gh.requests[since:] if r.operation == "/repos/{owner}/{repo}/pulls"]
    assert listed.status == 200
    assert d.pull()["body"] != "edited by hand"


def test_a_task_past_its_request_budget_stops_with_an_error_naming_it(
    deploy: Deploy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing bounded the GitHub calls of one task: a loop over pages or PRs would spend the
    installation's hourly quota. Past CARRY_GITHUB_REQUEST_BUDGET a call is not sent."""
    d = deploy(patches=(FIX, SECOND))
    monkeypatch.setenv("CARRY_GITHUB_REQUEST_BUDGET", "2")
    runtime_module.reset()
    d.rt = runtime_module.runtime()
    since = len(d.gh.requests)
    with pytest.raises(ForgeError, match=r"made its 2 calls \(CARRY_GITHUB_REQUEST_BUDGET\)"):
        d.propose(CONFLICTING, "Rework 10")  # list, open, label, report: 4 calls
    assert len([r for r in d.gh.requests[since:] if r.kind == "api"]) == 2


def test_a_conflict_with_nothing_to_propose_pushes_no_branch_and_opens_no_pr(
    deploy: Deploy,
) -> None:
    """The only patch conflicts: there is no file to propose. carry said so in history but
    pushed carry/<series> with main's tree anyway, and the next publish opened a PR with an
    empty diff from it."""
    d = deploy(patches=(FIX,))
    head = d.env.upstream.commit("Rework 10", CONFLICTING)
    for n in range(2):
        finished = rebase_series(d.rt, SERIES, head, "refs/heads/main", force=n > 0)
        assert finished is not None
        publish.publish(
            d.rt, SERIES, finished.head_sha, finished.digest, finished.changed, finished.result_tree
        )
    assert d.gh.ref(DOWN_OWNER, DOWN_NAME, f"refs/heads/carry/{SERIES}") is None
    assert d.gh.pulls(DOWN_OWNER, DOWN_NAME) == []
    said = [e["data"]["result"] for e in d.history("published")]
    assert said == ["needs attention, but nothing to push: see the dashboard"] * 2


def test_writes_within_a_task_are_spaced_as_github_asks(
    deploy: Deploy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GitHub's REST best practices: "wait at least one second between each" mutative request.
    carry's PyGithub client had its write pause off (seconds_between_writes=None)."""
    d = deploy(patches=(FIX, SECOND))
    monkeypatch.setenv("CARRY_GITHUB_WRITE_PAUSE_S", "0.4")
    runtime_module.reset()
    d.rt = runtime_module.runtime()
    since = len(d.gh.requests)
    d.propose(CONFLICTING, "Rework 10")  # opens the PR, labels it, posts the conflict report
    writes = [r.at for r in d.gh.requests[since:] if r.kind == "api" and r.method != "GET"]
    assert len(writes) >= 3
    gaps = [later - earlier for earlier, later in itertools.pairwise(writes)]
    assert min(gaps) >= 0.39, gaps


# -- renamed repositories -----------------------------------------------------------------------


def test_the_emulator_redirects_a_renamed_repository_as_github_does(tmp_path: Path) -> None:
    """GitHub's repository redirects (developer.github.com/changes/2015-04-17-preview-
    repository-redirects): a request by the old name gets 301 for GET and HEAD and 307 for
    other methods, to /repositories/<id>; git follows the web host's redirect."""
    with GitHubEmulator(tmp_path / "gh") as gh:
        gh.create_repo(DOWN_OWNER, DOWN_NAME)
        gh.add_user("maint")
        gh.add_token("maint-token", "maint")
        gh.set_permission(DOWN_OWNER, DOWN_NAME, "maint", "write")
        repo_id = _get(gh, f"/repos/{DOWN_OWNER}/{DOWN_NAME}").json()["id"]
        old_git_url = gh.git_url(DOWN_OWNER, DOWN_NAME)
        gh.rename_repo(DOWN_OWNER, DOWN_NAME, "carry-renamed")
        auth = {"User-Agent": "carry-test", "Authorization": "token maint-token"}
        old = f"{gh.base_url}/repos/{DOWN_OWNER}/{DOWN_NAME}"
        moved = requests.get(f"{old}/pulls?state=open", headers=auth, allow_redirects=False)
        assert moved.status_code == 301 and moved.json()["message"] == "Moved Permanently"
        assert moved.headers["Location"] == f"{gh.base_url}/repositories/{repo_id}/pulls?state=open"
        write = requests.post(
            f"{old}/issues/1/comments", json={"body": "x"}, headers=auth, allow_redirects=False
        )
        assert write.status_code == 307
        assert (
            write.headers["Location"] == f"{gh.base_url}/repositories/{repo_id}/issues/1/comments"
        )
        followed = requests.get(moved.headers["Location"], headers=auth, timeout=10)
        assert followed.status_code == 200 and followed.json() == []
        assert _get(gh, f"/repositories/{repo_id}").json()["full_name"] == (
            f"{DOWN_OWNER}/carry-renamed"
        )
        clone = tmp_path / "clone"
        git(tmp_path, "clone", "-q", old_git_url, str(clone))
        assert clone.is_dir()
        assert gh.errors == []


def test_carry_goes_on_publishing_to_a_renamed_downstream_and_says_so(deploy: Deploy) -> None:
    d = deploy(auth="token")
    number = d.open_pr()
    d.gh.rename_repo(DOWN_OWNER, DOWN_NAME, "carry-renamed")
    state = d.propose({"mod.py": "# header\n# more\n" + BODY}, "Add another header")
    assert pr(state).number == number
    (pull,) = d.gh.pulls(DOWN_OWNER, "carry-renamed")
    assert pull["head"]["sha"] == pr(state).head_sha
    # The PATCH of the PR's body reached it: by the old name GitHub answers 307, which PyGithub
    # takes for success, so the new head's report was lost without a word.
    assert str(state.checked_head)[:12] in pull["body"]
    d.report(state, CiState(runner=CHECK, state="success", commit_sha=pr(state).head_sha))
    (status,) = d.gh.statuses(DOWN_OWNER, "carry-renamed", pr(state).head_sha)
    assert status["state"] == "success"
    # Said once, by the first task that met the rename; later ones use the new name at once.
    (moved,) = d.history("downstream-renamed")
    assert moved["data"]["now"] == f"{DOWN_OWNER}/carry-renamed"
    assert (
        moved["data"]["action"]
        == f"set downstream.repo to {DOWN_OWNER}/carry-renamed in the config"
    )
    followed = [r for r in d.gh.requests if r.status in (301, 307) and "/repos/" in r.path]
    assert len(followed) == 1, [(r.method, r.path) for r in followed]


def test_carry_goes_on_publishing_to_a_downstream_renamed_then_transferred(deploy: Deploy) -> None:
    """Issue 34, item 7: a transfer after a rename. carry's look at its own PR by the config's
    name was taken for another repository's redirect ("update the config's upstream repo"),
    and every publish failed until the config was changed."""
    d = deploy(auth="token")
    number = d.open_pr()
    d.gh.rename_repo(DOWN_OWNER, DOWN_NAME, "carry-renamed")
    d.propose({"mod.py": "# header\n# more\n" + BODY}, "Add another header")
    d.gh.add_user("new-home", type="Organization")
    d.gh.transfer_repo(DOWN_OWNER, "carry-renamed", "new-home")
    state = d.propose({"mod.py": "# header\n# more\n# third\n" + BODY}, "A third header")
    assert pr(state).number == number and d.history("publish-failed") == []
    (pull,) = d.gh.pulls("new-home", "carry-renamed")
    assert pull["head"]["sha"] == pr(state).head_sha
    assert str(state.checked_head)[:12] in pull["body"]
    assert [e["data"]["now"] for e in d.history("downstream-renamed")][:1] == [
        "new-home/carry-renamed"
    ]


# -- the rate limit reaches the metrics through the runtime's port -------------------------------


def test_the_rate_limit_github_answers_reaches_the_store_of_the_runtime(deploy: Deploy) -> None:
    """The GitHub adapter writes no Redis of its own (it had a hidden module-level client on
    REDIS_URL): the runtime that connects it says where the figure goes."""
    d = deploy(auth="token")
    where = d.rt.redis.connection_pool.connection_kwargs
    elsewhere = redis.Redis(host=where["host"], port=where["port"], db=(where["db"] + 1) % 16)
    elsewhere.delete(GITHUB_KEY)
    rt = dataclasses.replace(d.rt, redis=elsewhere)  # not the Redis of REDIS_URL
    rt.forge().find_open_pull("carry/nothing")
    stored = elsewhere.hget(GITHUB_KEY, "remaining")
    assert stored is not None
    assert int(stored) == d.gh.rate_limit(token="carry-token").remaining


def test_the_pr_text_is_recorded_before_it_is_posted(deploy: Deploy) -> None:
    """The series page shows the PR text carry proposes before every publish (issue 17), so
    it is there also when GitHub then refuses it."""
    d = deploy(auth="token")
    d.open_pr()
    (proposal,) = d.history("proposal")
    assert proposal["data"]["read_only"] is False
    assert proposal["data"]["body"] == d.pull()["body"]
    assert proposal["data"]["title"] == d.pull()["title"]


def test_a_permission_lookup_with_a_fresh_token_that_gets_401_is_retried_like_any_call(
    deploy: Deploy,
) -> None:
    """Issue 34, item 5: the lookup of a commenter's permission has the same retries as every
    other call of the adapter (it skipped the one retry of a new token's 401, and the command
    was dropped)."""
    d = deploy(auth="app")
    d.gh.hub.token_warmup_s = 0.5
    d.gh.add_user("maint")
    d.gh.set_permission(DOWN_OWNER, DOWN_NAME, "maint", "write")
    forge = d.forge()
    assert forge.permission("maint") == "write"
    asked = "/repos/{owner}/{repo}/collaborators/{username}/permission"
    assert [r.status for r in d.gh.api_requests() if r.operation == asked] == [401, 200]
