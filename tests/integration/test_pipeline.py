"""Webhooks and polling → planner → Celery workers on Redis, with real processes throughout."""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest
from celery import Celery

from bot.store import quarantine
from bot.store import series as store
from harness.carry_env import BODY, SERIES, CarryEnv, lanes_empty, slow_git_shim, wait_for
from tests.support.broker_junk import malformed, real_envelope

FIX = {"mod.py": BODY.replace("compute(10)", "compute(10, safe=True)")}


@pytest.fixture
def carry(tmp_path: Path, redis_url: str):
    env = CarryEnv(tmp_path, redis_url)
    env.carry_patches([FIX])
    env.write_config()
    yield env
    env.stop()


def move_upstream(env: CarryEnv, n: int) -> tuple[str, str]:
    before = env.upstream.head()
    after = env.upstream.commit(f"upstream change {n}", {f"other_{n}.py": f"x = {n}\n"})
    return before, after


def test_signed_push_is_rebased_and_every_decision_recorded(carry):
    url = carry.start_web()
    carry.start_worker()
    before, after = move_upstream(carry, 1)
    response = carry.deliver(url, "push", carry.push_payload(after, before))
    assert response.status_code == 202
    state = carry.wait_checked(after)
    assert [(p.name, p.status, p.decision) for p in state.patches] == [
        (state.patches[0].name, "applies", "keep")
    ]
    decisions = carry.history("decision")
    assert decisions[0]["data"]["evidence"], "every decision carries its evidence"
    proposals = wait_for(lambda: carry.history("proposal"), 20, "proposal")  # published after
    assert proposals[0]["data"]["read_only"] is True


def test_forged_delivery_queues_nothing(carry):
    url = carry.start_web()
    before, after = move_upstream(carry, 1)
    payload = carry.push_payload(after, before)
    import httpx

    response = httpx.post(
        f"{url}/webhooks/github",
        json=payload,
        headers={
            "X-GitHub-Event": "push",
            "X-GitHub-Delivery": "forged-1",
            "X-Hub-Signature-256": "sha256=" + "0" * 64,
        },
    )
    assert response.status_code == 401
    assert lanes_empty(carry.client)  # the Celery queues stay empty
    assert carry.state() is None


