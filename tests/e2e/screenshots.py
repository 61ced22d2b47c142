"""The dashboard screenshots in docs/dashboard.md, taken of state that carry's own code builds.

Two upstream repositories on disk and a downstream checkout with five series and their fix
pages; carry's rebase (the engine on real git), its read-only publish and its poller write the
store, a private Redis. Only the hardware runs are written as carry's CI code stores them (the
run records with bot/store/ci_runs.py's functions, the CI rows as workers/ci/rows.py does),
since a run needs a runner host. The whole app serves that store and headless Chromium takes
the shots.

    python -m tests.e2e.screenshots docs/screenshots      (what `make screenshots` runs)

tests/e2e/test_dashboard_browser.py runs the same code into a temporary directory.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import struct
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis
from playwright.sync_api import Browser, FloatRect, Page, ViewportSize, sync_playwright
from pydantic import SecretStr

from bot.config import CarryConfig, Settings
from bot.core import bisect, verified
from bot.core.ci_plan import classify_outcome
from bot.core.render import pr_title
from bot.core.state import CiState, SeriesState
from bot.store import runners
from bot.store import series as store
from bot.store.ci_runs import run_key, transition, write_run
from bot.store.metrics import record_rate_limit
from bot.web.app import create_app
from harness.gitrepo import RepoBuilder
from harness.redis_server import PrivateRedis
from tests.support.asgi import serve
from workers import poller, publish
from workers.rebase import rebase_series
from workers.runtime import Runtime

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
WIDTH = 1280
VIEWPORT: ViewportSize = {"width": WIDTH, "height": 800}
WAIT_MS = 10_000
OPEN_TOGGLES = "document.querySelectorAll('details').forEach((d) => { d.open = true; })"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# The visible text of an element outside code blocks (diffs, git's output, code in prose),
# which may show a value as the program writes it.
PROSE_JS = """(root) => {
  const code = [...root.querySelectorAll("pre, code")];
  const was = code.map((e) => e.style.display);
  code.forEach((e) => { e.style.display = "none"; });
  const text = root.innerText;
  code.forEach((e, i) => { e.style.display = was[i]; });
  return text;
}"""

# --------------------------------------------------------------------------- the upstreams

SCHEDULER_PY = "engine/scheduler.py"
SCHEDULER = '''"""Decode steps: pick the running requests, pad their input ids, scatter them."""

BLOCK = 16


def padded_width(lengths, block=BLOCK):
    widest = max(lengths, default=0)
    return -(-widest // block) * block


def pad_rows(rows, width, fill=0):
    return [row + [fill] * (width - len(row)) for row in rows]


def pick_running(requests, budget):
    picked = []
    for request in requests:
        if request.tokens > budget:
            break
        picked.append(request)
        budget -= request.tokens
    return picked


def scatter_ids(device_ids, host_ids, rows):
    for slot, row in enumerate(rows):
        device_ids[row] = host_ids[slot]
    return device_ids


def decode_step(runner, requests, budget):
    picked = pick_running(requests, budget)
    widths = [len(r.ids) for r in picked]
    host_ids = pad_rows([r.ids for r in picked], padded_width(widths))
    rows = [r.row for r in picked]
    runner.device_ids = scatter_ids(runner.device_ids, host_ids, rows)
    return runner.forward(runner.device_ids)


def release(runner, finished):
    for request in finished:
        runner.free(request.row)
    return len(finished)
'''
SCATTER = "    runner.device_ids = scatter_ids(runner.device_ids, host_ids, rows)\n"
SEEDED = (
    "    seeded = runner.seed(host_ids)  # rows left out of the last step read no stale id\n"
    "    runner.device_ids = scatter_ids(seeded, host_ids, rows)\n"
)
ON_COPY_STREAM = "    runner.device_ids = runner.copy_stream.scatter(host_ids, rows)\n"
STOP, SKIP = "            break\n", "            continue\n"
FREE, FREE_ONCE = (
    "        runner.free(request.row)\n",
    "        runner.free(request.row, once=True)\n",
)
PAD = "    host_ids = pad_rows([r.ids for r in picked], padded_width(widths))\n"
PAD_ID = "    host_ids = pad_rows([r.ids for r in picked], padded_width(widths), runner.pad_id)\n"

POOL_PY = "runtime/pool.py"
POOL = '''"""Worker pools of the serving runtime."""


def start_pool(size, make):
    return [make(slot) for slot in range(size)]


def stop_pool(pool):
    for worker in pool:
        worker.stop()
    return []
'''


def edit(text: str, *changes: tuple[str, str]) -> str:
    for old, new in changes:
        assert text.count(old) == 1, f"{old!r} is not once in the file"
        text = text.replace(old, new)
    return text


# --------------------------------------------------------------------------- the series


@dataclass(frozen=True)
class Fix:
    """One carried fix: its patches (subject, files after the change) and its fix page."""

    name: str
    summary: str
    patches: tuple[tuple[str, dict[str, str]], ...]
    upstream_pr: str


@dataclass(frozen=True)
class SeriesPlan:
    id: str
    upstream: str
    branch: str
    fix: Fix


ENGINE_REPO, RUNTIME_REPO = "example-org/engine", "example-org/runtime"
CONFLICT, PARTIAL, PROPOSAL = "engine-main", "engine-release-1.4", "engine-release-1.3"
LOST_RUNNER, UNREACHABLE = "engine-release-1.2", "runtime-main"
SERIES_IDS = (CONFLICT, PARTIAL, PROPOSAL, LOST_RUNNER, UNREACHABLE)
CI_KEY = "gaudi/greedy-match"

SEED_FIX = Fix(
    "seed-decode-rows",
    "Seed every decode row on the device before the scatter, so a request left out of the "
    "last step does not decode from a stale id.",
    (
        (
            "Seed decode rows",
            {SCHEDULER_PY: edit(SCHEDULER, (SCATTER, SEEDED))},
        ),
    ),
    "example-org/engine#377",
)
BUDGET_FIX = Fix(
    "budget-and-free",
    "Skip a request over the token budget instead of stopping at it, and free each finished "
    "row once.",
    (
        (
            "Skip and free once",
            {SCHEDULER_PY: edit(SCHEDULER, (STOP, SKIP), (FREE, FREE_ONCE))},
        ),
    ),
    "example-org/engine#405",
)
PAD_FIX = Fix(
    "pad-id",
    "Pad decode rows with the runner's pad id, not with token 0.",
    (("Pad with the pad id", {SCHEDULER_PY: edit(SCHEDULER, (PAD, PAD_ID))}),),
    "example-org/engine#390",
)
PAD_AND_FREE_FIX = Fix(
    "pad-and-free",
    "Pad decode rows with the runner's pad id, and free each finished row once.",
    (
        (
            "Pad with the pad id",
            {SCHEDULER_PY: edit(SCHEDULER, (PAD, PAD_ID))},
        ),
        (
            "Free rows once",
            {SCHEDULER_PY: edit(SCHEDULER, (PAD, PAD_ID), (FREE, FREE_ONCE))},
        ),
    ),
    "example-org/engine#398",
)
STOP_FIX = Fix(
    "stop-in-reverse",
    "Stop the pool's workers in the reverse of their start order.",
    (
        (
            "Stop in reverse",
            {
                POOL_PY: edit(
                    POOL, ("    for worker in pool:\n", "    for worker in reversed(pool):\n")
                )
            },
        ),
    ),
    "example-org/runtime#61",
)
PLANS = (
    SeriesPlan(CONFLICT, "engine", "main", SEED_FIX),
    SeriesPlan(PARTIAL, "engine", "release-1.4", BUDGET_FIX),
    SeriesPlan(PROPOSAL, "engine", "release-1.3", PAD_AND_FREE_FIX),
    SeriesPlan(LOST_RUNNER, "engine", "release-1.2", PAD_FIX),
    SeriesPlan(UNREACHABLE, "runtime", "main", STOP_FIX),
)

# What upstream did to each branch after the series were written: the commits carry checks on.
UPSTREAM_MOVES: dict[tuple[str, str], tuple[str, dict[str, str]]] = {
    ("engine", "main"): (
        "Scatter decode ids on the copy stream (#412)",
        {SCHEDULER_PY: edit(SCHEDULER, (SCATTER, ON_COPY_STREAM))},
    ),
    ("engine", "release-1.4"): (
        "Skip requests over the budget (#405, backport)",
        {SCHEDULER_PY: edit(SCHEDULER, (STOP, SKIP))},
    ),
    ("engine", "release-1.3"): (
        "Free each finished row once (#398, backport)",
        {SCHEDULER_PY: edit(SCHEDULER, (FREE, FREE_ONCE))},
    ),
    ("engine", "release-1.2"): (
        "Explain the block size",
        {SCHEDULER_PY: edit(SCHEDULER, ("BLOCK = 16\n", "BLOCK = 16  # tokens per KV block\n"))},
    ),
    ("runtime", "main"): (
        "Name the pool's worker slots",
        {POOL_PY: edit(POOL, ("make(slot)", "make(slot, name=f'worker-{slot}')"))},
    ),
}

PAGE = """# {name}

