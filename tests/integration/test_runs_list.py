"""/runs and /api/v1/runs: every hardware run, filtered and paged, over real HTTP and a real
Redis. The runs are written with the store functions the CI workers use (write_run, then the
runner's transitions); only their request times are set, so that their order is known."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import httpx
import pytest
import redis

from bot.store.ci_runs import run_key, transition, write_run
from tests.support.dashboard_app import dashboard


@dataclass(frozen=True)
class Planned:
    run_id: str
    series: str
    kind: str
    head: str
    result: str  # the state it ends in
    minutes_ago: int
    took_s: int


def iso(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def plan() -> list[Planned]:
    """55 runs over two series and two runner kinds, one a minute, newest first."""
    out = []
    for n in range(55):
        series = "engine-main" if n % 2 else "engine-release-1.4"
        kind = "gaudi" if n % 3 else "gb10"
        result = ("success", "failure", "infra-error", "success", "running")[n % 5]
        head = f"{n:02d}" + "ab" * 19
        out.append(Planned(f"{kind}-{n:012x}", series, kind, head, result, n + 1, 30 + n))
    return out


def store_run(client: redis.Redis, run: Planned) -> None:
    values = {"series": run.series, "kind": run.kind, "tree_key": "t" * 64, "state": "queued"}
    write_run(client, run.run_id, run.series, run.kind, {**values, "head_sha": run.head})
    runner = f"{run.kind}-host-{run.minutes_ago % 2}"
    assert transition(client, run.run_id, "running", ("queued",), runner=runner)
    if run.result != "running":
        assert transition(client, run.run_id, run.result, ("running",), detail="checks done")
    # Now, not at import: a long suite had run 14 minutes between the two.
    requested = datetime.now(UTC) - timedelta(minutes=run.minutes_ago)
    client.hset(
        run_key(run.run_id),
        mapping={
            "created_at": iso(requested),
            "updated_at": iso(requested + timedelta(seconds=run.took_s)),
        },
    )


@pytest.fixture
def planned() -> list[Planned]:
    return plan()


@pytest.fixture
def site(redis_url: str, planned: list[Planned]) -> Iterator[tuple[str, httpx.Client]]:
    client = redis.Redis.from_url(redis_url)
    for run in planned:
        store_run(client, run)
    with dashboard(client) as url, httpx.Client(base_url=url, timeout=10) as http:
        yield url, http


def test_the_api_lists_every_run_newest_first_with_its_facts(
    site: tuple[str, httpx.Client], planned: list[Planned]
) -> None:
    _, http = site
    first = http.get("/api/v1/runs").json()
    second = http.get("/api/v1/runs", params={"page": 2}).json()

    assert (first["total"], first["pages"], first["per_page"]) == (55, 2, 50)
    listed = first["runs"] + second["runs"]
    assert [r["run_id"] for r in listed] == [p.run_id for p in planned]
    newest, oldest_done = listed[0], listed[1]
    assert (newest["series"], newest["kind"], newest["head_sha"]) == (
        planned[0].series,
        planned[0].kind,
        planned[0].head,
    )
    assert newest["result"] == "success" and newest["finished"] is True
    assert newest["duration_s"] == 30 and newest["duration"] == "30 s"
    assert newest["runner"] == "gb10-host-1" and newest["age"] == "1 min ago"
    assert oldest_done["result"] == "failure" and oldest_done["detail"] == "checks done"
    running = next(r for r in listed if r["result"] == "running")
    assert running["finished"] is False and running["duration_s"] >= 60 * 4  # so far
    assert first["series_ids"] == ["engine-main", "engine-release-1.4"]
    assert first["kinds"] == ["gaudi", "gb10"]


@pytest.mark.parametrize(
    ("params", "keep"),
    [
        ({"series": "engine-main"}, lambda p: p.series == "engine-main"),
        ({"runner": "gb10"}, lambda p: p.kind == "gb10"),
        ({"runner": "gaudi-host-0"}, lambda p: p.kind == "gaudi" and p.minutes_ago % 2 == 0),
        ({"head": "07AB"}, lambda p: p.head.startswith("07ab")),
        ({"result": "infra-error"}, lambda p: p.result == "infra-error"),
        (
            {"series": "engine-main", "result": "success", "runner": "gaudi"},
            lambda p: (p.series, p.result, p.kind) == ("engine-main", "success", "gaudi"),
        ),
        ({"series": "", "result": ""}, lambda p: True),  # the page's form sends "" for any
    ],
)
def test_the_api_filters_by_series_runner_head_and_result(
    site: tuple[str, httpx.Client], planned: list[Planned], params: dict[str, str], keep: object
) -> None:
    _, http = site
    answer = http.get("/api/v1/runs", params={**params, "per_page": 100}).json()
    wanted = [p.run_id for p in planned if keep(p)]  # type: ignore[operator]

    assert wanted, "the plan has runs of this kind"
    assert [r["run_id"] for r in answer["runs"]] == wanted
    assert answer["total"] == len(wanted)


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"head": "not-a-sha"}, "head"),
        ({"result": "green"}, "result"),
        ({"page": "0"}, "page"),
        ({"per_page": "501"}, "per_page"),
    ],
)
def test_a_bad_filter_is_a_clear_422(
    site: tuple[str, httpx.Client], params: dict[str, str], field: str
) -> None:
    _, http = site
    answer = http.get("/api/v1/runs", params=params)

    assert answer.status_code == 422
    assert [e["loc"][-1] for e in answer.json()["detail"]] == [field]


def cells(page: str) -> list[str]:
    """The run ids of the page's table, in order."""
    return re.findall(r'<th scope="row" data-label="Run"><a href="/runs/([^"]+)">', page)


