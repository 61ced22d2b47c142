"""`python -m bot.demo`: the whole carry loop on one machine, with no network and no credentials.

It builds, under a demo directory (default `.carry-demo/` in the current directory):

- a local GitHub (bot.emulator, in this process) holding an upstream project,
  `upstream-org/calc`, with an open PR whose head will move, and a downstream repository,
  `downstream-org/calc-carry`, carrying a series of two patches with their fix pages;
- carry's web, worker and beat processes, and two runner workers (kinds gaudi and gb10) whose
  hardware checks are plain shell commands;
- Redis: a private redis-server of its own on a free port, its files in the demo directory,
  nothing saved to disk, its `default` user behind a password. Only --redis-url (or REDIS_URL) points it at another Redis; the demo
  then wants an empty database there, and empties a non-empty one only with --redis-flush.

Then it plays a storyline and says what to look at on the dashboard: the PR head moves, carry
rebases, opens a PR downstream, CI runs on both runner kinds, upstream merges the fix of patch
0001 and carry drops it. Everything keeps running until Ctrl-C (or stops at once: --no-wait).
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx
import redis
import yaml

import bot
from bot.ci.job_keys import KEY_DIR, PRIVATE_NAME, ensure_key_pair
from bot.core.state import CiState, SeriesState
from bot.emulator import GitHubEmulator
from bot.local_redis import LocalRedis, LocalRedisError
from bot.store import series as store

# Where the running `bot` package is imported from: carry's processes must import the same one.
PACKAGE_PARENT = Path(bot.__file__).resolve().parents[1]
MARKER = ".carry-demo"  # a file that marks a directory as the demo's own (safe to wipe)
DEFAULT_PORT = 8000
UP_OWNER, UP_NAME = "upstream-org", "calc"
DOWN_OWNER, DOWN_NAME = "downstream-org", "calc-carry"
SERIES = "calc-fixes"
BOT, BOT_TOKEN = "carry[bot]", "carry-demo-token"
DEV, MAINT = "upstream-dev", "upstream-maint"
SECRET = "carry-demo-webhook-secret"
KINDS = ("gaudi", "gb10")  # runner kinds; every kind runs every check below
CHECKS = {
    "divide-by-zero": "import app; assert app.safe_divide(1, 0) is None",
    "empty-mean": "import app; assert app.mean([]) == 0.0",
}
PATCH_DIVIDE = "0001-return-none-when-dividing-by-zero.patch"
PATCH_MEAN = "0002-mean-of-no-values-is-zero.patch"
FIX_TITLE = "safe_divide: answer None for a zero divisor"  # upstream's own take on patch 0001
FIX_PULL = 2  # its number upstream (PR 1 is the one the series is carried on)

T = TypeVar("T")


class DemoError(RuntimeError):
    """The demo cannot go on; the message says why and where to look."""


# --------------------------------------------------------------------------- the project

APP = '''"""calc: small arithmetic helpers."""


def add(a: float, b: float) -> float:
    """a + b."""
    return a + b


def safe_divide(a: float, b: float) -> float | None:
    """a / b, or None when b is zero."""
    return a / b


def clamp(value: float, low: float, high: float) -> float:
    """value, kept within [low, high]."""
    return max(low, min(high, value))


def mean(values: list[float]) -> float:
    """The arithmetic mean of values; 0.0 for no values."""
    return sum(values) / len(values)
'''
PERCENT = '''

def percent(part: float, whole: float) -> float:
    """part as a percentage of whole."""
    return 100 * part / whole
'''
DOCSTRING = '''"""calc: small arithmetic helpers.

Every function takes plain floats and returns a float (or None where
the result does not exist). Nothing here raises on ordinary input.
"""
'''
DIVIDE_FIX = ("    return a / b\n", "    if b == 0:\n        return None\n    return a / b\n")
MEAN_FIX = (
    "    return sum(values) / len(values)\n",
    "    if not values:\n        return 0.0\n    return sum(values) / len(values)\n",
)

PAGE = """# {name}

{summary}

| Field | Value |
|---|---|
| Affects | everyone calling `{function}` |
| Releases | main |
| Patches | {patch}: app.py |
| Upstream | {upstream} |
| Test | `python -c "{check}"` |

## Problem

{problem}

## Symptom

{symptom}

## Who is affected

Every caller of `{function}`.

## The fix

{fix}

## Verify

