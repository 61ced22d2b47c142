"""The dashboard's overview at S series of P patches (issue 37: p95 under 200 ms at 200x30).

Fills a private redis-server as the service would: one upstream with a base and a head that
moves some patched files and rewrites others, S series directories of P patches (each with a
fix page naming an upstream PR), and each series' state from the real engine's check of its
patches on the head merged by the real transitions (bot.core.transitions.apply_check), with a
PR and a CI row, stored with bot.store.series.save_series. Every seventh patch conflicts, so
every series needs attention: a worst case for the page. Then it starts `carry web` twice on
that store and those directories: once from this working tree ("now") and once from a baseline
revision of the repository (`--baseline`, default main: the code as it was before this work),
extracted with `git archive`. It asks each for the overview once (its first, nothing kept),
then both in turn for GET / and GET /series/<first> over real HTTP, `--repeat` times after a
warm-up, with `--churn` series saved again before each round (as workers change them), and
prints p50/p95 and the ratio of each to the baseline's.

With `--exported` the webs read the series as compose's web does: from carry's own copy of the
downstream repository, exported from GitHub into the cache directory it shares with the
workers (here, the world's patches copied there), not from a checkout named by
CARRY_DOWNSTREAM_DIR.

Usage: python bench/overview.py [--series 200] [--patches 30] [--repeat 30] [--churn 5]
       [--baseline main | --no-baseline] [--exported]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.scale import pct
from bot.core import transitions as tr
from bot.core.policy import series_digest
from bot.core.state import CiState, PrInfo, SeriesState
from bot.git.engine import Engine, PatchInput
from bot.git.mirror import Mirror
from bot.local_redis import free_port
from bot.store.series import load_series, save_series
from harness.carry_env import REPO_ROOT, SECRET, wait_for
from harness.redis_server import PrivateRedis
from harness.scale_world import Size, World, github, upstream_file

UP_REPO = "upstream-org/up0"
DOWN_REPO = "downstream-org/carry"
KIND = "gaudi"
CHECKED_AT = "2026-09-01T00:00:00Z"


# =========================================================================== the store


def moved(k: int) -> str:
    """Upstream's file k on the head, for patch k's fate there: every fifth file gains lines
    above the patched one (the patch applies, moved), every seventh has the patched line
    rewritten (a conflict); the others are as they were (the patch applies)."""
    body = upstream_file(k)
    if k % 7 == 3:
        return body.replace("compute(10)", "compute(10, mode=1)")
    if k % 5 == 1:
        return "# moved\n" * 3 + body
    return body


def build(root: Path, size: Size) -> tuple[World, str]:
    """The series directories, the upstream (one, every series on it) and its new head."""
    world = World(root, size, per_upstream=size.series)
    world.build()
    upstream = world.upstreams[0]
    files = {("mod.py" if k == 0 else f"f{k}.py"): moved(k) for k in range(size.patches)}
    head = upstream.commit("move and rewrite some files", files)
    return world, head


def fill(client: redis.Redis, world: World, head: str, cache: Path) -> None:
    """Each series as a worker leaves it after checking the head: the engine's findings merged
    by the transitions, then carry's PR and a CI row."""
    engine = Engine(Mirror(str(world.upstreams[0].path), cache))
    for n, sid in enumerate(world.series):
        directory = world.downstream / "patches" / sid
        order = (directory / "series").read_text().split()
        patches = [PatchInput(name, (directory / name).read_bytes()) for name in order]
        state = SeriesState(id=sid, upstream_repo=UP_REPO, base="branch main")
        state.upstream_web_host = "https://github.com"
        tr.start_check(state, head, "refs/heads/main", "upstream-dev", CHECKED_AT)
        report = engine.check(head, patches)
        tr.apply_check(
            state,
            tr.CheckResult(
                head=head,
                digest=series_digest((p.name, p.data) for p in patches),
                checked_at=CHECKED_AT,
                patches=tuple(tr.checked_patch(r) for r in report.patches),
            ),
        )
        state.pr = PrInfo(
            number=100 + n,
            url=f"https://github.com/{DOWN_REPO}/pull/{100 + n}",
            branch=f"carry/{sid}",
            head_sha=head,
        )
        state.ci[KIND] = CiState(
            runner=KIND,
            state="success" if n % 3 else "failure",
            run_id=f"run-{sid}",
            head_sha=head,
            updated_at=CHECKED_AT,
            reported="success" if n % 3 else "failure",
        )
        save_series(client, state)


