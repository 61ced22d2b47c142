"""carry against GitHub's rules that a lenient double would hide (issue 15): check runs are
App-only, private Free/Pro repositories refuse drafts, and bodies, comments and check-run
summaries have size limits. The emulator enforces each rule (tests/integration/
test_github_emulator.py cites where each is documented); these tests run carry's real publish
and CI-report code in this process against it, with real git, Redis and PyGithub."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bot.core.state import CiState, PrInfo, SeriesState
from bot.emulator import GitHubEmulator, generate_app_key
from bot.store import series as store
from tests.support.carry_env import BODY, SERIES, CarryEnv
from tests.support.gitrepo import git
from workers import hardware, publish, tasks
from workers import runtime as runtime_module
from workers.celery_app import app as celery_app
from workers.rebase import rebase_series
from workers.runtime import Runtime

UP_OWNER, UP_NAME = "upstream-org", "engine"
DOWN_OWNER, DOWN_NAME = "downstream-org", "carry"
APP_ID, INSTALLATION_ID = 31337, 4242
FIX = {"mod.py": BODY.replace("compute(10)", "compute(10, safe=True)")}
MOVED = {"mod.py": "# header\n" + BODY}
# A second patch further down: it still applies (moved) where the first one conflicts, so a
# conflicting refresh has files to propose and opens a PR.
SECOND = {"mod.py": FIX["mod.py"].replace("compute(30)", "compute(30, fast=True)")}
CONFLICTING = {"mod.py": "# header\n" + BODY.replace("compute(10)", "other(10)")}
CHECK = "gaudi/has-fix"


@dataclass
class Deployment:
    env: CarryEnv
    gh: GitHubEmulator
    rt: Runtime

    def propose(self, files: dict[str, str], message: str) -> SeriesState:
        """Upstream main moves; carry rebases the series and publishes it, as its tasks do."""
        head = self.env.upstream.commit(message, files)
        finished = rebase_series(self.rt, SERIES, head, "refs/heads/main")
        assert finished is not None
        publish.publish(
            self.rt,
            SERIES,
            finished.head_sha,
            finished.digest,
            finished.changed,
            finished.result_tree,
        )
        state = store.load_series(self.rt.redis, SERIES)
        assert state is not None and state.pr is not None, self.history()
        return state

    def pull(self) -> dict[str, Any]:
        (pull,) = self.gh.pulls(DOWN_OWNER, DOWN_NAME)
        return pull

    def report(self, state: SeriesState, row: CiState) -> None:
        """A CI row changed (as workers.ci stores it), then the GitHub hook runs."""
        state.ci[row.runner] = row
        store.save_series(self.rt.redis, state)
        hardware.report_on_github(SERIES, row)

    def history(self, kind: str | None = None) -> list[dict[str, Any]]:
        entries = store.history(self.rt.redis, SERIES, limit=1000)
        return [e for e in entries if kind is None or e["kind"] == kind]


Deploy = Callable[..., Deployment]


def pr(state: SeriesState) -> PrInfo:
    assert state.pr is not None
    return state.pr


@pytest.fixture
def deploy(tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Deploy]:
    env = CarryEnv(tmp_path, redis_url)
    broker = celery_app.conf.broker_url
    with GitHubEmulator(tmp_path / "gh") as gh:

        def start(
            *,
            auth: str = "token",
            private: bool = False,
            plan: str = "free",
            patches: tuple[dict[str, str], ...] = (FIX,),
        ) -> Deployment:
            env.carry_patches(list(patches))
            git(env.downstream, "init", "-q", "-b", "main")
            git(env.downstream, "add", "-A")
            git(env.downstream, "commit", "-q", "-m", "carry the fixes")
            env.write_config()
            gh.create_repo(UP_OWNER, UP_NAME, from_path=env.upstream.path)
            gh.create_repo(
                DOWN_OWNER, DOWN_NAME, from_path=env.downstream, private=private, plan=plan
            )
            settings = {
                **env.env,
                "GITHUB_BASE_URL": gh.base_url,
                "CARRY_DOWNSTREAM_DIR": "",  # the series come from the emulated GitHub
                "CARRY_BOT_LOGIN": "carry[bot]",
            }
            if auth == "app":
                private_key, public_key = generate_app_key()
                gh.add_app(APP_ID, public_key, slug="carry")
                gh.add_installation(APP_ID, INSTALLATION_ID, DOWN_OWNER)
                settings |= {
                    "GITHUB_APP_ID": str(APP_ID),
                    "GITHUB_APP_PRIVATE_KEY": private_key,
                    "GITHUB_INSTALLATION_ID": str(INSTALLATION_ID),
                }
            else:
                gh.add_user("carry[bot]", type="Bot")
                gh.add_token("carry-token", "carry[bot]")
                gh.set_permission(DOWN_OWNER, DOWN_NAME, "carry[bot]", "write")
                settings["GITHUB_TOKEN"] = "carry-token"
            for key, value in settings.items():
                monkeypatch.setenv(key, value)
            runtime_module.reset()
            celery_app.conf.broker_url = redis_url  # anything enqueued goes to the test's Redis
            celery_app.close()
            return Deployment(env, gh, runtime_module.runtime())

        yield start
        assert gh.errors == []
    celery_app.conf.broker_url = broker
    celery_app.close()
    runtime_module.reset()


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
