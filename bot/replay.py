"""`carry replay`: what carry would have done over an upstream's past.

Walks the first-parent history from a start to an end as the heads carry would have seen, and
at each one runs what the service runs on a head: the planner on the head's move (a Rebase, or
for a paused series a RecordHead), the engine's check and transitions.apply_check with the
series' policy (workers/rebase.py), the planner on the finished check (a Publish), then the
publisher's decision (bot.core.replay.publish_at; workers/publish.py), with the commit's
committer date as the clock. What else the planner asks for is recorded, not done. Nothing is
written to GitHub or Redis: the series state lives in memory, and the downstream repository
and carry's PR are simulated (bot.core.replay says how). One engine serves every head, so its
mirror, touch index and caches are reused, as in a worker.

Progress is saved in the cache directory (replay/<key>.json) as the walk goes; the same replay
started again (same repository, series content, start and sampling) continues from the last
head saved, and gives the result an uninterrupted walk gives.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, TextIO

from bot.core import actions as act
from bot.core import replay as core
from bot.core import transitions as tr
from bot.core.planner import plan
from bot.core.policy import series_digest
from bot.core.report import SeriesReport
from bot.core.seriesfile import SeriesFile, parse_series, render_series, validate_series
from bot.core.state import SeriesState
from bot.git.engine import Engine, PatchInput
from bot.git.mirror import Mirror, MirrorError
from bot.git.runner import GitError

log = logging.getLogger("carry.replay")
CHECKPOINT_S = 2.0  # progress is saved at most this often (and at the end)
SERIES_FILE = "series"


class ReplayError(RuntimeError):
    """The replay cannot run as asked (said in one line)."""


@dataclass(frozen=True)
class ReplaySpec:
    """What to replay: `files` is the series directory as the walk starts (its `series` file,
    patches and fix pages); `order` the patches in apply order."""

    repo: str  # the upstream, as the mirror names it (path or URL)
    start: str  # a revision, or a date (YYYY-MM-DD, or ISO 8601), as the user gave it
    end: str | None  # a revision; None: the repository's HEAD
    series_id: str
    files: Mapping[str, bytes]
    order: tuple[str, ...]
    every: int | None = None
    daily: bool = False
    auto_drop: bool = True
    start_commit: str | None = None  # the commit `start` names, where the caller resolved it
    ref: str = "HEAD"  # the upstream ref whose heads the walk moves through, as the planner sees it
    paused: bool = False  # the series' policy pauses it: the planner checks none of its heads
    runners: tuple[str, ...] = ()  # the series' runners (the planner's publish names them)
    ci_every_head: bool = True

    @property
    def watch(self) -> core.Watch:
        """The series as the planner sees it."""
        return core.Watch(
            self.series_id,
            self.shown_repo,
            self.ref,
            self.paused,
            self.runners,
            self.ci_every_head,
        )

    @property
    def shown_repo(self) -> str:
        """The upstream as reports show it: a password in its URL replaced by ***."""
        from bot.config.settings import redact_url

        return redact_url(self.repo)

    def key(self) -> str:
        """What identifies the replay for resuming: everything but its end, and the carry
        that walks it (another version may decide otherwise)."""
        import bot

        content = series_digest(sorted(self.files.items()))
        said: list[object] = [self.repo, self.series_id, content, list(self.order)]
        said += [
            self.start_commit or self.start,
            self.every,
            self.daily,
            self.auto_drop,
            self.ref,
            self.paused,
            list(self.runners),
            self.ci_every_head,
            core.SCHEMA,
            bot.__version__,
        ]
        return hashlib.sha256(json.dumps(said).encode()).hexdigest()[:24]


@dataclass
class Result:
    spec: ReplaySpec
    heads: list[core.Commit]
    records: list[core.HeadRecord]
    resumed_at: int  # heads taken from saved progress
    walk_s: float = 0.0  # seconds spent on the heads walked this run (check, transitions, publish)
    elapsed_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def summary(self) -> core.Summary:
        return core.summarize(self.records)

    def as_dict(self) -> dict[str, Any]:
        return {
            "repo": self.spec.shown_repo,
            "series": self.spec.series_id,
            "start": self.spec.start,
            "end": self.heads[-1].sha if self.heads else None,
            "sampling": sampling_words(self.spec),
            "summary": self.summary.as_dict(),
            "patches": [p.as_dict() for p in core.patch_summaries(self.records)],
            "timeline": [r.as_dict() for r in self.records],
        }


def sampling_words(spec: ReplaySpec) -> str:
    if spec.daily:
        return "daily"
    return f"every {spec.every} commits" if spec.every and spec.every > 1 else "every commit"


def loose_patches(patches: Sequence[tuple[str, bytes]]) -> dict[str, bytes]:
    """Patch files given one by one (--patch) as a series directory: the files and a `series`
    file listing them (those whose names a series file can hold, NNNN-slug.patch in order;
    the others are still checked, in the order given, but never listed)."""
    listed: tuple[str, ...] = ()
    for name, _ in patches:
        if not validate_series(SeriesFile(patches=(*listed, name))):
            listed = (*listed, name)
    files = dict(patches)
    files[SERIES_FILE] = render_series(SeriesFile(patches=listed)).encode()
    return files


def progress_path(cache_dir: Path, key: str) -> Path:
    return cache_dir / "replay" / f"{key}.json"


# ----------------------------------------------------------------------------- history


def _as_date(text: str) -> datetime | None:
    """A start given as a date (2026-01-31, or ISO 8601 with a time), in UTC; else None."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if len(text) < 10 or text[4] != "-":
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def first_parent_commits(
    engine: Engine, start: str, end: str, start_commit: str | None = None
) -> list[core.Commit]:
    """The first-parent line from `start` (a revision, included, or a date; `start_commit`:
    the commit it names, when known) to `end`, oldest first, with committer dates and
    subjects."""
    try:
        out = engine.git.run(
            "log", "--first-parent", "--format=%H%x00%ct%x00%s", end, "--"
        ).stdout.decode("utf-8", "replace")
    except GitError as err:
        raise ReplayError(f"cannot read the history of {end}: {err.stderr_text}") from err
    commits = []
    for line in out.splitlines():
        sha, stamp, subject = line.split("\x00", 2)
        commits.append(core.Commit(sha, core.iso_utc(int(stamp)), subject))
    commits.reverse()
    moment = None if start_commit else _as_date(start)
    if moment is not None:
        since = core.iso_utc(int(moment.timestamp()))
        first = next((i for i, c in enumerate(commits) if c.date >= since), len(commits))
        return commits[first:]
    found = engine.commit_of(start_commit or start)
    if found is None:
        try:
            found = engine.commit_of(engine.mirror.resolve(start).sha)
        except MirrorError as err:
            raise ReplayError(str(err)) from err
    if found is None:
        raise ReplayError(f"--from {start} does not name a commit in {engine.mirror.source}")
    position = next((i for i, c in enumerate(commits) if c.sha == found), None)
    if position is None:
        raise ReplayError(f"--from {start} is not on the first-parent history of {end[:12]}")
    return commits[position:]


