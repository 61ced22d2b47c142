"""2. worker kills: a Celery worker killed mid-task; the task must run again."""

from __future__ import annotations

import math
import signal
import statistics
import time
from collections import Counter
from pathlib import Path

from bench.reliability.common import RedisServer, Row, Scale, carry_env, stop_proc
from harness.carry_env import CarryEnv, slow_git_shim, wait_for


def scenario_worker_kill(root: Path, scale: Scale) -> Row:
    server = RedisServer(root / "redis").start()
    quick_redelivery = {
        "CARRY_VISIBILITY_TIMEOUT_S": "5",
        "CARRY_LOCK_TTL_S": "4",
        "CARRY_BUSY_RETRY_S": "0.2",
    }
    heads, recoveries, lost = [], [], []
    try:
        with carry_env(root / "carry", server.url, **quick_redelivery) as env:
            url = env.start_web()
            for n in range(scale.kill_rounds):
                head, seconds = _kill_round(env, url, root / f"round-{n}", n)
                heads.append(head)
                if seconds is None:
                    lost.append(head)
                else:
                    recoveries.append(seconds)
            rebased = Counter(e["data"].get("head") for e in env.history("rebased"))
            proposed = len(env.history("proposal"))
    finally:
        server.kill()
    doubled = [h for h in heads if rebased[h] > 1] + ["proposal"] * max(0, proposed - len(heads))
    return Row(
        "worker killed mid-job",
        f"{len(heads)} rebases, each worker SIGKILLed inside the engine, a new worker started",
        f"{len(lost)} of {len(heads)} jobs",
        f"{len(doubled)} (each head rebased once, proposed once)",
        "late ack: the job went back to the queue after the visibility timeout (5 s here, "
        "CARRY_VISIBILITY_TIMEOUT_S) and the series lock expired (CARRY_LOCK_TTL_S); "
        f"redone in {statistics.median(recoveries) if recoveries else math.nan:.1f} s median",
        ok=not lost and not doubled,
    )


def _kill_round(env: CarryEnv, url: str, workdir: Path, n: int) -> tuple[str, float | None]:
    marker = workdir / "in-engine"
    shim = slow_git_shim(workdir / "shim", marker)
    victim = env.start_worker(f"victim-{n}", path_prefix=str(shim))
    proposals = len(env.history("proposal"))
    before = env.upstream.head()
    after = env.upstream.commit(f"upstream change {n}", {f"other_{n}.py": f"x = {n}\n"})
    assert env.deliver(url, "push", env.push_payload(after, before)).status_code == 202
    wait_for(marker.exists, 60, "the rebase to reach the engine")
    stop_proc(victim, signal.SIGKILL)
    killed = time.monotonic()
    rescuer = env.start_worker(f"rescuer-{n}")
    try:
        env.wait_checked(after, timeout=60)
        wait_for(lambda: len(env.history("proposal")) > proposals, 30, "the proposal")
    except AssertionError:
        return after, None
    finally:
        stop_proc(rescuer)
    return after, time.monotonic() - killed