def test_same_delivery_twice_concurrently_is_processed_once(carry):
    url = carry.start_web()
    carry.start_worker()
    before, after = move_upstream(carry, 1)
    payload = carry.push_payload(after, before)
    results = []
    threads = [
        threading.Thread(
            target=lambda: results.append(
                carry.deliver(url, "push", payload, "same-id").status_code
            )
        )
        for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [200, 202]
    carry.wait_checked(after)
    wait_for(lambda: carry.history("proposal"), 20, "proposal")
    assert len(carry.history("rebased")) == 1


def test_burst_of_twenty_heads_collapses_to_the_newest(carry):
    url = carry.start_web()
    heads = [move_upstream(carry, n) for n in range(20)]
    for before, after in heads:
        assert carry.deliver(url, "push", carry.push_payload(after, before)).status_code == 202
    carry.start_worker()  # the worker starts after the burst: all 20 are queued
    newest = heads[-1][1]
    state = carry.wait_checked(newest, timeout=90)
    wait_for(lambda: lanes_empty(carry.client), 60, "queue drained")
    rebases = carry.history("rebased")
    assert 1 <= len(rebases) <= 2
    assert state.head_sha == newest and rebases[0]["data"]["head"] == newest


def test_worker_killed_mid_rebase_loses_nothing_and_duplicates_nothing(carry, tmp_path):
    carry.extra_env.update({"CARRY_VISIBILITY_TIMEOUT_S": "5", "CARRY_LOCK_TTL_S": "4"})
    url = carry.start_web()
    marker = tmp_path / "in-engine"
    victim = carry.start_worker("victim", path_prefix=str(slow_git_shim(tmp_path / "shim", marker)))
    before, after = move_upstream(carry, 1)
    assert carry.deliver(url, "push", carry.push_payload(after, before)).status_code == 202
    wait_for(marker.exists, 60, "rebase to reach the engine")
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait()
    carry.start_worker("rescuer")
    carry.wait_checked(after, timeout=90)
    wait_for(lambda: carry.history("proposal"), 30, "proposal")
    assert len(carry.history("rebased")) == 1
    assert len(carry.history("proposal")) == 1


def test_a_worker_that_lost_its_lock_stores_nothing_over_the_newer_check(carry, tmp_path):
    """Issue 13: a worker stalled past the lock's TTL (SIGSTOP: a frozen VM, a swap storm)
    loses the series to another worker, which checks a newer head. When it wakes, its older
    result must not overwrite the newer one: the commit is refused and the task retried."""
    carry.extra_env.update({"CARRY_LOCK_TTL_S": "2", "CARRY_BUSY_RETRY_S": "1"})
    url = carry.start_web()
    marker = tmp_path / "in-engine"
    stalled = carry.start_worker(
        "stalled", path_prefix=str(slow_git_shim(tmp_path / "shim", marker))
    )
    before, older = move_upstream(carry, 1)
    assert carry.deliver(url, "push", carry.push_payload(older, before)).status_code == 202
    wait_for(marker.exists, 60, "the older head's rebase to reach the engine")
    os.killpg(stalled.pid, signal.SIGSTOP)
    try:
        time.sleep(3)  # past the TTL: the stalled worker cannot renew its lock
        carry.start_worker("rescuer")
        _, newer = move_upstream(carry, 2)
        assert carry.deliver(url, "push", carry.push_payload(newer, older)).status_code == 202
        carry.wait_checked(newer, timeout=90)
    finally:
        os.killpg(stalled.pid, signal.SIGCONT)
    lost = wait_for(lambda: carry.history("lease-lost"), 60, "the stalled commit refused")
    assert lost[0]["data"]["head"] == older
    wait_for(lambda: carry.history("superseded"), 60, "the retried older rebase superseded")
    state = carry.state()
    assert state is not None and state.checked_head == newer
    assert [e["data"]["head"] for e in carry.history("rebased")] == [newer]


def test_paused_series_is_never_touched_automatically(carry):
    """Failure story 9: a paused series records the new head but does not rebase."""
    carry.write_config(policy={"paused": True, "auto_drop": True})
    url = carry.start_web()
    carry.start_worker()
    before, after = move_upstream(carry, 1)
    assert carry.deliver(url, "push", carry.push_payload(after, before)).status_code == 202
    state = wait_for(
        lambda: (s := carry.state()) and s.head_sha == after and s, 30, "head recorded"
    )
    assert state.checked_head is None
    # The history entry is written just after the state (one commit for both: issue 13).
    recorded = wait_for(lambda: carry.history("record_head"), 10, "record_head in the history")
    assert "paused" in recorded[0]["data"]["reason"]
    assert carry.history("rebased") == []


def test_series_edited_by_hand_is_reread_not_resurrected(carry):
    """Failure story 1: after a maintainer rewrites the series, carry works from the repo."""
    url = carry.start_web()
    carry.start_worker()
    before, after = move_upstream(carry, 1)
    carry.deliver(url, "push", carry.push_payload(after, before))
    first = carry.wait_checked(after)
    old_name = first.patches[0].name
    new_names = carry.carry_patches(
        [{"mod.py": BODY.replace("compute(20)", "compute(20, fast=True)")}], base="main"
    )
    assert new_names == [old_name] or new_names  # same file name, different content
    before, after = move_upstream(carry, 2)
    carry.deliver(url, "push", carry.push_payload(after, before))
    second = carry.wait_checked(after)
    assert [p.name for p in second.patches] == new_names
    assert "compute(20" in (carry.downstream / "patches" / SERIES / new_names[0]).read_text()
    assert second.checked_digest != first.checked_digest


def test_a_rebase_past_its_time_limit_is_stopped_and_shown_as_timed_out(carry, tmp_path):
    """One slow series must not hold the others behind it: `carry worker` stops a rebase at
    CARRY_REBASE_TIME_LIMIT_S and the series says so, instead of running on."""
    carry.extra_env["CARRY_REBASE_TIME_LIMIT_S"] = "1"
    url = carry.start_web()
    shim = slow_git_shim(tmp_path / "shim", tmp_path / "in-engine")  # each check waits 3 s
    carry.start_carry_worker("slow", path_prefix=str(shim))
    before, after = move_upstream(carry, 1)
    assert carry.deliver(url, "push", carry.push_payload(after, before)).status_code == 202
    (entry,) = wait_for(lambda: carry.history("rebase-timed-out"), 60, "the rebase to time out")
    assert entry["data"]["limit_s"] == 1 and entry["data"]["head"] == after
    state = carry.state()
    assert state is not None and state.phase == "error" and "timed out after 1 s" in state.error
    assert carry.history("rebased") == []


def test_a_poll_past_its_time_limit_is_stopped_and_the_slow_upstream_named(carry, tmp_path):
    """Every task of the service has a time limit of its kind (CARRY_POLL_TIME_LIMIT_S for a
    poll of the heads): an upstream whose ls-remote hangs stops the poll, and the series of
    that upstream say so under "needs attention" instead of the poll running on."""
    carry.extra_env["CARRY_POLL_TIME_LIMIT_S"] = "1"
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "git").write_text(
        '#!/bin/sh\nfor a in "$@"; do if [ "$a" = ls-remote ]; then sleep 20; fi; done\n'
        f'exec {shutil.which("git")} "$@"\n'
    )
    (shim / "git").chmod(0o755)
    carry.start_carry_worker("slow-poll", path_prefix=str(shim), queues="carry.git")
    Celery(broker=carry.redis_url).send_task("carry.poll", queue="carry.git")
    (stopped,) = wait_for(lambda: carry.history("poll-failed"), 60, "the poll to be stopped")
    assert "time limit (1 s, CARRY_POLL_TIME_LIMIT_S)" in stopped["data"]["error"]
    state = carry.state()
    assert state is not None and state.upstream_error is not None
    assert any("time limit" in r for r in state.needs_attention)

    def recorded() -> list[dict[str, object]]:
        entries = store.history(carry.client, None, limit=200)
        return [e for e in entries if e["kind"] == "task-timed-out"]

    (entry,) = wait_for(recorded, 30, "the time-out on the events page")
    assert entry["data"]["task"] == "carry.poll" and entry["data"]["limit_s"] == 1