Run the check in the Test field from the root of a tree with the patch applied.
"""


def _page(name: str, patch: str, upstream: str, check: str, **text: str) -> str:
    return PAGE.format(name=name, patch=patch, upstream=upstream, check=check, **text)


def fix_pages() -> dict[str, str]:
    return {
        "divide-by-zero.md": _page(
            "divide-by-zero",
            PATCH_DIVIDE,
            f"{UP_OWNER}/{UP_NAME}#{FIX_PULL} (open)",
            CHECKS["divide-by-zero"],
            function="safe_divide",
            summary="`safe_divide(a, 0)` returns None, as its docstring promises.",
            problem="`safe_divide` divides without looking at the divisor.",
            symptom="`ZeroDivisionError` from a function called safe.",
            fix="Return None when the divisor is zero.",
        ),
        "empty-mean.md": _page(
            "empty-mean",
            PATCH_MEAN,
            "not-filed",
            CHECKS["empty-mean"],
            function="mean",
            summary="`mean([])` is 0.0, as its docstring promises.",
            problem="`mean` divides by the number of values, which may be zero.",
            symptom="`ZeroDivisionError` on an empty list.",
            fix="Return 0.0 when there are no values.",
        ),
    }


# --------------------------------------------------------------------------- git


def git(cwd: Path, *args: str) -> str:
    """git with a fixed identity and no user or system config (no signing, no hooks)."""
    env = {
        **os.environ,
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "Demo Developer",
        "GIT_AUTHOR_EMAIL": "dev@calc.example",
        "GIT_COMMITTER_NAME": "Demo Developer",
        "GIT_COMMITTER_EMAIL": "dev@calc.example",
    }
    proc = subprocess.run(
        ["git", "-c", "init.defaultBranch=main", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise DemoError(f"git {' '.join(args)} failed in {cwd}: {proc.stderr.strip()}")
    return proc.stdout.strip()


def commit(repo: Path, message: str, files: dict[str, str], *, author: str | None = None) -> str:
    for name, text in files.items():
        path = repo / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message, *(["--author", author] if author else []))
    return git(repo, "rev-parse", "HEAD")


def read(repo: Path, name: str) -> str:
    return (repo / name).read_text()


def build_upstream(path: Path) -> None:
    """main, and the branch `feature` of the PR the series is carried on."""
    path.mkdir(parents=True)
    git(path, "init", "-q")
    commit(path, "calc: small arithmetic helpers", {"app.py": APP})
    git(path, "checkout", "-q", "-b", "feature")
    commit(path, "Add percent()", {"app.py": APP + PERCENT})


def build_series(upstream: Path, series_dir: Path) -> list[str]:
    """The two downstream fixes, as patches made on the PR head; the upstream repo is left
    as it was."""
    git(upstream, "checkout", "-q", "-b", "downstream-fixes", "feature")
    text = read(upstream, "app.py").replace(*DIVIDE_FIX)
    commit(upstream, "Return None when dividing by zero", {"app.py": text})
    commit(upstream, "Mean of no values is zero", {"app.py": text.replace(*MEAN_FIX)})
    series_dir.mkdir(parents=True)
    listed = git(upstream, "format-patch", "-o", str(series_dir), "feature..HEAD")
    git(upstream, "checkout", "-q", "feature")
    git(upstream, "branch", "-q", "-D", "downstream-fixes")
    made = [Path(line) for line in listed.splitlines()]
    names = [PATCH_DIVIDE, PATCH_MEAN]
    if len(made) != len(names):
        raise DemoError(f"git format-patch made {len(made)} patches, not {len(names)}")
    for path, name in zip(made, names, strict=True):
        path.rename(series_dir / name)
    (series_dir / "series").write_text("".join(f"{name}\n" for name in names))
    for page, text in fix_pages().items():
        (series_dir / page).write_text(text)
    return names


def build_downstream(path: Path, upstream: Path) -> list[str]:
    path.mkdir(parents=True)
    git(path, "init", "-q")
    names = build_series(upstream, path / "patches" / SERIES)
    readme = "# calc-carry\n\nFixes carried on upstream-org/calc: see patches/.\n"
    commit(path, "Carry two fixes for calc", {"README.md": readme})
    return names


# --------------------------------------------------------------------------- configuration


def check_command(code: str) -> list[str]:
    return ["sh", "-c", f'python -c "{code}"']


def runner_config(kind: str, root: Path) -> dict[str, Any]:
    return {
        "queue": f"hw.{kind}",
        "workdir": str(root / "runners" / kind),
        "checks": {
            check: {"run": check_command(code), "timeout_s": 120} for check, code in CHECKS.items()
        },
    }


def carry_config(root: Path, upstream_url: str, pull: int, fix_pull: int) -> dict[str, Any]:
    series = {
        "id": SERIES,
        "upstream": UP_NAME,
        "base": {"pull": pull},
        "patches": SERIES,
        "runners": list(KINDS),
        "checks": list(CHECKS),
        "links": {PATCH_DIVIDE: [f"{UP_OWNER}/{UP_NAME}#{fix_pull}"]},
        "trusted_authors": [DEV, MAINT],
        "policy": {"paused": False, "auto_drop": True},
    }
    return {
        "downstream": {"repo": f"{DOWN_OWNER}/{DOWN_NAME}", "branch": "main"},
        "upstreams": {UP_NAME: {"url": upstream_url, "repo": f"{UP_OWNER}/{UP_NAME}"}},
        "series": [series],
        "runners": {kind: runner_config(kind, root) for kind in KINDS},
        "polling": {"refs_every_s": 60, "pr_state_every_s": 120},
    }


def write_config(path: Path, config: dict[str, Any]) -> None:
    header = "# Written by `python -m bot.demo`: carry's configuration for the demo.\n"
    path.write_text(header + yaml.safe_dump(config, sort_keys=False, default_flow_style=None))


# --------------------------------------------------------------------------- processes


@dataclass
class Processes:
    """carry's processes, each in its own session with its log under `logs`."""

    logs: Path
    env: dict[str, str]
    pid_file: Path
    log_level: str = "WARNING"  # carry's --log-level for each of them
    running: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)
    services: list[subprocess.Popen[bytes]] = field(default_factory=list)  # stopped last

    def start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        with open(self.logs / f"{name}.log", "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "bot.cli", "--log-level", self.log_level, *args],
                env=self.env,
                cwd=self.logs.parent,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.running.append((name, proc))
        with open(self.pid_file, "a") as pids:
            pids.write(f"{proc.pid} {name}\n")
        return proc

    def adopt(self, proc: subprocess.Popen[bytes] | None) -> None:
        """A process started elsewhere (the private redis-server): stopped after carry's."""
        if proc is not None:
            self.services.append(proc)

    def log_text(self, name: str) -> str:
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def check_alive(self) -> None:
        for name, proc in self.running:
            if proc.poll() is not None:
                raise DemoError(
                    f"{name} exited with status {proc.returncode}: see {self.logs / name}.log"
                )

    def stop_all(self) -> None:
        _stop([proc for _, proc in reversed(self.running)])
        _stop(self.services)
        self.running.clear()
        self.services.clear()


def _stop(procs: list[subprocess.Popen[bytes]], grace_s: float = 10) -> None:
    """SIGTERM to each main process (a Celery worker then finishes its job: warm shutdown);
    what is still there after `grace_s` is killed with its process group."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + grace_s
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            proc.wait()


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        if os.getpgid(proc.pid) == proc.pid:  # its own session: take its children too
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
    except ProcessLookupError:
        pass


def wait_for(what: str, condition: Callable[[], T | None], timeout: float, procs: Processes) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        procs.check_alive()
        time.sleep(0.1)
    raise DemoError(
        f"timed out after {timeout:g}s waiting for {what}: see the logs in {procs.logs}"
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def web_answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=0.5).status_code == 200
    except httpx.HTTPError:
        return False


def start_carry(procs: Processes, port: int, timeout: float) -> str:
    """web, worker, beat and one runner per kind, started together, then waited for."""
    url = f"http://127.0.0.1:{port}"
    procs.start("web", "web", "--host", "127.0.0.1", "--port", str(port))
    procs.start("worker", "worker")
    procs.start("beat", "beat")
    for kind in KINDS:
        procs.start(f"runner-{kind}", "runner", "--kind", kind, "--name", f"{kind}@carry-demo")
    wait_for("carry web", lambda: web_answers(url), timeout, procs)
    ready = {"worker": "ready", "beat": "Starting", **{f"runner-{k}": "ready" for k in KINDS}}
    for name, word in ready.items():
        wait_for(name, log_says(procs, name, word), timeout, procs)
    return url


def log_says(procs: Processes, name: str, word: str) -> Callable[[], bool]:
    return lambda: word in procs.log_text(name)


# --------------------------------------------------------------------------- the demo


@dataclass(frozen=True)
class Options:
    directory: Path
    port: int
    port_given: bool  # by --port or PORT: never replaced by another port
    wait: bool
    pause_s: float
    step_timeout_s: float
    redis_url: str | None  # None: the demo's own redis-server
    redis_flush: bool
    github_port: int
    log_level: str  # of carry's processes, in their logs


@dataclass
class Demo:
    options: Options
    gh: GitHubEmulator
    procs: Processes
    client: redis.Redis
    dashboard: str
    upstream: Path
    pull: int
    fix_pull: int
    patches: list[str]

    # -- what the storyline looks at ------------------------------------------------------------

    def state(self) -> SeriesState | None:
        return store.load_series(self.client, SERIES)

    def history(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in store.history(self.client, SERIES, limit=2000) if e["kind"] == kind]

    def entry(self, kind: str, **match: Any) -> dict[str, Any] | None:
        for item in self.history(kind):
            if all(item["data"].get(k) == v for k, v in match.items()):
                return item
        return None

    def wait(self, what: str, condition: Callable[[], T | None]) -> T:
        return wait_for(what, condition, self.options.step_timeout_s, self.procs)

    def pause(self) -> None:
        time.sleep(self.options.pause_s)

    # -- what the storyline does -------------------------------------------------------------------

    def push_feature(self, pusher: str) -> str:
        self.gh.push(UP_OWNER, UP_NAME, self.upstream, "feature", pusher=pusher, force=True)
        return git(self.upstream, "rev-parse", "feature")

    def pr_head(self) -> str:
        return str(self.gh.pull(UP_OWNER, UP_NAME, self.pull)["head"]["sha"])

    def delivery_status(self, head: str) -> str:
        self.gh.wait_for_deliveries()
        for delivery in reversed(self.gh.deliveries):
            if delivery.event == "pull_request" and delivery.payload.get("after") == head:
                return f"HTTP {delivery.status_code}"
        return "not sent"


def say(text: str = "") -> None:
    print(text, flush=True)


def step(number: int, title: str) -> None:
    say()
    say(f"Step {number}/5  {title}")
    say("-" * (len(title) + 11))


def look(demo: Demo, *paths: str) -> None:
    for path in paths:
        say(f"  Look at: {demo.dashboard}{path}")


def short(sha: str | None) -> str:
    return (sha or "")[:12]


# -- step 1 -----------------------------------------------------------------------------------


def move_head(demo: Demo) -> str:
    step(1, "The upstream PR's head moves")
    before = demo.pr_head()
    git(demo.upstream, "checkout", "-q", "feature")
    body = read(demo.upstream, "app.py").replace('"""calc: small arithmetic helpers."""\n', "")
    commit(demo.upstream, "Document the module", {"app.py": DOCSTRING + body})
    head = demo.push_feature(DEV)
    say(f"  {DEV} pushes 'Document the module' to {UP_OWNER}/{UP_NAME}#{demo.pull}:")
    say(f"  head moved: {short(before)} -> {short(head)}")
    status = demo.delivery_status(head)
    say(f"  The emulator sent carry a signed pull_request webhook (synchronize): {status}")
    look(demo, "/events")
    return head


# -- step 2 -----------------------------------------------------------------------------------


def rebase(demo: Demo, head: str) -> None:
    step(2, "carry rebases the series on the new head")
    entry = demo.wait(f"the rebase on {short(head)}", lambda: demo.entry("rebased", head=head))
    state = demo.state()
    assert state is not None
    say(f"  rebased on {short(head)}: outcome {entry['data'].get('outcome')}")
    describe_patches(state)
    say("  The docstring moved every hunk down: carry refreshed the patches' context.")
    look(demo, f"/series/{SERIES}")


def describe_patches(state: SeriesState) -> None:
    width = max((len(p.name) for p in state.patches), default=0)
    for patch in state.patches:
        say(f"    {patch.name:<{width}}  {patch.status:<16} {patch.decision}")


# -- step 3 -----------------------------------------------------------------------------------


def propose(demo: Demo, head: str) -> int:
    step(3, "carry proposes the result as a PR on the downstream repository")
    entry = demo.wait(
        f"the PR for {short(head)}", lambda: demo.entry("published", head=head, pushed=True)
    )
    number = int(entry["data"]["pr"])
    pull = demo.gh.pull(DOWN_OWNER, DOWN_NAME, number)
    say(f"  PR #{number} opened on {DOWN_OWNER}/{DOWN_NAME}: {pull['title']}")
    say(f"  branch {pull['head']['ref']}, files: {', '.join(entry['data'].get('files', []))}")
    say(f"  On the emulator: {demo.gh.base_url}/repos/{DOWN_OWNER}/{DOWN_NAME}/pulls/{number}")
    look(demo, f"/series/{SERIES}")
    return number


# -- step 4 -----------------------------------------------------------------------------------


def ci_rows_done(demo: Demo, head: str) -> SeriesState | None:
    state = demo.state()
    return None if state is None else ci_finished(state, head)


def ci_finished(state: SeriesState, head: str) -> SeriesState | None:
    """The state once every CI row of `head` passed; None while they run or wait. A row that
    failed stops the demo at once, with the row's own reason."""
    rows = ci_rows(state, head)
    if len(rows) == len(KINDS) * len(CHECKS) and all(row.state == "success" for row in rows):
        return state
    failed = [row for row in rows if row.state in ("failure", "infra-error", "cancelled")]
    if failed:
        raise DemoError(f"CI did not pass: {describe(failed)}")
    return None


def ci_held(state: SeriesState | None, head: str) -> str:
    """Why CI on `head` is not done, when rows wait for `/carry approve`: a poll can see a head
    before its push webhook names the pusher (that release is normal); a wait that outlasts the
    step is not, and the timeout says which rows and why."""
    held = [row for row in ci_rows(state, head) if row.state == "waiting-approval"] if state else []
    return f"; still held: {describe(held)}" if held else ""


def ci_rows(state: SeriesState, head: str) -> list[CiState]:
    rows = [state.ci.get(f"{kind}/{check}") for kind in KINDS for check in CHECKS]
    return [row for row in rows if row is not None and row.head_sha == head]


def describe(rows: list[CiState]) -> str:
    return "; ".join(f"{row.runner}: {row.state} {row.detail}" for row in rows)


def run_ci(demo: Demo, head: str, number: int) -> None:
    step(4, "Hardware CI runs on both runner kinds")
    say(f"  Runners {' and '.join(KINDS)} each build the exact tree (upstream head + the PR's")
    say("  patches) and run the series' checks there, shell commands from carry.yaml:")
    for check, code in CHECKS.items():
        say(f"    {check:<15} sh -c 'python -c \"{code}\"'")
    approve_once(demo, head)
    try:
        state = demo.wait(f"CI on {short(head)}", lambda: ci_rows_done(demo, head))
    except DemoError as timed_out:
        raise DemoError(f"{timed_out}{ci_held(demo.state(), head)}") from timed_out
    for key, row in sorted(state.ci.items()):
        say(f"  {key}: {row.state} (run {row.run_id}: {demo.dashboard}/runs/{row.run_id})")
    runs = demo.wait("the CI results on the PR", lambda: completed_ci_statuses(demo, number))
    say(f"  Commit statuses on the downstream PR #{number} (a token may not write check runs):")
    for name, conclusion in sorted(runs.items()):
        say(f"    {name}: {conclusion}")
    look(demo, "/runners")


def approve_once(demo: Demo, head: str) -> None:
    """The PR's head is the first push carry saw since it started: no trusted or approved
    head is under it, so its runs wait for approval (trust covers the range of pushes, not
    the last pusher). An operator approves it once, with `carry approve`; the heads that
    trusted authors push on top of it run with no approval."""
    state = demo.wait(f"CI rows of {short(head)}", lambda: ci_requested(demo, head))
    if not any(row.state == "waiting-approval" for row in ci_rows(state, head)):
        return
    argv = ["approve", "--series", SERIES, head, "--by", "demo-operator"]
    done = subprocess.run(
        [sys.executable, "-m", "bot.cli", *argv],
        env=demo.procs.env,
        capture_output=True,
        text=True,
        timeout=demo.options.step_timeout_s,
        check=False,
    )
    if done.returncode != 0:
        raise DemoError(f"carry approve failed: {done.stderr.strip() or done.stdout.strip()}")
    say(f"  {short(head)} is the first head carry saw: no trusted head is under it, so its")
    say(f"  runs waited until an operator approved it once: carry approve --series {SERIES} ...")


def ci_requested(demo: Demo, head: str) -> SeriesState | None:
    state = demo.state()
    return state if state is not None and ci_rows(state, head) else None


def completed_ci_statuses(demo: Demo, number: int) -> dict[str, str] | None:
    """context -> state of the newest commit status per context, once each CI row has a final
    one. The demo runs carry with a token, so CI results are commit statuses, not check runs."""
    head = demo.gh.pull(DOWN_OWNER, DOWN_NAME, number)["head"]["sha"]
    newest: dict[str, dict[str, Any]] = {}
    for status in demo.gh.statuses(DOWN_OWNER, DOWN_NAME, head):
        if status["context"] not in newest or status["id"] > newest[status["context"]]["id"]:
            newest[status["context"]] = status
    wanted = {f"carry/{kind}/{check}" for kind in KINDS for check in CHECKS}
    if not wanted <= newest.keys() or any(newest[n]["state"] == "pending" for n in wanted):
        return None
    return {name: str(newest[name]["state"]) for name in wanted}


# -- step 5 -----------------------------------------------------------------------------------


def merge_fix(demo: Demo) -> str:
    step(5, "Upstream merges the fix of patch 0001; carry drops the patch")
    pull = demo.gh.pull(UP_OWNER, UP_NAME, demo.fix_pull)
    demo.gh.merge_pull(UP_OWNER, UP_NAME, demo.fix_pull, user=MAINT)
    git(demo.upstream, "fetch", "-q", str(demo.gh.repo_path(UP_OWNER, UP_NAME)), "feature")
    git(demo.upstream, "checkout", "-q", "feature")
    git(demo.upstream, "reset", "-q", "--hard", "FETCH_HEAD")
    head = demo.pr_head()
    say(f"  {MAINT} merges {UP_OWNER}/{UP_NAME}#{demo.fix_pull} ({pull['title']}) into")
    say(f"  the PR's branch: {UP_OWNER}/{UP_NAME}#{demo.pull} head is now {short(head)}")
    return head


def drop(demo: Demo, head: str, number: int) -> None:
    name = demo.patches[0]
    decision = demo.wait(
        f"the decision on {name}",
        lambda: demo.entry("decision", head=head, patch=name),
    )
    if decision["data"].get("decision") != "drop":
        data = decision["data"]
        raise DemoError(f"{name}: {data.get('status')} / {data.get('decision')}, not dropped")
    say(f"  carry re-checked {short(head)}: {name} is {decision['data'].get('status')}")
    say(f"  reason: {decision['data'].get('reason')}")
    demo.wait(f"the PR update for {short(head)}", lambda: demo.entry("published", head=head))
    body = str(demo.gh.pull(DOWN_OWNER, DOWN_NAME, number).get("body") or "")
    say(f"  PR #{number} on {DOWN_OWNER}/{DOWN_NAME} is updated; its body says:")
    for line in dropped_section(body):
        say(wrap(line))
    say(f"  dropped: {name} (upstream contains it)")
    say(f"  The PR now carries {demo.patches[1]} only.")
    say("  CI now runs again on the new proposal (one patch fewer).")
    look(demo, f"/series/{SERIES}/patches/{name}", "/events")


def wrap(line: str) -> str:
    return textwrap.fill(
        line, 96, initial_indent="    ", subsequent_indent="      ", break_on_hyphens=False
    )


def dropped_section(body: str) -> list[str]:
    """The 'Dropped' heading of a PR body and the list under it."""
    lines = body.splitlines()
    start = next((i for i, line in enumerate(lines) if "Dropped" in line), None)
    if start is None:
        return []
    items = [lines[start].lstrip("# ")]
    for line in lines[start + 1 :]:
        if line.startswith("#"):
            break
        if line.strip():
            items.append(line.strip())
    return items


def storyline(demo: Demo) -> None:
    head = move_head(demo)
    demo.pause()
    rebase(demo, head)
    demo.pause()
    number = propose(demo, head)
    demo.pause()
    run_ci(demo, head, number)
    demo.pause()
    head = merge_fix(demo)
    drop(demo, head, number)


# --------------------------------------------------------------------------- set-up


def prepare_directory(directory: Path) -> None:
    """Empties the demo directory, refusing a non-empty one that the demo did not make."""
    if directory.exists() and any(directory.iterdir()):
        if not (directory / MARKER).exists():
            raise DemoError(f"{directory} is not empty and is not a demo directory: pick --dir")
        shutil.rmtree(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / MARKER).write_text("made by python -m bot.demo; deleted by its next run\n")
    (directory / "logs").mkdir()


def shown(url: str) -> str:
    """A Redis URL fit to print: any password replaced by ***."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = f"{parts.username}:" if parts.username else ":"
    return parts._replace(netloc=f"{user}***@{parts.hostname}:{parts.port or 6379}").geturl()


def own_redis(directory: Path) -> LocalRedis:
    """The demo's own redis-server: nobody else's data is in it, and its `default` user has
    a password (the demo's runners and their checks get none of carry's)."""
    try:
        server = LocalRedis(directory / "redis", password=secrets.token_urlsafe(24)).start()
    except LocalRedisError as err:
        raise DemoError(f"{err}; or pass --redis-url to use a Redis of yours") from err
    say(
        f"Redis: the demo's own redis-server on {shown(server.url)} (in {directory / 'redis'}, "
        f"not saved; its password in {server.conf})"
    )
    return server


def given_redis(url: str, flush: bool) -> str:
    """A Redis the user named: used only if its database is empty, or emptied with --redis-flush."""
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=2)
    except ValueError as err:
        raise DemoError(f"--redis-url {shown(url)!r} is not a Redis URL: {err}") from err
    try:
        keys = client.dbsize()
    except redis.RedisError as err:
        raise DemoError(f"no Redis answers at {shown(url)}: {err}") from err
    db = client.connection_pool.connection_kwargs.get("db", 0)
    if keys and not flush:
        raise DemoError(
            f"database {db} of {shown(url)} holds {keys} keys; the demo needs an empty one: "
            "pass --redis-flush to empty it, or leave out --redis-url (and REDIS_URL) to let "
            "the demo run its own redis-server"
        )
    if keys:
        say(f"Redis: emptying database {db} of {shown(url)} ({keys} keys), as --redis-flush asks")
        client.flushdb()
    say(f"Redis: {shown(url)} (database {db}), given by --redis-url or REDIS_URL")
    return url


def start_emulator(root: Path, port: int) -> GitHubEmulator:
    try:
        return GitHubEmulator(root, port=port).start()
    except OSError as err:
        raise DemoError(
            f"the GitHub emulator cannot listen on port {port}: {err.strerror}"
        ) from err


def populate_github(gh: GitHubEmulator, upstream: Path, downstream: Path) -> tuple[int, int]:
    """Users, tokens, both repositories and the two upstream PRs; returns their numbers."""
    gh.create_repo(UP_OWNER, UP_NAME, from_path=upstream)
    gh.create_repo(DOWN_OWNER, DOWN_NAME, from_path=downstream)
    gh.add_user(BOT, type="Bot")
    gh.add_token(BOT_TOKEN, BOT)
    gh.set_permission(DOWN_OWNER, DOWN_NAME, BOT, "write")
    for login in (DEV, MAINT):
        gh.add_user(login)
        gh.set_permission(UP_OWNER, UP_NAME, login, "write")
    pull = gh.open_pull(
        UP_OWNER, UP_NAME, head="feature", base="main", title="Add percent()", user=DEV
    )
    fix_pull = open_fix_pull(gh, upstream)
    if (pull, fix_pull) != (1, FIX_PULL):  # the fix page names the fix's PR
        raise DemoError(f"the emulator numbered the upstream PRs {pull} and {fix_pull}")
    return pull, fix_pull


def open_fix_pull(gh: GitHubEmulator, upstream: Path) -> int:
    """Downstream's fix 0001, proposed upstream against the PR's branch (not merged yet)."""
    git(upstream, "checkout", "-q", "-b", "fix-divide", "feature")
    text = read(upstream, "app.py").replace(*DIVIDE_FIX)
    commit(upstream, FIX_TITLE, {"app.py": text}, author=f"{MAINT} <{MAINT}@calc.example>")
    gh.push(UP_OWNER, UP_NAME, upstream, "fix-divide", pusher=MAINT)
    git(upstream, "checkout", "-q", "feature")
    return gh.open_pull(
        UP_OWNER,
        UP_NAME,
        head="fix-divide",
        base="feature",
        title=FIX_TITLE,
        user=MAINT,
    )


def process_env(options: Options, redis_url: str, gh: GitHubEmulator) -> dict[str, str]:
    """The environment of carry's processes: the user's, minus any carry or GitHub setting
    (no real credential can reach the emulator), plus the demo's. The user's acceptance of an
    open Redis (CARRY_ALLOW_OPEN_REDIS, for a --redis-url without a password) is kept: without
    it the demo's worker refuses such a Redis, as every worker does."""
    kept = ("CARRY_ALLOW_OPEN_REDIS",)
    inherited = {
        k: v
        for k, v in os.environ.items()
        if (not k.startswith(("CARRY_", "GITHUB_")) or k in kept) and k != "REDIS_URL"
    }
    root = options.directory
    # The service signs every job it hands to the runners, which verify it (issue 33): the
    # key pair is made before any of them starts, the runners find its public half beside it.
    ensure_key_pair(root / "cache" / KEY_DIR / PRIVATE_NAME)
    return {
        **inherited,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": os.pathsep.join(
            [str(PACKAGE_PARENT), *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
        "REDIS_URL": redis_url,
        "CARRY_CONFIG": str(root / "carry.yaml"),
        "CARRY_CACHE_DIR": str(root / "cache"),
        "CARRY_WEBHOOK_SECRET": SECRET,
        "GITHUB_TOKEN": BOT_TOKEN,
        "GITHUB_BASE_URL": gh.base_url,
        "CARRY_DOWNSTREAM_DIR": "",
        "CARRY_BOT_LOGIN": BOT,
        "CARRY_CI_DEBOUNCE_S": "1",
        "CARRY_BUSY_RETRY_S": "0.5",
        "CARRY_HEARTBEAT_S": "5",
        "CARRY_GITHUB_WRITE_PAUSE_S": "0",  # its own emulator: no rate to respect
    }


def introduce(demo: Demo, redis_url: str, options: Options) -> None:
    root = options.directory
    say("carry demo: the whole loop on this machine, with no network and no credentials.")
    say()
    say(f"  GitHub emulator  {demo.gh.base_url}  (repositories under {root / 'github'})")
    say(f"  upstream         {UP_OWNER}/{UP_NAME}: PR #{demo.pull} 'Add percent()' by {DEV},")
    say(f"                   head {short(demo.pr_head())}; the series is carried on that head")
    say(f"  downstream       {DOWN_OWNER}/{DOWN_NAME}: series {SERIES}, patches:")
    for name in demo.patches:
        say(f"                     {name}")
    whose = "the demo's own" if options.redis_url is None else "given by --redis-url/REDIS_URL"
    say(f"  Redis            {shown(redis_url)}  ({whose})")
    say("  carry            web, worker, beat; runners gaudi and gb10 (shell-command checks)")
    say(f"  config, logs     {root / 'carry.yaml'}, {root / 'logs'}/")
    say()
    say(f"Dashboard: {demo.dashboard}/   (open it now: it updates live)")


@contextmanager
def running(options: Options) -> Iterator[Demo]:
    """Builds everything and starts every process; stops them all on the way out."""
    root = options.directory
    prepare_directory(root)
    procs = Processes(root / "logs", {}, root / "pids", options.log_level)
    gh: GitHubEmulator | None = None
    try:
        if options.redis_url is None:
            server = own_redis(root)
            procs.adopt(server.proc)
            redis_url = server.url
        else:
            redis_url = given_redis(options.redis_url, options.redis_flush)
        gh = start_emulator(root / "github", options.github_port)
        yield setup(options, gh, procs, redis_url)
    finally:
        procs.stop_all()
        if gh is not None:
            gh.stop()


def setup(options: Options, gh: GitHubEmulator, procs: Processes, redis_url: str) -> Demo:
    root = options.directory
    upstream = root / "work" / "upstream"
    build_upstream(upstream)
    patches = build_downstream(root / "work" / "downstream", upstream)
    pull, fix_pull = populate_github(gh, upstream, root / "work" / "downstream")
    config = carry_config(root, gh.git_url(UP_OWNER, UP_NAME), pull, fix_pull)
    write_config(root / "carry.yaml", config)
    procs.env = process_env(options, redis_url, gh)
    dashboard = start_carry(procs, options.port, options.step_timeout_s)
    gh.add_webhook(f"{dashboard}/webhooks/github", secret=SECRET)
    client = redis.Redis.from_url(redis_url)
    demo = Demo(options, gh, procs, client, dashboard, upstream, pull, fix_pull, patches)
    introduce(demo, redis_url, options)
    return demo


def keep_running(demo: Demo) -> None:
    say()
    say(f"Everything keeps running. Dashboard: {demo.dashboard}/")
    say(f"GitHub emulator: {demo.gh.base_url}   Logs: {demo.procs.logs}/")
    say("Press Ctrl-C to stop every process the demo started.")
    while True:
        demo.procs.check_alive()
        time.sleep(1)


def parse_args(
    argv: Sequence[str] | None, prog: str = "python -m bot.demo", log_level: str = "WARNING"
) -> Options:
    """The demo's options; `log_level` is the default of --log-level (carry's own option when
    `carry --log-level LEVEL demo` runs it)."""
    from bot.cli import LOG_LEVELS, log_level_arg

    parser = argparse.ArgumentParser(
        prog=prog, description=textwrap.dedent(__doc__ or "").split("\n")[0]
    )
    parser.add_argument(
        "--port", type=int, help=f"dashboard port (default: $PORT, else {DEFAULT_PORT})"
    )
    parser.add_argument(
        "--dir", type=Path, help="where everything is built (default: ./.carry-demo)"
    )
    parser.add_argument(
        "--no-wait", action="store_true", help="stop everything after the storyline"
    )
    parser.add_argument(
        "--pause", type=float, help="seconds between steps (default 3; 0 with --no-wait)"
    )
    parser.add_argument("--timeout", type=float, default=90, help="seconds allowed per step")
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("REDIS_URL") or None,
        help="a Redis of yours, its database empty (default: $REDIS_URL, else the demo's own "
        "private redis-server)",
    )
    parser.add_argument(
        "--redis-flush",
        action="store_true",
        help="empty the --redis-url database if it holds keys (otherwise the demo refuses)",
    )
    parser.add_argument("--github-port", type=int, default=0, help="emulator port (0: any)")
    parser.add_argument(
        "--log-level",
        type=log_level_arg,
        default=log_level,
        metavar="LEVEL",
        help="level of the log lines of carry's processes, in DIR/logs: "
        f"{', '.join(LOG_LEVELS)} (default {log_level.lower()})",
    )
    args = parser.parse_args(argv)
    port, port_given = dashboard_port(parser, args.port)
    pause = args.pause if args.pause is not None else (0.0 if args.no_wait else 3.0)
    return Options(
        (args.dir or Path.cwd() / ".carry-demo").resolve(),
        port,
        port_given,
        not args.no_wait,
        pause,
        args.timeout,
        args.redis_url,
        args.redis_flush,
        args.github_port,
        args.log_level,
    )


def dashboard_port(parser: argparse.ArgumentParser, flag: int | None) -> tuple[int, bool]:
    """--port, else $PORT, else the default; and whether the user chose it."""
    if flag is not None:
        return flag, True
    env = os.environ.get("PORT")
    if not env:
        return DEFAULT_PORT, False
    if not env.isdigit():
        parser.error(f"PORT={env!r} is not a port number")
    return int(env), True


def usable_port(options: Options) -> int | None:
    """The dashboard's port: the chosen one if free (None if taken), else a free one."""
    if port_is_free(options.port):
        say(f"Dashboard: port {options.port}")
        return options.port
    if options.port_given:
        return None
    port = free_port()
    say(f"Dashboard: port {options.port} is in use, so the dashboard takes port {port}")
    return port


def _stop_on_sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(
    argv: Sequence[str] | None = None, prog: str = "python -m bot.demo", log_level: str = "WARNING"
) -> int:
    """The demo; `prog` names it in usage and errors (`carry demo` when carry runs it), and
    `log_level` is carry's own --log-level given before `demo`."""
    options = parse_args(argv, prog, log_level)
    port = usable_port(options)
    if port is None:
        print(f"carry demo: port {options.port} is in use: pass another --port", file=sys.stderr)
        return 2
    options = replace(options, port=port)
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started ignoring it
    try:
        with running(options) as demo:
            storyline(demo)
            say()
            say("Storyline complete: head moved, rebased, PR opened, CI passed, patch dropped.")
            if options.wait:
                keep_running(demo)
            say("Stopping every process the demo started.")
    except DemoError as err:
        print(f"carry demo: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        say()
        say("Stopped every process the demo started.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
