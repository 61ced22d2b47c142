"""Which paths each commit changes, kept next to a mirror and extended after every fetch.

History evidence asks "which commits in fork..head touch these paths". Git answers that with a
tree diff per commit, which costs the same on every check. This index pays it once per commit,
when the commit is fetched; a check then walks parent links. It only answers for linear ranges
whose commits are all indexed, and says "unknown" (None) otherwise, so callers fall back to git
and never get a partial answer.

The index is an SQLite file in the mirror's git dir: one row per commit (its parents and the
paths it changes) and the tips (ref tips whose whole ancestry is indexed), written in one
transaction per update, so a crash leaves the index as it was before the update. Readers look
up only the commits they walk: a check on a warm mirror reads a few hundred rows, not the file.
The line-oriented file of earlier versions is migrated on the first update.

A head's whole history (a check without a base) is answered without a walk: every commit whose
ancestry is linear (single parents down to a root) has a place on a line of commits (its line
and its distance from the root), lines branch off one another where the history forks, and a
second table lists the commits by the paths they change. The commits of a head's history that
touch some paths are then those listed for the paths whose place is on the head's lines. A
history with a merge has no place, and git answers as before. An index written before lines
existed is rebuilt on the next update (a check asks for that update).
"""

from __future__ import annotations

import contextlib
import logging
import re
import sqlite3
from collections.abc import Callable, Iterator, Sequence, Set
from dataclasses import dataclass
from pathlib import Path

from bot.git.runner import Git, GitError

# typing.TYPE_CHECKING without importing typing (mypy and ruff treat the name the same way):
# `carry check` runs as a short process, and typing is only needed for annotations here.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

log = logging.getLogger("carry.touchindex")

FILE_NAME = "carry-touch-index.sqlite"
LEGACY_FILE_NAME = "carry-touch-index"  # NUL-separated records, read only to migrate them
_HEADER = re.compile(rb"^\x01([0-9a-f]{40})((?: [0-9a-f]{40})*) ?$")  # a root has no parent
MAX_WALK = 200_000
SCHEMA_VERSION = "2"  # 2: lines (commits.line, commits.pos, lines) and the touched table
MAX_PARAMETERS = 500  # paths per query (SQLite's limit on parameters may be as low as 999)
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS commits (sha TEXT PRIMARY KEY, parents TEXT NOT NULL,"
    " paths BLOB NOT NULL, line INTEGER, pos INTEGER) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    # A line: commits each the only child on it of the one before; it starts at a root (no
    # base) or branches off another line after the commit at (base, base_pos).
    "CREATE TABLE IF NOT EXISTS lines"
    " (id INTEGER PRIMARY KEY, base INTEGER, base_pos INTEGER, tip TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS touched"
    " (path TEXT NOT NULL, sha TEXT NOT NULL, PRIMARY KEY (path, sha)) WITHOUT ROWID",
)


@dataclass(frozen=True)
class Touches:
    parents: tuple[str, ...]
    paths: frozenset[str]


def update(git: Git, git_dir: Path) -> int:
    """Indexes every commit reachable from the mirror's refs that is not indexed yet; returns
    how many were added. Called with the mirror's lock held. Failure only costs speed."""
    try:
        with _writable(git_dir / FILE_NAME) as db:
            added = _migrate_legacy(db, git_dir / LEGACY_FILE_NAME)
            return added + _extend(git, db, git_dir)
    except (sqlite3.Error, OSError) as err:
        log.warning("could not index %s: %s", git_dir, err)
        return 0


def _extend(git: Git, db: sqlite3.Connection, git_dir: Path) -> int:
    tips = _tips(db)
    try:
        current = _ref_tips(git)
        if not current or current == tips:
            return 0
        known = _present(git, tips)
        out = git.run(
            "log",
            "--format=%x01%H %P",
            "-z",
            "--name-only",
            "--no-renames",
            "--stdin",
            input="".join(f"{t}\n" for t in [*current, *(f"^{k}" for k in known)]).encode(),
        ).stdout
    except GitError as err:
        log.warning("could not index %s: %s", git_dir, err)
        return 0
    records = _parse_log(out)
    _store(db, records, current)
    log.info("indexed %d commits of %s", len(records), git_dir)
    return len(records)


