"""How the whole service's cost grows with series, patches and heads (issue 37), with real
processes: a private redis-server, the GitHub emulator, `carry web`, a quick-lane worker, one or
two git-lane workers, `carry beat`, and one runner of one kind with a cheap check.

For each size, S series of P patches each sit on U upstreams (synthetic git repositories, SERIES_PER
upstream series on each, so U grows with S and a head is the business of the same number of series
at every size). Upstream heads are pushed through the emulator at a fixed rate for a fixed time,
round robin over the upstreams; each head moves the context of every series' first patch on that
upstream, so each of those series checks the head, refreshes and opens (then updates) its PR, and
the runner checks the result tree. Meanwhile a reader asks the dashboard for the overview and a
series page. One line per size:

  heads pushed / checked   upstream heads pushed, and those every series on their upstream decided
  decision p50 / p95       push to the series' decision on the head (its `rebased` history entry)
  PR p50 / p95             push to carry's PR pushed for that head (its `published` entry)
  throughput               series-heads decided per second of the run (pushing and draining)
  git lane a series-head   the git lane's task run time over the series-heads decided
  git lane CPU ...         the git workers' CPU (with the git they ran) over the same: the figure
                           the machine's other load moves least
  Redis KiB / 1k heads     used memory grown over the run, per 1,000 series-heads decided
  overview / series p95    the dashboard's pages, as a browser asks them during the run

and the ratio of each figure to the smallest size's. Then the same with two git workers. GitHub's
write budget is off unless --github-budget is given (Plan.github_budget says why).

    python bench/scale.py                      # S in 10, 50, 200; P in 3, 30 (long)
    python bench/scale.py --quick              # two small sizes, < 2 minutes
    python bench/scale.py --series 10 --series 50 --patches 3 --seconds 20 --rate 1
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import redis

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bot.core.history import HistoryKind  # noqa: E402
from bot.emulator import GitHubEmulator  # noqa: E402
from bot.queue.celery_app import GIT_QUEUE, QUICK_QUEUE  # noqa: E402
from bot.store import ci_runs  # noqa: E402
from bot.store import series as store  # noqa: E402
from bot.store.series import HISTORY_MAXLEN  # noqa: E402
from bot.store.write_budget import WRITES_PREFIX  # noqa: E402
from harness.carry_env import SECRET, CarryEnv, lanes_empty, wait_for  # noqa: E402
from harness.pushes import trusted_push  # noqa: E402
from harness.redis_server import PrivateRedis  # noqa: E402
from harness.scale_world import (  # noqa: E402
    KIND,
    PUSHER,
    UP_OWNER,
    Size,
    World,
    github,
)

# GitHub's write budget off (Plan.github_budget): carry's own gate and the emulated GitHub's
# secondary limit on content creation
UNBUDGETED_RATE = 100_000  # writes a minute
UNBUDGETED = {
    "CARRY_GITHUB_WRITE_PAUSE_S": "0",
    "CARRY_GITHUB_WRITES_PER_MINUTE": str(UNBUDGETED_RATE),
    "CARRY_GITHUB_WRITES_PER_HOUR": str(60 * UNBUDGETED_RATE),
}
SETTLE_S_A_SERIES = 5.0
DECIDED = "rebased"  # the history entry of a series' decision on a head
PR = "pr"  # a `published` history entry that names carry's PR
# a head a newer one replaced before its check began: the newer head's check covers it
SUPERSEDED = "superseded"


@dataclass(frozen=True)
class Plan:
    sizes: tuple[Size, ...]
    seconds: float = 60.0  # how long heads are pushed
    # heads a second, over all upstreams: 1 series-head a second at 5 series an upstream
    rate: float = 0.2
    per_upstream: int = 5  # series on each upstream
    drain_s: float = 600.0  # how long the service may take to finish after the last push
    git_workers: tuple[int, ...] = (1, 2)
    # GitHub's write budget for one installation (80 a minute, 500 an hour, a second between
    # writes) or none, as a GitHub Enterprise Server may set: at 200 series the first PRs
    # alone are about 1,000 writes, two hours of github.com's budget, and every figure would
    # be the budget's wait rather than carry's cost
    github_budget: bool = False


FULL = Plan(
    sizes=tuple(Size(s, p) for p in (3, 30) for s in (10, 50, 200)),
)
QUICK = Plan(sizes=(Size(3, 2), Size(6, 2)), seconds=8, rate=0.5, per_upstream=2, drain_s=90)


# =========================================================================== figures


@dataclass
class Figures:
    size: Size
    git_workers: int
    upstreams: int
    pushed: int = 0
    checked: int = 0
    series_heads: int = 0  # (series, head) pairs decided
    decision_ms: list[float] = field(default_factory=list)
    pr_ms: list[float] = field(default_factory=list)
    seconds: float = 0.0
    memory_grown: int = 0
    overview_ms: list[float] = field(default_factory=list)
    series_page_ms: list[float] = field(default_factory=list)
    stream_lengths: dict[str, int] = field(default_factory=dict)
    grown: dict[str, int] = field(default_factory=dict)  # key family -> bytes grown
    superseded: int = 0  # series-heads a newer head's check covered (never checked alone)
    owed: int = 0  # series-heads the pushes asked for (each head, each series on its upstream)
    github_writes: int = 0  # content-creating GitHub requests during the run (write budget)
    page_failures: list[str] = field(default_factory=list)
    git_lane_s: float = 0.0  # the git lane's task time from the first push until drained
    git_lane_cpu_s: float = 0.0  # the git workers' CPU (with their git) over the same span

    @property
    def throughput(self) -> float:
        return self.series_heads / self.seconds if self.seconds else 0.0

    @property
    def kib_per_1k(self) -> float:
        return self.memory_grown / 1024 / self.series_heads * 1000 if self.series_heads else 0.0

    def values(self) -> dict[str, float]:
        return {
            "decision p50": pct(self.decision_ms, 0.5),
            "decision p95": pct(self.decision_ms, 0.95),
            "PR p50": pct(self.pr_ms, 0.5),
            "PR p95": pct(self.pr_ms, 0.95),
            "throughput": self.throughput,
            # what a series-head costs the git lane, whatever the queue: the figure that
            # must not grow with series on other upstreams
            "git lane a series-head": (
                self.git_lane_s * 1000 / self.series_heads if self.series_heads else math.nan
            ),
            # the same as CPU time of the git workers and the git they ran: what the machine's
            # other load changes least
            "git lane CPU a series-head": (
                self.git_lane_cpu_s * 1000 / self.series_heads if self.series_heads else math.nan
            ),
            "KiB/1k": self.kib_per_1k,
            "overview p95": pct(self.overview_ms, 0.95),
            "series p95": pct(self.series_page_ms, 0.95),
        }


def pct(values: list[float], fraction: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))]


COLUMNS = (
    "decision p50",
    "decision p95",
    "PR p50",
    "PR p95",
    "throughput",
    "git lane a series-head",
    "git lane CPU a series-head",
    "KiB/1k",
    "overview p95",
    "series p95",
)
UNITS = {"throughput": "/s", "KiB/1k": " KiB"}


def render(rows: list[Figures]) -> str:
    """One markdown table: each size's figures and (in brackets) its ratio to the first row
    with the same number of git workers."""
    head = "| git workers | size | upstreams | heads pushed / checked | series-heads | "
    head += " | ".join(f"{c} (ms)" if c not in UNITS else c for c in COLUMNS) + " |"
    lines = [head, "|" + "---|" * (5 + len(COLUMNS))]
    base: dict[int, Figures] = {}
    for row in rows:
        first = base.setdefault(row.git_workers, row)
        mine, theirs = row.values(), first.values()
        cells = []
        for column in COLUMNS:
            value, ratio = mine[column], mine[column] / theirs[column] if theirs[column] else 0
            text = f"{value:.1f}{UNITS.get(column, '')}"
            cells.append(text if row is first else f"{text} ({ratio:.2f}x)")
        lines.append(
            f"| {row.git_workers} | {row.size} | {row.upstreams} | {row.pushed} / {row.checked} "
            f"| {row.series_heads} | " + " | ".join(cells) + " |"
        )
    return "\n".join(lines)


# =========================================================================== the world


# =========================================================================== the dashboard reader


class Reader(threading.Thread):
    """Asks for the overview and one series page in turn, as a person with the dashboard open
    would, and keeps each answer's time."""

    def __init__(self, url: str, series_id: str, every_s: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.url, self.series_id, self.every_s = url, series_id, every_s
        self.overview: list[float] = []
        self.series_page: list[float] = []
        self.failures: list[str] = []
        self.done = threading.Event()

    def run(self) -> None:
        with httpx.Client(timeout=30) as http:
            while not self.done.is_set():
                for path, into in (
                    ("/", self.overview),
                    (f"/series/{self.series_id}", self.series_page),
                ):
                    started = time.perf_counter()
                    answer = http.get(self.url + path)
                    elapsed = (time.perf_counter() - started) * 1000
                    if answer.status_code == 200:
                        into.append(elapsed)
                    else:
                        self.failures.append(f"{path}: {answer.status_code}")
                self.done.wait(self.every_s)


# =========================================================================== one size


def run_size(root: Path, size: Size, plan: Plan, git_workers: int) -> Figures:
    world = World(root, size, plan.per_upstream)
    world.build()
    figures = Figures(size, git_workers, len(world.upstreams))
    server = PrivateRedis(root / "redis", persist=False).start()
    env = CarryEnv(root / "carry", server.url)
    client = redis.Redis.from_url(server.url)
    try:
        with github(world) as gh:
            if not plan.github_budget:  # as a GitHub Enterprise Server may set it
                gh.set_content_limits(per_minute=UNBUDGETED_RATE, per_hour=60 * UNBUDGETED_RATE)
            env.config_path.write_text(json.dumps(world.config(gh, root / "runner"), indent=2))
            env.extra_env.update(
                {
                    "GITHUB_TOKEN": "carry-token",
                    "GITHUB_BASE_URL": gh.base_url,
                    "CARRY_DOWNSTREAM_DIR": "",
                    "CARRY_BOT_LOGIN": "carry[bot]",
                    "CARRY_CI_DEBOUNCE_S": "0",
                    **({} if plan.github_budget else UNBUDGETED),
                }
            )
            bases = {sid: world.upstreams[u].head() for sid, u in world.series.items()}
            for sid, base in bases.items():  # a trusted head under every later push
                trusted_push(client, sid, base, by=PUSHER)
            url, git_lane = _start(env, world, git_workers)
            gh.add_webhook(f"{url}/webhooks/github", secret=SECRET)
            try:
                # the first check, PR and runner job of every series: seconds a series
                settle_s = max(plan.drain_s, SETTLE_S_A_SERIES * size.series)
                wait_for(lambda: _settled(client, bases), settle_s, "every series checked")
            except AssertionError as err:
                raise AssertionError(f"{size}: {err}: {_unsettled(client, bases)}") from None
            memory_before, families_before = _used_memory(client), families(client)
            writes_before = _github_writes(client)
            reader = Reader(url, next(iter(world.series)))
            reader.start()
            started, since = time.monotonic(), _log_time()
            cpu_before = sessions_cpu_s(git_lane)
            pushes = _push(world, gh, plan)
            figures.pushed = len(pushes)
            wait_for(
                lambda: _drained(client, world, pushes),
                plan.drain_s,
                f"{size}: every head decided",
            )
            figures.seconds = time.monotonic() - started
            figures.git_lane_s = lane_seconds(env.root.glob("git-worker-*.log"), since)
            figures.git_lane_cpu_s = sessions_cpu_s(git_lane) - cpu_before
            reader.done.set()
            reader.join()
            figures.overview_ms, figures.series_page_ms = reader.overview, reader.series_page
            figures.page_failures = reader.failures
            figures.memory_grown = max(0, _used_memory(client) - memory_before)
            figures.github_writes = _github_writes(client) - writes_before
            after = families(client)
            figures.grown = {
                name: grown
                for name, fam in after.items()
                if (grown := fam.bytes - families_before.get(name, Family()).bytes) > 0
            }
            _latencies(client, world, pushes, figures)
            figures.stream_lengths = {
                "history (all series)": int(client.xlen(f"{store.PREFIX}history")),
                "run logs": sum(1 for _ in client.scan_iter(f"{store.PREFIX}runlog:*")),
            }
    finally:
        env.stop()
        server.stop(kill=True)
    return figures


def _start(env: CarryEnv, world: World, git_workers: int) -> tuple[str, set[int]]:
    """carry's processes, started together (each takes seconds to import): the web process,
    the quick lane's worker, `git_workers` git-lane workers, beat and the runner. Returns the
    web process's URL once every one of them says it is ready, and the git workers' process
    sessions (each started in its own)."""
    argv = ["bot.cli", "--log-level", "INFO", "worker", "--queues"]
    # The first process alone: it clones the downstream repository's mirror into the cache
    # the others share, which then only fetch.
    first = env.spawn([*argv, QUICK_QUEUE], "worker.log")
    env.wait_logged(*first, b"ready.")
    started = [
        (*env.spawn([*argv, GIT_QUEUE], f"git-worker-{n}.log"), b"ready.")
        for n in range(git_workers)
    ]
    runner = ["bot.cli", "runner", "--kind", KIND, "--name", f"{KIND}@carry-bench"]
    started.append((*env.spawn(runner, f"runner-{KIND}.log"), b"ready"))
    env.spawn(["bot.cli", "beat"], "beat.log")
    # The web process reads the series as compose's does: from carry's copy of the downstream
    # repository, exported from the emulated GitHub into the cache directory it shares with
    # the workers.
    url = env.start_web()
    for proc, log_path, marker in started:
        env.wait_logged(proc, log_path, marker)
    return url, {proc.pid for proc, _, _ in started[:git_workers]}


def sessions_cpu_s(sessions: set[int]) -> float:
    """CPU seconds (user and system) of every process in these sessions, with what each has
    reaped of its children: a Celery worker, its pool process and the git they ran. A child
    that ended moves into its parent's count, so the sum only grows."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:  # ended while listed
            continue
        # after the name: state ppid pgrp session ... utime(12th) stime cutime cstime
        if int(fields[3]) in sessions:
            total += sum(int(f) for f in fields[11:15])
    return total / tick


@dataclass(frozen=True)
class Pushed:
    upstream: int
    head: str
    at_ms: float  # wall clock, as Redis stream ids count


def _push(world: World, gh: GitHubEmulator, plan: Plan) -> list[Pushed]:
    """Heads at `plan.rate` a second for `plan.seconds`, round robin over the upstreams; each
    adds a line above mod.py's, which moves every series' first patch on that upstream."""
    pushes: list[Pushed] = []
    interval, started = 1.0 / plan.rate, time.monotonic()
    n = 0
    while time.monotonic() - started < plan.seconds:
        u = n % len(world.upstreams)
        repo = world.upstreams[u]
        content = f"# head {n}\n" + repo.read("mod.py").decode()
        head = repo.commit(f"upstream change {n} (#{100 + n})", {"mod.py": content})
        at_ms = time.time() * 1000
        gh.push(UP_OWNER, f"up{u}", repo.path, "main", pusher=PUSHER)
        pushes.append(Pushed(u, head, at_ms))
        n += 1
        time.sleep(max(0.0, started + n * interval - time.monotonic()))
    return pushes


# a task's end in a worker's JSON log: when, and how long it ran
TASK_DONE = re.compile(
    r'"ts": "(?P<ts>[^"]+)".*"msg": "Task carry\.[\w.]+\[[^\]]+\] succeeded in (?P<s>[0-9.]+)s'
)


def _log_time() -> str:
    """Now, as carry's JSON log lines write it (bot.log: local time, to the second)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S")


def lane_seconds(logs: Iterable[Path], since: str) -> float:
    """The run time of the tasks that ended at `since` or later in these workers' logs."""
    total = 0.0
    for log in logs:
        for line in log.read_text(errors="replace").splitlines():
            if (done := TASK_DONE.search(line)) and done["ts"] >= since:
                total += float(done["s"])
    return total


def _settled(client: redis.Redis, bases: dict[str, str]) -> bool:
    """Every series checked on its base head, and the runner's work for those heads done (its
    reports would otherwise spend the GitHub write budget of the first pushes)."""
    if not lanes_empty(client) or _runner_busy(client):
        return False
    for sid, base in bases.items():
        state = store.load_series(client, sid)
        if state is None or state.checked_head != base or state.phase != "idle":
            return False
    return True


def _runner_busy(client: redis.Redis) -> bool:
    return bool(client.llen(f"hw.{KIND}")) or ci_runs.in_flight(client, KIND) > 0


def _unsettled(client: redis.Redis, bases: dict[str, str]) -> str:
    """The series that have not settled on their base head, and where they stand."""
    said = []
    for sid, base in bases.items():
        state = store.load_series(client, sid)
        if state is None or state.checked_head != base or state.phase != "idle":
            where = "no state" if state is None else f"{state.phase} on {state.checked_head}"
            said.append(f"{sid}: {where} ({state.error if state else ''})")
    return "; ".join(said[:5]) or "lanes still busy"


def _decided(client: redis.Redis, sid: str) -> dict[str, dict[str, float]]:
    """head -> history kind -> when (ms, from the stream id) it was first written."""
    out: dict[str, dict[str, float]] = {}
    for entry_id, raw in client.xrange(f"{store.PREFIX}history:{sid}"):
        fields = {k.decode(): v.decode() for k, v in raw.items()}
        data = json.loads(fields.get("data") or "{}")
        head = data.get("head") or data.get("head_sha")
        if isinstance(head, str):
            at = float(entry_id.decode().split("-")[0])
            kind = fields.get("kind", "")
            if kind == "published" and data.get("pr"):
                kind = PR
            out.setdefault(head, {}).setdefault(kind, at)
    return out


def _drained(client: redis.Redis, world: World, pushes: list[Pushed]) -> bool:
    if not lanes_empty(client) or _runner_busy(client):
        return False
    last = {p.upstream: p.head for p in pushes}
    for sid, u in world.series.items():
        state = store.load_series(client, sid)
        if u in last and (state is None or state.checked_head != last[u] or state.phase != "idle"):
            return False
    return True


def _latencies(client: redis.Redis, world: World, pushes: list[Pushed], figures: Figures) -> None:
    on: dict[int, list[str]] = {}
    for sid, u in world.series.items():
        on.setdefault(u, []).append(sid)
    decided = {sid: _decided(client, sid) for sid in world.series}
    for push in pushes:
        all_decided = True
        figures.owed += len(on[push.upstream])
        for sid in on[push.upstream]:
            kinds = decided[sid].get(push.head, {})
            if SUPERSEDED in kinds and DECIDED not in kinds:
                figures.superseded += 1
                continue
            if DECIDED not in kinds:
                all_decided = False
                continue
            figures.series_heads += 1
            figures.decision_ms.append(kinds[DECIDED] - push.at_ms)
            if PR in kinds:
                figures.pr_ms.append(kinds[PR] - push.at_ms)
        figures.checked += all_decided


def _github_writes(client: redis.Redis) -> int:
    """Content-creating GitHub requests in the write budget's window (an hour)."""
    return sum(int(client.zcard(key)) for key in client.scan_iter(f"{WRITES_PREFIX}*"))


def _used_memory(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def family(key: str) -> str:
    """A key with its ids left out: carry:history:s001 -> carry:history:*."""
    parts = key.split(":")
    keep = 3 if key.startswith(("carry:ci:", "carry:runner:")) else 2
    return ":".join(parts[:keep]) + (":*" if len(parts) > keep else "")


# Each family's bound, as bot/store sets it (docs/performance.md).
RETENTION = {
    "carry:history": "capped near 20,000 entries (HISTORY_MAXLEN)",
    "carry:history:*": "capped near 20,000 entries a series (HISTORY_MAXLEN)",
    "carry:series:*": "one a series; its heads list capped (MAX_HEADS)",
    "carry:series-versions": "one hash: a field a series",
    "carry:series-versions:*": "one marker: the versions are complete",
    "carry:ci:run:*": "expire 30 days after the last write (RUN_RETENTION_S)",
    "carry:ci:issued:*": "expire 30 days after the last write (RUN_RETENTION_S)",
    "carry:runlog:*": "5,000 lines each, expire 30 days after the last line",
    "carry:delivery:*": "expire after 35 days (deliveries retention_s)",
    "carry:deliveries": "capped near 10,000 entries (STREAM_MAXLEN)",
    "carry:deliveries:*": "the open deliveries: each settled as a worker handles its event",
    "carry:done:*": "expire after 90 days (DONE_TTL_S)",
    "carry:ci:result:*": "one per tree and kind, expire after 180 days (RESULT_TTL_S)",
    "carry:ci:starts:*": "expire after 2 days",
    "carry:ci:current:*": "one a series and kind",
    "carry:ci:lease:*": "expire with the run's lease",
    "carry:ci:slots:*": "one a kind",
    "carry:hw:*": "runner reports: capped near 200,000 entries a kind (REPORTS_MAXLEN)",
    "carry:refreshed:*": "expire after 7 days",
    "carry:citree:*": "one a series",
    "carry:github-writes:*": "expire with the write budget's window",
    "carry:metrics:*": "a few counters",
    "unacked": "Celery's messages in flight, emptied as tasks finish",
    "unacked_index": "Celery's messages in flight, emptied as tasks finish",
    "carry": "the quick lane's queue, emptied as tasks finish",
    "carry.git": "the git lane's queue, emptied as tasks finish",
}


@dataclass
class Family:
    keys: int = 0
    bytes: int = 0
    without_expiry: int = 0  # keys that neither expire nor are one per series or kind


def families(client: redis.Redis) -> dict[str, Family]:
    """Each key family's count, bytes (MEMORY USAGE) and keys with no expiry."""
    out: dict[str, Family] = {}
    for raw in client.scan_iter(count=1000):
        key = raw.decode("utf-8", "replace")
        found = out.setdefault(family(key), Family())
        found.keys += 1
        found.bytes += int(client.memory_usage(raw, samples=0) or 0)
        found.without_expiry += client.ttl(raw) == -1
    return out


def render_families(rows: list[Figures]) -> str:
    """Bytes per 1,000 series-heads of each key family that grew, for each size (1 worker)."""
    rows = [r for r in rows if r.git_workers == min(x.git_workers for x in rows)]
    names = sorted({n for r in rows for n in r.grown}, key=lambda n: -rows[-1].grown.get(n, 0))
    lines = ["| key family | " + " | ".join(str(r.size) for r in rows) + " | expire or capped |"]
    lines.append("|---|" + "---|" * (len(rows) + 1))
    for name in names:
        cells = [
            f"{r.grown.get(name, 0) / 1024 / r.series_heads * 1000:.0f} KiB"
            if r.series_heads
            else "-"
            for r in rows
        ]
        lines.append(f"| `{name}` | " + " | ".join(cells) + f" | {RETENTION.get(name, '?')} |")
    return "\n".join(lines)


# =========================================================================== trimming


@dataclass
class Plateau:
    """A series' history written past its cap: entries written, the streams' lengths and Redis
    used memory after each step."""

    written: list[int] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    memory: list[int] = field(default_factory=list)

    def table(self) -> str:
        lines = ["| history entries written | " + " | ".join(f"{n:,}" for n in self.written) + " |"]
        lines.append("|---|" + "---|" * len(self.written))
        lines.append(
            "| entries kept (series stream) | " + " | ".join(f"{n:,}" for n in self.lengths) + " |"
        )
        lines.append(
            "| Redis used memory (MiB) | "
            + " | ".join(f"{m / 2**20:.1f}" for m in self.memory)
            + " |"
        )
        return "\n".join(lines)

    @property
    def flat(self) -> bool:
        """Memory after the cap was reached grows by less than a tenth from step to step."""
        capped = [m for n, m in zip(self.written, self.memory, strict=True) if n >= HISTORY_MAXLEN]
        return len(capped) >= 2 and max(capped) < 1.1 * min(capped)


def history_plateau(root: Path, steps: int = 6) -> Plateau:
    """Writes a series' history in steps of half the cap (a decision entry as the rebase
    writes one per patch and head) and measures after each: the streams stop growing at
    HISTORY_MAXLEN entries and memory with them."""
    server = PrivateRedis(root / "plateau-redis", persist=False).start()
    client = redis.Redis.from_url(server.url)
    plateau = Plateau()
    decision = {
        "patch": "0001-make-value-10-safe.patch",
        "head": "a" * 40,
        "status": "applies",
        "decision": "keep",
        "reason": "applies cleanly on the new head",
        "evidence": [{"signal": "apply", "result": "clean", "file": "mod.py"}],
    }
    try:
        step = HISTORY_MAXLEN // 2
        for n in range(1, steps + 1):
            for _ in range(0, step, 1000):
                pipe = client.pipeline(transaction=False)
                for _ in range(1000):
                    store.queue_history(pipe, "s000", HistoryKind.REBASED, **decision)
                pipe.execute()
            plateau.written.append(n * step)
            plateau.lengths.append(int(client.xlen(f"{store.PREFIX}history:s000")))
            plateau.memory.append(_used_memory(client))
    finally:
        server.stop(kill=True)
    return plateau


# =========================================================================== main


def run(plan: Plan, say: Any = print) -> list[Figures]:
    rows = []
    for workers in plan.git_workers:
        for size in plan.sizes:
            with tempfile.TemporaryDirectory(prefix="carry-scale-") as tmp:
                try:
                    figures = run_size(Path(tmp), size, plan, workers)
                except AssertionError as err:  # the other sizes still run and print
                    say(f"{size}, {workers} git worker(s): FAILED: {str(err)[-2000:]}")
                    continue
            say(render([figures]).splitlines()[-1])
            say(
                f"{size}, {workers} git worker(s): {figures.pushed} heads pushed, "
                f"{figures.checked} checked, {figures.series_heads} series-heads in "
                f"{figures.seconds:.0f} s, {figures.github_writes} GitHub writes; "
                f"{figures.stream_lengths}"
            )
            rows.append(figures)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="two small sizes (< 2 minutes)")
    parser.add_argument("--series", type=int, action="append", help="S (repeatable)")
    parser.add_argument("--patches", type=int, action="append", help="P (repeatable)")
    parser.add_argument("--seconds", type=float, help="how long heads are pushed")
    parser.add_argument("--rate", type=float, help="heads a second, over all upstreams")
    parser.add_argument("--per-upstream", type=int, help="series on each upstream")
    parser.add_argument("--git-workers", type=int, action="append", help="1, 2 (repeatable)")
    parser.add_argument(
        "--github-budget",
        action="store_true",
        help="keep github.com's write budget (80 a minute, 500 an hour): PR latency is its wait",
    )
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    if args.series or args.patches:
        series = args.series or sorted({s.series for s in plan.sizes})
        patches = args.patches or sorted({s.patches for s in plan.sizes})
        plan = replace(plan, sizes=tuple(Size(s, p) for p in patches for s in series))
    for name in ("seconds", "rate", "per_upstream"):
        if getattr(args, name) is not None:
            plan = replace(plan, **{name: getattr(args, name)})
    if args.git_workers:
        plan = replace(plan, git_workers=tuple(args.git_workers))
    plan = replace(plan, github_budget=args.github_budget)
    started = time.monotonic()
    rows = run(plan)
    print(
        f"\n{len(plan.sizes)} sizes x {len(plan.git_workers)} worker counts, heads at "
        f"{plan.rate}/s for {plan.seconds:.0f} s, {plan.per_upstream} series an upstream, "
        f"{'github.com' if plan.github_budget else 'no'} GitHub write budget, "
        f"in {time.monotonic() - started:.0f} s\n"
    )
    print(render(rows))
    print("\nRedis memory grown per 1,000 series-heads, by key family:\n")
    print(render_families(rows))
    failures = [f"{r.size}/{r.git_workers}: {r.page_failures[:3]}" for r in rows if r.page_failures]
    if failures:
        print("\ndashboard requests that failed:", "; ".join(failures))
    with tempfile.TemporaryDirectory(prefix="carry-scale-") as tmp:
        plateau = history_plateau(Path(tmp))
    print(f"\nA series' history written past its cap ({HISTORY_MAXLEN:,} entries):\n")
    print(plateau.table())
    ok = all(r.checked == r.pushed for r in rows) and plateau.flat and not failures
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
