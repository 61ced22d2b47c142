"""Every dashboard page fits a 1280 px window, with every toggle open, on the state that
`carry demo` leaves behind (its web, worker, beat and runner processes against the emulator) and
on the screenshots' state (a conflict with git's output, a lost runner, an unreachable upstream).

An open "fields" toggle is a wrapped list of names and values, never a line of JSON; git's
output of several lines is preformatted text, never one paragraph."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import redis
from playwright.sync_api import Browser, Page, sync_playwright
from pydantic import SecretStr

from bot.config import CarryConfig, Settings, load_config
from bot.local_redis import free_port
from bot.store import series as store
from bot.store.ci_runs import CI
from bot.web.app import create_app
from tests.e2e import screenshots as docs
from tests.support.asgi import serve
from tests.support.demo import demo_env, stop_leftovers
from tests.support.page_text import RAW_VALUES

WIDTH = 1280

DEMO_SERIES = "calc-fixes"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not docs.CHROMIUM.exists(),
        reason=f"browser tests skipped: {docs.CHROMIUM} is missing (`sudo make browser`)",
    ),
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(docs.CHROMIUM), headless=True, args=docs.CHROMIUM_ARGS
        )
        yield launched
        launched.close()


# Data shown as the program holds it: a JSON object or list, a dataclass repr, an object's
# address. (The demo's patches are about Python's None: the word alone is no sign here.)
STRUCTURES = (RAW_VALUES[0], *RAW_VALUES[2:])


@dataclass(frozen=True)
class Measured:
    path: str
    width: int
    raw: list[str]  # JSON or Python data shown as text, outside code blocks
    fields: int  # open "fields" toggles


def measure(page: Page, site: str, path: str) -> Measured:
    page.goto(f"{site}{path}")
    page.wait_for_selector('html[data-live="on"]')
    page.evaluate(docs.OPEN_TOGGLES)
    prose = page.locator("body").evaluate(docs.PROSE_JS)
    return Measured(
        path,
        int(page.evaluate("document.documentElement.scrollWidth")),
        [found.group(0) for pattern in STRUCTURES for found in pattern.finditer(prose)],
        page.locator("details.raw[open]").count(),
    )


def run_ids(client: redis.Redis) -> list[str]:
    prefix = f"{CI}run:"
    return sorted(k.decode().removeprefix(prefix) for k in client.scan_iter(f"{prefix}*"))


def every_page(client: redis.Redis) -> list[str]:
    paths = ["/", "/events", "/events?outcome=problem", "/runners", "/runs"]
    for state in store.all_series(client):
        paths.append(f"/series/{state.id}")
        paths += [docs.patch_url(state.id, p.name) for p in state.patches]
    return paths + [f"/runs/{run_id}" for run_id in run_ids(client)]


def measure_all(browser: Browser, site: str, paths: list[str]) -> list[Measured]:
    context = browser.new_context(viewport={"width": WIDTH, "height": 800})
    try:
        page = context.new_page()
        page.set_default_timeout(10_000)
        return [measure(page, site, path) for path in paths]
    finally:
        context.close()


# --------------------------------------------------------------------------- the demo's state


def run_demo(directory: Path, redis_url: str) -> None:
    argv = [sys.executable, "-m", "bot.demo", "--no-wait", "--dir", str(directory)]
    argv += ["--port", str(free_port()), "--redis-url", redis_url, "--timeout", "60"]
    try:
        done = subprocess.run(
            argv,
            cwd=directory.parent,
            env=demo_env(),
            capture_output=True,
            text=True,
            timeout=150,
        )
    finally:
        stop_leftovers(directory / "pids")
    assert done.returncode == 0, done.stdout + done.stderr


def demo_app_parts(directory: Path) -> tuple[CarryConfig, Settings]:
    """The demo's configuration, read as its web process reads it, without GitHub."""
    checkout = directory / "cache" / "downstream-checkout"
    settings = Settings(
        webhook_secret=SecretStr("widths-webhook-secret"),
        github_token=None,
        github_app_id=None,
        downstream_dir=checkout,
        cache_dir=directory / "cache",
        max_body_bytes=None,
    )
    return load_config(directory / "carry.yaml", downstream_dir=checkout), settings


def test_every_page_of_the_demo_fits_1280_px_with_its_toggles_open(
    browser: Browser, tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Failed on ec2334b: the overview 16,737 px, the series page 16,670 px and /events
    16,770 px wide with the fields open (one line of JSON each)."""
    client = redis.Redis.from_url(redis_url)
    run_demo(tmp_path / "demo", redis_url)
    config, settings = demo_app_parts(tmp_path / "demo")
    monkeypatch.delenv("CARRY_DASHBOARD_TOKEN", raising=False)
    paths = every_page(client)
    assert f"/series/{DEMO_SERIES}" in paths and any(p.startswith("/runs/") for p in paths)
    with serve(create_app(config, settings, client)) as site:
        measured = measure_all(browser, site, paths)
        kept = next(p.name for p in store.all_series(client)[0].patches if p.decision == "keep")
        fix_page = httpx.get(f"{site}{docs.patch_url(DEMO_SERIES, kept)}", timeout=10).text
    # The demo carries its fixes on upstream PR #1 (failed on f87f93e: "main: not carried").
    releases = re.findall(r"<li>(main: [^<]*)</li>", fix_page)
    assert releases == [
        "main: on a PR: calc-fixes carries it on upstream PR #1; a PR names no release, so "
        "carry does not match it to main"
    ]
    too_wide = [(m.path, m.width) for m in measured if m.width > WIDTH]
    assert too_wide == []
    shown_raw = [(m.path, m.raw) for m in measured if m.raw]
    assert shown_raw == []
    assert sum(m.fields for m in measured) > 20  # the toggles were there, and open


# --------------------------------------------------------------------------- a conflict


def test_every_page_with_a_conflict_fits_and_git_output_keeps_its_lines(
    browser: Browser, tmp_path: Path, redis_url: str
) -> None:
    """Failed on ec2334b: pages 1,280 px closed grew with their toggles open, and the
    evidence's git apply output was one paragraph (no line of it on a line of its own)."""
    client = redis.Redis.from_url(redis_url)
    built = docs.build_state(client, tmp_path)
    paths = every_page(client)
    (conflict,) = docs.patch_names(client, docs.CONFLICT)
    with docs.served(client, built) as site:
        measured = measure_all(browser, site, paths)
        context = browser.new_context(viewport={"width": WIDTH, "height": 800})
        page = context.new_page()
        page.goto(f"{site}{docs.patch_url(docs.CONFLICT, conflict)}")
        evidence = page.locator("ol.evidence pre.wrap")
        outputs = evidence.all_inner_texts()
        context.close()
    assert [(m.path, m.width) for m in measured if m.width > WIDTH] == []
    assert [(m.path, m.raw) for m in measured if m.raw] == []
    assert any("\nerror: " in text and "patch does not apply" in text for text in outputs), outputs
