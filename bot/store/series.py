"""Series state, decision history and coordination keys in Redis.

Layout (all keys prefixed `carry:`):
  carry:series:<id>        JSON of bot.core.state.SeriesState (the current picture)
  carry:series-versions    hash: every stored series' id -> its document's sha1 (the
                           dashboard's list, and what it has already read)
  carry:history:<id>       stream: every event, decision and outcome for one series, with evidence
  carry:history            stream: the same entries for all series (the events page)
  carry:wanted:<id>        the newest head a rebase was requested for (bursts collapse to it)
  carry:done:<key>         idempotency markers for actions already carried out
  carry:lock:<id>          one job per series at a time
  carry:updates            pub/sub channel: a message per change, for live pages

The other modules of bot.store own the other keys: deliveries.py (webhook deliveries),
pr_polls.py (what the PR poller last saw), dashboard_issue.py (carry's issue on GitHub),
ci_runs.py (the hardware runs, carry:ci:), runners.py (runner heartbeats and run logs) and
metrics.py (carry's counters, carry:metrics:).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, cast

import redis
from redis.commands.core import CoreCommands

from bot.core.history import HistoryKind
from bot.core.state import SeriesState, stamp_since
from bot.store.codec import text

log = logging.getLogger("carry.store")

PREFIX: Final = "carry:"
UPDATES_CHANNEL: Final = "carry:updates"
HISTORY_MAXLEN: Final = 20_000
DONE_TTL_S: Final = 90 * 24 * 3600


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _series_key(series_id: str) -> str:
    return f"{PREFIX}series:{series_id}"


# Each stored series' id and the version of its document (sha1hex, as the commit script
# computes it), written with the document by every writer: the dashboard's list of series,
# and what lets it skip the documents it has already made its rows of (at 200 series of 30
# patches the documents are ~7 MB; their versions ~10 KB). A SCAN for carry:series:* would
# walk every key of the store (deliveries, runs, the done keys of 90 days), which grows with
# the store's age, not with the series: 3.9 s an overview at 60,000 other keys. A store
# written before the versions is versioned by one SCAN, once (SERIES_VERSIONED says it was).
SERIES_VERSIONS: Final = f"{PREFIX}series-versions"
SERIES_VERSIONED: Final = f"{PREFIX}series-versions:complete"
# The index an older carry kept (ids only), removed when the versions are made.
_OLD_INDEX: Final = (f"{PREFIX}series-ids", f"{PREFIX}series-ids:complete")


def load_series(client: redis.Redis, series_id: str) -> SeriesState | None:
    raw = client.get(_series_key(series_id))
    return SeriesState.from_dict(json.loads(raw)) if raw else None


def load_many(client: redis.Redis, series_ids: list[str]) -> list[SeriesState | None]:
    """The stored state of each series (None where it has none), in one round trip."""
    values = client.mget([_series_key(s) for s in series_ids]) if series_ids else []
    return [SeriesState.from_dict(json.loads(v)) if v else None for v in values]


def all_series(client: redis.Redis) -> list[SeriesState]:
    return [SeriesState.from_dict(json.loads(raw)) for _, raw in all_series_documents(client)]


def all_series_documents(client: redis.Redis) -> list[tuple[str, bytes]]:
    """Every stored series document as (series id, its JSON bytes), by id, unparsed."""
    documents = series_documents(client, sorted(series_versions(client)))
    return sorted(documents.items())


def series_versions(client: redis.Redis) -> dict[str, str]:
    """Each stored series' id -> its document's version (the sha1hex of its bytes): a reader
    that keeps what it made of a document asks only for those whose version it has not seen
    (series_documents)."""
    if not client.exists(SERIES_VERSIONED):
        _version_stored_series(client)
    return {text(sid): text(version) for sid, version in client.hgetall(SERIES_VERSIONS).items()}


def series_documents(client: redis.Redis, series_ids: list[str]) -> dict[str, bytes]:
    """The stored documents of these series (those that have one), unparsed, in one MGET."""
    values = client.mget([_series_key(sid) for sid in series_ids]) if series_ids else []
    return {sid: raw for sid, raw in zip(series_ids, values, strict=True) if raw}


# Sets one document's version from its bytes as stored: atomic, so a writer's own version
# (written with its document) is never replaced by an older one.
_VERSION = """
local current = redis.call('GET', KEYS[1])
if current then redis.call('HSET', KEYS[2], ARGV[1], redis.sha1hex(current)) end
return current and 1 or 0
"""


def _version_stored_series(client: redis.Redis) -> None:
    """Versions every stored series document (a store from before the versions), then marks
    the versions complete; writers add their own meanwhile."""
    prefix = _series_key("")
    version = client.register_script(_VERSION)
    for key in client.scan_iter(f"{prefix}*", count=1000):
        version(keys=[key, SERIES_VERSIONS], args=[text(key).removeprefix(prefix)])
    client.delete(*_OLD_INDEX)
    client.set(SERIES_VERSIONED, "1")


def save_series(client: redis.Redis, state: SeriesState) -> None:
    """Overwrites the whole document: for seeding a state (tests, fixtures). Workers change a
    series only through update_series, which never writes over a concurrent change."""
    _write(client, state)


def _write(client: redis.Redis, state: SeriesState) -> None:
    state.updated_at = now_iso()
    document = json.dumps(state.to_dict())
    pipe = client.pipeline()  # MULTI: the document and its version together
    pipe.set(_series_key(state.id), document)
    pipe.hset(SERIES_VERSIONS, state.id, _digest(document))
    publish(pipe, {"kind": "series", "series": state.id})
    pipe.execute()


Change = Callable[[SeriesState], bool]
Also = Callable[[Any], None]  # queues more writes that commit with the state


@dataclass(frozen=True)
class Lease:
    """A job's hold on its series (the lock's key and this holder's token): a commit made with
    it lands only while the job still holds the lock."""

    key: str
    token: bytes


class LeaseLost(RuntimeError):
    """The job's series lock expired or passed to another job: its result was not stored."""


