"""Read-only mode shows, on the series page, the whole PR carry would open: title and body
rendered, not one timeline row cut at 80 characters."""

from __future__ import annotations

import re

import httpx

from bot.core.render import pr_body, pr_title
from bot.core.state import PatchState, PrInfo, SeriesState
from bot.store.series import append_history, save_series
from tests.e2e import screenshots as docs
from tests.support.dashboard_app import dashboard

SERIES = "read-only-series"


def test_read_only_mode_shows_the_pr_it_would_open(client):
    state = SeriesState(
        id=SERIES,
        upstream_repo="upstream-org/engine",
        base="branch main",
        checked_head="c" * 40,
        patches=[
            PatchState(name="0001-keep.patch", status="applies", decision="keep"),
            PatchState(name="0002-gone.patch", status="contained", decision="drop"),
        ],
    )
    save_series(client, state)
    title, body = pr_title(state), pr_body(state, "2026.12.1")
    append_history(client, SERIES, "proposal", read_only=True, changed=True, title=title, body=body)
    with dashboard(client) as url:
        text = httpx.get(f"{url}/series/{SERIES}", timeout=10).text
    section = text[text.index('id="pr-title"') : text.index('id="ci-title"')]
    assert "No PR open" not in section
    assert "Read-only mode" in section and f"<h3>{title}</h3>" in section
    assert "0002-gone.patch" in section and "0001-keep.patch" in section
    assert len(section) > len(body) // 2  # the body, not a summary of it


def test_with_a_pr_the_page_keeps_the_text_carry_proposed_for_it(client):
    state = SeriesState(
        id=SERIES,
        base="branch main",
        checked_head="c" * 40,
        patches=[PatchState(name="0001-keep.patch", status="applies", decision="keep")],
        pr=PrInfo(7, "https://example/pull/7", "carry/read-only-series"),
    )
    save_series(client, state)
    title, body = pr_title(state), pr_body(state, "2026.12.1")
    append_history(
        client,
        SERIES,
        "proposal",
        read_only=False,
        changed=True,
        title=title,
        body=body,
        head="c" * 40,
    )
    with dashboard(client) as url:
        text = httpx.get(f"{url}/series/{SERIES}", timeout=10).text
    section = text[text.index('id="pr-title"') : text.index('id="ci-title"')]
    assert "#7</a>" in section and "Read-only mode" not in section
    assert "The text carry proposed for it, for upstream head <code>cccccccccccc</code>" in section
    assert f"<h3>{title}</h3>" in section and "0001-keep.patch" in section


def test_before_a_pr_is_opened_the_page_says_so_not_read_only(client):
    state = SeriesState(id=SERIES, base="branch main", checked_head="c" * 40)
    save_series(client, state)
    append_history(client, SERIES, "proposal", read_only=False, changed=True, title="T", body="B")
    with dashboard(client) as url:
        text = httpx.get(f"{url}/series/{SERIES}", timeout=10).text
    section = text[text.index('id="pr-title"') : text.index('id="ci-title"')]
    assert "carry has not opened its PR yet" in section and "Read-only mode" not in section


def pr_section(page: str) -> str:
    return page[page.index('id="pr-title"') : page.index('id="ci-title"')]


def test_read_only_mode_says_what_carry_would_do_for_each_series(client, tmp_path):
    """State carry's own rebase and read-only publish built (tests/e2e/screenshots.py): a
    conflict with no file to propose, a patch to review, a patch upstream took, and two clean
    series. Failed on c0833b8: every one said "This is the PR it would open"."""
    built = docs.build_state(client, tmp_path)
    with docs.served(client, built) as url:
        pages = {
            sid: pr_section(httpx.get(f"{url}/series/{sid}", timeout=10).text)
            for sid in docs.SERIES_IDS
        }
        events = httpx.get(f"{url}/events", params={"kind": "proposal"}, timeout=10).text
    would = {
        sid: re.search(r"it would <strong>([^<]+)</strong>: ([^<]+)\.</p>", section)
        for sid, section in pages.items()
    }
    assert {sid: found.group(1) for sid, found in would.items() if found} == {
        docs.CONFLICT: "report without a PR",
        docs.PARTIAL: "open a draft PR",
        docs.PROPOSAL: "open a PR",
        docs.LOST_RUNNER: "propose nothing",
        docs.UNREACHABLE: "propose nothing",
    }
    assert "needs a human (conflict), but no file would change" in would[docs.CONFLICT].group(2)
    assert "would be removed in the series directory" in would[docs.PROPOSAL].group(2)
    assert "already has every file" in would[docs.LOST_RUNNER].group(2)
    opens = [sid for sid, section in pages.items() if "This is the PR it would open" in section]
    assert opens == [docs.PARTIAL, docs.PROPOSAL]
    for sid in (docs.CONFLICT, docs.LOST_RUNNER, docs.UNREACHABLE):
        assert "The PR text carry prepared, which it would not post" in pages[sid]
    assert "carry would report without a PR: the series needs a human (conflict)" in events
