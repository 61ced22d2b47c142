"""Hardware runs in Redis: every key under `carry:ci:`, and the only code that touches them.

  run:<run_id>             hash: the run (payload, state, attempt, runner, per-check results),
                           kept RUN_RETENTION_S after the service last wrote it
  current:<series>:<kind>  the newest run requested for a series on a runner kind
  cancel:<run_id>          cancel marker with its reason; the runner polls it and kills the step
  result:<kind>:<tree_key> the reusable verdict for one exact tree on one runner kind
  inflight:<kind>          zset of runs handed to the broker and not finished (the budget)
  deferred:<kind>          zset of runs held back because the budget was full
  paced                    zset of runs held back by a series' pacing, scored by when they may start
  starts:<series>:<kind>   zset of the series' head runs handed to a kind's queue, by time (a day)
  lease:<run_id>           who executes the run now ("runner|host|pid"), with expiry
  slots:<kind>             zset of running leases (budget.running), expiring
  lock:<kind>              serializes planning for a runner kind
  issued:<run_id>          hash: the run as the service issued it (series, kind, tree_key,
                           head_sha) and how far it let it go (IssuedState); no runner's
                           broker user may write it (kind_acl_patterns names no such key)

The run record is stored as text fields; bot/ci/runs.py reads it into a `Run` (its payload
is the runner's job, which bot/ does not know)."""

from __future__ import annotations

import json
import re
import secrets
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

import redis

from bot.store.codec import text
from bot.store.series import PREFIX, now_iso

CI: Final = f"{PREFIX}ci:"
CANCEL_TTL_S: Final = 7 * 24 * 3600
RESULT_TTL_S: Final = 180 * 24 * 3600
# How long a run's record, what the service issued of it and its live log are kept (from the
# last time the service wrote the run): one of each per head, series and runner kind, so
# without it they would grow with every head for ever. bot.store.runners keeps the logs as long.
RUN_RETENTION_S: Final = 30 * 24 * 3600
KIND_LOCK_S: Final = 60
KIND_LOCK_WAIT_S: Final = 30
RUN_TOKEN_BYTES: Final = 6  # a run id is <kind>-<12 hex digits>


def new_run_id(kind: str) -> str:
    return f"{kind}-{secrets.token_hex(RUN_TOKEN_BYTES)}"


def is_run_id(kind: str, run_id: str) -> bool:
    """Whether `run_id` has the form of a run id carry issues for `kind`."""
    digits = 2 * RUN_TOKEN_BYTES
    return re.fullmatch(rf"{re.escape(kind)}-[0-9a-f]{{{digits}}}", run_id) is not None


def run_id_glob(kind: str) -> str:
    """is_run_id as a Redis glob (kind names hold no glob characters)."""
    return f"{kind}-" + "[0-9a-f]" * (2 * RUN_TOKEN_BYTES)


def kind_acl_patterns(kind: str) -> list[str]:
    """ACL key patterns for what a runner of `kind` may touch here: its kind's runs (record,
    lease; the cancel marker read-only), verdicts, running slots and budget entries."""
    run = run_id_glob(kind)
    return [
        f"~{run_key(run)}",
        f"%R~{CI}cancel:{run}",
        f"~{_lease_key(run)}",
        f"~{CI}result:{kind}:*",
        f"~{_slots_key(kind)}",
        f"~{_inflight_key(kind)}",
        f"~{_deferred_key(kind)}",
    ]


class IssuedState(StrEnum):
    """How far the service let a run it issued go."""

    WAITING_APPROVAL = "waiting-approval"  # held until `/carry approve`
    HELD = "held"  # held back by the kind's budget, not handed to a runner yet
    DISPATCHED = "dispatched"  # handed to the broker: a runner may report on it


@dataclass(frozen=True)
class Issued:
    """A run as the service issued it: what a runner's report about it is checked against."""

    run_id: str
    series: str
    kind: str
    tree_key: str
    head_sha: str
    state: IssuedState


