"""What a runner of one kind may touch in Redis, the reports it sends the service, and the
Redis ACL rules that hold a runner's broker user to exactly that.

A runner executes code nobody here wrote, so its broker access is least-privilege. It keeps
its kind's runs (`carry:ci:run:<kind>-<hex>` and their leases, logs, verdicts, slots and budget
entries; it reads their cancel markers) and its kind's heartbeats (`carry:runner:<kind>:*`);
it pops and requeues jobs of its queue. It never writes series state, history or approvals
and never queues a service task: what the service must do because of a run (history entries,
CI rows, the budget's deferred runs) it *reports*, and the service checks each report against
the run record and applies it (workers/ci/reports.py).

  carry:hw:<kind>:reports    stream of reports (type, run_id, runner, data)
  carry:hw:<kind>:quarantine messages in the queue that are no Celery message, set aside
                             whole (bot/queue/broker_transport.py), newest first
  carry:hw:<kind>:unacked*   the kind's Celery deliveries in progress (kombu's unacked keys,
                             kept apart from the service's so a runner cannot requeue a
                             message into a service queue)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

import redis

from bot.store.ci_runs import kind_acl_patterns, run_id_glob
from bot.store.codec import text
from bot.store.runners import runlog_key, runner_key
from bot.store.series import PREFIX, UPDATES_CHANNEL

HW: Final = f"{PREFIX}hw:"
REPORTS_MAXLEN: Final = 200_000
APPLIERS: Final = "carry-service"

# The commands a runner sends: Celery's Redis transport (pop, requeue, its unacked bookkeeping
# and mutex), redis-py's connection set-up, and carry's runner code. Nothing that reaches
# other keys (KEYS, SCAN), the server (CONFIG, FLUSHALL) or a subscription.
RUNNER_COMMANDS: Final = (
    "ping",
    "auth",
    "hello",
    "client|setname",
    "select",
    "quit",
    "reset",
    "multi",
    "exec",
    "discard",
    "watch",
    "unwatch",
    "time",
    "get",
    "set",
    "del",
    "exists",
    "expire",
    "ttl",
    "incr",
    "hincrby",
    "hsetnx",
    "publish",
    "hset",
    "hget",
    "hgetall",
    "hdel",
    "zadd",
    "zrem",
    "zscore",
    "zcard",
    "zrange",
    "zrangebyscore",
    "zrevrangebyscore",
    "zremrangebyscore",
    "lpush",
    "ltrim",
    "rpush",
    "brpop",
    "llen",
    "sadd",
    "smembers",
    "xadd",
    "eval",
    "evalsha",
    "script|load",
)


def kind_prefix(kind: str) -> str:
    return f"{HW}{kind}:"


def reports_key(kind: str) -> str:
    return f"{kind_prefix(kind)}reports"


def quarantine_key(kind: str) -> str:
    return f"{kind_prefix(kind)}quarantine"


def transport_options(kind: str) -> dict[str, Any]:
    """kombu's Redis transport options for a runner of `kind`: its deliveries in progress and
    the messages it sets aside in its own keys, and one list for its queue (no priority sub-lists, which the ACL does not
    name; carry sends jobs without a priority)."""
    return {
        "priority_steps": [0],
        "unacked_key": f"{kind_prefix(kind)}unacked",
        "unacked_index_key": f"{kind_prefix(kind)}unacked_index",
        "unacked_mutex_key": f"{kind_prefix(kind)}unacked_mutex",
        "quarantine_key": quarantine_key(kind),
    }


def acl_rules(kind: str, queue: str) -> list[str]:
    """ACL SETUSER rules (without the user's name and password) for a runner of `kind` that
    consumes `queue`: its kind's runs (records, leases, verdicts, slots, budget, logs), its
    reports and deliveries, its queue, its kind's heartbeats, the live page's channel (publish
    only: a run log's line tells open pages to refresh), and RUNNER_COMMANDS."""
    return [
        "resetkeys",
        "resetchannels",
        "-@all",
        *(f"+{command}" for command in RUNNER_COMMANDS),
        *kind_acl_patterns(kind),
        f"~{runlog_key(run_id_glob(kind))}",
        f"~{runner_key(kind, '*')}",
        f"~{kind_prefix(kind)}*",
        f"~{queue}",
        f"~_kombu.binding.{queue}",
        f"~_kombu.binding_permanent.{queue}",
        f"&{UPDATES_CHANNEL}",
    ]


def runner_user(kind: str) -> str:
    return f"carry-runner-{kind}"


def acl_setuser(kind: str, queue: str, password: str) -> list[str]:
    """The ACL SETUSER command (as arguments) that creates or resets `kind`'s runner user."""
    return [
        "ACL",
        "SETUSER",
        runner_user(kind),
        "reset",
        "on",
        f">{password}",
        *acl_rules(kind, queue),
    ]


def set_runner_user(client: redis.Redis, kind: str, queue: str, password: str) -> None:
    client.execute_command(*acl_setuser(kind, queue, password))


# --------------------------------------------------------------------------- reports


@dataclass(frozen=True)
class Report:
    """One report of a runner: what it saw, for the service to check and apply."""

    entry_id: str
    type: str
    run_id: str
    runner: str
    data: dict[str, Any]


def send_report(
    client: redis.Redis, kind: str, type_: str, run_id: str, runner: str, **data: Any
) -> None:
    client.xadd(
        reports_key(kind),
        {"type": type_, "run_id": run_id, "runner": runner, "data": json.dumps(data, default=str)},
        maxlen=REPORTS_MAXLEN,
        approximate=True,
    )


def ensure_group(client: redis.Redis, kind: str) -> None:
    try:
        client.xgroup_create(reports_key(kind), APPLIERS, id="0", mkstream=True)
    except redis.ResponseError as err:
        if "BUSYGROUP" not in str(err):
            raise


def read_reports(
    client: redis.Redis, kinds: list[str], consumer: str, block_ms: int, count: int = 100
) -> list[tuple[str, Report]]:
    """New reports of the kinds (kind, report), oldest first, for this consumer."""
    if not kinds:
        return []
    streams = {reports_key(kind): ">" for kind in kinds}
    answer = client.xreadgroup(APPLIERS, consumer, streams, count=count, block=block_ms)
    return _reports(answer or [])


def claim_stale(
    client: redis.Redis, kind: str, consumer: str, idle_ms: int
) -> list[tuple[str, Report]]:
    """Reports another consumer read and never acknowledged (it died), now this one's."""
    _next, entries, *_ = client.xautoclaim(reports_key(kind), APPLIERS, consumer, idle_ms, "0-0")
    return _reports([(reports_key(kind), entries)])


def ack_report(client: redis.Redis, kind: str, entry_id: str) -> None:
    client.xack(reports_key(kind), APPLIERS, entry_id)


def pending_reports(client: redis.Redis, kind: str) -> int:
    """Reports not yet applied: unread ones and read ones not acknowledged."""
    try:
        groups = client.xinfo_groups(reports_key(kind))
    except redis.ResponseError:  # no stream yet
        return 0
    for group in groups:
        if text(group.get("name")) == APPLIERS:
            return int(group.get("pending") or 0) + int(group.get("lag") or 0)
    return int(client.xlen(reports_key(kind)))


def _reports(answer: list[Any]) -> list[tuple[str, Report]]:
    out = []
    for stream, entries in answer:
        kind = text(stream).removeprefix(HW).split(":", 1)[0]
        for entry_id, raw in entries:
            if raw is None:  # trimmed away while pending
                continue
            fields = {text(k): text(v) for k, v in raw.items()}
            try:
                data = json.loads(fields.get("data") or "{}")
            except ValueError:
                data = {"unreadable": fields.get("data", "")}
            out.append(
                (
                    kind,
                    Report(
                        entry_id=text(entry_id),
                        type=fields.get("type", ""),
                        run_id=fields.get("run_id", ""),
                        runner=fields.get("runner", ""),
                        data=data if isinstance(data, dict) else {"unreadable": data},
                    ),
                )
            )
    return out
