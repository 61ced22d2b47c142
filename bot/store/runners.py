"""What runner hosts write for people to see: their heartbeats and each CI run's live log.

Layout (all keys prefixed `carry:`):
  carry:runner:<kind>:<name>  runner heartbeats (hash, with expiry)
  carry:runlog:<run_id>       stream of a CI run's output, bounded (RUNLOG_MAXLEN lines), kept
                              RUN_RETENTION_S after its last line, as long as the run's record

A runner's broker user may write only its own kind's heartbeats and its kind's runs' logs
(bot/store/runner_channel.py holds it to that).
"""

from __future__ import annotations

from typing import Any, Final

import redis

from bot.store.ci_runs import RUN_RETENTION_S
from bot.store.codec import text
from bot.store.series import PREFIX, now_iso, publish

RUNLOG_MAXLEN: Final = 5_000


def runner_key(kind: str, runner: str) -> str:
    return f"{PREFIX}runner:{kind}:{runner}"


def heartbeat(
    client: redis.Redis, kind: str, runner: str, info: dict[str, Any], ttl_s: int = 60
) -> None:
    key = runner_key(kind, runner)
    client.hset(key, mapping={"seen_at": now_iso(), **{k: str(v) for k, v in info.items()}})
    client.expire(key, ttl_s)


def forget_runner(client: redis.Redis, kind: str, runner: str) -> None:
    """A runner that stops says so at once (its heartbeat would otherwise linger to expiry)."""
    client.delete(runner_key(kind, runner))


# Keys a SCAN call visits: the heartbeats are found by walking the whole store (a runner's
# broker user may write no index beside them), which holds thousands of other keys (done keys
# of 90 days, deliveries, runs): redis-py's default of 10 made that one round trip per 10 keys.
SCAN_COUNT: Final = 1000


def runners(client: redis.Redis) -> list[dict[str, str]]:
    """Live runners; the kind is the key's (a runner's broker user writes only its own kind's
    heartbeats), never what a heartbeat says of itself."""
    out = []
    for key in sorted(client.scan_iter(runner_key("*", "*"), count=SCAN_COUNT)):
        kind, _, name = text(key).removeprefix(f"{PREFIX}runner:").partition(":")
        if not name:  # a heartbeat of a runner older than kind-scoped keys
            continue
        data = {text(k): text(v) for k, v in client.hgetall(key).items()}
        out.append({**data, "name": name, "kind": kind})
    return out


def runlog_key(run_id: str) -> str:
    return f"{PREFIX}runlog:{run_id}"


def append_runlog(client: redis.Redis, run_id: str, stream: str, text: str) -> None:
    key = runlog_key(run_id)
    pipe = client.pipeline(transaction=False)
    pipe.xadd(key, {"stream": stream, "text": text}, maxlen=RUNLOG_MAXLEN, approximate=True)
    pipe.expire(key, RUN_RETENTION_S)
    publish(pipe, {"kind": "runlog", "run": run_id})
    pipe.execute()


def runlog(
    client: redis.Redis, run_id: str, after: str = "-", limit: int = 1000
) -> list[dict[str, str]]:
    start = f"({after}" if after != "-" else "-"
    return [
        {"id": text(i), **{text(k): text(v) for k, v in raw.items()}}
        for i, raw in client.xrange(runlog_key(run_id), min=start, count=limit)
    ]