def test_the_page_lists_filters_and_pages_the_runs(
    site: tuple[str, httpx.Client], planned: list[Planned]
) -> None:
    _, http = site
    overview = http.get("/").text
    first = http.get("/runs").text
    failures = http.get("/runs", params={"result": "failure", "series": ""}).text
    older = re.search(r'<a href="([^"]+)" rel="next">Older runs</a>', first)

    assert '<a href="/runs">Every hardware CI run</a>' in overview
    assert cells(first) == [p.run_id for p in planned[:50]]
    assert "55 runs; page 1 of 2" in first
    assert older is not None
    rest = http.get(html.unescape(older.group(1))).text
    assert cells(rest) == [p.run_id for p in planned[50:]]
    assert "Newer runs" in rest and "Older runs" not in rest
    assert cells(failures) == [p.run_id for p in planned if p.result == "failure"]
    assert '<option value="failure" selected>' in failures
    assert 'href="/api/v1/runs?result=failure&amp;page=1"' in failures  # its JSON twin
    row = first.split(f'href="/runs/{planned[0].run_id}"', 1)[1].split("</tr>", 1)[0]
    for shown in (planned[0].series, "gb10", "on gb10-host-1", planned[0].head[:12], "success"):
        assert shown in row
    assert "30 s" in row and "1 min ago" in row


def test_a_filter_that_matches_nothing_says_so(site: tuple[str, httpx.Client]) -> None:
    _, http = site
    page = http.get("/runs", params={"head": "ffff"}).text

    assert cells(page) == [] and "No run matches." in page


def test_every_listed_run_has_its_page(
    site: tuple[str, httpx.Client], planned: list[Planned]
) -> None:
    """A run no series' CI row refers to (an older head's, a cancelled one, one that never ran)
    is listed, and its link leads to its facts. Failed on af85829: /runs/<id> and
    /api/v1/runs/<id> were 404 "unknown run" for every run of the list (no CI row, no log)."""
    _, http = site
    for run in planned[:5]:  # success, failure, infra-error, success, running
        page = http.get(f"/runs/{run.run_id}")
        api = http.get(f"/api/v1/runs/{run.run_id}")

        assert (page.status_code, api.status_code) == (200, 200), page.text[:300]
        shown = api.json()
        assert (shown["series"], shown["runner"]) == (run.series, run.kind)
        assert (shown["ci"]["state"], shown["ci"]["head_sha"]) == (run.result, run.head)
        facts = page.text.split('<dl class="facts">', 1)[1].split("</dl>", 1)[0]
        for fact in (run.series, run.kind, f"on {run.kind}-host-{run.minutes_ago % 2}", run.head):
            assert fact in facts, (run.run_id, fact)
        assert run.result in facts
    assert http.get("/runs/gaudi-000000000bad").status_code == 404
