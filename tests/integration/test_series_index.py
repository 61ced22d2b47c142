"""The dashboard's list of series does not walk the whole store, and does not read documents
it has already made its rows of (issue 37: at 200 series the overview's p95 was 755 ms in
bench/scale.py; a SCAN for carry:series:* visits every key, and the done keys of 90 days,
deliveries and runs outnumber the series by thousands; at 200 series of 30 patches every
overview read ~7 MB of documents, most of them unchanged since the last request)."""

from __future__ import annotations

import hashlib
import json

import redis

from bot.core.state import SeriesState
from bot.store import series as store
from bot.store.runners import heartbeat, runners
from bot.web.series_cache import SeriesCache
from bot.web.views import FixPages, carry_health, kept_summaries
from tests.support.dashboard_app import CONFIG
from tests.support.paths import REPO_ROOT

OTHER_KEYS = 20_000


def calls(client: redis.Redis, command: str) -> int:
    stats = client.info("commandstats")
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


def stored_versions(client: redis.Redis) -> dict[str, str]:
    """Each series document's sha1, from its bytes as stored."""
    prefix = f"{store.PREFIX}series:"
    return {
        key.decode().removeprefix(prefix): hashlib.sha1(client.get(key) or b"").hexdigest()
        for key in client.scan_iter(f"{prefix}*")
    }


def other_keys(client: redis.Redis) -> None:
    """What a store of some age holds beside the series: done keys, deliveries, runs."""
    pipe = client.pipeline(transaction=False)
    for n in range(OTHER_KEYS):
        pipe.set(f"{store.PREFIX}done:action-{n}", "1")
    pipe.execute()


def test_listing_the_series_does_not_scan_the_other_keys(client: redis.Redis) -> None:
    other_keys(client)
    store.save_series(client, SeriesState("s1"))
    store.ensure_series(client, "s2")
    store.update_series(client, "s3", lambda state: True, create={})
    store.all_series(client)  # a store from before the versions is versioned once
    before = calls(client, "scan")

    listed = [state.id for state in store.all_series(client)]

    assert listed == ["s1", "s2", "s3"]
    assert calls(client, "scan") == before, "the listing scanned the store again"


def test_every_write_of_a_document_stores_its_version(client: redis.Redis) -> None:
    store.save_series(client, SeriesState("saved"))
    store.ensure_series(client, "ensured")
    store.ensure_series(client, "ensured", upstream_repo="other/repo")  # already there
    store.update_series(client, "updated", lambda state: True, create={})
    store.update_series(client, "saved", lambda state: state.patches == [])

    assert store.series_versions(client) == stored_versions(client)
    assert sorted(stored_versions(client)) == ["ensured", "saved", "updated"]


def test_a_store_written_before_the_versions_lists_every_series_once_versioned(
    client: redis.Redis,
) -> None:
    for sid in ("old-a", "old-b"):  # as an older carry stored them: an index of ids only
        client.set(f"{store.PREFIX}series:{sid}", json.dumps(SeriesState(sid).to_dict()))
        client.sadd(f"{store.PREFIX}series-ids", sid)
    client.set(f"{store.PREFIX}series-ids:complete", "1")
    store.update_series(client, "new", lambda state: True, create={})  # versioned by its write

    assert [s.id for s in store.all_series(client)] == ["new", "old-a", "old-b"]
    assert store.series_versions(client) == stored_versions(client)
    assert not client.exists(f"{store.PREFIX}series-ids", f"{store.PREFIX}series-ids:complete")


def test_the_overview_reads_only_the_documents_that_changed(client: redis.Redis) -> None:
    for sid in ("one", "two", "three"):
        store.save_series(client, SeriesState(sid, upstream_repo="up/repo"))
    fix_pages = FixPages.from_config(CONFIG, REPO_ROOT / CONFIG.downstream.patches_dir)
    kept: SeriesCache = SeriesCache()
    kept_summaries(client, fix_pages, kept)  # made and kept

    before = calls(client, "mget"), calls(client, "get")
    again = kept_summaries(client, fix_pages, kept)
    assert (calls(client, "mget"), calls(client, "get")) == before, "unchanged documents read"
    assert [entry.value.id for entry in again] == ["one", "three", "two"]

    def pause(state: SeriesState) -> bool:
        state.paused_by = "alice"
        return True

    store.update_series(client, "two", pause)
    read = calls(client, "mget")
    changed = kept_summaries(client, fix_pages, kept)
    assert calls(client, "mget") == read + 1
    assert {e.value.id: e.value.paused_by for e in changed} == {
        "one": None,
        "three": None,
        "two": "alice",
    }


def test_the_overview_looks_for_runners_only_when_jobs_wait(client: redis.Redis) -> None:
    """Its health line says a kind's jobs wait with no runner online; finding the heartbeats
    walks the whole store (at 200 series in bench/scale.py a quarter of the web process's
    time), so it is done only when a kind has jobs waiting."""
    other_keys(client)
    before = calls(client, "scan")
    assert carry_health(client, CONFIG) == []
    assert calls(client, "scan") == before, "the store was walked with no job waiting"

    client.lpush("hw.gaudi", "a job")
    reasons = [item.reason for item in carry_health(client, CONFIG)]
    assert reasons == ["no gaudi runner is online: 1 job(s) wait in hw.gaudi"]
    heartbeat(client, "gaudi", "gaudi@host", {"state": "busy"})
    assert carry_health(client, CONFIG) == []


def test_finding_the_runners_takes_a_round_trip_per_thousand_keys(client: redis.Redis) -> None:
    other_keys(client)
    heartbeat(client, "gb10", "gb10@host", {"state": "idle"})
    before = calls(client, "scan")

    assert [(r["kind"], r["name"]) for r in runners(client)] == [("gb10", "gb10@host")]
    assert calls(client, "scan") - before <= OTHER_KEYS // 1000 + 2