def _store(db: sqlite3.Connection, records: list[tuple[str, Touches]], tips: list[str]) -> None:
    """The records (each placed on a line when its ancestry is linear) and the new tips, in
    one transaction: readers see all of it or none."""
    with db:
        lines = _Lines(db)
        rows = []
        for sha, touches in _parents_first(records):
            if lines.held(sha):
                continue
            line, pos = lines.place(sha, touches.parents)
            rows.append((sha, " ".join(touches.parents), _join_paths(touches.paths), line, pos))
        db.executemany("INSERT INTO commits VALUES (?, ?, ?, ?, ?)", rows)
        db.executemany(
            "INSERT OR IGNORE INTO touched VALUES (?, ?)",
            ((path, sha) for sha, touches in records for path in touches.paths),
        )
        lines.save()
        db.execute("INSERT OR REPLACE INTO meta VALUES ('tips', ?)", (" ".join(sorted(tips)),))


def _parents_first(records: list[tuple[str, Touches]]) -> list[tuple[str, Touches]]:
    """The records ordered so that a commit comes after its parents among them."""
    batch = dict(records)
    order: list[tuple[str, Touches]] = []
    done: set[str] = set()
    for start, _ in reversed(records):  # git log lists the newest first
        stack = [(start, False)]
        while stack:
            sha, expanded = stack.pop()
            if sha in done:
                continue
            if expanded:
                done.add(sha)
                order.append((sha, batch[sha]))
                continue
            stack.append((sha, True))
            stack.extend((p, False) for p in batch[sha].parents if p in batch and p not in done)
    return order


class _Lines:
    """Places commits on lines as they are stored, parents first (see the module doc)."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db
        self.placed: dict[str, tuple[int | None, int | None]] = {}
        self.tips: dict[int, str] = {}
        self.new: dict[int, tuple[int | None, int | None]] = {}
        row = db.execute("SELECT max(id) FROM lines").fetchone()
        self.next_id = (row[0] or 0) + 1

    def held(self, sha: str) -> bool:
        return self.db.execute("SELECT 1 FROM commits WHERE sha = ?", (sha,)).fetchone() is not None

    def _place_of(self, sha: str) -> tuple[int | None, int | None]:
        if sha in self.placed:
            return self.placed[sha]
        row = self.db.execute("SELECT line, pos FROM commits WHERE sha = ?", (sha,)).fetchone()
        return (row[0], row[1]) if row else (None, None)

    def _tip(self, line: int) -> str | None:
        if line not in self.tips:
            row = self.db.execute("SELECT tip FROM lines WHERE id = ?", (line,)).fetchone()
            if row is None:
                return None
            self.tips[line] = row[0]
        return self.tips[line]

    def place(self, sha: str, parents: tuple[str, ...]) -> tuple[int | None, int | None]:
        """(line, pos) of a new commit, or (None, None) when its ancestry is not linear."""
        if len(parents) > 1:
            place: tuple[int | None, int | None] = (None, None)
        elif not parents:
            place = (self._start(sha, None, None), 0)
        else:
            line, pos = self._place_of(parents[0])
            if line is None or pos is None:
                place = (None, None)
            elif self._tip(line) == parents[0]:
                self.tips[line] = sha
                place = (line, pos + 1)
            else:
                place = (self._start(sha, line, pos), pos + 1)
        self.placed[sha] = place
        return place

    def _start(self, sha: str, base: int | None, base_pos: int | None) -> int:
        line = self.next_id
        self.next_id += 1
        self.new[line] = (base, base_pos)
        self.tips[line] = sha
        return line

    def save(self) -> None:
        self.db.executemany(
            "INSERT INTO lines VALUES (?, ?, ?, ?)",
            ((line, base, pos, self.tips[line]) for line, (base, pos) in self.new.items()),
        )
        self.db.executemany(
            "UPDATE lines SET tip = ? WHERE id = ?",
            ((tip, line) for line, tip in self.tips.items() if line not in self.new),
        )


@contextlib.contextmanager
def _writable(path: Path) -> Iterator[sqlite3.Connection]:
    """The index open for writing; a file SQLite cannot read (torn by a copy, or not ours) is
    replaced by an empty index, which the update then fills again."""
    try:
        db = _open_writable(path)
    except sqlite3.DatabaseError as err:
        log.warning("touch index %s is unreadable (%s); rebuilding it", path, err)
        for stale in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            stale.unlink(missing_ok=True)
        db = _open_writable(path)
    try:
        yield db
    finally:
        db.close()


def _open_writable(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None)  # transactions are explicit (`with db`)
    try:
        db.execute("PRAGMA journal_mode=WAL")  # readers never wait for the writer
        db.execute("PRAGMA synchronous=NORMAL")  # a power cut may lose the last update, whole
        if _schema(db) != SCHEMA_VERSION:  # an index of an earlier version: indexed again
            for table in ("commits", "meta", "lines", "touched"):
                db.execute(f"DROP TABLE IF EXISTS {table}")
        for statement in _SCHEMA:
            db.execute(statement)
        db.execute("INSERT OR REPLACE INTO meta VALUES ('schema', ?)", (SCHEMA_VERSION,))
        db.execute("SELECT count(*) FROM meta").fetchone()  # fails now on a damaged file
    except sqlite3.DatabaseError:
        db.close()
        raise
    db.isolation_level = "DEFERRED"  # `with db` commits or rolls back the transaction
    return db


def _schema(db: sqlite3.Connection) -> str | None:
    """The index's schema version; None for a new file or one of the first version."""
    try:
        row = db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
    except sqlite3.OperationalError:  # no meta table: a new file
        return None
    return row[0] if row else None