def test_a_slow_rebase_holds_no_webhook_or_reply_behind_it(carry, tmp_path):
    """`make run` and the compose file run two workers: one for git work (rebase, publish,
    polls), one for everything quick (webhook intake, commands and replies, CI reports). A
    rebase that takes minutes then delays no other event: here the push of another repository
    is taken in while the rebase is still inside the engine."""
    url = carry.start_web()
    marker = tmp_path / "in-engine"
    shim = slow_git_shim(tmp_path / "shim", marker)  # each check waits 3 s inside the engine
    carry.start_carry_worker("git-work", path_prefix=str(shim), queues="carry.git")
    carry.start_carry_worker("quick", queues="carry")
    before, after = move_upstream(carry, 1)
    assert carry.deliver(url, "push", carry.push_payload(after, before)).status_code == 202
    wait_for(marker.exists, 60, "the rebase to be inside the engine")
    other = carry.push_payload(after, before)
    other["repository"] = {**other["repository"], "full_name": "elsewhere-org/other"}
    started = time.monotonic()
    assert carry.deliver(url, "push", other).status_code == 202

    def noted() -> bool:
        notes = [e for e in store.history(carry.client, None, limit=200) if e["kind"] == "note"]
        return any("elsewhere-org/other" in e["data"].get("reason", "") for e in notes)

    wait_for(noted, 30, "the other push to be taken in")
    taken_in_s = time.monotonic() - started
    assert carry.history("rebased") == [], "the rebase had already finished: nothing was shown"
    assert taken_in_s < 2.5, f"the other push waited {taken_in_s:.1f} s behind the rebase"
    wait_for(lambda: carry.history("rebased"), 60, "the slow rebase to finish on its own worker")


def test_a_malformed_message_in_a_service_queue_is_set_aside_and_the_worker_goes_on(carry):
    """Bytes in a service queue that are no Celery message stopped a stock kombu worker at the
    first of them. `carry worker` sets each aside, whole, with one log line, and goes on: the
    push delivered after them is rebased."""
    url = carry.start_web()
    worker_log = carry.start_carry_worker("quick")
    junk = malformed(real_envelope(Celery(broker=carry.redis_url), carry.client))
    carry.client.lpush("carry", *junk.values())
    before, after = move_upstream(carry, 1)
    assert carry.deliver(url, "push", carry.push_payload(after, before)).status_code == 202
    carry.wait_checked(after)
    kept = quarantine.set_aside_messages(carry.client, quarantine.SERVICE_KEY)
    assert sorted(kept) == sorted(junk.values())
    said = [line for line in worker_log.read_text().splitlines() if "not a Celery message" in line]
    assert len(said) == len(junk), said
    assert all('"level": "warning"' in line and "Traceback" not in line for line in said)
