"""A rebase in flight never erases what others wrote meanwhile (issue 13, the lost update).

The real functions run in the order production interleaves them, on a real Redis with real git:
the rebase loads the series state and runs the engine; while the engine runs, a maintainer's
`/carry pause` and `/carry keep NAME` go through the planner and the dispatcher, an approval is
recorded and hardware CI writes its row; then the rebase stores its result.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from bot.ci.spec import TreeSpec
from bot.core import events as ev
from bot.core import transitions as tr
from bot.core.state import SeriesState
from bot.queue.celery_app import app as celery_app
from bot.store import series as store
from harness.carry_env import (
    BODY,
    SERIES,
    CarryEnv,
    authorized_comment,
    queued_names,
    queued_tasks,
)
from tests.support.broker import point_at
from workers import rebase, tasks
from workers import runtime as runtime_module
from workers.ci import requests as ci
from workers.rebase import rebase_series
from workers.runtime import Runtime

FIX = {"mod.py": BODY.replace("compute(10)", "compute(10, safe=True)")}
# The second patch builds on the first; upstream later takes its change, so the engine drops it.
FAST = {"mod.py": FIX["mod.py"].replace("compute(30)", "compute(30, fast=True)")}
UPSTREAM_TAKES_FAST = {"mod.py": BODY.replace("compute(30)", "compute(30, fast=True)")}
RUNNER = "gaudi"
CI_ROW = f"{RUNNER}/fixed"


@pytest.fixture
def env(tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[CarryEnv]:
    carry = CarryEnv(tmp_path, redis_url)
    carry.names = carry.carry_patches([FIX, FAST])  # type: ignore[attr-defined]
    carry.write_config(runners=[RUNNER], checks=["fixed"], trusted_authors=["maintainer"])
    config = json.loads(carry.config_path.read_text())
    config["runners"] = {
        RUNNER: {
            "queue": "hw.gaudi",
            "workdir": str(tmp_path / "r"),
            "checks": {"fixed": {"run": ["true"]}},
        }
    }
    carry.config_path.write_text(json.dumps(config))
    for key in ("GITHUB_TOKEN", "GITHUB_APP_ID", "GITHUB_APP_PRIVATE_KEY"):
        monkeypatch.delenv(key, raising=False)
    for key, value in carry.env.items():
        monkeypatch.setenv(key, value)
    broker = celery_app.conf.broker_url
    point_at(celery_app, redis_url)  # tasks the dispatcher sends land in the test Redis
    runtime_module.reset()
    yield carry
    point_at(celery_app, broker)
    runtime_module.reset()


def meanwhile_in_engine(monkeypatch: pytest.MonkeyPatch, work: Callable[[], None]) -> list[str]:
    """Runs `work` in another thread (as another worker would) after the rebase's engine check,
    before the rebase stores its result; returns the thread's errors."""
    real_check = rebase._check
    errors: list[str] = []

    def check(*args: Any, **kwargs: Any) -> Any:
        report = real_check(*args, **kwargs)
        thread = threading.Thread(target=guarded, daemon=True)
        thread.start()
        thread.join(60)
        assert not thread.is_alive(), "the concurrent writers did not finish"
        return report

    def guarded() -> None:
        try:
            work()
        except Exception as err:  # surfaced by the test, not lost in the thread
            errors.append(repr(err))

    monkeypatch.setattr(rebase, "_check", check)
    return errors


def ci_row(rt: Runtime, state: SeriesState) -> None:
    spec = TreeSpec(
        upstream_url=str(state.head_sha),
        upstream_sha=str(state.head_sha),
        downstream_url="/srv/down.git",
        downstream_ref=f"refs/heads/carry/{SERIES}",
        downstream_sha="4" * 40,
        patches_dir=f"patches/{SERIES}",
        series_digest=str(state.checked_digest),
        expected_tree="5" * 40,
    )
    targets = ci.targets_from_config(rt.config, SERIES)
    ci.request_ci(rt.redis, celery_app, SERIES, targets, spec, issuer=rt.job_issuer, debounce_s=0)