class _Queued(CoreCommands):
    """Records the commands redis-py would send, for the commit script to run after its
    checks pass (a MULTI block cannot be made conditional on them)."""

    # A Lua call unpacks at most a few thousand words: a big HSET goes in parts.
    MAX_WORDS = 1000

    def __init__(self) -> None:
        self.commands: list[tuple[Any, ...]] = []

    def execute_command(self, *args: Any, **options: Any) -> _Queued:
        name, *words = args
        if len(words) <= self.MAX_WORDS:
            self.commands.append(args)
        elif name == "HSET":
            key, pairs = words[0], words[1:]
            step = self.MAX_WORDS - self.MAX_WORDS % 2
            for start in range(0, len(pairs), step):
                self.commands.append((name, key, *pairs[start : start + step]))
        else:
            raise ValueError(f"{name} with {len(words)} words is too long for one commit")
        return self


# Compare-and-set of one series document, with the writes that go with it. The version is
# the stored document's own digest: a commit lands only on the document its change was
# computed from, and only while the job's lease (when it has one) is still its own.
#   KEYS[1] the document; ARGV[1] the digest it had ("" when absent), ARGV[2] the lease key,
#   ARGV[3] the lease token ("" without a lease), ARGV[4] the new document; then each further
#   command as its word count and its words. Like MULTI/EXEC, a failing command does not
#   stop the others; the script returns what failed.
_COMMIT = """
local current = redis.call('GET', KEYS[1])
local seen = current and redis.sha1hex(current) or ''
if seen ~= ARGV[1] then return 0 end
if ARGV[3] ~= '' and redis.call('GET', ARGV[2]) ~= ARGV[3] then return -1 end
redis.call('SET', KEYS[1], ARGV[4])
local failed = {}
local i = 5
while i <= #ARGV do
  local n = tonumber(ARGV[i])
  local reply = redis.pcall(unpack(ARGV, i + 1, i + n))
  if type(reply) == 'table' and reply.err then table.insert(failed, ARGV[i + 1] .. ': ' .. reply.err) end
  i = i + n + 1
end
if #failed > 0 then return failed end
return 1
"""