def _tips(db: sqlite3.Connection) -> list[str]:
    row = db.execute("SELECT value FROM meta WHERE key = 'tips'").fetchone()
    return row[0].split() if row else []


def _present(git: Git, oids: list[str]) -> list[str]:
    if not oids:
        return []
    out = git.run("cat-file", "--batch-check", input="".join(f"{o}\n" for o in oids).encode())
    return [line.split()[0] for line in out.text.splitlines() if not line.endswith("missing")]


def _ref_tips(git: Git) -> list[str]:
    out = git.run("for-each-ref", "--format=%(objectname) %(*objectname) %(objecttype)").text
    tips = set()
    for line in out.splitlines():
        parts = line.split()
        if parts and parts[-1] in ("commit", "tag"):
            tips.add(parts[1] if parts[-1] == "tag" and len(parts) == 3 else parts[0])
    return sorted(tips)


def _parse_log(out: bytes) -> list[tuple[str, Touches]]:
    records: list[tuple[str, Touches]] = []
    sha: str | None = None
    parents: tuple[str, ...] = ()
    paths: set[str] = set()
    for token in out.split(b"\0"):
        token = token.removeprefix(b"\n")
        match = _HEADER.match(token)
        if match:
            if sha is not None:
                records.append((sha, Touches(parents, frozenset(paths))))
            sha, parents, paths = (
                match.group(1).decode(),
                tuple(match.group(2).decode().split()),
                set(),
            )
        elif token and sha is not None:
            paths.add(token.decode("utf-8", "surrogateescape"))
    if sha is not None:
        records.append((sha, Touches(parents, frozenset(paths))))
    return records


def _join_paths(paths: frozenset[str]) -> bytes:
    return b"\0".join(p.encode("utf-8", "surrogateescape") for p in sorted(paths))


def _split_paths(data: bytes) -> frozenset[str]:
    return frozenset(p.decode("utf-8", "surrogateescape") for p in data.split(b"\0") if p)


# --------------------------------------------------------------------------- legacy format


def _migrate_legacy(db: sqlite3.Connection, legacy: Path) -> int:
    """Moves the records of an index file of the earlier format into `db`, then removes the
    file. Only what the file vouches for (records up to its last complete tips record) moves;
    the update that follows indexes the rest."""
    try:
        data = legacy.read_bytes()
    except FileNotFoundError:
        return 0
    records, tips = _legacy_records(data)
    if records and not _tips(db):
        _store(db, records, tips)
    legacy.unlink()
    log.info("migrated %d commits from %s", len(records), legacy)
    return len(records)


def _legacy_records(data: bytes) -> tuple[list[tuple[str, Touches]], list[str]]:
    """The commit records up to the last complete tips record, and those tips. Records are
    separated by NUL NUL: `C <sha> [<parent>...]` NUL `<path>` NUL ..., or `T <sha> ...`."""
    limit = len(data)
    while True:
        at = data.rfind(b"\0\0T ", 0, limit)
        start = at + 2 if at >= 0 else (0 if data.startswith(b"T ") else -1)
        if start < 0:
            return [], []
        stop = data.find(b"\0\0", start)
        if stop >= 0:
            break
        if at < 0:
            return [], []
        limit = at  # this tips record is torn: the one before it still holds
    records = []
    for record in data[:start].split(b"\0\0"):
        if record.startswith(b"C "):
            head, *paths = record.split(b"\0")
            sha, *parents = head[2:].decode().split()
            records.append((sha, Touches(tuple(parents), _split_paths(b"\0".join(paths)))))
    return records, data[start + 2 : stop].decode().split()


# --------------------------------------------------------------------------- reading


