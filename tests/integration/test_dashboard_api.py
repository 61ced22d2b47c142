"""The dashboard's JSON API, pages, live stream and badges over real HTTP with a real Redis."""

from __future__ import annotations

import html as html_module
import json
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from fastapi import FastAPI
from pydantic import SecretStr
from redis.backoff import NoBackoff
from redis.retry import Retry

from bot.config import Settings
from bot.core import bisect
from bot.core import transitions as tr
from bot.core.state import (
    GoodHead,
    HeadCheck,
    HumanWait,
    Notice,
    NoticeKind,
    PatchState,
    PrInfo,
    RedStreak,
    SeriesState,
    Verdict,
)
from bot.store.metrics import record_rate_limit
from bot.store.runners import heartbeat
from bot.store.series import (
    append_history,
    load_series,
    save_series,
    update_series,
)
from bot.web.access import SESSION_COOKIE, exposure_warning
from bot.web.app import create_app
from bot.web.dashboard import LiveStream, async_client_like, dashboard_router, render_markdown
from bot.web.views import FixPages
from harness.redis_server import free_port
from tests.support.asgi import serve
from tests.support.dashboard_app import (
    CONFIG,
    DASHBOARD_TOKEN,
    DECISION,
    FAILED_RUN,
    GATE,
    GITHUB_TOKEN,
    MAIN,
    MAIN_HEAD,
    PATCH,
    PLE,
    RELEASE,
    TOKEN_ENV,
    WEBHOOK_SECRET,
    ago,
    dashboard,
    main_series,
    ple_series,
    release_series,
    secret_settings,
    seed,
)
from tests.support.paths import REPO_ROOT


@dataclass
class Site:
    url: str
    client: redis.Redis
    http: httpx.Client

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.http.get(f"{self.url}{path}", **kwargs)


@pytest.fixture
def site(client: redis.Redis) -> Iterator[Site]:
    seed(client)
    with dashboard(client) as url, httpx.Client(timeout=10) as http:
        yield Site(url, client, http)


# --------------------------------------------------------------------------- JSON API


def test_series_list_puts_attention_first_with_head_ci_and_patches(site: Site) -> None:
    listed = site.get("/api/v1/series").json()["series"]

    assert [s["id"] for s in listed] == [MAIN, RELEASE, PLE]
    main = listed[0]
    assert main["needs_attention"] == [f"{PATCH}: conflict", "CI gaudi: failure"]
    assert main["head"]["short_sha"] == MAIN_HEAD[:12]
    assert main["head"]["age"] == "2 h ago"
    assert main["ci"]["gaudi"]["state"] == "failure"
    assert [(p["name"], p["status"], p["decision"]) for p in main["patches"]] == [
        (PATCH, "conflict", "review")
    ]
    # No upstream state observed by carry for this series: the fix page's entry fills in.
    assert main["patches"][0]["upstream"] == [
        {
            "ref": "vllm-project/vllm-gaudi#1919",
            "state": "open",
            "label": "open",
            "url": "https://github.com/vllm-project/vllm-gaudi/pull/1919",
            "merge_commit": None,
            "superseded_by": None,
            "source": "fix page",
        }
    ]
    assert listed[1]["pr"]["number"] == 12
    assert listed[1]["patches"][0]["upstream"][0]["source"] == "carry"


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("https://ghe.corp.example", "https://ghe.corp.example/vllm-project/vllm-gaudi/pull/1919"),
        ("", None),  # an upstream without web pages (a local path) gets no link
        (None, "https://github.com/vllm-project/vllm-gaudi/pull/1919"),  # stored before hosts
    ],
)
def test_upstream_pr_links_go_to_the_upstreams_own_web_host(
    site: Site, host: str | None, url: str | None
) -> None:
    """They were always https://github.com, even for an upstream on GitHub Enterprise."""
    state = main_series()
    state.upstream_web_host = host
    save_series(site.client, state)
    (listed,) = [s for s in site.get("/api/v1/series").json()["series"] if s["id"] == MAIN]
    assert [u["url"] for u in listed["patches"][0]["upstream"]] == [url]
    detail = site.get(f"/api/v1/series/{MAIN}/patches/{PATCH}").json()
    assert [u["url"] for u in detail["patch"]["upstream"]] == [url]
    assert [u["url"] for u in detail["fix_page"]["upstream"]] == [url]


def test_the_fix_page_panel_says_which_listed_releases_a_series_carries(site: Site) -> None:
    """The async-inputs page lists v0.26.0 and v0.30.0; this config's series sit on v0.26.0 and
    main only, so v0.30.0 is shown as not carried, with why (it used to go unsaid)."""
    detail = site.get(f"/api/v1/series/{MAIN}/patches/{PATCH}").json()
    lines = {x["release"]: x for x in detail["fix_page"]["release_lines"]}
    assert (lines["v0.26.0"]["carried"], lines["v0.30.0"]["carried"]) == (True, False)
    assert lines["v0.30.0"]["mark"] == "not carried"
    assert "no configured series with a page of async-inputs" in lines["v0.30.0"]["reason"]
    page = site.get(f"/series/{MAIN}/patches/{PATCH}").text
    assert "<li>v0.26.0: carried</li>" in page
    assert "<li>v0.30.0: not carried: no configured series with a page of async-inputs" in page


