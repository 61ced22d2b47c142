"""`carry replay --html` in headless Chromium: one file that shows its summary, patches,
timeline and chart without asking for anything else."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright

from bot import cli
from tests.e2e.screenshots import CHROMIUM, CHROMIUM_ARGS
from tests.support.replay_upstream import build_upstream

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason=f"browser tests skipped: {CHROMIUM} is missing (Debian package chromium; "
        "`sudo make browser` installs it)",
    ),
]


def test_the_html_report_is_self_contained_and_shows_the_chart(
    tmp_path: Path, make_repo, capsys: pytest.CaptureFixture[str]
) -> None:
    upstream = build_upstream(tmp_path, make_repo())
    report = tmp_path / "report" / "replay.html"
    report.parent.mkdir()
    argv = ["replay", "--repo", str(upstream.path), "--from", upstream.start, "--json"]
    argv += ["--cache-dir", str(tmp_path / "cache"), "--html", str(report)]
    assert cli.main([*argv, "--patch", *map(str, upstream.patches)]) == 0
    capsys.readouterr()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            asked: list[str] = []
            page.on("request", lambda request: asked.append(request.url))
            page.goto(report.as_uri())
            expect(page.get_by_role("heading", level=1)).to_contain_text("patches")
            rows = page.locator("table").first.locator("tr")
            expect(rows.filter(has_text="Heads walked")).to_contain_text("8")
            expect(rows.filter(has_text="Human actions")).to_contain_text("2")
            bar = page.locator("svg rect.bar")
            expect(bar).to_have_count(1)
            box = bar.bounding_box()
            assert box is not None and box["height"] > 50 and box["width"] > 20
            expect(page.locator("svg title").first).to_contain_text("2026-01 2")
            timeline = page.locator("table").nth(2)
            expect(timeline).to_contain_text("Rewrite totals")
            expect(timeline).to_contain_text("wait-human")
            assert asked == [report.as_uri()]  # no style sheet, script, font or image fetched
            page.screenshot(path=str(tmp_path / "replay.png"), full_page=True)
        finally:
            browser.close()