def test_overrides_and_ci_written_during_a_rebase_survive_it(
    env: CarryEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    rt = runtime_module.runtime()
    first = env.upstream.head()
    assert rebase_series(rt, SERIES, first, "refs/heads/main") is not None
    keep, drop_candidate = env.names  # type: ignore[attr-defined]
    head = env.upstream.commit("take the fast path", UPSTREAM_TAKES_FAST)
    seen: list[SeriesState] = []

    def maintainer_and_runner() -> None:
        authorized_comment(rt, f"/carry pause\n/carry keep {drop_candidate}", comment_id=101)
        running = store.load_series(rt.redis, SERIES)
        assert running is not None and running.phase == "paused"
        ci_row(rt, running)
        ci.approve(rt.redis, SERIES, head, "alice", issuer=rt.job_issuer)
        seen.append(store.load_series(rt.redis, SERIES))  # type: ignore[arg-type]

    errors = meanwhile_in_engine(monkeypatch, maintainer_and_runner)
    result = rebase_series(rt, SERIES, head, "refs/heads/main")
    assert errors == []
    (before,) = seen
    assert (before.paused_by, before.phase) == ("alice", "paused")
    assert before.patch(drop_candidate).pinned  # type: ignore[union-attr]
    assert CI_ROW in before.ci and head in before.approvals

    after = store.load_series(rt.redis, SERIES)
    assert after is not None
    pinned = after.patch(drop_candidate)
    assert pinned is not None
    summary = (after.paused_by, after.phase, pinned.pinned, pinned.decision, sorted(after.ci))
    assert summary == ("alice", "paused", True, "keep", [CI_ROW]), summary
    assert head in after.approvals
    assert after.ci[CI_ROW].state == before.ci[CI_ROW].state
    assert pinned.status == "contained"  # the engine's own finding is kept, the pin decides
    assert after.patch(keep).decision == "keep"  # type: ignore[union-attr]
    assert after.checked_head == head and after.outcome == "clean"
    assert result is not None and result.outcome == "clean" and not result.changed
    decisions = {e["data"]["patch"]: e["data"]["decision"] for e in env.history("decision")[:2]}
    assert decisions == {keep: "keep", drop_candidate: "keep"}  # the history tells the truth


def test_two_writers_creating_a_state_at_once_keep_both_changes(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first event of a series and a `/carry pause` race to create its state: the pause,
    committed between the other creator's read and its write, stays."""
    client = redis.Redis.from_url(redis_url)
    real_load = store.load_series
    raced: list[bool] = []

    def load_then_race(c: Any, series_id: str) -> SeriesState | None:
        state = real_load(c, series_id)
        if state is None and not raced:
            raced.append(True)
            store.update_series(client, series_id, lambda s: tr.set_paused(s, "alice"), create={})
        return state

    monkeypatch.setattr(store, "load_series", load_then_race)
    created = store.ensure_series(client, "s-new", upstream_repo="up/stream")
    stored = real_load(client, "s-new")
    assert raced and stored is not None
    assert (stored.paused_by, created.paused_by) == ("alice", "alice")


def queued_rebases(rt: Runtime) -> list[dict[str, Any]]:
    """The kwargs of every carry.rebase task waiting in the broker, oldest first."""
    import base64

    found = []
    for message in queued_tasks(rt.redis):
        if message["headers"]["task"] == "carry.rebase":
            _args, kwargs, _embed = json.loads(base64.b64decode(message["body"]))
            found.append(kwargs)
    return found


def push(rt: Runtime, env: CarryEnv, head: str, before: str) -> None:
    tasks.handle_event(
        rt,
        ev.HeadMoved(
            repo="upstream-org/engine",
            ref="refs/heads/main",
            before=before,
            after=head,
            actor="maintainer",
            delivery_id=f"push-{head[:8]}",
        ),
    )


def test_a_pin_after_a_push_rechecks_the_new_head_not_the_one_it_read(env: CarryEnv) -> None:
    """bench/reliability --scenario override-race found it: a `/carry keep` that lands after
    a push's rebase was asked for (not yet run) set `wanted` back to the older head it read
    from the state, so the new head's rebase was skipped as superseded and never checked."""
    rt = runtime_module.runtime()
    first = env.upstream.head()
    assert rebase_series(rt, SERIES, first, "refs/heads/main") is not None
    newer = env.upstream.commit("move on", {"other.py": "x = 1\n"})
    push(rt, env, newer, first)
    authorized_comment(rt, f"/carry keep {env.names[1]}", comment_id=201)  # type: ignore[attr-defined]
    assert store.wanted(rt.redis, SERIES) == newer
    assert [k["head_sha"] for k in queued_rebases(rt)] == [newer, newer]
    for kwargs in queued_rebases(rt):  # as the workers would run them
        rebase_series(rt, **{k: v for k, v in kwargs.items() if k != "series_id"}, series_id=SERIES)
    state = store.load_series(rt.redis, SERIES)
    assert state is not None and state.checked_head == newer


def test_a_forced_recheck_of_an_older_head_never_moves_the_series_back(env: CarryEnv) -> None:
    """The pin's re-check (or a `/carry rebase`) of head 1 ran after head 2 was checked: the
    series went back to head 1 and carry published the older result."""
    rt = runtime_module.runtime()
    first = env.upstream.head()
    assert rebase_series(rt, SERIES, first, "refs/heads/main") is not None
    authorized_comment(rt, f"/carry keep {env.names[1]}", comment_id=202)  # type: ignore[attr-defined]
    (recheck,) = queued_rebases(rt)
    newer = env.upstream.commit("move on", {"other.py": "x = 1\n"})
    store.set_wanted(rt.redis, SERIES, newer)
    assert rebase_series(rt, SERIES, newer, "refs/heads/main") is not None
    late = rebase_series(
        rt, **{k: v for k, v in recheck.items() if k != "series_id"}, series_id=SERIES
    )
    assert late is None
    state = store.load_series(rt.redis, SERIES)
    assert state is not None and (state.checked_head, state.head_sha) == (newer, newer)
    assert env.history("superseded")[0]["data"]["newest"] == newer


def test_a_burst_of_rebase_commands_queues_one_recheck(env: CarryEnv) -> None:
    """Issue 14: 200 `/carry rebase` comments from a writer gave 200 forced rebases. A re-check
    of the head already queued is not queued again (each comment is still answered)."""
    rt = runtime_module.runtime()
    head = env.upstream.head()
    assert rebase_series(rt, SERIES, head, "refs/heads/main") is not None
    for n in range(20):
        authorized_comment(rt, "/carry rebase", comment_id=300 + n)
    assert [k["head_sha"] for k in queued_rebases(rt)] == [head]
    skipped = [e for e in env.history("skipped") if "already queued" in e["data"]["reason"]]
    assert len(skipped) == 19
    replies = queued_names(rt.redis)
    assert replies.count("carry.reply") == 20
    # Once it ran, a new `/carry rebase` queues a new re-check.
    (kwargs,) = queued_rebases(rt)
    rebase_series(rt, **{k: v for k, v in kwargs.items() if k != "series_id"}, series_id=SERIES)
    authorized_comment(rt, "/carry rebase", comment_id=400)
    assert len(queued_rebases(rt)) == 2


def test_a_queued_rebase_with_nothing_to_do_leaves_the_series_resting(env: CarryEnv) -> None:
    """A push of a head already checked queues a rebase that finds it unchanged: the series
    showed "queued" from then on (and a `/carry rebase` would take it for a check waiting)."""
    rt = runtime_module.runtime()
    head = env.upstream.head()
    assert rebase_series(rt, SERIES, head, "refs/heads/main") is not None
    push(rt, env, head, "0" * 40)
    assert store.load_series(rt.redis, SERIES).phase == "queued"  # type: ignore[union-attr]
    assert rebase_series(rt, SERIES, head, "refs/heads/main") is None  # unchanged
    assert store.load_series(rt.redis, SERIES).phase == "idle"  # type: ignore[union-attr]


def test_a_pin_on_a_paused_series_decides_at_once(env: CarryEnv) -> None:
    """bench/reliability --scenario override-race found it: on a paused series a new head is
    only recorded (it becomes the head a re-check must use), so the re-check a `/carry keep`
    asked for just before is superseded by a head that is not checked until `/carry resume`,
    and the patch kept showing the decision of the `/carry drop` the keep replaced."""
    rt = runtime_module.runtime()
    first = env.upstream.head()
    name = env.names[0]  # type: ignore[attr-defined]
    assert rebase_series(rt, SERIES, first, "refs/heads/main") is not None
    authorized_comment(rt, f"/carry drop {name}", comment_id=501)
    (recheck,) = queued_rebases(rt)
    rebase_series(rt, **{k: v for k, v in recheck.items() if k != "series_id"}, series_id=SERIES)
    dropped = store.load_series(rt.redis, SERIES).patch(name)  # type: ignore[union-attr]
    assert dropped is not None and dropped.decision == "drop"
    authorized_comment(rt, "/carry pause", comment_id=502)
    authorized_comment(rt, f"/carry keep {name}", comment_id=503)
    recheck = queued_rebases(rt)[-1]
    assert recheck["head_sha"] == first
    newer = env.upstream.commit("move on", {"other.py": "x = 1\n"})
    push(rt, env, newer, first)  # paused: recorded, not checked
    late = rebase_series(
        rt, **{k: v for k, v in recheck.items() if k != "series_id"}, series_id=SERIES
    )
    assert late is None  # superseded by the paused head
    state = store.load_series(rt.redis, SERIES)
    assert state is not None and state.checked_head == first
    patch = state.patch(name)
    assert patch is not None and (patch.pinned, patch.drop_requested_by) == (True, None)
    assert (patch.decision, patch.reason) == ("keep", "applies as is"), patch
    assert state.outcome == "clean"