def test_history_is_filtered_by_series_and_kind_and_paged(site: Site) -> None:
    """Issue 17 item 7: the events page was the newest 100 entries of everything, unfiltered."""
    for n in range(130):
        append_history(
            site.client, MAIN if n % 2 else RELEASE, "decision" if n % 3 else "rebase", n=n
        )
    wanted = [n for n in reversed(range(130)) if n % 2 and n % 3]  # MAIN's decisions, newest first
    seen: list[int] = []
    before = None
    while True:
        query = {
            "series": MAIN,
            "kind": "decision",
            "limit": 20,
            **({"before": before} if before else {}),
        }
        page = site.get("/api/v1/history", params=query).json()
        assert {(e["series"], e["kind"]) for e in page["entries"]} <= {(MAIN, "decision")}
        seen += [e["data"]["n"] for e in page["entries"] if "n" in e["data"]]
        before = page["next_before"]
        if before is None:
            break
    assert seen == wanted
    assert site.get("/api/v1/history", params={"before": "x"}).status_code == 422
    assert site.get("/api/v1/history", params={"series": "nope"}).status_code == 404

    html = site.get("/events", params={"series": MAIN, "kind": "decision"}).text
    assert f'<option value="{MAIN}" selected>' in html and 'value="decision"' in html
    assert "Older events" not in html  # its 44 entries fit on one page
    everything = site.get("/events").text  # 135 entries: a page of 100, then the rest
    assert "Older events" in everything and "Webhook deliveries" in everything
    older = re.search(r'<a href="([^"]+)" rel="next">', everything)
    assert older is not None
    second = site.get(html_module.unescape(older[1])).text
    assert "Webhook deliveries" not in second and "all, newest first" in second
    assert "Older events" not in second


def test_history_is_filtered_by_outcome_and_paged(site: Site) -> None:
    """Issue 17 item 7: the events page filterable by outcome too, the filter kept when paging
    back; the seed's ci-check failure and conflict decision are problems as well."""
    shapes = [
        ("rebased", {"outcome": "conflict"}),  # problem
        ("poll-failed", {"upstream": "engine", "error": "unreachable"}),  # problem
        ("rebased", {"outcome": "changed"}),  # changed
        ("note", {"reason": "ignored: ping"}),  # nothing
        ("rebased", {"outcome": "clean"}),  # routine
    ]
    for n in range(250):
        kind, data = shapes[n % len(shapes)]
        append_history(site.client, MAIN if n % 2 else RELEASE, kind, n=n, **data)
    wanted = [n for n in reversed(range(250)) if n % 5 in (0, 1)]
    seen: list[int] = []
    before = None
    while True:
        query = {"outcome": "problem", "limit": 30, **({"before": before} if before else {})}
        page = site.get("/api/v1/history", params=query).json()
        assert page["outcome"] == "problem"
        assert {e["outcome"] for e in page["entries"]} == {"problem"}
        seen += [e["data"].get("n", -1) for e in page["entries"]]
        before = page["next_before"]
        if before is None:
            break
    assert seen == [*wanted, -1, -1]  # then the seed's ci-check failure and conflict decision
    mine = site.get("/api/v1/history", params={"series": RELEASE, "outcome": "changed"}).json()
    assert [e["data"]["n"] for e in mine["entries"]] == [
        n for n in reversed(range(0, 250, 2)) if n % 5 == 2
    ]
    assert site.get("/api/v1/history", params={"outcome": "bad"}).status_code == 422

    html = site.get("/events", params={"outcome": "nothing"}).text
    assert '<option value="nothing" selected>' in html
    assert 'href="/api/v1/history?outcome=nothing"' in html
    rows = html[html.index('id="history-title"') : html.index('id="deliveries-title"')]
    assert set(
        re.findall(r'<span class="st [^"]+">(problem|changed|routine|nothing)</span>', rows)
    ) == {"nothing"}
    assert "Older events" not in html  # its 50 notes fit on one page
    problems = site.get("/events", params={"outcome": "problem", "kind": ""}).text
    older = re.search(r'<a href="([^"]+)" rel="next">', problems)
    assert older is not None and "outcome=problem" in older[1]
    second = site.get(html_module.unescape(older[1])).text
    assert '<option value="problem" selected>' in second
    # 102 problems: the 100 newest on the first page, then the seed's two
    assert "gaudi: failure" in second and "hunk 2 fails" in second
    assert "unreachable" not in second and "Older events" not in second
    assert site.get("/events", params={"outcome": ""}).status_code == 200  # "any outcome"


def test_the_series_timeline_is_grouped_by_head_and_reads_as_sentences(site: Site) -> None:
    html = site.get(f"/series/{MAIN}").text
    timeline = html[html.index('id="timeline-title"') :]
    assert f"Head <code>{MAIN_HEAD[:12]}</code>" in timeline
    assert "gaudi: failure" in timeline  # the CI entry in words, not `run_id: ..., runner: ...`
    assert '<details class="raw"><summary>fields</summary>' in timeline