def update_series(
    client: redis.Redis,
    series_id: str,
    change: Change,
    *,
    create: dict[str, Any] | None = None,
    also: Also | None = None,
    lease: Lease | None = None,
) -> SeriesState | None:
    """Read, change in pure code, commit once: `change` edits a fresh copy and says whether it
    changed anything. The commit is a compare-and-set on the document as it was read, so a
    concurrent writer's change is never overwritten: on a conflict the document is read again
    and `change` runs again (so it must start from what it is given each time). With `create`,
    a missing state starts as SeriesState(id, **create). `also` queues writes (history
    entries) that commit with the state, after `change` said True. With `lease`, the commit
    is refused (LeaseLost) once the job no longer holds its series. Two round trips when no
    one else writes. Returns the state as committed, or None when there is no state or
    nothing changed."""
    key = _series_key(series_id)
    commit = client.register_script(_COMMIT)
    while True:
        raw = client.get(key)
        state = SeriesState.from_dict(json.loads(raw)) if raw else None
        if state is None and create is not None:
            state = SeriesState(id=series_id, **create)
        before = (state.error, state.upstream_error) if state else (None, None)
        if state is None or not change(state):
            return None
        stamp_since(state, before, now_iso())
        state.updated_at = now_iso()
        document = json.dumps(state.to_dict())
        queued = _Queued()  # history entries and the live-page message, run by the script
        queued.hset(SERIES_VERSIONS, state.id, _digest(document))
        publish(queued, {"kind": "series", "series": state.id})
        if also is not None:
            also(queued)
        words: list[Any] = [
            _digest(raw),
            lease.key if lease else "",
            lease.token if lease else "",
            document,
        ]
        for command in queued.commands:
            words += [len(command), *command]
        landed = commit(keys=[key], args=words)
        if isinstance(landed, list):
            failed = "; ".join(text(line) for line in landed)
            raise redis.ResponseError(
                f"series {series_id} was stored, but not all with it: {failed}"
            )
        if landed == 1:
            return state
        if landed == -1:
            assert lease is not None
            raise LeaseLost(
                f"series {series_id}: this job no longer holds its lock ({lease.key}); "
                "another job owns the series now, so this change was not stored"
            )


def _digest(raw: bytes | str | None) -> str:
    """The version of a stored document, as the commit script computes it (sha1hex)."""
    if not raw:
        return ""
    data = raw if isinstance(raw, bytes) else raw.encode()
    return hashlib.sha1(data, usedforsecurity=False).hexdigest()


# Stores a new document, with its version, only where the series has none.
_CREATE = """
if not redis.call('SET', KEYS[1], ARGV[1], 'NX') then return 0 end
redis.call('HSET', KEYS[2], ARGV[2], redis.sha1hex(ARGV[1]))
return 1
"""


def ensure_series(client: redis.Redis, series_id: str, **defaults: Any) -> SeriesState:
    """The stored state, or a new one with `defaults` (stored at once, so it shows up). Two
    creators at once store one document: the second reads what the first stored."""
    while True:
        state = load_series(client, series_id)
        if state is not None:
            return state
        state = SeriesState(id=series_id, **defaults)
        state.updated_at = now_iso()
        create = client.register_script(_CREATE)
        keys = [_series_key(series_id), SERIES_VERSIONS]
        if create(keys=keys, args=[json.dumps(state.to_dict()), series_id]):
            publish(client, {"kind": "series", "series": series_id})
            return state


