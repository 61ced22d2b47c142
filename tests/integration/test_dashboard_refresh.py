"""Issue 35: the series page and its API say whether each refreshed patch's context only moved
or its content changed, and which upstream commit forced a content change."""

from __future__ import annotations

import httpx
import redis

from bot.core.state import PatchState
from bot.store.series import save_series
from tests.support.dashboard_app import MAIN, dashboard, main_series

FORCED = {
    "file": "vllm_gaudi/v1/worker/hpu_model_runner.py",
    "hunk": "@@ -48,6 +48,8 @@",
    "sha": "e" * 40,
    "subject": "Seed the decode ids upstream (#1919)",
    "pr": 1919,
}


def test_the_series_page_and_api_tell_the_refresh_classes(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    state = main_series()
    common = {"status": "applies-moved", "decision": "keep", "changed": True, "interdiff": "x"}
    state.patches = [
        PatchState(name="0001-moved.patch", refresh={"class": "context-only"}, **common),
        PatchState(
            name="0002-took.patch",
            refresh={"class": "content-changed", "forced_by": [FORCED]},
            **common,
        ),
    ]
    save_series(client, state)
    with dashboard(client) as url, httpx.Client(timeout=10) as http:
        page = http.get(f"{url}/series/{MAIN}").text
        api = http.get(f"{url}/api/v1/series/{MAIN}").json()
    assert "(refreshed: context only)" in page
    assert "(refreshed: content changed by <code>eeeeeeeeeeee</code> Seed the decode ids" in page
    by_name = {p["name"]: p for p in api["patches"]}
    assert by_name["0001-moved.patch"]["refresh"] == "context-only"
    assert by_name["0002-took.patch"]["refresh"] == "content-changed"
    assert by_name["0002-took.patch"]["forced_by"] == [FORCED]