def test_the_overview_filters_and_sorts_its_rows(site: Site) -> None:
    """Issue 17 item 7: the overview had neither a filter nor a sort."""

    def rows(**query: str) -> list[str]:
        return re.findall(r'<tr id="series-([^"]+)"', site.get("/", params=query).text)

    assert rows() == [MAIN, RELEASE, PLE]  # needs attention first, then by id
    assert rows(sort="id") == sorted([MAIN, RELEASE, PLE])
    assert rows(q="CONFLICT") == [MAIN]  # any case, over patches' status and decision
    assert rows(q="v0.26.0") == [RELEASE]  # the base
    assert rows(q="53899") == [PLE]
    html = site.get("/", params={"q": "no-such-thing"}).text
    assert "No series matches “no-such-thing”." in html and 'href="/">all series</a>' in html
    assert site.get("/", params={"sort": "sideways"}).status_code == 422


def test_series_detail_has_decision_reason_and_evidence(site: Site) -> None:
    detail = site.get(f"/api/v1/series/{MAIN}").json()

    patch = detail["patches"][0]
    assert (patch["status"], patch["decision"]) == ("conflict", "review")
    assert patch["reason"].startswith("hunk 2")
    assert patch["evidence"][0]["signal"] == "apply --3way"
    assert patch["conflict"]["hunks"] == [2]
    assert detail["attention"][1] == {
        "series": MAIN,
        "reason": "CI gaudi: failure",
        "patch": None,
        "run_id": FAILED_RUN,
        "since": None,  # the seeded row has no updated_at
        "age": None,
        "link": None,
    }


@pytest.mark.parametrize(
    ("path", "error"),
    [
        ("/api/v1/series/nope", "unknown series 'nope'"),
        ("/api/v1/series/nope/history", "unknown series 'nope'"),
        (f"/api/v1/series/{MAIN}/patches/9999-nope.patch", "unknown patch '9999-nope.patch'"),
        ("/api/v1/series/nope/patches/x.patch", "unknown series 'nope'"),
        ("/api/v1/runs/run-nope", "unknown run 'run-nope'"),
        ("/api/v1/runs/run-nope/log", "unknown run 'run-nope'"),
    ],
)
def test_unknown_ids_are_404_with_a_clear_json_error(site: Site, path: str, error: str) -> None:
    response = site.get(path)

    assert response.status_code == 404
    assert response.json()["error"].startswith(error)


def test_history_is_newest_first_and_limited(site: Site) -> None:
    entries = site.get(f"/api/v1/series/{MAIN}/history").json()["entries"]
    newest = site.get(f"/api/v1/series/{MAIN}/history", params={"limit": 1}).json()["entries"]

    assert [e["kind"] for e in entries] == ["ci-check", "decision", "rebase"]
    assert newest == entries[:1]
    assert entries[0]["summary"] == "gaudi: failure"  # in words; the fields stay in `data`
    assert entries[0]["data"]["run_id"] == FAILED_RUN
    assert site.get(f"/api/v1/series/{MAIN}/history", params={"limit": 0}).status_code == 422


def test_patch_detail_has_fix_page_and_every_entry_about_the_patch(site: Site) -> None:
    detail = site.get(f"/api/v1/series/{MAIN}/patches/{PATCH}").json()

    page = detail["fix_page"]
    assert page["name"] == "async-inputs"
    assert page["file"] == f"patches/{MAIN}/async-inputs.md"
    assert [s["title"] for s in page["sections"]][:2] == ["Problem", "Symptom"]
    assert page["markdown"].startswith("# async-inputs\n")
    # The ci-check and head-moved entries do not name the patch.
    assert [(h["kind"], h["about"]) for h in detail["history"]] == [("decision", DECISION)]
    release = site.get(f"/api/v1/series/{RELEASE}/patches/{PATCH}").json()
    assert release["history"][0]["about"] == {"status": "applies", "decision": "keep"}


def test_fix_pages_come_from_the_downstream_checkout_not_the_web_directory(
    client: redis.Redis, tmp_path: Path
) -> None:
    """The workers read the series from the downstream checkout; so does the dashboard, from
    wherever the web process was started."""
    checkout = tmp_path / "checkout"
    shutil.copytree(REPO_ROOT / "patches" / MAIN, checkout / "patches" / MAIN)
    page_file = checkout / "patches" / MAIN / "async-inputs.md"
    page_file.write_text(page_file.read_text().replace("## Problem", "## Problem\n\nFROM-CHECKOUT"))
    seed(client)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path)  # no patches/ here
        patch.delenv(TOKEN_ENV, raising=False)
        settings = Settings(
            webhook_secret=WEBHOOK_SECRET, downstream_dir=checkout, max_body_bytes=None
        )
        app = create_app(CONFIG, settings, client)
    with serve(app) as url:
        detail = httpx.get(f"{url}/api/v1/series/{MAIN}/patches/{PATCH}").json()
    assert detail["fix_page"] is not None, detail.get("fix_page_note")
    assert "FROM-CHECKOUT" in detail["fix_page"]["markdown"]