class TouchIndex:
    """Answers from the index file, reading the rows of the commits it walks (and keeping
    them: a commit's parents and paths never change). `when_missing`, if given, is called
    when there is no index file (a mirror indexed by an earlier version, or never), to build
    one."""

    def __init__(self, git_dir: Path, when_missing: Callable[[], object] | None = None):
        self.path = git_dir / FILE_NAME
        self.rows_read = 0  # how many commits were read from the file: the reads are lazy
        self._when_missing = when_missing
        self._db: sqlite3.Connection | None = None
        self._identity: tuple[int, int] | None = None
        self._commits: dict[str, Touches] = {}
        self._walks: dict[str, tuple[str, tuple[str, ...]]] = {}  # fork -> (head, its range)
        self._touched: dict[tuple[str, frozenset[str]], tuple[str, list[str]]] = {}
        self._current: bool | None = None  # whether the file has lines (SCHEMA_VERSION)
        self._reaches: dict[str, dict[int, int] | None] = {}  # head -> _reach(head)

    def refresh(self) -> None:
        """Follows the file: a re-created mirror (another file) starts over; rows appended
        since the last call are read when asked for."""
        identity = self._stat()
        if identity is None and self._when_missing is not None:
            self._when_missing()
            identity = self._stat()
        if identity != self._identity:
            self.close()
            self._commits, self._walks, self._touched, self._reaches = {}, {}, {}, {}
            self._identity = identity
            self._current = None
        if self._identity is not None and self._current is None:
            self._current = self._read_schema() == SCHEMA_VERSION
            if not self._current and self._when_missing is not None:
                self._when_missing()  # an index of an earlier version: updated in place
                self._current = self._read_schema() == SCHEMA_VERSION

    def _read_schema(self) -> str | None:
        rows = self._select("SELECT value FROM meta WHERE key = 'schema'", ())
        return rows[0][0] if rows else None

    def _stat(self) -> tuple[int, int] | None:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return None
        return (stat.st_dev, stat.st_ino)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def get(self, sha: str) -> Touches | None:
        """The commit's parents and paths, or None when the index does not hold it."""
        found = self._commits.get(sha)
        if found is None and self._identity is not None:
            row = self._query(sha)
            if row is not None:
                found = Touches(tuple(row[0].split()), _split_paths(row[1]))
                self._commits[sha] = found
                self.rows_read += 1
        return found

    def _query(self, sha: str) -> tuple[str, bytes] | None:
        rows = self._select("SELECT parents, paths FROM commits WHERE sha = ?", (sha,))
        return (rows[0][0], bytes(rows[0][1])) if rows else None

    def _select(self, sql: str, parameters: tuple[object, ...]) -> list[tuple[Any, ...]]:
        try:
            if self._db is None:
                # mode=rw: never creates the file (a reader does not index).
                # Any thread may ask (a worker's threads share one engine, which serializes
                # its checks) where the SQLite library is serialized (threadsafety 3).
                shared = sqlite3.threadsafety == 3
                self._db = sqlite3.connect(
                    f"file:{self.path}?mode=rw", uri=True, check_same_thread=not shared
                )
            return self._db.execute(sql, parameters).fetchall()
        except sqlite3.Error as err:  # unknown, so the caller asks git
            log.warning("cannot read touch index %s: %s", self.path, err)
            self.close()
            self._identity = None
            return []

    def _prefetch(self, head: str, stops: tuple[str, ...]) -> None:
        """Reads the first-parent line below `head` in one query, up to a stop, a merge, a
        commit the file lacks or MAX_WALK rows, so a walk does not ask row by row."""
        if self._identity is None or head in self._commits:
            return
        marks = ",".join("?" * len(stops))
        rows = self._select(
            "WITH RECURSIVE line(sha, parents, paths, depth) AS ("
            " SELECT sha, parents, paths, 0 FROM commits WHERE sha = ?"
            " UNION ALL SELECT c.sha, c.parents, c.paths, line.depth + 1"
            " FROM line JOIN commits AS c ON c.sha = line.parents"
            f" WHERE line.sha NOT IN ({marks}) AND line.depth < ?)"
            " SELECT sha, parents, paths FROM line",
            (head, *stops, MAX_WALK),
        )
        for sha, parents, paths in rows:
            if sha not in self._commits:
                self._commits[sha] = Touches(tuple(parents.split()), _split_paths(bytes(paths)))
                self.rows_read += 1

    def all_commits(self) -> dict[str, Touches]:
        """Every commit of the file (for tests and tools; checks read only what they walk)."""
        if self._identity is None:
            return {}
        db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
        try:
            rows = db.execute("SELECT sha, parents, paths FROM commits").fetchall()
        finally:
            db.close()
        return {
            sha: Touches(tuple(p.split()), _split_paths(bytes(paths))) for sha, p, paths in rows
        }

    def linear_range(self, fork: str, head: str) -> tuple[str, ...] | None:
        """Commits of fork..head, newest first, when fork is reached from head through single
        parents, every one of them indexed; None otherwise (merges, unknown commits, fork not
        an ancestor). The walk stops early at the head of the last range asked for the fork."""
        if fork not in self._walks and fork != head and self.reaches(head, fork) is False:
            return None  # known from the lines, without walking down to the root
        known_head, known = self._walks.get(fork, (fork, ()))
        self._prefetch(head, (fork, known_head))
        walked: list[str] = []
        current = head
        while current != fork:
            if current == known_head:
                walked.extend(known)
                break
            touches = self.get(current)
            if touches is None or len(touches.parents) != 1 or len(walked) >= MAX_WALK:
                return None
            walked.append(current)
            current = touches.parents[0]
        answer = tuple(walked)
        self._walks[fork] = (head, answer)
        return answer

    def touching(self, commits: Sequence[str], paths: Set[str]) -> list[str]:
        """The commits (all indexed: from linear_range) that change any of `paths`."""
        found = []
        for sha in commits:
            touches = self.get(sha)
            assert touches is not None, f"{sha} is not indexed"
            if not touches.paths.isdisjoint(paths):
                found.append(sha)
        return found

    def touching_range(self, fork: str, head: str, paths: frozenset[str]) -> list[str] | None:
        """touching(linear_range(fork, head), paths), reusing the answer for an earlier head
        of the same range."""
        walked = self.linear_range(fork, head)
        if walked is None:
            return None
        earlier_head, earlier = self._touched.get((fork, paths), (fork, []))
        try:
            new = walked[: walked.index(earlier_head)] if earlier_head != fork else walked
        except ValueError:  # the earlier head is not below this one
            new, earlier = walked, []
        found = self.touching(new, paths) + earlier
        self._touched[(fork, paths)] = (head, found)
        return list(found)

    def reaches(self, head: str, sha: str) -> bool | None:
        """Whether `sha` is in head's history, from the lines alone (a few rows, no walk);
        None when head has no place (a merge below it, not indexed, an older file). A placed
        head's whole history is indexed and placed, so a commit the index lacks, or holds
        without a place, is not in it (a downstream commit the mirror has the objects of)."""
        reach = self._reach(head)
        if reach is None:
            return None
        rows = self._select("SELECT line, pos FROM commits WHERE sha = ?", (sha,))
        if self._identity is None:  # the read failed: unknown
            return None
        if not rows or rows[0][0] is None:
            return False
        line, pos = rows[0]
        return line in reach and pos <= reach[line]

    def _reach(self, head: str) -> dict[int, int] | None:
        """Each line head's history is on -> the highest position of that history on it."""
        if head in self._reaches:
            return self._reaches[head]
        if self._identity is None or not self._current:
            return None
        rows = self._select("SELECT line, pos FROM commits WHERE sha = ?", (head,))
        if not rows or rows[0][0] is None:
            return None
        line, pos = rows[0]
        reach: dict[int, int] = {}
        while line is not None:
            reach.setdefault(line, pos)
            found = self._select("SELECT base, base_pos FROM lines WHERE id = ?", (line,))
            if not found:
                return None
            line, pos = found[0]
        self._reaches[head] = reach
        return reach

    def head_history(self, head: str, paths: Set[str], limit: int) -> list[str] | None:
        """The newest `limit` commits of head's whole history that change any of `paths`,
        newest first, as `git log --no-merges -n<limit> <head> -- <paths>` lists them for a
        linear history; None when the history has a merge or the index does not place it."""
        reach = self._reach(head)
        if reach is None:
            return None
        wanted = sorted(paths)
        candidates: dict[str, int] = {}
        for start in range(0, len(wanted), MAX_PARAMETERS):
            chunk = wanted[start : start + MAX_PARAMETERS]
            marks = ",".join("?" * len(chunk))
            for sha, on, at in self._select(
                "SELECT c.sha, c.line, c.pos FROM touched AS t JOIN commits AS c"
                f" ON c.sha = t.sha WHERE t.path IN ({marks})",
                tuple(chunk),
            ):
                if on in reach and at <= reach[on]:
                    candidates[sha] = at
        if self._identity is None:  # a read failed: unknown
            return None
        newest = sorted(candidates, key=candidates.__getitem__, reverse=True)
        return newest[:limit]