{summary}

| Field | Value |
|---|---|
| Affects | serving with the decode scheduler |
| Releases | {releases} |
| Patches | {patches} |
| Upstream | {upstream} (open) |
| Test | the decode-step unit tests |

## Problem

{summary}

## Symptom

Requests decode the wrong token now and then, or a pool stops in the wrong order.

## Who is affected

Every deployment on this base.

## The fix

The patches below, until upstream merges {upstream}.

## Verify

Run the decode-step unit tests on the refreshed branch.
"""


@dataclass
class Upstreams:
    repos: dict[str, RepoBuilder]
    base: dict[str, str]  # upstream name -> the commit every branch and series starts from


def make_upstreams(root: Path) -> Upstreams:
    repos = {"engine": RepoBuilder(root / "engine"), "runtime": RepoBuilder(root / "runtime")}
    repos["engine"].commit("Decode scheduling", {SCHEDULER_PY: SCHEDULER})
    repos["runtime"].commit("Worker pools", {POOL_PY: POOL})
    base = {name: repo.head("main") for name, repo in repos.items()}
    for plan in PLANS:
        if plan.branch != "main":
            repos[plan.upstream].git("branch", plan.branch, base[plan.upstream])
    return Upstreams(repos, base)


def write_series(upstreams: Upstreams, plan: SeriesPlan, patches_root: Path) -> None:
    """The series directory as a maintainer commits it: patches from format-patch, the series
    file and the fix page."""
    repo, base = upstreams.repos[plan.upstream], upstreams.base[plan.upstream]
    repo.checkout(base, new_branch=f"fix-{plan.id}")
    for subject, files in plan.fix.patches:
        repo.commit(subject, files)
    directory = patches_root / plan.id
    names = [p.name for p in repo.format_patch(f"{base}..HEAD", directory)]
    repo.checkout("main")
    (directory / "series").write_text(f"# base: {base}\n" + "".join(f"{n}\n" for n in names))
    touched = {path for _, files in plan.fix.patches for path in files}
    page = PAGE.format(
        name=plan.fix.name,
        summary=plan.fix.summary,
        releases=plan.branch,
        patches="; ".join(f"{n}: {', '.join(sorted(touched))}" for n in names),
        upstream=plan.fix.upstream_pr,
    )
    (directory / f"{plan.fix.name}.md").write_text(page)


def move_upstreams(upstreams: Upstreams) -> dict[str, str]:
    """Upstream's new commits; returns each series' new head."""
    heads = {}
    for (name, branch), (message, files) in UPSTREAM_MOVES.items():
        repo = upstreams.repos[name]
        repo.checkout(branch)
        heads[(name, branch)] = repo.commit(message, files)
        repo.checkout("main")
    return {plan.id: heads[(plan.upstream, plan.branch)] for plan in PLANS}


def carry_config(upstreams: Upstreams) -> CarryConfig:
    return CarryConfig.model_validate(
        {
            "downstream": {"repo": "example-org/carry-patches", "patches_dir": "patches"},
            "upstreams": {
                "engine": {"url": str(upstreams.repos["engine"].path), "repo": ENGINE_REPO},
                "runtime": {"url": str(upstreams.repos["runtime"].path), "repo": RUNTIME_REPO},
            },
            "series": [
                {
                    "id": plan.id,
                    "upstream": plan.upstream,
                    "base": {"branch": plan.branch},
                    "patches": plan.id,
                    "runners": [],
                    "checks": [],
                }
                for plan in PLANS
            ],
            "runners": {"gaudi": {"queue": "hw.gaudi", "workdir": "/var/lib/carry/runner"}},
        }
    )


def read_only_settings(downstream: Path, cache: Path) -> Settings:
    """No GitHub credentials whatever the environment holds: read-only mode, as the demo."""
    return Settings(
        webhook_secret=SecretStr("screenshots-webhook-secret"),
        github_token=None,
        github_app_id=None,
        downstream_dir=downstream,
        cache_dir=cache,
        max_body_bytes=None,
        git_timeout_s=30,
    )


# --------------------------------------------------------------------------- CI rows


def store_ci_row(client: redis.Redis, series_id: str, row: CiState) -> None:
    def put(state: SeriesState) -> bool:
        state.ci[row.runner] = row
        return True

    store.update_series(client, series_id, put)


def store_run_record(
    client: redis.Redis,
    run_id: str,
    series_id: str,
    head: str,
    runner: str,
    result: str,
    timing: tuple[timedelta, timedelta],
    **final: str,
) -> None:
    """The run's record as carry's CI code leaves it: written when the run is requested,
    taken by a runner, ended with its result; then its request and last change moved back by
    `timing` (how long ago it was requested, how long it took), so that /runs shows a
    duration."""
    values = {"series": series_id, "kind": "gaudi", "tree_key": "t" * 64, "head_sha": head}
    write_run(client, run_id, series_id, "gaudi", {**values, "state": "queued", "dispatched": "1"})
    assert transition(client, run_id, "running", ("queued",), runner=runner)
    assert transition(client, run_id, result, ("running",), **final)
    ago, took = timing
    requested = datetime.now(UTC) - ago
    client.hset(
        run_key(run_id),
        mapping={
            "created_at": requested.isoformat(timespec="seconds"),
            "updated_at": (requested + took).isoformat(timespec="seconds"),
        },
    )


def ci_passed(client: redis.Redis, series_id: str, head: str) -> None:
    run_id = "run-gaudi-0041"
    store.append_history(client, series_id, "ci-started", run_id=run_id, runner="gaudi-1")
    runners.append_runlog(client, run_id, "stdout", "greedy-match: 64 prompts, outputs identical")
    row = CiState(CI_KEY, "success", run_id, head_sha=head, detail="greedy outputs match")
    took = timedelta(minutes=7, seconds=42)
    store_run_record(
        client,
        run_id,
        series_id,
        head,
        "gaudi-1",
        "success",
        (timedelta(minutes=26), took),
        detail=row.detail,
    )
    store_ci_row(client, series_id, row)
    store.append_history(client, series_id, "ci-success", run_id=run_id, reason=row.detail)


def ci_runner_lost(client: redis.Redis, series_id: str, head: str) -> None:
    """The run's runner died twice mid-job: carry retried once, then gave up (infra-error)."""
    run_id = "run-gaudi-0042"
    lost = classify_outcome("job", None, lost=True, name="gaudi")
    for attempt in (1, 2):
        store.append_history(
            client, series_id, "ci-started", run_id=run_id, runner="gaudi-2", attempt=attempt
        )
        runners.append_runlog(client, run_id, "carry", f"[carry] attempt {attempt} on gaudi-2")
        store.append_history(
            client,
            series_id,
            "ci-runner-lost",
            run_id=run_id,
            runner="gaudi-2",
            attempt=attempt,
            reason=lost.reason,
        )
    detail = f"{lost.reason}; gave up after 2 attempts"
    row = CiState(CI_KEY, lost.verdict, run_id, head_sha=head, detail=detail, attempt=2)
    timing = (timedelta(hours=1, minutes=12), timedelta(minutes=48, seconds=5))
    store_run_record(
        client,
        run_id,
        series_id,
        head,
        "gaudi-2",
        lost.verdict,
        timing,
        detail=detail,
        attempt="2",
    )
    store_ci_row(client, series_id, row)
    store.append_history(client, series_id, f"ci-{lost.verdict}", run_id=run_id, reason=detail)