def test_without_config_there_are_no_fix_pages(client: redis.Redis) -> None:
    seed(client)
    with dashboard(client, None) as url:
        detail = httpx.get(f"{url}/api/v1/series/{MAIN}/patches/{PATCH}").json()
        page = httpx.get(f"{url}/series/{MAIN}/patches/{PATCH}")

    assert detail["fix_page"] is None
    assert detail["fix_page_note"] == "no configuration loaded: fix pages are not shown"
    assert "no configuration loaded" in page.text


def test_runners_show_heartbeats_and_queue_depth(site: Site) -> None:
    view = site.get("/api/v1/runners").json()

    assert [(r["name"], r["info"]) for r in view["runners"]] == [
        ("gaudi-host-1", {"kind": "gaudi", "queue": "hw.gaudi"})
    ]
    assert view["runners"][0]["age"].endswith("s ago")
    assert view["queues"] == [
        {"runner": "gaudi", "queue": "hw.gaudi", "depth": 2},
        {"runner": "gb10", "queue": "hw.gb10", "depth": 0},
    ]


def test_run_log_pages_with_after(site: Site) -> None:
    first = site.get(f"/api/v1/runs/{FAILED_RUN}/log").json()
    rest = site.get(f"/api/v1/runs/{FAILED_RUN}/log", params={"after": first["lines"][0]["id"]})
    run = site.get(f"/api/v1/runs/{FAILED_RUN}").json()

    assert [(line["stream"], line["text"]) for line in first["lines"]] == [
        ("stdout", "serving model on 127.0.0.1:8000"),
        ("stderr", "AssertionError: greedy outputs differ"),
    ]
    assert rest.json()["lines"] == first["lines"][1:]
    assert first["after"] == first["lines"][-1]["id"]
    assert (run["series"], run["runner"], run["ci"]["state"]) == (MAIN, "gaudi", "failure")
    assert site.get(f"/api/v1/runs/{FAILED_RUN}/log", params={"after": "x;y"}).status_code == 422


def test_openapi_publishes_the_api_but_not_the_pages(site: Site) -> None:
    paths = site.get("/openapi.json").json()["paths"]

    assert {
        "/api/v1/series",
        "/api/v1/series/{series_id}",
        "/api/v1/series/{series_id}/history",
        "/api/v1/series/{series_id}/patches/{name}",
        "/api/v1/runners",
        "/api/v1/runs/{run_id}/log",
        "/api/v1/events",
    } <= set(paths)
    assert "/" not in paths
    assert "404" in paths["/api/v1/series/{series_id}"]["get"]["responses"]


# --------------------------------------------------------------------------- pages


def test_overview_page_has_attention_first_and_real_table_headers(site: Site) -> None:
    response = site.get("/")
    html = response.text

    assert response.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in response.headers["content-security-policy"]
    attention = html.index('id="needs-attention"')
    assert attention < html.index("What is carried where")
    assert html.index(f"{PATCH}: conflict") > attention
    assert '<th scope="col">Base and head</th>' in html
    assert f'<th scope="row" data-label="Series"><a href="/series/{MAIN}">{MAIN}</a>' in html
    assert "awaiting import: no patch files yet" in html  # the PLE series
    # One row per series and a fixed set of columns: no column per patch name (a series
    # carrying different patches made the table the cross-product of all of them).
    head = html[html.index("<thead>", html.index("What is carried where")) :]
    head = head[: head.index("</thead>")]
    assert re.findall(r'<th scope="col">([^<]+)</th>', head) == [
        "Series",
        "Base and head",
        "State",
        "Patches",
        "CI",
        "carry PR",
        "Last event",
    ]
    assert '<span class="st tone-bad">conflict</span>' in html


def test_the_interdiff_is_named_for_what_it_compares(client: redis.Redis) -> None:
    """It compares the carried patch with the refreshed one, not with upstream's version
    (failed on f87f93e: "Interdiff against upstream's version")."""
    interdiff = (
        "--- carried\n+++ refreshed\n@@ -3,3 +3,3 @@\n-@@ -20,6 +20,8 @@\n+@@ -24,6 +24,8 @@\n"
    )
    patch = PatchState(name=PATCH, status="applies-moved", decision="keep", interdiff=interdiff)
    save_series(client, SeriesState(id=MAIN, patches=[patch]))
    with dashboard(client) as url:
        page = httpx.get(f"{url}/series/{MAIN}/patches/{PATCH}", timeout=10).text

    assert "upstream&#39;s version" not in page and "upstream's version" not in page
    assert (
        "<h3>What the refresh changes in the patch (the carried patch against the refreshed "
        "one)</h3>"
    ) in page
    assert '<span class="add">+@@ -24,6 +24,8 @@</span>' in page


