"""A delivery carry acknowledged whose message the broker lost is handled after all (issue 34,
no lost delivery). bench/reliability's Redis restart scenario found it: kombu's Redis transport
takes a message off the queue (BRPOP) and records it as unacknowledged in a second command; a
broker killed between the two kept the pop (its AOF ends with the RPOP) and lost the message,
so an acknowledged push was never handled and GitHub, answered 2xx, never sends it again.
Here the pop is made by hand, as the worker's was, with real processes: `carry web`, a
Celery worker and the sweep's task. Fails on the code before the sweep: the head is never
checked."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from celery import Celery

from bot.core.history import HistoryKind
from bot.store import deliveries
from bot.store import series as store
from harness.carry_env import BODY, CarryEnv, wait_for

FIX = {"mod.py": BODY.replace("compute(10)", "compute(10, safe=True)")}
REQUEUE_AFTER_S = 1.0


@pytest.fixture
def carry(tmp_path: Path, redis_url: str):
    env = CarryEnv(tmp_path, redis_url)
    env.carry_patches([FIX])
    env.write_config()
    env.extra_env["CARRY_REQUEUE_AFTER_S"] = str(REQUEUE_AFTER_S)
    yield env
    env.stop()


def sweep(env: CarryEnv) -> None:
    """The beat's sweep, once the open delivery is overdue; waits until the worker ran it."""
    time.sleep(REQUEUE_AFTER_S)
    log = env.root / "worker-w1.log"
    done = log.read_bytes().count(b"carry.requeue_lost[")
    Celery(broker=env.redis_url).send_task("carry.requeue_lost", queue="carry")
    wait_for(
        lambda: log.read_bytes().count(b"carry.requeue_lost[") >= done + 2, 20, "the sweep"
    )  # received, then succeeded


def test_an_acknowledged_push_whose_message_was_lost_is_handled(carry: CarryEnv) -> None:
    url = carry.start_web()
    before = carry.upstream.head()
    after = carry.upstream.commit("upstream change", {"other.py": "x = 1\n"})
    response = carry.deliver(url, "push", carry.push_payload(after, before), delivery="lost-1")
    assert response.status_code == 202
    client = carry.client
    assert client.rpop("carry") is not None  # the worker's pop; the broker died before unacked
    assert client.llen("carry") == 0 and client.hlen("unacked") == 0

    carry.start_worker()
    wait_for(
        lambda: deliveries.open_since(client, 1e12) == ["lost-1"], 10, "the delivery still open"
    )
    sweep(carry)

    state = carry.wait_checked(after)
    assert state.checked_head == after
    wait_for(lambda: deliveries.open_since(client, 1e12) == [], 20, "the delivery settled")
    assert deliveries.requeued(client, "lost-1") == 1
    kinds = [e["kind"] for e in store.history(client, None, limit=100)]
    assert kinds.count(HistoryKind.DELIVERY_REQUEUED) == 1


def test_a_handled_delivery_is_settled_and_never_queued_again(carry: CarryEnv) -> None:
    url = carry.start_web()
    carry.start_worker()
    before = carry.upstream.head()
    after = carry.upstream.commit("upstream change", {"other.py": "x = 1\n"})
    carry.deliver(url, "push", carry.push_payload(after, before), delivery="kept-1")
    carry.wait_checked(after)
    client = carry.client
    wait_for(lambda: deliveries.open_since(client, 1e12) == [], 20, "the delivery settled")

    sweep(carry)
    assert deliveries.requeued(client, "kept-1") == 0
    kinds = [e["kind"] for e in store.history(client, None, limit=100)]
    assert HistoryKind.DELIVERY_REQUEUED not in kinds
    assert HistoryKind.DUPLICATE_EVENT not in kinds
