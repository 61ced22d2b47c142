"""The overview at many series and patches (issue 37): a long series' patches counted by status
and decision, with the chips of those that need attention and a link to the series page that
lists every patch; each series' parts kept while it is unchanged, and made again at once when
its stored document changes."""

from __future__ import annotations

import re

import httpx
import redis

from bot.core.state import PatchState, SeriesState
from bot.store.series import save_series
from bot.web.dashboard import CHIPS_AT_MOST
from bot.web.series_cache import SeriesCache
from bot.web.views import FixPages, series_list
from tests.support.dashboard_app import CONFIG, MAIN, dashboard, seed
from tests.support.paths import REPO_ROOT

LONG = "long-series"


def name(k: int) -> str:
    return f"{k:04d}-fix-number-{k}.patch"


def long_series(conflicts: tuple[int, ...] = (7, 19)) -> SeriesState:
    patches = []
    for k in range(1, 26):
        if k in conflicts:
            patch = PatchState(name=name(k), status="conflict", decision="review")
        elif k == 3:
            patch = PatchState(name=name(k), status="applies-moved", decision="keep")
        else:
            patch = PatchState(name=name(k), status="applies", decision="keep")
        patch.upstream_prs = [{"ref": f"vllm-project/vllm#{1000 + k}", "state": "open"}]
        patches.append(patch)
    return SeriesState(id=LONG, upstream_repo="vllm-project/vllm", patches=patches)


def row_of(html: str, series_id: str) -> str:
    return html[html.index(f'<tr id="series-{series_id}"') :].split("</tr>", 1)[0]


def test_a_long_series_is_counted_and_its_page_lists_every_patch(client: redis.Redis) -> None:
    assert len(long_series().patches) > CHIPS_AT_MOST
    save_series(client, long_series())
    seed(client)
    with dashboard(client) as url, httpx.Client(timeout=10) as http:
        overview = http.get(f"{url}/").text
        page = http.get(f"{url}/series/{LONG}").text
        found = http.get(f"{url}/", params={"q": name(12)}).text

    row = row_of(overview, LONG)
    words = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", row))
    assert "25 patches: 22 applies keep 1 applies-moved keep 2 conflict review" in words, words
    # the chips of the patches that need attention, with their upstream PRs
    for k in (7, 19):
        assert f'href="/series/{LONG}/patches/{name(k)}"' in row
        assert f"vllm-project/vllm#{1000 + k}" in row
    assert name(12) not in row and "vllm-project/vllm#1012" not in row
    assert f'<a href="/series/{LONG}#patches-title">every patch of {LONG}</a>' in row
    assert '<h2 id="patches-title">Patches</h2>' in page
    assert all(f'href="/series/{LONG}/patches/{name(k)}"' in page for k in range(1, 26))
    assert "vllm-project/vllm#1012" in page
    # A short series keeps a chip per patch; the filter still finds a patch not shown.
    assert "patches:" not in row_of(overview, MAIN)
    assert re.findall(r'<tr id="series-([^"]+)"', found) == [LONG]


def test_the_overview_shows_a_changed_series_at_once(client: redis.Redis) -> None:
    save_series(client, long_series(conflicts=()))
    with dashboard(client) as url, httpx.Client(timeout=10) as http:
        before = http.get(f"{url}/").text
        again = http.get(f"{url}/").text  # from what was kept
        save_series(client, long_series(conflicts=(4,)))
        after = http.get(f"{url}/").text

    assert "Nothing needs you now." in before and "Nothing needs you now." in again
    assert row_of(before, LONG) == row_of(again, LONG)
    assert f"{name(4)}: conflict" not in before
    assert f"{name(4)}: conflict" in after
    assert f'href="/series/{LONG}/patches/{name(4)}"' in row_of(after, LONG)
    assert "1 conflict review" in re.sub(r"<[^>]+>", "", row_of(after, LONG))


def test_the_kept_list_is_the_list_made_afresh(client: redis.Redis) -> None:
    """The same series, patches, attention and ages as without keeping anything (head ages in
    seconds aside: the clock moves between the calls)."""
    seed(client)
    save_series(client, long_series())
    fix_pages = FixPages.from_config(CONFIG, REPO_ROOT / CONFIG.downstream.patches_dir)
    kept: SeriesCache = SeriesCache()

    def listed(keep: SeriesCache | None) -> list[dict[str, object]]:
        series = series_list(client, fix_pages, CONFIG, keep).model_dump()["series"]
        for s in series:
            s["head"].pop("age_s")
        return series

    fresh = listed(None)
    assert listed(kept) == fresh  # made and kept
    assert listed(kept) == fresh  # from what was kept
    assert LONG in [s["id"] for s in fresh]