def publish(client: Any, message: dict[str, Any]) -> None:
    client.publish(UPDATES_CHANNEL, json.dumps(message))


def append_history(
    client: redis.Redis, series_id: str | None, kind: HistoryKind, **fields: Any
) -> str:
    """Appends one entry to the series' history and the global one; returns its stream id."""
    pipe = client.pipeline()
    queue_history(pipe, series_id, kind, **fields)
    ids = pipe.execute()
    return text(ids[-2])  # the global stream's entry; the last reply is the PUBLISH's


def queue_history(pipe: Any, series_id: str | None, kind: HistoryKind, **fields: Any) -> None:
    """Queues one history entry (both streams and its live-page message) on a pipeline, so it
    commits with whatever else that pipeline writes."""
    kind = HistoryKind(kind)  # a kind carry does not know is refused before anything is written
    entry = {
        "at": now_iso(),
        "series": series_id or "",
        "kind": kind.value,
        "data": json.dumps(fields, default=str),
    }
    if series_id:
        pipe.xadd(f"{PREFIX}history:{series_id}", entry, maxlen=HISTORY_MAXLEN, approximate=True)
    pipe.xadd(f"{PREFIX}history", entry, maxlen=HISTORY_MAXLEN, approximate=True)
    publish(pipe, {"kind": "history", "series": series_id, "entry": kind.value})


def history(
    client: redis.Redis,
    series_id: str | None = None,
    limit: int = 100,
    *,
    before: str | None = None,
    kind: str | None = None,
) -> list[dict[str, Any]]:
    """Newest first: up to `limit` entries older than stream id `before` (when given), of
    `kind` (when given). A kind filter reads at most HISTORY_MAXLEN entries to find them."""
    key = f"{PREFIX}history:{series_id}" if series_id else f"{PREFIX}history"
    out: list[dict[str, Any]] = []
    newest, read = f"({before}" if before else "+", 0
    while len(out) < limit and read < HISTORY_MAXLEN:
        batch = client.xrevrange(key, max=newest, count=limit if kind is None else 200)
        if not batch:
            break
        read += len(batch)
        for entry_id, raw in batch:
            entry = _history_entry(entry_id, raw)
            if kind is None or entry["kind"] == kind:
                out.append(entry)
        newest = f"({text(batch[-1][0])}"
    return out[:limit]


def _history_entry(entry_id: Any, raw: dict[Any, Any]) -> dict[str, Any]:
    fields = {text(k): text(v) for k, v in raw.items()}
    return {
        "id": text(entry_id),
        "at": fields.get("at", ""),
        "series": fields.get("series", ""),
        "kind": fields.get("kind", ""),
        "data": json.loads(fields.get("data") or "{}"),
    }


def set_wanted(client: redis.Redis, series_id: str, head: str) -> None:
    client.set(f"{PREFIX}wanted:{series_id}", head)


def wanted(client: redis.Redis, series_id: str) -> str | None:
    raw = client.get(f"{PREFIX}wanted:{series_id}")
    return text(raw) if raw else None


def wanted_many(client: redis.Redis, series_ids: Sequence[str]) -> list[str | None]:
    """`wanted` of each series, in one round trip."""
    if not series_ids:
        return []
    raws = client.mget([f"{PREFIX}wanted:{series_id}" for series_id in series_ids])
    return [text(raw) if raw else None for raw in raws]


def claim(client: redis.Redis, key: str, ttl_s: int = DONE_TTL_S) -> bool:
    """True the first time `key` is claimed: the idempotency check for an action."""
    return bool(client.set(f"{PREFIX}done:{key}", str(time.time()), nx=True, ex=ttl_s))