def resolve_end(engine: Engine, end: str | None) -> str:
    """The end's commit in the mirror (fetched as needed); None: the repository's HEAD, as its
    default branch (ls-remote's HEAD) names it."""
    mirror = engine.mirror
    try:
        mirror.ensure()
        if end is None:
            refs = mirror.remote_refs()
            head = refs.get("HEAD")
            branch = next(
                (r for r, s in refs.items() if s == head and r.startswith("refs/heads/")), None
            )
            if head is None or branch is None:
                raise ReplayError(f"{mirror.source} has no HEAD branch: give --to")
            end = branch
        sha = mirror.resolve(end).sha
    except MirrorError as err:
        raise ReplayError(str(err)) from err
    commit = engine.commit_of(sha)
    if commit is None:
        raise ReplayError(f"--to {end} does not name a commit in {mirror.source}")
    return commit


# ----------------------------------------------------------------------------- the walk


# (heads done, heads in all, heads walked in this run, seconds this run's walk has taken)
Report = Callable[[int, int, int, float], None]


def run(
    spec: ReplaySpec,
    engine: Engine,
    cache_dir: Path,
    *,
    on_progress: Report | None = None,
    stop_after: int | None = None,
) -> Result:
    """Walks the replay, continuing saved progress of the same replay. `stop_after`: stop
    after that many heads walked in this run (the saved progress stays, as after a kill)."""
    started = time.perf_counter()
    end = resolve_end(engine, spec.end)
    heads = core.sample(
        first_parent_commits(engine, spec.start, end, spec.start_commit),
        every=spec.every,
        daily=spec.daily,
    )
    if not heads:
        raise ReplayError(f"no commit from {spec.start} to {end[:12]}")
    key = spec.key()
    path = progress_path(cache_dir, key)
    progress, notes = _resume(path, key, [c.sha for c in heads])
    if progress is None:
        state, downstream, notes = _start(spec, engine, heads[0], notes)
        records: list[core.HeadRecord] = []
    else:
        state, downstream, records = progress.state, progress.downstream, list(progress.records)
    result = Result(spec, heads, records, len(records), notes=notes)
    saved = time.monotonic()
    walked = 0
    walking = time.perf_counter()
    try:
        for commit in heads[len(records) :]:
            if stop_after is not None and walked >= stop_after:
                break
            tick = time.perf_counter()
            downstream = _walk_one(spec, engine, state, downstream, commit, records)
            result.walk_s += time.perf_counter() - tick
            walked += 1
            if on_progress is not None:
                on_progress(len(records), len(heads), walked, time.perf_counter() - walking)
            if time.monotonic() - saved >= CHECKPOINT_S:
                _save(path, key, state, downstream, records)
                saved = time.monotonic()
    finally:
        _save(path, key, state, downstream, records)
    result.elapsed_s = time.perf_counter() - started
    return result


