"""The dashboard in headless Chromium (Debian's /usr/bin/chromium, driven by Playwright).

Seeded state in a real Redis, the whole carry app served by uvicorn, the dashboard token set:
the browser logs in once with ?token= and then works from the session cookie.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from playwright.sync_api import Browser, Locator, Page, ViewportSize, expect, sync_playwright

from bot.store.runners import append_runlog
from bot.store.series import append_history, save_series
from tests.e2e import screenshots as docs
from tests.e2e.screenshots import CHROMIUM, CHROMIUM_ARGS
from tests.support.dashboard_app import (
    DASHBOARD_TOKEN,
    FAILED_RUN,
    MAIN,
    PATCH,
    PLE,
    RELEASE,
    RELEASE_HEAD,
    dashboard,
    release_series,
    seed,
)
from tests.support.page_text import RAW_VALUES
from tests.support.paths import REPO_ROOT

SCREENSHOTS = REPO_ROOT / "artifacts" / "screenshots"
DESKTOP: ViewportSize = {"width": 1280, "height": 800}
PHONE: ViewportSize = {"width": 390, "height": 844}
WAIT_MS = 10_000
PAGES = {
    "overview": "/",
    "series": f"/series/{MAIN}",
    "patch": f"/series/{MAIN}/patches/{PATCH}",
    "run": f"/runs/{FAILED_RUN}",
    "runners": "/runners",
    "events": "/events",
}
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason=f"browser tests skipped: {CHROMIUM} is missing (Debian package chromium; "
        "`sudo make browser` installs it)",
    ),
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        yield launched
        launched.close()


@pytest.fixture
def site(client: redis.Redis) -> Iterator[str]:
    seed(client)
    with dashboard(client, token=DASHBOARD_TOKEN) as url:
        yield url


def open_page(
    browser: Browser, site: str, viewport: ViewportSize = DESKTOP, *, javascript: bool = True
) -> Page:
    context = browser.new_context(viewport=viewport, java_script_enabled=javascript)
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    page.goto(f"{site}/?token={DASHBOARD_TOKEN}")
    return page


@pytest.fixture
def page(browser: Browser, site: str) -> Iterator[Page]:
    opened = open_page(browser, site)
    yield opened
    opened.context.close()


def wait_live(page: Page) -> None:
    """The page's EventSource is open (so the server has subscribed to the updates)."""
    expect(page.locator("html")).to_have_attribute("data-live", "on")
    expect(page.locator("#live-status")).to_have_text("Live updates on")


def matrix_row(page: Page, series_id: str) -> Locator:
    return page.locator(f"table.matrix tbody tr#series-{re.escape(series_id)}")


def raw_values(text: str) -> list[str]:
    return [found.group(0) for pattern in RAW_VALUES for found in pattern.finditer(text)]


def top(locator: Locator) -> float:
    box = locator.bounding_box()
    assert box is not None, "not rendered"
    return box["y"]


# --------------------------------------------------------------------------- 1


def test_overview_shows_the_seeded_state(page: Page) -> None:
    expect(page).to_have_url(re.compile(r"/$"))  # the token left the address bar
    expect(page.get_by_role("heading", name="Overview", level=1)).to_be_visible()
    headers = page.locator("table.matrix thead th")
    expect(headers).to_contain_text(["Series", "Base and head", "State", "Patches", "CI"])
    main = matrix_row(page, MAIN)
    expect(main).to_contain_text("branch main")
    expect(main).to_contain_text("5f0c1d2e3a4b")
    expect(main).to_contain_text("2 h ago")
    expect(main.get_by_role("cell").nth(2)).to_contain_text("conflict review")
    release = matrix_row(page, RELEASE)
    expect(release).to_contain_text("applies keep")
    expect(release).to_contain_text("vllm-project/vllm-gaudi#1919 open")
    expect(release.get_by_role("link", name="#12")).to_be_visible()
    expect(matrix_row(page, PLE)).to_contain_text("awaiting-import")
    assert DASHBOARD_TOKEN not in page.content()


# --------------------------------------------------------------------------- 2


def test_a_new_event_appears_without_a_reload(page: Page, client: redis.Redis) -> None:
    wait_live(page)
    page.evaluate("window.carryNoReload = 'same document'")
    moved = release_series()
    moved.last_event = "head moved to c0ffee0"

    save_series(client, moved)
    append_history(client, RELEASE, "rebase", head="c0ffee0123", ref="refs/tags/v0.26.1")

    expect(page.locator("#recent tbody tr").first).to_contain_text("rebase")
    expect(page.locator("#recent tbody tr").first).to_contain_text("c0ffee0123")
    expect(matrix_row(page, RELEASE)).to_contain_text("head moved to c0ffee0")
    assert page.evaluate("window.carryNoReload") == "same document"


# --------------------------------------------------------------------------- 3