def append_history_once(
    client: redis.Redis,
    key: str,
    entries: Iterable[tuple[str | None, HistoryKind, dict[str, Any]]],
) -> bool:
    """Appends the history entries and claims `key` in one transaction, unless `key` is
    claimed already: of callers racing on one key exactly one writes, and a caller that dies
    before committing leaves the key unclaimed for the next. True when this call wrote."""
    done = f"{PREFIX}done:{key}"
    with client.pipeline() as pipe:
        try:
            pipe.watch(done)
            if pipe.exists(done):
                return False
            pipe.multi()
            for series_id, kind, fields in entries:
                queue_history(pipe, series_id, kind, **fields)
            pipe.set(done, str(time.time()), ex=DONE_TTL_S)
            pipe.execute()
        except redis.WatchError:  # another caller claimed it meanwhile: it said it
            return False
    return True


def release_claim(client: redis.Redis, key: str) -> None:
    client.delete(f"{PREFIX}done:{key}")


def is_claimed(client: redis.Redis, key: str) -> bool:
    return bool(client.exists(f"{PREFIX}done:{key}"))


@contextmanager
def series_lock(
    client: redis.Redis, series_id: str, *, ttl_s: int = 1800, wait_s: float = 0
) -> Iterator[Lease | None]:
    """Yields this process's Lease when it holds the series lock, else None. The lock lives
    ttl_s without renewal, so a killed worker cannot block its series for ever; while its
    holder is alive it is renewed every third of that, so a long rebase keeps it (two rebases
    of one series never run at once). A holder whose renewal failed may find another job
    holds the series: update_series(lease=...) refuses its commit."""
    key = f"{PREFIX}lock:{series_id}"
    lock = client.lock(
        key,
        timeout=ttl_s,
        blocking_timeout=wait_s,
        thread_local=False,  # the renewing thread must see the token the holder got
    )
    acquired = lock.acquire(blocking=wait_s > 0)
    done = threading.Event()
    renewer = threading.Thread(
        target=_renew, args=(lock, series_id, ttl_s / 3, done), name=f"lock-{series_id}"
    )
    if acquired:
        renewer.daemon = True
        renewer.start()
    try:
        yield Lease(key, cast(bytes, lock.local.token)) if acquired else None
    finally:
        if acquired:
            done.set()
            renewer.join()
            # Lost only if Redis lost it (renewal failed): then the next holder owns it now.
            with suppress(redis.exceptions.LockError):
                lock.release()


def _renew(lock: Any, series_id: str, every_s: float, done: threading.Event) -> None:
    while not done.wait(every_s):
        try:
            lock.reacquire()
        except (redis.exceptions.LockError, redis.RedisError) as err:
            log.warning("series %s: could not renew its lock (%s)", series_id, err)


def stash_refreshed(
    client: redis.Redis, series_id: str, head: str, digest: str, patches: dict[str, bytes]
) -> None:
    """Refreshed patch bytes of one rebase result, for the publisher (kept a week)."""
    pipe = client.pipeline()
    queue_refreshed(pipe, series_id, head, digest, patches)
    pipe.execute()


def queue_refreshed(
    pipe: Any, series_id: str, head: str, digest: str, patches: dict[str, bytes]
) -> None:
    key = f"{PREFIX}refreshed:{series_id}:{head}:{digest}"
    pipe.delete(key)
    if patches:
        pipe.hset(key, mapping=patches)
        pipe.expire(key, 7 * 24 * 3600)


def refreshed(client: redis.Redis, series_id: str, head: str, digest: str) -> dict[str, bytes]:
    raw = client.hgetall(f"{PREFIX}refreshed:{series_id}:{head}:{digest}")
    return {text(k): bytes(v) for k, v in raw.items()}


def set_ci_tree(client: redis.Redis, series_id: str, spec: dict[str, Any]) -> None:
    """The last tree sent to hardware CI, for `/carry retest`."""
    client.set(f"{PREFIX}citree:{series_id}", json.dumps(spec))


def ci_tree(client: redis.Redis, series_id: str) -> dict[str, Any] | None:
    raw = client.get(f"{PREFIX}citree:{series_id}")
    return json.loads(raw) if raw else None