def test_a_series_not_checked_yet_shows_its_patch_files(client: redis.Redis) -> None:
    """Before its first check a series has patch files, not "no patches" (failed on f87f93e:
    the overview said "no patches yet" and the series page "No patches recorded yet")."""
    save_series(client, SeriesState(id=MAIN, upstream_repo="vllm-project/vllm-gaudi"))
    save_series(client, ple_series())
    with dashboard(client) as url:
        overview = httpx.get(f"{url}/", timeout=10).text
        page = httpx.get(f"{url}/series/{MAIN}", timeout=10).text
        listed = httpx.get(f"{url}/api/v1/series", timeout=10).json()["series"]

    row = overview[overview.index(f'id="series-{MAIN}"') :].split("</tr>", 1)[0]
    assert "1 patch file, not checked yet" in row and "no patches" not in row
    assert f"1 patch file, not checked yet: {PATCH}." in page
    assert {s["id"]: s["patch_files"] for s in listed} == {MAIN: [PATCH], PLE: []}


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (f"/series/{MAIN}", "Timeline of heads and decisions"),
        (f"/series/{MAIN}/patches/{PATCH}", "Every decision about this patch"),
        (f"/runs/{FAILED_RUN}", "AssertionError: greedy outputs differ"),
        ("/runners", "gaudi-host-1"),
        ("/events", "delivery-0001"),
    ],
)
def test_every_page_renders_seeded_state(site: Site, path: str, expected: str) -> None:
    response = site.get(path)

    assert response.status_code == 200
    assert expected in response.text


def test_the_events_page_shows_a_long_error_whole(site: Site) -> None:
    cause = "fatal: unable to access https://example.invalid/up.git/: Could not resolve host"
    error = f"git ls-remote --refs https://example.invalid/up.git refs/heads/main failed: {cause}"
    append_history(site.client, MAIN, "poll-failed", upstream="engine", error=error)
    page = site.get("/events").text
    assert "whole error" in page and cause in page


def test_unknown_pages_are_404_pages(site: Site) -> None:
    response = site.get("/series/nope")

    assert response.status_code == 404
    assert "unknown series &#39;nope&#39;" in response.text


def test_patch_page_renders_the_fix_page(site: Site) -> None:
    html = site.get(f"/series/{MAIN}/patches/{PATCH}").text

    assert "<h3>async-inputs</h3>" in html
    assert "<h4>Problem</h4>" in html
    assert "<code>_create_decode_input_data</code>" in html
    assert '<th scope="col">Field</th>' in html


def test_state_text_is_escaped_in_pages(client: redis.Redis) -> None:
    state = main_series()
    state.patches[0].reason = '<script>alert("x")</script>'
    save_series(client, state)
    with dashboard(client) as url:
        html = httpx.get(f"{url}/series/{MAIN}").text

    assert "<script>alert" not in html
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in html


