"""Who executes a run now, and how many run at once: a run's lease (one holder, renewed while
it runs, taken over from a dead holder on the same host) and a runner kind's running slots
(expiring, counted on Redis's clock)."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from contextlib import suppress

import redis

from bot.ci.runs import Run, RunEffects, end_run
from bot.ci.spec import (
    JobPayload,
)
from bot.core.state import CiStatus
from bot.store import ci_runs as store
from bot.store.ci_runs import cancel_reason
from runner.runtime import runner_runtime

log = logging.getLogger("carry.ci")

POLL_S = 0.5


# --------------------------------------------------------------------------- leases and slots


def holder_id(runner: str) -> str:
    return f"{runner}|{socket.gethostname()}|{os.getpid()}"


def acquire_lease(client: redis.Redis, run_id: str, me: str) -> str | None:
    """None when this process now holds the run's lease; else the live holder."""
    for _ in range(3):
        if store.take_lease(client, run_id, me, runner_runtime().lease_s):
            return None
        holder = store.lease_holder(client, run_id)
        if holder == me or (holder and holder_dead(holder)):
            store.release_lease(client, run_id, holder)
            continue
        if holder:
            return holder
    return "contended"


def holder_dead(holder: str) -> bool:
    """A holder on this host whose process is gone (a killed pool child, a killed worker)."""
    _, host, pid = [*holder.split("|"), "", ""][:3]
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def take_slot(client: redis.Redis, kind: str, run_id: str, limit: int) -> bool:
    return store.take_slot(client, kind, run_id, limit, runner_runtime().lease_s)


def wait_for_slot(client: redis.Redis, effects: RunEffects, run: Run, runner: str) -> bool:
    """Blocks until the kind's running budget has room for this run; False if cancelled."""
    limit = run.payload.budget.running
    noted = False
    while not take_slot(client, run.kind, run.run_id, limit):
        if not noted:
            store.note_detail(
                client,
                run.run_id,
                f"{runner} waits for a {run.kind} slot (budget: {limit} running)",
            )
            noted = True
        reason = cancel_reason(client, run.run_id)
        if reason is not None:
            end_run(client, effects, run, CiStatus.CANCELLED, reason)
            return False
        time.sleep(POLL_S)
    return True


class Watch:
    """While a run executes: answers "cancelled?" for the steps (rate-limited reads of the
    cancel marker) and keeps the lease and the running slot alive from a thread, so a long
    fetch or a silent step never looks like a lost runner."""

    def __init__(self, client: redis.Redis, job: JobPayload, runner: str) -> None:
        self.client = client
        self.job = job
        self.me = holder_id(runner)
        self._checked = 0.0
        self._reason: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, name="carry-lease", daemon=True)
        self._thread.start()

    def cancelled(self) -> str | None:
        now = time.monotonic()
        if self._reason is not None or now - self._checked < POLL_S:
            return self._reason
        self._checked = now
        try:
            self._reason = cancel_reason(self.client, self.job.run_id)
        except redis.RedisError:  # a Redis hiccup must not kill a test that runs for hours
            log.warning("cannot poll the cancel marker of %s", self.job.run_id, exc_info=True)
        return self._reason

    def _renew(self) -> None:
        lease = runner_runtime().lease_s
        while not self._stop.wait(lease / 4):
            try:
                store.renew_lease(self.client, self.job.run_id, self.me, lease)
                take_slot(self.client, self.job.kind, self.job.run_id, self.job.budget.running)
            except redis.RedisError:
                log.warning("cannot renew the lease of %s", self.job.run_id, exc_info=True)

    def release(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        with suppress(redis.RedisError):
            store.release_lease(self.client, self.job.run_id, self.me)
            store.free_slot(self.client, self.job.kind, self.job.run_id)
