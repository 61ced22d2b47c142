"""The dashboard's list of series does not walk the whole store (issue 37: at 200 series the
overview's p95 was 755 ms in bench/scale.py; a SCAN for carry:series:* visits every key, and
the done keys of 90 days, deliveries and runs outnumber the series by thousands)."""

from __future__ import annotations

import json

import redis

from bot.core.state import SeriesState
from bot.store import series as store

OTHER_KEYS = 20_000


def scans(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return int(stats.get("cmdstat_scan", {}).get("calls", 0))


def test_listing_the_series_does_not_scan_the_other_keys(client: redis.Redis) -> None:
    pipe = client.pipeline(transaction=False)
    for n in range(OTHER_KEYS):
        pipe.set(f"{store.PREFIX}done:action-{n}", "1")
    pipe.execute()
    store.save_series(client, SeriesState("s1"))
    store.ensure_series(client, "s2")
    store.update_series(client, "s3", lambda state: True, create={})
    store.all_series(client)  # a store from before the index is indexed once
    before = scans(client)

    listed = [state.id for state in store.all_series(client)]

    assert listed == ["s1", "s2", "s3"]
    assert scans(client) == before, "the listing scanned the store again"


def test_a_store_written_before_the_index_lists_every_series_once_indexed(
    client: redis.Redis,
) -> None:
    for sid in ("old-a", "old-b"):  # as an older carry stored them: no index
        client.set(f"{store.PREFIX}series:{sid}", json.dumps(SeriesState(sid).to_dict()))
    store.update_series(client, "new", lambda state: True, create={})  # indexed by its write

    assert [s.id for s in store.all_series(client)] == ["new", "old-a", "old-b"]
    assert sorted(m.decode() for m in client.smembers(store.SERIES_IDS)) == [
        "new",
        "old-a",
        "old-b",
    ]