def test_stored_links_that_are_not_http_are_refused(
    client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    # Someone with write access to the store plants script links where carry keeps URLs.
    state = main_series()
    state.ci["gaudi"].url = "javascript:alert(1)"
    state.pr = PrInfo(7, "JavaScript:alert(2)", "carry/x")
    state.upstream_web_host = "javascript:alert(3)//"
    state.patches[0].upstream_prs = [{"ref": "vllm-project/vllm-gaudi#5", "state": "open"}]
    save_series(client, state)

    with dashboard(client) as url, caplog.at_level("WARNING", logger="carry.state"):
        page = httpx.get(f"{url}/series/{MAIN}").text
        patch_page = httpx.get(f"{url}/series/{MAIN}/patches/{PATCH}").text
        api = httpx.get(f"{url}/api/v1/series/{MAIN}").text

    for shown in (page, patch_page, api):
        assert "alert(" not in shown.lower()
    assert "vllm-project/vllm-gaudi#5" in patch_page  # the ref is still shown, unlinked
    refused = [r.getMessage() for r in caplog.records if "stored link refused" in r.getMessage()]
    assert (
        "CI row gaudi: stored link refused: 'javascript:alert(1)' is not an http(s) URL: "
        "only http:// and https:// links are accepted"
    ) in refused
    assert any(f"series {MAIN}: PR: stored link refused" in m for m in refused)
    assert any(f"series {MAIN}: upstream web host: stored link refused" in m for m in refused)


def test_markdown_renderer_is_safe_and_covers_the_fix_page_subset() -> None:
    text = (
        "# Title <b>x</b>\n\nA *b* **c** `<i>` [ok](https://e.org/?a=1&b=2) [bad](javascript:x)\n"
        "\n| A | B |\n|---|---|\n| 1 | <img src=x> |\n\n- one\n  more\n- two\n\n1. first\n"
        "\n```\n<raw>\n```\n"
    )

    html = str(render_markdown(text))

    assert "<h2>Title &lt;b&gt;x&lt;/b&gt;</h2>" in html
    assert "<em>b</em> <strong>c</strong> <code>&lt;i&gt;</code>" in html
    assert '<a href="https://e.org/?a=1&amp;b=2" rel="noopener noreferrer">ok</a>' in html
    assert "[bad](javascript:x)" in html
    assert '<thead><tr><th scope="col">A</th><th scope="col">B</th></tr></thead>' in html
    assert "<td>&lt;img src=x&gt;</td>" in html
    assert "<ul><li>one more</li><li>two</li></ul>" in html
    assert "<ol><li>first</li></ol>" in html
    assert "<pre><code>&lt;raw&gt;</code></pre>" in html


def test_html_comments_of_a_new_fix_page_are_not_shown() -> None:
    """`carry new` explains each field in HTML comments; the dashboard escaped them into text."""
    from bot.scaffold import series_files

    page = series_files("widget", "widget-fix", ["v1.0"])["widget-fix.md"]
    html = str(render_markdown(page))
    assert "&lt;!--" not in html and "Affects:" not in html
    assert "<th" in html and "TODO: one paragraph" in html  # the rest is still there


# --------------------------------------------------------------------------- badges


def test_badges_are_svg_with_their_status_in_text(site: Site) -> None:
    series = site.get(f"/badges/series/{MAIN}.svg")
    patch = site.get(f"/badges/series/{RELEASE}/patches/{PATCH}.svg")
    unknown = site.get("/badges/series/nope.svg")

    assert series.headers["content-type"] == "image/svg+xml"
    assert series.headers["cache-control"].startswith("no-cache")
    assert ">conflict</text>" in series.text
    assert f'aria-label="{MAIN}: conflict"' in series.text
    assert f'aria-label="{PATCH}: applies, keep"' in patch.text
    assert (unknown.status_code, unknown.headers["content-type"]) == (404, "image/svg+xml")
    assert ">unknown</text>" in unknown.text


# --------------------------------------------------------------------------- live stream


def read_event(lines: Iterator[str]) -> list[str]:
    """The lines of the next server-sent event (up to its blank line)."""
    event: list[str] = []
    for line in lines:
        if not line:
            if event:
                return event
            continue
        event.append(line)
    raise AssertionError("stream ended")


def test_stream_relays_every_update_as_a_data_line(site: Site) -> None:
    with site.http.stream("GET", f"{site.url}/events/stream") as response:
        lines = response.iter_lines()
        assert response.headers["content-type"].startswith("text/event-stream")
        assert read_event(lines) == ["retry: 3000", ": connected"]
        append_history(site.client, MAIN, "rebase", head="abc")
        save_series(site.client, release_series())
        received = [read_event(lines), read_event(lines)]

    assert [json.loads(event[0].removeprefix("data: ")) for event in received] == [
        {"kind": "history", "series": MAIN, "entry": "rebase"},
        {"kind": "series", "series": RELEASE},
    ]


def test_stream_sends_heartbeats_while_quiet(client: redis.Redis) -> None:
    app = FastAPI()
    live = LiveStream(async_client_like(client), heartbeat_s=0.2)
    app.include_router(dashboard_router(client, GATE, None, FixPages(None), live=live))
    with serve(app) as url, httpx.stream("GET", f"{url}/events/stream", timeout=5) as response:
        lines = response.iter_lines()
        first, second = read_event(lines), read_event(lines)

    assert (first[-1], second) == (": connected", [": keepalive"])


# --------------------------------------------------------------------------- access and secrets


def test_the_token_guards_pages_api_stream_and_badges(client: redis.Redis) -> None:
    seed(client)
    with dashboard(client, token=DASHBOARD_TOKEN) as url, httpx.Client(timeout=5) as http:
        refused = [http.get(f"{url}{p}").status_code for p in ("/", "/api/v1/series", "/runners")]
        refused.append(http.get(f"{url}/badges/series/{MAIN}.svg").status_code)
        bearer = http.get(
            f"{url}/api/v1/series", headers={"Authorization": f"Bearer {DASHBOARD_TOKEN}"}
        )
        login = http.get(f"{url}/runners", params={"token": DASHBOARD_TOKEN, "x": "1"})
        cookie = http.cookies.get(SESSION_COOKIE)
        after_login = http.get(f"{url}/")
        api_with_cookie = http.get(f"{url}/api/v1/series")
        with http.stream("GET", f"{url}/events/stream") as stream:
            stream_status = stream.status_code

    assert refused == [401, 401, 401, 401]
    assert bearer.status_code == 200
    assert login.status_code == 303
    assert login.headers["location"] == "/runners?x=1"
    assert "HttpOnly" in login.headers["set-cookie"]
    assert cookie and DASHBOARD_TOKEN not in cookie
    assert (after_login.status_code, api_with_cookie.status_code, stream_status) == (200, 200, 200)


def crawl(http: httpx.Client, url: str) -> dict[str, httpx.Response]:
    paths = [
        "/",
        f"/series/{MAIN}",
        f"/series/{MAIN}/patches/{PATCH}",
        f"/runs/{FAILED_RUN}",
        "/runners",
        "/events",
        "/series/nope",
        f"/badges/series/{MAIN}.svg",
        f"/badges/series/{MAIN}/patches/{PATCH}.svg",
        "/api/v1/series",
        f"/api/v1/series/{MAIN}",
        f"/api/v1/series/{MAIN}/history",
        f"/api/v1/series/{MAIN}/patches/{PATCH}",
        "/api/v1/history",
        "/api/v1/runners",
        f"/api/v1/runs/{FAILED_RUN}",
        f"/api/v1/runs/{FAILED_RUN}/log",
        "/api/v1/events",
        "/openapi.json",
        "/static/live.js",
    ]
    return {path: http.get(f"{url}{path}") for path in paths}


def test_no_configured_secret_appears_in_any_response(client: redis.Redis) -> None:
    seed(client)
    with dashboard(client, token=DASHBOARD_TOKEN) as url, httpx.Client(timeout=5) as http:
        login = http.get(f"{url}/", params={"token": DASHBOARD_TOKEN}, follow_redirects=False)
        responses = {"/?token=…": login, **crawl(http, url)}

    statuses = {path: r.status_code for path, r in responses.items() if r.status_code != 200}
    assert statuses == {"/?token=…": 303, "/series/nope": 404}
    for path, response in responses.items():
        exposed = response.text + json.dumps(dict(response.headers))
        for secret in (WEBHOOK_SECRET, GITHUB_TOKEN, DASHBOARD_TOKEN):
            assert secret not in exposed, path


def test_a_dead_store_answers_503() -> None:
    dead = redis.Redis(port=free_port(), retry=Retry(NoBackoff(), 0), socket_connect_timeout=1)
    with dashboard(dead) as url:
        api = httpx.get(f"{url}/api/v1/series")
        page = httpx.get(f"{url}/")

    assert (api.status_code, api.json()["error"]) == (
        503,
        "carry's store is unavailable (ConnectionError); try again shortly",
    )
    assert page.status_code == 503
    assert re.search(r"<h1>Unavailable</h1>", page.text)


# --------------------------------------------------------------------------- carry's own health


def test_carrys_own_trouble_needs_attention_with_since_when(client: redis.Redis) -> None:
    """Not only a series' problems: GitHub's rate limit nearly spent and hardware jobs that
    wait for a runner kind with no runner online are shown first, with since when, and a
    series' error and unreachable upstream say since when they began."""
    seed(client)
    record_rate_limit(client, 42, 5000)
    client.lpush("hw.gb10", b"{}")  # a job waits; only a gaudi runner sends heartbeats
    heartbeat(client, "gaudi", "gaudi@host", {"state": "idle"})
    update_series(client, MAIN, lambda s: tr.step_failed(s, "publish failed: 502", final=True))
    update_series(client, PLE, lambda s: setattr(s, "upstream_error", "no route") or True)
    with dashboard(client) as url:
        listed = httpx.get(f"{url}/api/v1/series", timeout=10).json()
        page = httpx.get(f"{url}/", timeout=10).text
    reasons = [h["reason"] for h in listed["health"]]
    assert reasons == [
        "GitHub rate limit nearly spent: 42 of 5000 requests left",
        "no gb10 runner is online: 1 job(s) wait in hw.gb10",
    ]
    assert listed["health"][0]["since"] and listed["health"][0]["age"].endswith("ago")
    assert listed["health"][1]["link"] == "/runners"
    rows = {a["reason"]: a for s in listed["series"] for a in s["attention"]}
    error = rows["error: publish failed: 502"]
    assert error["since"] and error["age"].endswith(" s ago")
    assert rows["upstream unreachable: no route"]["since"]
    section = page[page.index('id="needs-attention"') : page.index('id="matrix-title"')]
    assert section.index("GitHub rate limit nearly spent") < section.index("publish failed: 502")
    assert "carry itself" in section and 'href="/runners"' in section and "(since " in section


def test_an_error_keeps_the_time_it_began_until_it_is_gone(client: redis.Redis) -> None:
    save_series(client, SeriesState(id=MAIN))
    update_series(
        client, MAIN, lambda s: tr.step_failed(s, "rebase failed (attempt 1)", final=False)
    )
    began = load_series(client, MAIN).error_since  # type: ignore[union-attr]
    assert began is not None
    update_series(
        client, MAIN, lambda s: tr.step_failed(s, "rebase failed (attempt 2)", final=True)
    )
    assert load_series(client, MAIN).error_since == began  # type: ignore[union-attr]
    update_series(
        client, MAIN, lambda s: tr.start_check(s, "c" * 40, "refs/heads/main", None, ago())
    )
    state = load_series(client, MAIN)
    assert state is not None and state.error is None and state.error_since is None


def test_verified_heads_last_good_and_red_streak_on_the_page_api_and_badge(
    client: redis.Redis,
) -> None:
    """Issue 32: the heads carry tested, the last known good head and the red streak are in
    the series' JSON, on its page and in its last-good badge."""
    good, bad = "a" * 40, "b" * 40
    state = SeriesState(
        id="verified",
        upstream_repo="vllm-project/vllm-gaudi",
        heads=[
            HeadCheck(good, "t1", Verdict.GREEN, {"gaudi/fixed": "success"}, ago(hours=2)),
            HeadCheck(bad, "t2", Verdict.RED, {"gaudi/fixed": "failure"}, ago(hours=1)),
        ],
        last_good=GoodHead(good, "t1", ago(hours=2)),
        red_streak=RedStreak(bad, ago(hours=1), 1, bad),
        human_wait=HumanWait(good, ago(hours=3), 12, bad, told=True),
    )
    culprit = "c" * 40
    found = bisect.start(
        "gaudi/fixed", good, [(culprit, "Rework the scheduler (#77)"), (bad, "x")], "t"
    )
    assert bisect.next_probe(found, "t") == culprit
    assert bisect.record(found, culprit, bisect.Probe.FAIL)
    assert bisect.next_probe(found, "t") is None and bisect.next_ab(found) == culprit
    assert bisect.record_ab(found, culprit, bisect.Probe.FAIL, "t")
    assert bisect.next_ab(found) == good
    assert bisect.record_ab(found, good, bisect.Probe.FAIL, "t")
    state.bisect = found
    save_series(client, state)
    with dashboard(client) as url, httpx.Client(timeout=10) as http:
        api = http.get(f"{url}/api/v1/series/verified").json()
        page = http.get(f"{url}/series/verified").text
        badge = http.get(f"{url}/badges/series/verified/good.svg")
    assert [h["head"] for h in api["heads"]] == [bad, good]  # newest first
    assert [h["verdict"] for h in api["heads"]] == ["red", "green"]
    assert api["last_good"]["head"] == good
    assert api["last_good"]["badge"] == "/badges/series/verified/good.svg"
    assert api["red_streak"] == {"head": bad, "at": state.red_streak.at, "heads": 1, "last": bad}  # type: ignore[union-attr]
    assert "Red since <code>bbbbbbbbbbbb</code>" in page
    assert api["human_wait"]["heads"] == 12 and api["human_wait"]["told"] is True
    assert "Waiting for a human since <code>aaaaaaaaaaaa</code> (12 checked heads" in page
    assert "people were told it is stuck" in page
    assert "Last known good head: <code>aaaaaaaaaaaa</code>" in page
    assert "(last good)" in page
    assert badge.headers["content-type"] == "image/svg+xml"
    assert "aaaaaaaaaaaa (red since bbbbbbbbbbbb)" in badge.text
    assert api["bisect"]["status"] == "found" and api["bisect"]["culprit"] == culprit
    assert api["bisect"]["culprit_pr"] == 77 and api["bisect"]["ab"] == {
        "culprit": "fail",
        "parent": "fail",
    }
    assert "First failing commit: <code>cccccccccccc</code> Rework the scheduler (#77)</p>" in page
    assert "the fix no longer works after cccccccccccc Rework the scheduler (#77)" in page


@pytest.mark.parametrize(
    ("host", "token", "open_"),
    [
        ("127.0.0.1", None, False),
        ("::1", None, False),
        ("localhost", None, False),
        ("0.0.0.0", None, True),
        ("::", None, True),
        ("10.1.2.3", None, True),
        ("carry.internal", None, True),
        ("0.0.0.0", "t0ken", False),
    ],
)
def test_a_dashboard_open_beyond_this_machine_without_a_token_is_said(
    host: str, token: str | None, open_: bool
) -> None:
    """Issue 33: compose's dashboard, run logs and /metrics were public with no warning."""
    said = exposure_warning(host, 8000, SecretStr(token) if token else None, TOKEN_ENV)
    assert (said is not None) == open_
    if said is not None:
        assert f"anyone who can reach {host}:8000" in said and TOKEN_ENV in said


def test_every_page_shows_the_exposure_warning(client: redis.Redis) -> None:
    save_series(client, main_series())
    said = exposure_warning("0.0.0.0", 8000, None, TOKEN_ENV)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(REPO_ROOT)
        patch.delenv(TOKEN_ENV, raising=False)
        app = create_app(CONFIG, secret_settings(), client, exposure=said)
    with serve(app) as url, httpx.Client(timeout=10) as http:
        for path in ("/", f"/series/{MAIN}", "/runs", "/runners", "/events", "/series/none"):
            page = http.get(f"{url}{path}").text
            assert "Open to the network:" in page and "anyone who can reach 0.0.0.0:8000" in page
    with dashboard(client) as url, httpx.Client(timeout=10) as http:
        assert "Open to the network" not in http.get(f"{url}/").text


def test_notices_not_yet_on_github_are_shown_first_until_said(client: redis.Redis) -> None:
    """A notice carry must say on its PR (the backup branch of a person's commits) is on the
    series page and in the API from the moment it is due until GitHub has it."""
    state = main_series()
    state.notices = [
        Notice(
            "said-1",
            NoticeKind.OTHER,
            "An older notice.",
            at="2026-12-01T00:00:00+00:00",
            said_at="2026-12-01T00:01:00+00:00",
            pr=7,
            comment_id=3,
        ),
        Notice(
            "kept-2",
            NoticeKind.COMMITS_KEPT,
            "Your 2 commits are kept on carry/backup/x.",
            at="2026-12-02T00:00:00+00:00",
        ),
    ]
    save_series(client, state)
    with dashboard(client) as url, httpx.Client(timeout=10) as http:
        api = http.get(f"{url}/api/v1/series/{MAIN}").json()
        page = http.get(f"{url}/series/{MAIN}").text
    assert [(n["id"], n["said_at"]) for n in api["notices"]] == [
        ("kept-2", None),
        ("said-1", "2026-12-01T00:01:00+00:00"),
    ]
    assert "Not yet said on GitHub (1)" in page
    assert "Your 2 commits are kept on carry/backup/x." in page
    assert "An older notice." not in page  # said: in the history, not here

    state.notices[1].said_at = "2026-12-02T00:05:00+00:00"
    save_series(client, state)
    with dashboard(client) as url, httpx.Client(timeout=10) as http:
        page = http.get(f"{url}/series/{MAIN}").text
    assert "Not yet said on GitHub" not in page