def test_links_lead_to_the_series_patch_and_run_pages(page: Page, client: redis.Redis) -> None:
    matrix_row(page, MAIN).get_by_role("link", name=MAIN).click()
    expect(page).to_have_url(re.compile(f"/series/{MAIN}$"))
    expect(page.get_by_role("heading", name=f"Series {MAIN}")).to_be_visible()
    expect(page.get_by_role("heading", name="Timeline of heads and decisions")).to_be_visible()

    page.get_by_role("row").filter(has_text="hunk 2").get_by_role("link", name=PATCH).click()
    expect(page).to_have_url(re.compile(f"/series/{MAIN}/patches/{re.escape(PATCH)}$"))
    expect(page.get_by_role("heading", name=f"Patch {PATCH}")).to_be_visible()
    expect(page.locator("article.fixpage h4", has_text="Problem")).to_be_visible()
    expect(page.locator("article.fixpage code").first).to_be_visible()

    page.get_by_role("link", name=MAIN).first.click()
    page.get_by_role("link", name=f"log of {FAILED_RUN}").click()
    expect(page).to_have_url(re.compile(f"/runs/{FAILED_RUN}$"))
    log = page.locator("#log")
    expect(log).to_contain_text("AssertionError: greedy outputs differ")

    wait_live(page)
    append_runlog(client, FAILED_RUN, "stdout", "retrying with a smaller batch")
    expect(log.locator(".line").last).to_have_text("retrying with a smaller batch\n")


def test_pages_work_without_javascript(browser: Browser, site: str) -> None:
    page = open_page(browser, site, javascript=False)
    try:
        expect(page.locator("#live-status")).to_have_text("Reload the page to see changes.")
        expect(page.locator("#needs-attention")).to_contain_text(f"{PATCH}: conflict")
        page.locator("#needs-attention").get_by_role("link", name=f"run {FAILED_RUN}").click()
        expect(page.locator("#log")).to_contain_text("AssertionError: greedy outputs differ")
        page.get_by_role("navigation", name="Breadcrumb").get_by_role("link", name=MAIN).click()
        expect(page.get_by_role("heading", name=f"Series {MAIN}")).to_be_visible()
    finally:
        page.context.close()


# --------------------------------------------------------------------------- 4


def test_a_conflict_shows_under_needs_attention(page: Page, client: redis.Redis) -> None:
    attention = page.locator("#needs-attention")
    expect(attention.get_by_role("heading")).to_have_text("Needs attention (2)")
    conflict_row = attention.get_by_role("row").filter(has_text=f"{PATCH}: conflict")
    expect(conflict_row).to_contain_text(MAIN)
    expect(conflict_row.get_by_role("link", name=f"patch {PATCH}")).to_have_attribute(
        "href", f"/series/{MAIN}/patches/{PATCH}"
    )
    matrix = page.locator("table.matrix")
    assert top(attention) < top(matrix)

    wait_live(page)
    broken = release_series()
    broken.patches[0].status, broken.patches[0].decision = "conflict", "review"
    save_series(client, broken)

    expect(attention.get_by_role("heading")).to_have_text("Needs attention (3)")
    expect(attention.get_by_role("row").filter(has_text=RELEASE)).to_contain_text("conflict")


# --------------------------------------------------------------------------- 5


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["1280x800", "390x844"])
def test_screenshots_at_desktop_and_phone_width(
    browser: Browser, site: str, viewport: ViewportSize
) -> None:
    page = open_page(browser, site, viewport)
    size = f"{viewport['width']}x{viewport['height']}"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    try:
        for name, path in PAGES.items():
            page.goto(f"{site}{path}")
            wait_live(page)
            overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
            assert overflow <= 0, f"{name} scrolls sideways by {overflow}px at {size}"
            shot = SCREENSHOTS / f"{name}-{size}.png"
            page.screenshot(path=str(shot), full_page=True)
            assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    finally:
        page.context.close()


# --------------------------------------------------------------------------- 6


@pytest.mark.parametrize("name", list(PAGES))
def test_no_page_shows_raw_json_or_python_reprs(browser: Browser, site: str, name: str) -> None:
    """Visible text outside code blocks: the raw fields behind a closed "fields" toggle are
    not shown, and a diff or a code sample may say True."""
    page = open_page(browser, site)
    try:
        page.goto(f"{site}{PAGES[name]}")
        wait_live(page)
        text = page.locator("body").evaluate(docs.PROSE_JS)
        assert raw_values(text) == [], text
    finally:
        page.context.close()


CONFLICT_SHOWS = {
    "series": (f"/series/{RELEASE}", "#needs-attention", f"{PATCH}: conflict"),
    "patch": (f"/series/{RELEASE}/patches/{PATCH}", "dl.facts", "conflict"),
    "events": ("/events", "#live tbody tr", "0001-seed-decode-input-ids"),
}