def record_issued(client: redis.Redis, issued: Issued) -> None:
    """The service issued (or released) a run: kept where runners cannot write."""
    mapping: dict[str | bytes, str] = {
        "series": issued.series,
        "kind": issued.kind,
        "tree_key": issued.tree_key,
        "head_sha": issued.head_sha,
        "state": issued.state.value,
    }
    key = _issued_key(issued.run_id)
    pipe = client.pipeline()
    pipe.hset(key, mapping=mapping)
    pipe.expire(key, RUN_RETENTION_S)
    pipe.execute()


def issued_run(client: redis.Redis, run_id: str) -> Issued | None:
    """The run as the service issued it; None when the service never issued a run so named."""
    raw = {text(k): text(v) for k, v in client.hgetall(_issued_key(run_id)).items()}
    try:
        state = IssuedState(raw.get("state", ""))
    except ValueError:
        return None
    return Issued(
        run_id,
        raw.get("series", ""),
        raw.get("kind", ""),
        raw.get("tree_key", ""),
        raw.get("head_sha", ""),
        state,
    )


def _issued_key(run_id: str) -> str:
    return f"{CI}issued:{run_id}"


def run_key(run_id: str) -> str:
    return f"{CI}run:{run_id}"


def current_key(series_id: str, kind: str) -> str:
    return f"{CI}current:{series_id}:{kind}"


def _lease_key(run_id: str) -> str:
    return f"{CI}lease:{run_id}"


def _slots_key(kind: str) -> str:
    return f"{CI}slots:{kind}"


def _inflight_key(kind: str) -> str:
    return f"{CI}inflight:{kind}"


def _deferred_key(kind: str) -> str:
    return f"{CI}deferred:{kind}"


def _paced_key() -> str:
    return f"{CI}paced"


def _starts_key(series_id: str, kind: str) -> str:
    return f"{CI}starts:{series_id}:{kind}"


# --------------------------------------------------------------------------- the run record


def run_fields(client: redis.Redis, run_id: str) -> dict[str, str]:
    """The run's stored fields as text; empty when there is no such run."""
    return {text(k): text(v) for k, v in client.hgetall(run_key(run_id)).items()}


def write_run(
    client: redis.Redis, run_id: str, series_id: str, kind: str, values: Mapping[str, str]
) -> None:
    """Writes (or rewrites) a run's record and makes it the series' current run of its kind."""
    key = run_key(run_id)
    pipe = client.pipeline()
    pipe.hsetnx(key, "created_at", now_iso())
    pipe.hsetnx(key, "attempt", "0")
    mapping: dict[str | bytes, str] = {"updated_at": now_iso()}
    mapping.update(values)
    pipe.hset(key, mapping=mapping)
    pipe.expire(key, RUN_RETENTION_S)
    pipe.set(current_key(series_id, kind), run_id)
    pipe.execute()


def transition(
    client: redis.Redis, run_id: str, to: str, allowed: Iterable[str], **values: str
) -> bool:
    """Moves a run to state `to` if it is in one of `allowed` (atomic: WATCH/MULTI)."""
    key = run_key(run_id)
    allowed = tuple(allowed)
    with client.pipeline() as pipe:
        while True:
            try:
                pipe.watch(key)
                if text(pipe.hget(key, "state")) not in allowed:
                    pipe.reset()
                    return False
                pipe.multi()
                mapping: dict[str | bytes, str] = {"state": to, "updated_at": now_iso()}
                mapping.update(values)
                pipe.hset(key, mapping=mapping)
                pipe.execute()
                return True
            except redis.WatchError:
                continue


def note_detail(client: redis.Redis, run_id: str, detail: str) -> None:
    client.hset(run_key(run_id), "detail", detail)


def next_attempt_number(client: redis.Redis, run_id: str) -> int:
    return int(client.hincrby(run_key(run_id), "attempt", 1))


def record_check(client: redis.Redis, run_id: str, check_key: str, data: Mapping[str, Any]) -> None:
    client.hset(run_key(run_id), f"check:{check_key}", json.dumps(data))


def run_states(client: redis.Redis, run_ids: list[str]) -> list[str]:
    pipe = client.pipeline()
    for run_id in run_ids:
        pipe.hget(run_key(run_id), "state")
    return [text(s) for s in pipe.execute()]


# --------------------------------------------------------------------------- current runs