def _walk_one(
    spec: ReplaySpec,
    engine: Engine,
    state: SeriesState,
    downstream: core.Downstream,
    commit: core.Commit,
    records: list[core.HeadRecord],
) -> core.Downstream:
    """One head, as the service handles it: the planner on the head's move; its Rebase is the
    check (the engine), merged into the state (transitions); the planner on the finished check;
    its Publish is the publisher's step (simulated). Appends its timeline entry."""
    watch = spec.watch
    moved = plan(core.head_moved(watch, state, commit), core.facts(watch, state))
    rebase = next((a for a in moved if isinstance(a, act.Rebase)), None)
    if rebase is None:
        held = next((a for a in moved if isinstance(a, act.RecordHead)), None)
        why = "; ".join(a.reason for a in moved)
        if held is not None:
            tr.record_head(state, held.head_sha, held.head_ref, None, held.reason, commit.date)
        published = core.not_published(downstream, why)
        index = len(records)
        records.append(core.unchecked_record(index, commit, state, published, core.planned(moved)))
        return downstream
    series, _ = parse_series(downstream.files.get(SERIES_FILE, b"").decode("utf-8", "replace"))
    patches = [PatchInput(n, downstream.files[n]) for n in spec.order if n in downstream.files]
    tr.start_check(state, rebase.head_sha, rebase.head_ref, rebase.actor, commit.date)
    try:
        report = engine.check(commit.sha, patches, base=series.base)
    except MirrorError as err:
        raise ReplayError(f"head {commit.sha[:12]}: {err}") from err
    found = tuple(tr.checked_patch(r) for r in report.patches)
    digest = series_digest((p.name, p.data) for p in patches)
    result = tr.CheckResult(
        head=commit.sha,
        digest=digest,
        checked_at=commit.date,
        patches=found,
        auto_drop=spec.auto_drop,
    )
    tr.apply_check(state, result)
    finished = core.rebase_finished(watch, state, digest, report.result_tree)
    checked = plan(finished, core.facts(watch, state))
    if any(isinstance(a, act.Publish) for a in checked):
        published, after = core.publish_at(state, downstream, _refreshed(report), _day(commit))
    else:
        published, after = (
            core.not_published(downstream, "; ".join(a.reason for a in checked)),
            downstream,
        )
    steps = core.planned([*moved, *checked])
    records.append(core.head_record(len(records), commit, state, found, published, steps))
    return after


def _refreshed(report: SeriesReport) -> dict[str, bytes]:
    """The refreshed bytes of the patches whose context moved (what the service stashes)."""
    return {
        r.patch.rsplit("/", 1)[-1]: r.refreshed
        for r in report.patches
        if r.changed and r.refreshed is not None
    }