@pytest.mark.parametrize("name", list(CONFLICT_SHOWS))
def test_a_conflict_appears_live_on_each_page_that_shows_it(
    page: Page, site: str, client: redis.Redis, name: str
) -> None:
    """The overview's case is test 4; the run and runners pages show no patch."""
    path, region, words = CONFLICT_SHOWS[name]
    page.goto(f"{site}{path}")
    wait_live(page)
    expect(page.locator(region).first).not_to_contain_text("conflict")
    page.evaluate("window.carryNoReload = 'same document'")

    broken = release_series()
    broken.patches[0].status, broken.patches[0].decision = "conflict", "review"
    save_series(client, broken)
    decision = {"patch": PATCH, "head": RELEASE_HEAD, "status": "conflict", "decision": "review"}
    append_history(client, RELEASE, "decision", **decision, reason="hunk 1 fails")

    shown = page.locator(region).first
    expect(shown).to_contain_text(words)
    expect(shown).to_contain_text("conflict")
    assert page.evaluate("window.carryNoReload") == "same document"


def test_pages_of_state_carry_built_show_words_and_fit(
    browser: Browser, client: redis.Redis, tmp_path: Path
) -> None:
    """The seeded state above is written by hand; the screenshots' state is what carry's
    rebase, publish and poller wrote (a rebase's summary is a dict of counts, a proposal's
    fields are booleans): every page of it reads as words and fits 1280 px."""
    built = docs.build_state(client, tmp_path)
    paths = ["/", "/events", "/events?outcome=problem", "/runners", "/runs/run-gaudi-0042"]
    for series_id in docs.SERIES_IDS:
        paths.append(f"/series/{series_id}")
        paths += [docs.patch_url(series_id, name) for name in docs.patch_names(client, series_id)]
    with docs.served(client, built) as site:
        page = browser.new_context(viewport=DESKTOP).new_page()
        try:
            for path in paths:
                page.goto(f"{site}{path}")
                wait_live(page)
                prose = page.locator("body").evaluate(docs.PROSE_JS)
                assert raw_values(prose) == [], (path, prose)
                width = page.evaluate("document.documentElement.scrollWidth")
                assert width <= DESKTOP["width"], (path, width)
        finally:
            page.context.close()


def test_the_events_outcome_filter_works_without_javascript(browser: Browser, site: str) -> None:
    page = open_page(browser, site, javascript=False)
    try:
        page.goto(f"{site}/events")
        page.get_by_label("Outcome").select_option("problem")
        page.get_by_role("button", name="Show").click()
        expect(page).to_have_url(re.compile(r"/events\?.*outcome=problem"))
        rows = page.locator("section[aria-labelledby=history-title] tbody tr")
        expect(rows).to_have_count(2)  # the seed's conflict decision and CI failure
        expect(rows.get_by_role("cell").filter(has_text="problem")).to_have_count(2)
        expect(page.get_by_label("Outcome")).to_have_value("problem")
        expect(page.get_by_role("link", name="This page as JSON")).to_have_attribute(
            "href", "/api/v1/history?outcome=problem"
        )
    finally:
        page.context.close()


# --------------------------------------------------------------------------- 7


def test_make_screenshots_saves_each_docs_png(
    browser: Browser, client: redis.Redis, tmp_path: Path
) -> None:
    """`make screenshots` runs this code into docs/screenshots; here it runs into tmp_path.
    Each shot checked its texts before it was taken; here: what came out, and those texts."""
    taken = docs.screenshots(client, tmp_path / "work", tmp_path / "png", browser)

    names = ["patch-conflict", "patch-partial", "overview", "series-fields", "runs"]
    names += ["proposed-pr", "verified-heads", "health"]
    assert [t.file for t in taken] == [tmp_path / "png" / f"{n}.png" for n in names]
    for shot in taken:
        width, height = docs.png_size(shot.file)
        assert (width, height > 300) == (1280, True), shot.file
        # The open fields of a timeline are a long page of text.
        limit = 400_000 if shot.shot.open_toggles else 300_000
        assert shot.file.stat().st_size < limit, shot.file
        assert raw_values(shot.prose) == [], shot.shot.name
    text = {t.shot.name: t.text for t in taken}
    assert "1 of 1 hunk needs work" in text["patch-conflict"]
    assert "+    seeded = runner.seed(host_ids)" in text["patch-conflict"]
    assert "Scatter decode ids on the copy stream (#412)" in text["patch-conflict"]
    assert "the head already has the other 1" in text["patch-partial"]
    assert "+        runner.free(request.row, once=True)" in text["patch-partial"]
    assert all(series_id in text["overview"] for series_id in docs.SERIES_IDS)
    assert "Read-only mode" in text["proposed-pr"] and "drop 1" in text["proposed-pr"]
    # The fields as names and values, git's output on lines of its own (never JSON).
    assert "error: engine/scheduler.py: patch does not apply" in text["series-fields"].splitlines()
    assert "reverse-apply" in text["series-fields"] and '"signal"' not in text["series-fields"]
    assert "run-gaudi-0041" in text["runs"] and "(attempt 2)" in text["runs"]
    assert "Red since" in text["verified-heads"] and "(last good)" in text["verified-heads"]
    assert docs.CULPRIT_SUBJECT in text["verified-heads"]
    assert "upstream unreachable: " in text["health"]
    assert f"CI {docs.CI_KEY}: infra-error" in text["health"]