def current_run(client: redis.Redis, series_id: str, kind: str) -> str:
    return text(client.get(current_key(series_id, kind)))


def forget_current(client: redis.Redis, series_id: str, kind: str) -> None:
    client.delete(current_key(series_id, kind))


def current_runs(client: redis.Redis, series_id: str) -> list[str]:
    """The current run of each runner kind of a series."""
    return [text(client.get(key)) for key in client.scan_iter(f"{CI}current:{series_id}:*")]


# --------------------------------------------------------------------------- cancel, results


def mark_cancelled(client: redis.Redis, run_id: str, reason: str) -> None:
    client.set(f"{CI}cancel:{run_id}", reason, ex=CANCEL_TTL_S)


def cancel_reason(client: redis.Redis, run_id: str) -> str | None:
    raw = client.get(f"{CI}cancel:{run_id}")
    return text(raw) if raw is not None else None


def stored_result(client: redis.Redis, kind: str, tree: str) -> dict[str, Any] | None:
    raw = client.get(f"{CI}result:{kind}:{tree}")
    return json.loads(raw) if raw else None


def store_result(
    client: redis.Redis, kind: str, tree: str, body: Mapping[str, Any], *, replace: bool
) -> None:
    """Keeps a tree's verdict for reuse; the first one stays unless `replace` (a forced retest)."""
    key = f"{CI}result:{kind}:{tree}"
    client.set(key, json.dumps(body), ex=RESULT_TTL_S, nx=not replace)


# --------------------------------------------------------------------------- the budget


@contextmanager
def kind_lock(client: redis.Redis, kind: str) -> Iterator[None]:
    """Serializes planning for one runner kind (across service processes)."""
    lock = client.lock(f"{CI}lock:{kind}", timeout=KIND_LOCK_S, blocking_timeout=KIND_LOCK_WAIT_S)
    if not lock.acquire(blocking=True):
        raise TimeoutError(f"CI planning lock for {kind} is held for over {KIND_LOCK_WAIT_S} s")
    try:
        yield
    finally:
        with suppress(redis.exceptions.LockError):
            lock.release()


def add_in_flight(client: redis.Redis, kind: str, run_id: str) -> None:
    """The run was handed to the broker: it counts against the budget, it waits no longer."""
    pipe = client.pipeline()
    pipe.zadd(_inflight_key(kind), {run_id: time.time()})
    pipe.zrem(_deferred_key(kind), run_id)
    pipe.execute()


def in_flight(client: redis.Redis, kind: str) -> int:
    """Dispatched, unfinished runs of a kind (entries of finished or lost records pruned)."""
    members = [text(m) for m in client.zrange(_inflight_key(kind), 0, -1)]
    if not members:
        return 0
    states = run_states(client, members)
    stale = [m for m, s in zip(members, states, strict=True) if s not in ("queued", "running")]
    if stale:
        client.zrem(_inflight_key(kind), *stale)
    return len(members) - len(stale)


def defer(client: redis.Redis, kind: str, run_id: str) -> None:
    client.zadd(_deferred_key(kind), {run_id: time.time()})


def deferred(client: redis.Redis, kind: str) -> list[str]:
    """Runs the budget held back, oldest first."""
    return [text(raw) for raw in client.zrange(_deferred_key(kind), 0, -1)]


def undefer(client: redis.Redis, kind: str, run_id: str) -> None:
    client.zrem(_deferred_key(kind), run_id)


def pace(client: redis.Redis, run_id: str, not_before: float) -> None:
    """Holds a run back until `not_before` (its series' ci.min_interval_s / ci.daily_budget)."""
    client.zadd(_paced_key(), {run_id: not_before})


def paced_due(client: redis.Redis, now: float) -> list[str]:
    """Paced runs whose time has come, earliest first."""
    return [text(raw) for raw in client.zrangebyscore(_paced_key(), "-inf", now)]


def unpace(client: redis.Redis, run_id: str) -> None:
    client.zrem(_paced_key(), run_id)


