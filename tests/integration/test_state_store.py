"""The store and the series document's schema on a real Redis: an older carry's document is
migrated on its next write, and a newer carry's is never written over."""

from __future__ import annotations

import json

import pytest
import redis

from bot.core.state import SCHEMA_VERSION, SchemaError, SeriesState
from bot.store import series as store
from tests.support.stored_states import SCHEMA_1, stored_by_schema_1


def test_the_store_migrates_a_schema_1_document_on_its_next_write(redis_url):
    client = redis.Redis.from_url(redis_url)
    client.set("carry:series:gaudi-main", SCHEMA_1.read_text())

    def note(state: SeriesState) -> bool:
        state.last_event = "migrated"
        return True

    assert store.update_series(client, "gaudi-main", note)
    stored = json.loads(client.get("carry:series:gaudi-main"))
    assert stored["schema"] == SCHEMA_VERSION and stored["paused_by"] == "alice"
    assert stored["patches"][0]["pinned"] is True


def test_the_store_never_writes_over_a_newer_carrys_document(redis_url):
    client = redis.Redis.from_url(redis_url)
    newer = json.dumps({**stored_by_schema_1(), "schema": SCHEMA_VERSION + 1, "future": [1]})
    client.set("carry:series:gaudi-main", newer)

    with pytest.raises(SchemaError):
        store.update_series(client, "gaudi-main", lambda state: True)
    assert client.get("carry:series:gaudi-main").decode() == newer
