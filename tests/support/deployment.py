"""A carry deployment against the GitHub emulator, in this process: the upstream and downstream
repositories on the emulated GitHub, carry's runtime connected to it with a token or as an App,
and the test's Redis as store and broker. The tests of carry against GitHub's rules use it."""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bot.core import events as ev
from bot.core.ci_report import carry_over
from bot.core.state import CiState, PrInfo, SeriesState
from bot.emulator import GitHubEmulator, generate_app_key
from bot.github.forge import Forge
from bot.queue.celery_app import SERVICE_QUEUES
from bot.queue.celery_app import app as celery_app
from bot.queue.task_message import INGEST_TASK
from bot.store import series as store
from harness.carry_env import BODY, SERIES, CarryEnv
from harness.gitrepo import git
from tests.support.broker import point_at
from workers import publish
from workers import runtime as runtime_module
from workers.ci import github as hardware
from workers.rebase import rebase_series
from workers.runtime import Runtime
from workers.tasks import handle_event

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
        ready = publish.publish(
            self.rt,
            SERIES,
            finished.head_sha,
            finished.digest,
            finished.changed,
            finished.result_tree,
        )
        for event in ready:  # as the publish task hands them to the planner
            handle_event(self.rt, event)
        state = store.load_series(self.rt.redis, SERIES)
        assert state is not None and state.pr is not None, self.history()
        return state

    def forge(self) -> Forge:
        """carry's GitHub port for the downstream repository, as a task connects it."""
        return self.rt.forge()

    def open_pr(self) -> int:
        """Upstream moves and carry opens its PR; returns the PR's number."""
        return pr(self.propose(MOVED, "Add a header")).number

    def pull(self) -> dict[str, Any]:
        (pull,) = self.gh.pulls(DOWN_OWNER, DOWN_NAME)
        return pull

    def report(self, state: SeriesState, row: CiState) -> None:
        """A CI row changed (as workers.ci.rows stores it), then the GitHub hook runs."""
        stored = store.load_series(self.rt.redis, SERIES)
        state.ci[row.runner] = carry_over(stored.ci.get(row.runner) if stored else None, row)
        store.save_series(self.rt.redis, state)
        hardware.report_on_github(SERIES, row)

    def plan_recorded(self) -> int:
        """Takes the planner's events workers.ci.rows queued (ChecksRecorded) off the service's
        lanes and plans them as the `carry.ingest` task does; returns how many."""
        planned = 0
        for lane in SERVICE_QUEUES.split(","):
            for raw in reversed(self.rt.redis.lrange(lane, 0, -1)):
                message = json.loads(raw)
                if message["headers"]["task"] != INGEST_TASK:
                    continue
                self.rt.redis.lrem(lane, 1, raw)
                args, kwargs, _embed = json.loads(base64.b64decode(message["body"]))
                handle_event(self.rt, ev.event_from_dict(kwargs.get("event") or args[0]))
                planned += 1
        return planned

    def history(self, kind: str | None = None) -> list[dict[str, Any]]:
        entries = store.history(self.rt.redis, SERIES, limit=1000)
        return [e for e in entries if kind is None or e["kind"] == kind]


Deploy = Callable[..., Deployment]


def pr(state: SeriesState) -> PrInfo:
    assert state.pr is not None
    return state.pr


@contextlib.contextmanager
def deployments(
    tmp_path: Path,
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    *,
    waits: list[float] | None = None,
) -> Iterator[Deploy]:
    """Starts carry's runtime against a fresh GitHub emulator on each call (token or App auth),
    with the test's Redis as broker and store; checks on the way out that the emulator saw no
    request it could not answer. `waits`: the waits carry's GitHub port asks for are recorded
    there instead of slept."""
    env = CarryEnv(tmp_path, redis_url)
    broker = celery_app.conf.broker_url
    with contextlib.ExitStack() as running:
        started: list[GitHubEmulator] = []

        def start(
            *,
            auth: str = "token",
            private: bool = False,
            plan: str = "free",
            patches: tuple[dict[str, str], ...] = (FIX,),
            enterprise: bool = False,
            downstream: dict[str, Any] | None = None,
            role: str = "write",
            app_permissions: dict[str, str] | None = None,
        ) -> Deployment:
            gh = running.enter_context(GitHubEmulator(tmp_path / "gh", enterprise=enterprise))
            started.append(gh)
            env.carry_patches(list(patches))
            git(env.downstream, "init", "-q", "-b", "main")
            git(env.downstream, "add", "-A")
            git(env.downstream, "commit", "-q", "-m", "carry the fixes")
            env.write_config(downstream=downstream)
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
                gh.add_app(APP_ID, public_key, slug="carry", permissions=app_permissions)
                gh.add_installation(APP_ID, INSTALLATION_ID, DOWN_OWNER)
                settings |= {
                    "GITHUB_APP_ID": str(APP_ID),
                    "GITHUB_APP_PRIVATE_KEY": private_key,
                    "GITHUB_INSTALLATION_ID": str(INSTALLATION_ID),
                }
            else:
                gh.add_user("carry[bot]", type="Bot")
                gh.add_token("carry-token", "carry[bot]")
                gh.set_permission(DOWN_OWNER, DOWN_NAME, "carry[bot]", role)
                settings["GITHUB_TOKEN"] = "carry-token"
            for key, value in settings.items():
                monkeypatch.setenv(key, value)
            # a new runtime, so new Forge caches: a later emulator may get the port of an
            # earlier one, whose installation token or roles would be taken for its own
            runtime_module.reset()
            point_at(celery_app, redis_url)  # anything enqueued goes to the test's Redis
            rt = runtime_module.runtime()
            if waits is not None:
                rt.forge_caches.sleep = waits.append  # GitHub's waits, recorded, not slept
            return Deployment(env, gh, rt)

        yield start
        assert [gh.errors for gh in started] == [[] for _ in started]
    point_at(celery_app, broker)
    runtime_module.reset()