def note_start(client: redis.Redis, series_id: str, kind: str, run_id: str, at: float) -> None:
    """A head run of the series was handed to the kind's queue (what pacing counts); entries
    older than a day go."""
    key = _starts_key(series_id, kind)
    pipe = client.pipeline()
    pipe.zadd(key, {run_id: at})
    pipe.zremrangebyscore(key, "-inf", at - 86_400)
    pipe.expire(key, 86_400 * 2)
    pipe.execute()


def starts(client: redis.Redis, series_id: str, kind: str, now: float) -> tuple[float, ...]:
    """When the series' head runs on the kind were handed to its queue, in the last day."""
    rows = client.zrangebyscore(_starts_key(series_id, kind), now - 86_400, "+inf", withscores=True)
    return tuple(float(score) for _, score in rows)


def forget_start(client: redis.Redis, series_id: str, kind: str, run_id: str) -> None:
    """A run cancelled before any runner took it used no place in the series' pace."""
    client.zrem(_starts_key(series_id, kind), run_id)


def leave_budget(client: redis.Redis, kind: str, run_id: str) -> None:
    """A finished run holds no place in the budget, in flight or deferred."""
    pipe = client.pipeline()
    pipe.zrem(_inflight_key(kind), run_id)
    pipe.zrem(_deferred_key(kind), run_id)
    pipe.execute()


# --------------------------------------------------------------------------- leases and slots

_RELEASE_IF_OWNER = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""

# Takes (or renews) one of `limit` expiring slots; TIME keeps hosts' clocks out of it.
_SLOT = """
local now = tonumber(redis.call('time')[1])
redis.call('zremrangebyscore', KEYS[1], '-inf', now)
if redis.call('zscore', KEYS[1], ARGV[1]) or redis.call('zcard', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('zadd', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
  return 1
end
return 0
"""


def take_lease(client: redis.Redis, run_id: str, holder: str, ttl_s: int) -> bool:
    """True when `holder` now holds the run's lease (it was free)."""
    return bool(client.set(_lease_key(run_id), holder, nx=True, ex=ttl_s))


def renew_lease(client: redis.Redis, run_id: str, holder: str, ttl_s: int) -> None:
    client.set(_lease_key(run_id), holder, ex=ttl_s)


def lease_holder(client: redis.Redis, run_id: str) -> str:
    """Who holds the run's lease now; empty when nobody does."""
    return text(client.get(_lease_key(run_id)))


def lease_ttl_s(client: redis.Redis, run_id: str) -> int:
    return int(client.ttl(_lease_key(run_id)))


def release_lease(client: redis.Redis, run_id: str, holder: str) -> None:
    """Frees the run's lease if `holder` still holds it."""
    client.eval(_RELEASE_IF_OWNER, 1, _lease_key(run_id), holder)


def take_slot(client: redis.Redis, kind: str, run_id: str, limit: int, ttl_s: int) -> bool:
    """Takes or renews one of the kind's `limit` running slots for `ttl_s`."""
    return bool(client.eval(_SLOT, 1, _slots_key(kind), run_id, limit, ttl_s))


def free_slot(client: redis.Redis, kind: str, run_id: str) -> None:
    client.zrem(_slots_key(kind), run_id)


# What a list of runs shows of each: not its payload (the job, with every patch) nor its checks.
RUN_LIST_FIELDS: Final = (
    "series",
    "kind",
    "runner",
    "head_sha",
    "state",
    "detail",
    "attempt",
    "created_at",
    "updated_at",
)


def all_runs(client: redis.Redis, batch: int = 500) -> list[dict[str, str]]:
    """Every run's record (RUN_LIST_FIELDS, its id as "run_id"), in no particular order."""
    prefix = f"{CI}run:"
    keys = [text(key) for key in client.scan_iter(f"{prefix}*", count=batch)]
    out: list[dict[str, str]] = []
    for start in range(0, len(keys), batch):
        chunk = keys[start : start + batch]
        pipe = client.pipeline(transaction=False)
        for key in chunk:
            pipe.hmget(key, list(RUN_LIST_FIELDS))
        for key, values in zip(chunk, pipe.execute(), strict=True):
            if any(v is not None for v in values):  # gone between SCAN and HMGET
                record = {f: text(v) for f, v in zip(RUN_LIST_FIELDS, values, strict=True)}
                out.append({"run_id": key.removeprefix(prefix), **record})
    return out