def config(world: World) -> dict[str, object]:
    return {
        "downstream": {"repo": DOWN_REPO, "branch": "main", "patches_dir": "patches"},
        "upstreams": {"up0": {"url": str(world.upstreams[0].path), "repo": UP_REPO}},
        "series": [
            {
                "id": sid,
                "upstream": "up0",
                "base": {"branch": "main"},
                "patches": sid,
                "runners": [],
                "checks": [],
            }
            for sid in world.series
        ],
        "polling": {"refs_every_s": 3600},
    }


# =========================================================================== the web processes


@dataclass
class Web:
    name: str
    code: Path  # the tree `carry web` is imported from
    url: str = ""
    proc: subprocess.Popen[bytes] | None = None
    first_ms: float = 0.0  # the first overview it served (nothing kept yet)
    overview_ms: list[float] = field(default_factory=list)
    series_ms: list[float] = field(default_factory=list)


def baseline_tree(rev: str, into: Path) -> Path:
    """The repository's tree at `rev` (only what is committed), for the baseline's web."""
    into.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "archive", "--format=tar", rev],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


@contextlib.contextmanager
def serving(webs: list[Web], env: dict[str, str], logs: Path) -> Iterator[None]:
    try:
        for web in webs:
            port = free_port()
            web.url = f"http://127.0.0.1:{port}"
            log = open(logs / f"web-{web.name}.log", "wb")  # noqa: SIM115
            argv = [sys.executable, "-m", "bot.cli", "web", "--host", "127.0.0.1"]
            web.proc = subprocess.Popen(
                [*argv, "--port", str(port)],
                env={**env, "PYTHONPATH": str(web.code)},
                cwd=web.code,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        for web in webs:
            wait_for(lambda w=web: _up(w, logs), 60, f"web {web.name}")  # type: ignore[misc]
        yield
    finally:
        for web in webs:
            if web.proc is not None and web.proc.poll() is None:
                os.killpg(web.proc.pid, signal.SIGTERM)
                try:
                    web.proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    os.killpg(web.proc.pid, signal.SIGKILL)
                    web.proc.wait()


def _up(web: Web, logs: Path) -> bool:
    assert web.proc is not None
    if web.proc.poll() is not None:
        raise AssertionError((logs / f"web-{web.name}.log").read_text(errors="replace"))
    try:
        return httpx.get(f"{web.url}/healthz", timeout=0.5).status_code == 200
    except httpx.HTTPError:
        return False


def measure(
    webs: list[Web],
    client: redis.Redis,
    series_ids: list[str],
    repeat: int,
    churn: int,
    warmup: int = 2,
) -> None:
    """Each page from each web in turn (so load from other work on the machine falls on both
    alike); the first `warmup` rounds are not kept. Before each round `churn` series change
    (saved again, as a worker's check would: a new updated_at), in turn."""
    pages = (("/", "overview_ms"), (f"/series/{series_ids[0]}", "series_ms"))
    changed = 0
    with httpx.Client(timeout=120) as http:
        for round_ in range(warmup + repeat):
            for _ in range(churn):
                state = load_series(client, series_ids[changed % len(series_ids)])
                assert state is not None
                save_series(client, state)
                changed += 1
            for web in webs:
                for path, into in pages:
                    started = time.perf_counter()
                    answer = http.get(web.url + path)
                    elapsed = (time.perf_counter() - started) * 1000
                    if answer.status_code != 200:
                        raise AssertionError(f"{web.name} {path}: HTTP {answer.status_code}")
                    if round_ >= warmup:
                        getattr(web, into).append(elapsed)


def first_overview(webs: list[Web]) -> None:
    """The first overview each web serves, with nothing kept yet (as after a restart)."""
    with httpx.Client(timeout=120) as http:
        for web in webs:
            started = time.perf_counter()
            http.get(web.url + "/").raise_for_status()
            web.first_ms = (time.perf_counter() - started) * 1000


def check_pages(webs: list[Web], world: World) -> None:
    """Every series has its row on each overview, and its series page names every patch."""
    first = next(iter(world.series))
    with httpx.Client(timeout=120) as http:
        for web in webs:
            overview = http.get(web.url + "/").text
            missing = [sid for sid in world.series if f'id="series-{sid}"' not in overview]
            assert not missing, f"{web.name}: overview lacks {missing[:5]}"
            page = http.get(f"{web.url}/series/{first}").text
            names = (world.downstream / "patches" / first / "series").read_text().split()
            assert all(name in page for name in names), f"{web.name}: series page"


# =========================================================================== the table


def render(size: Size, churn: int, webs: list[Web], *, exported: bool) -> str:
    base = webs[0]
    source = "carry's export" if exported else "a checkout (CARRY_DOWNSTREAM_DIR)"
    lines = [
        f"overview bench: {size}, {len(base.overview_ms)} requests a page, "
        f"{churn} series changed before each, series read from {source}",
        "| code | page | p50 (ms) | p95 (ms) | p95 vs " + base.name + " |",
        "|---|---|---|---|---|",
    ]
    for page, attr in (("overview /", "overview_ms"), ("series page", "series_ms")):
        theirs = pct(getattr(base, attr), 0.95)
        for web in webs:
            values = getattr(web, attr)
            p95 = pct(values, 0.95)
            ratio = f"{p95 / theirs:.2f}x" if theirs else "-"
            lines.append(f"| {web.name} | {page} | {pct(values, 0.5):.1f} | {p95:.1f} | {ratio} |")
    for web in webs:
        ratio = f"{web.first_ms / base.first_ms:.2f}x" if base.first_ms else "-"
        lines.append(f"| {web.name} | first overview | {web.first_ms:.1f} | - | {ratio} |")
    return "\n".join(lines)


def run(
    size: Size, repeat: int, churn: int, baseline: str | None, root: Path, *, exported: bool
) -> str:
    world, head = build(root, size)
    server = PrivateRedis(root / "redis", persist=False).start()
    try:
        client = redis.Redis.from_url(server.url)
        started = time.perf_counter()
        fill(client, world, head, root / "cache")
        print(f"filled {size} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
        config_path = root / "carry.json"
        config_path.write_text(json.dumps(config(world), indent=2))
        env = {
            **os.environ,
            "REDIS_URL": server.url,
            "CARRY_CONFIG": str(config_path),
            "CARRY_DOWNSTREAM_DIR": str(world.downstream),
            "CARRY_CACHE_DIR": str(root / "web-cache"),
            "CARRY_WEBHOOK_SECRET": SECRET,
            "CARRY_ALLOW_OPEN_REDIS": "1",
        }
        with contextlib.ExitStack() as stack:
            if exported:  # no checkout named: each web exports the series from the emulator
                gh = stack.enter_context(github(world))
                env |= {
                    "CARRY_DOWNSTREAM_DIR": "",
                    "GITHUB_TOKEN": "carry-token",
                    "GITHUB_BASE_URL": gh.base_url,
                }
            webs = [Web("now", REPO_ROOT)]
            if baseline is not None:
                webs.insert(0, Web(f"baseline {baseline}", baseline_tree(baseline, root / "base")))
            with serving(webs, env, root):
                first_overview(webs)
                check_pages(webs, world)
                measure(webs, client, list(world.series), repeat, churn)
            return render(size, churn, webs, exported=exported)
    finally:
        server.stop(kill=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--series", type=int, default=200)
    parser.add_argument("--patches", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=30, help="requests kept a page and web")
    parser.add_argument("--churn", type=int, default=5, help="series changed before a round")
    parser.add_argument("--baseline", default="main", help="revision the baseline web runs")
    parser.add_argument("--no-baseline", action="store_true", help="measure this tree alone")
    parser.add_argument("--workdir", type=Path, help="keep the world here (default: a temp dir)")
    parser.add_argument(
        "--exported", action="store_true", help="the webs read carry's export, as compose's"
    )
    args = parser.parse_args(argv)
    size = Size(args.series, args.patches)
    baseline = None if args.no_baseline else args.baseline
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
        print(
            run(
                size,
                args.repeat,
                args.churn,
                baseline,
                Path(tempfile.mkdtemp(dir=args.workdir)),
                exported=args.exported,
            )
        )
        return 0
    with tempfile.TemporaryDirectory(prefix="carry-overview-") as tmp:
        print(run(size, args.repeat, args.churn, baseline, Path(tmp), exported=args.exported))
    return 0


if __name__ == "__main__":
    sys.exit(main())