def sha_of(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


CULPRIT_SUBJECT = "Reorder the decode scatter (#431)"


def verified_history(client: redis.Redis, series_id: str) -> None:
    """Five heads tested as carry's CI rows leave them (bot.core.verified): two green, then red
    from the third on; the range between the last good head and the first red one bisected to
    the commit inside it, and the check on plain upstream beside it (bot.core.bisect)."""
    heads = [sha_of(f"{series_id} head {n}") for n in range(1, 6)]
    verdicts = ["success", "success", "failure", "failure", "failure"]
    moments = [datetime.now(UTC) - timedelta(hours=h) for h in (30, 24, 18, 12, 6)]
    inside = [
        (sha_of(f"inside {n}"), s) for n, s in enumerate(("Log the batch size", CULPRIT_SUBJECT))
    ]
    commits = [*inside, (heads[2], "Tune the scheduler defaults (#433)")]

    def test_heads(state: SeriesState) -> bool:
        for head, verdict, moment in zip(heads, verdicts, moments, strict=True):
            row = CiState(
                CI_KEY, verdict, f"run-{head[:6]}", tree_key=f"tree-{head}", head_sha=head
            )
            state.ci = {CI_KEY: row}
            verified.note_rows(state, row.tree_key, moment.isoformat(timespec="seconds"))
        b = bisect.start(CI_KEY, heads[1], commits, moments[2].isoformat(timespec="seconds"))
        for sha, probe in ((commits[0][0], bisect.Probe.PASS), (commits[1][0], bisect.Probe.FAIL)):
            assert bisect.next_probe(b, "now") == sha and bisect.record(b, sha, probe)
        assert bisect.next_probe(b, "now") is None
        for _ in range(2):
            sha = bisect.next_ab(b)
            assert sha is not None and bisect.record_ab(b, sha, bisect.Probe.FAIL, "now")
        state.bisect = b
        return True

    store.update_series(client, series_id, test_heads)


def carry_in_trouble(client: redis.Redis) -> None:
    """carry's own health: a retest waits for the gaudi runners, none of which is online any
    more, and a worker saw GitHub's rate limit nearly spent (both as carry stores them)."""
    client.lpush("hw.gaudi", json.dumps({"task": "carry.ci.run_job", "series": LOST_RUNNER}))
    record_rate_limit(client, 212, 5000)


# --------------------------------------------------------------------------- the state


@dataclass(frozen=True)
class Shot:
    """One PNG: a page, the texts it must show before it is taken, and what of it is shot:
    the whole page, or a clip of the page's width around `element` (from the page's top when
    `from_top`), with its toggles open when `open_toggles`."""

    name: str
    path: str
    shows: tuple[str, ...]
    element: str | None = None
    from_top: bool = False
    open_toggles: bool = False  # every <details> open ("fields", the proposal's text) first


@dataclass(frozen=True)
class DocsState:
    config: CarryConfig
    settings: Settings
    shots: tuple[Shot, ...]


def patch_url(series_id: str, patch: str) -> str:
    return f"/series/{series_id}/patches/{patch}"


def build_state(client: redis.Redis, workdir: Path) -> DocsState:
    """Five series in `client`'s store, checked by carry on upstream's new heads."""
    upstreams = make_upstreams(workdir / "upstreams")
    downstream = workdir / "downstream"
    for plan in PLANS:
        write_series(upstreams, plan, downstream / "patches")
    config = carry_config(upstreams)
    settings = read_only_settings(downstream, workdir / "cache")
    rt = Runtime(config, settings, client, downstream.resolve())
    for series_id, head in move_upstreams(upstreams).items():
        branch = config.series_by_id(series_id).base.branch
        finished = rebase_series(rt, series_id, head, f"refs/heads/{branch}")
        assert finished is not None, store.history(client, series_id)
        publish.publish(rt, series_id, head, finished.digest, finished.changed)
    ci_passed(client, PROPOSAL, checked_head(client, PROPOSAL))
    verified_history(client, LOST_RUNNER)
    ci_runner_lost(client, LOST_RUNNER, checked_head(client, LOST_RUNNER))
    carry_in_trouble(client)
    gone = upstreams.repos["runtime"].path
    shutil.move(gone, gone.with_name("runtime-moved-away"))
    assert poller.head_events(rt) == []  # the engine's heads are known; runtime's is unreachable
    return DocsState(config, settings, shots(client))


def checked_head(client: redis.Redis, series_id: str) -> str:
    state = store.load_series(client, series_id)
    assert state is not None and state.checked_head, series_id
    return state.checked_head


def patch_names(client: redis.Redis, series_id: str) -> list[str]:
    state = store.load_series(client, series_id)
    assert state is not None
    return [p.name for p in state.patches]


def shots(client: redis.Redis) -> tuple[Shot, ...]:
    """What each PNG shows, from what the build left in the store."""
    (conflict,), (partial,) = patch_names(client, CONFLICT), patch_names(client, PARTIAL)
    proposal = store.load_series(client, PROPOSAL)
    assert proposal is not None
    worksheet = ".worksheet"
    return (
        Shot(
            "patch-conflict",
            patch_url(CONFLICT, conflict),
            ("1 of 1 hunk needs work", "-" + SCATTER.rstrip("\n"), "+" + SEEDED.split("\n")[0]),
            worksheet,
            from_top=True,
        ),
        Shot(
            "patch-partial",
            patch_url(PARTIAL, partial),
            ("1 of 2 hunks needs work; the head already has the other 1", "+" + FREE_ONCE.rstrip()),
            worksheet,
            from_top=True,
        ),
        # The series table; "health" shows the panel above it, the latest events below add
        # little but bytes.
        Shot("overview", "/", SERIES_IDS, 'section[aria-labelledby="matrix-title"]'),
        # The conflict's series page with every "fields" toggle open: names and values,
        # git's output as its own lines.
        Shot(
            "series-fields",
            f"/series/{CONFLICT}",
            (conflict, "patch does not apply", "Timeline of heads and decisions"),
            'section[aria-labelledby="timeline-title"]',
            open_toggles=True,
        ),
        Shot(
            "runs",
            "/runs",
            (
                "run-gaudi-0041",
                "on gaudi-1",
                "7 min 42 s",
                "run-gaudi-0042",
                "(attempt 2)",
                "48 min 5 s",
                PROPOSAL,
                LOST_RUNNER,
            ),
            "table.runs",
            from_top=True,
        ),
        Shot(
            "proposed-pr",
            f"/series/{PROPOSAL}",
            ("Read-only mode", pr_title(proposal), *(p.name for p in proposal.patches)),
            'section[aria-labelledby="pr-title"]',
        ),
        # Every head verified: the heads' verdicts, the last good one, the red streak and the
        # bisection of the red head with its A/B reading.
        Shot(
            "verified-heads",
            f"/series/{LOST_RUNNER}",
            ("Bisection of the red head", CULPRIT_SUBJECT, "the fix no longer works after"),
            'section[aria-labelledby="verified-title"]',
        ),
        Shot(
            "health",
            "/",
            (
                f"CI {CI_KEY}: infra-error",
                "upstream unreachable: ",
                UNREACHABLE,
                LOST_RUNNER,
                "no gaudi runner is online: 1 job(s) wait in hw.gaudi",
                "GitHub rate limit nearly spent: 212 of 5000 requests left",
            ),
            "#needs-attention",
        ),
    )


# --------------------------------------------------------------------------- the shots


@contextlib.contextmanager
def served(client: redis.Redis, docs: DocsState) -> Iterator[str]:
    """The whole carry app on the store, without a dashboard token."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("CARRY_DASHBOARD_TOKEN", raising=False)
        app = create_app(docs.config, docs.settings, client)
    with serve(app) as url:
        yield url


@contextlib.contextmanager
def chromium() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        raise SystemExit(f"{CHROMIUM} is missing: `sudo make browser` installs Debian's chromium")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield browser
        finally:
            browser.close()


@dataclass(frozen=True)
class Taken:
    shot: Shot
    file: Path
    text: str  # the visible text of what was shot
    prose: str  # that text without its code blocks


def clip_of(page: Page, shot: Shot) -> FloatRect | None:
    if shot.element is None:
        return None
    box = page.locator(shot.element).bounding_box()
    assert box is not None, f"{shot.name}: {shot.element} is not rendered"
    top = 0.0 if shot.from_top else max(0.0, box["y"] - 8)
    return {"x": 0, "y": top, "width": WIDTH, "height": box["y"] + box["height"] + 8 - top}


def take(page: Page, site: str, shot: Shot, out: Path) -> Taken:
    page.goto(f"{site}{shot.path}")
    page.wait_for_selector('html[data-live="on"]')  # the status line reads "Live updates on"
    if shot.open_toggles:
        page.evaluate(OPEN_TOGGLES)
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"{shot.name} scrolls sideways by {overflow}px at {WIDTH} px"
    shown = page.locator(shot.element or "body")
    text = shown.inner_text()
    missing = [want for want in shot.shows if want not in text]
    assert not missing, f"{shot.name} lacks {missing}"
    file = out / f"{shot.name}.png"
    clip = clip_of(page, shot)
    if clip is None:
        page.screenshot(path=str(file), full_page=True)
    else:
        page.screenshot(path=str(file), full_page=True, clip=clip)
    return Taken(shot, file, text, shown.evaluate(PROSE_JS))


def take_all(browser: Browser, site: str, docs: DocsState, out: Path) -> list[Taken]:
    out.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(viewport=VIEWPORT)
    try:
        page = context.new_page()
        page.set_default_timeout(WAIT_MS)
        return [take(page, site, shot, out) for shot in docs.shots]
    finally:
        context.close()


def png_size(file: Path) -> tuple[int, int]:
    """Width and height from a PNG's header (its IHDR chunk)."""
    head = file.read_bytes()[:24]
    assert head[:8] == PNG_SIGNATURE and head[12:16] == b"IHDR", f"{file} is not a PNG"
    width, height = struct.unpack(">II", head[16:24])
    return width, height


def screenshots(client: redis.Redis, workdir: Path, out: Path, browser: Browser) -> list[Taken]:
    """Build the state in `client`'s (empty) store, serve it and take every shot into `out`."""
    docs = build_state(client, workdir)
    with served(client, docs) as site:
        return take_all(browser, site, docs, out)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.e2e.screenshots OUT_DIR", file=sys.stderr)
        return 2
    out = Path(argv[0])
    with tempfile.TemporaryDirectory(prefix="carry-screenshots-") as scratch:
        workdir = Path(scratch)
        server = PrivateRedis(workdir / "redis", persist=False).start()
        try:
            with chromium() as browser:
                taken = screenshots(redis.Redis.from_url(server.url), workdir, out, browser)
        finally:
            server.stop()
    for shot in taken:
        width, height = png_size(shot.file)
        size_kb = shot.file.stat().st_size / 1024
        print(f"{shot.file}: {width}x{height}, {size_kb:.0f} KB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