def _day(commit: core.Commit) -> date:
    return date.fromisoformat(commit.day)


def _start(
    spec: ReplaySpec, engine: Engine, first: core.Commit, notes: list[str]
) -> tuple[SeriesState, core.Downstream, list[str]]:
    """The state before the first head: a series never checked, its directory as given. A
    recorded base that the first head does not contain (the series was verified later than
    the replay starts) is left out: the walk would otherwise anchor history on the future."""
    files = dict(spec.files)
    text = files.get(SERIES_FILE)
    if text is not None:
        series, _ = parse_series(text.decode("utf-8", "replace"))
        base = engine.commit_of(series.base) if series.base else None
        if series.base and (base is None or not engine.git.is_ancestor(base, first.sha)):
            files[SERIES_FILE] = render_series(replace(series, base=None)).encode()
            notes = [
                *notes,
                f"the series' base {series.base[:12]} is not in the first head's history: "
                "the replay starts without it",
            ]
    state = SeriesState(id=spec.series_id, upstream_repo=spec.shown_repo, base="replay")
    return state, core.Downstream(files), notes


def _resume(path: Path, key: str, heads: Sequence[str]) -> tuple[core.Progress | None, list[str]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        progress = core.Progress.from_dict(data)
    except FileNotFoundError:
        return None, []
    except (OSError, ValueError, KeyError, TypeError) as err:
        return None, [f"saved progress {path} unreadable ({err}): starting over"]
    if not progress.resumes(key, heads):
        return None, [f"saved progress {path} does not lead into this walk: starting over"]
    if not progress.heads:
        return None, []
    return progress, [f"resumed after {len(progress.heads)} heads saved in {path}"]


def _save(
    path: Path,
    key: str,
    state: SeriesState,
    downstream: core.Downstream,
    records: list[core.HeadRecord],
) -> None:
    """Writes the progress atomically: a kill leaves the old file or the new one."""
    progress = core.Progress(key, tuple(r.sha for r in records), state, downstream, tuple(records))
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    partial.write_text(json.dumps(progress.as_dict()), encoding="utf-8")
    os.replace(partial, path)


BAR_WIDTH = 30
TTY_EVERY_S = 0.5  # a bar on a terminal is redrawn at most this often (and at the last head)
PLAIN_EVERY_S = 10.0  # elsewhere (a pipe, a log file), a plain line this often


def progress_line(done: int, total: int, walked: int, seconds: float) -> str:
    """`carry replay: [#####.....] 120/441 heads, 2,083 heads/min`: the bar and count over
    every head of the replay (resumed ones included), the rate over the heads walked in this
    run (`walked`, in `seconds`)."""
    filled = BAR_WIDTH * done // total if total > 0 else BAR_WIDTH
    bar = "#" * filled + "." * (BAR_WIDTH - filled)
    rate = walked / seconds * 60 if seconds > 0 else 0.0
    return f"carry replay: [{bar}] {done}/{total} heads, {rate:,.0f} heads/min"


class ProgressDisplay:
    """The walk's progress on `stream` (a `Report`). On a terminal, a bar redrawn in place
    (carriage return) at most every TTY_EVERY_S and at the last head, then a new line;
    elsewhere, a plain line every PLAIN_EVERY_S and none at the end (the command's own summary
    line follows)."""

    def __init__(
        self,
        stream: TextIO,
        *,
        tty: bool | None = None,
        every_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream
        self.tty = stream.isatty() if tty is None else tty
        self.every_s = (
            every_s if every_s is not None else TTY_EVERY_S if self.tty else PLAIN_EVERY_S
        )
        self.clock = clock
        self.shown = float("-inf") if self.tty else clock()

    def __call__(self, done: int, total: int, walked: int, seconds: float) -> None:
        now = self.clock()
        last = done >= total
        due = now - self.shown >= self.every_s
        if self.tty and (due or last):
            self.stream.write("\r" + progress_line(done, total, walked, seconds) + " ")
            self.stream.write("\n" if last else "")
        elif not self.tty and due and not last:
            self.stream.write(progress_line(done, total, walked, seconds) + "\n")
        else:
            return
        self.shown = now
        self.stream.flush()


def open_engine(repo: str, cache_dir: Path) -> Engine:
    return Engine(Mirror(repo, cache_dir))
