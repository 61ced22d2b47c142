"""One commit per change of a series, on a real Redis: a compare-and-set on the document as it
was read, with its history entries, refused once the job has lost its series lock."""

from __future__ import annotations

import json
from typing import Any, ClassVar

import pytest
import redis

from bot.core.state import Phase, SeriesState
from bot.store import series as store

SERIES = "s-commit"


class CountingConnection(redis.Connection):
    writes: ClassVar[int] = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.writes += 1
        super().send_packed_command(command, check_health)


def seeded(client: redis.Redis) -> SeriesState:
    state = SeriesState(id=SERIES, phase=Phase.IDLE)
    store.save_series(client, state)
    return state


def stored(client: redis.Redis) -> dict[str, Any]:
    raw = client.get(f"carry:series:{SERIES}")
    assert raw is not None
    data: dict[str, Any] = json.loads(raw)
    return data


def test_a_write_between_read_and_commit_is_kept_and_the_change_runs_again(client):
    seeded(client)
    other = redis.Redis(connection_pool=client.connection_pool)
    runs = []

    def pin_while_a_maintainer_pauses(state: SeriesState) -> bool:
        runs.append(state.paused_by)
        if len(runs) == 1:  # a maintainer's /carry pause lands after this copy was read
            store.update_series(other, SERIES, lambda s: setattr(s, "paused_by", "alice") or True)
        state.last_event = "rebase"
        return True

    assert store.update_series(client, SERIES, pin_while_a_maintainer_pauses)
    assert runs == [None, "alice"]  # the second run started from the paused document
    assert (stored(client)["paused_by"], stored(client)["last_event"]) == ("alice", "rebase")


def test_history_commits_with_the_state_in_one_step(client):
    seeded(client)
    big = {f"{n:05}.patch": b"x" * 10 for n in range(2_345)}  # more words than one Lua call

    def entries(pipe: Any) -> None:
        store.queue_history(pipe, SERIES, "rebased", head="a" * 40)
        store.queue_refreshed(pipe, SERIES, "a" * 40, "d1", big)

    assert store.update_series(client, SERIES, lambda s: True, also=entries)
    assert [e["kind"] for e in store.history(client, SERIES)] == ["rebased"]
    assert store.refreshed(client, SERIES, "a" * 40, "d1") == big


def test_a_lost_lease_commits_nothing(client):
    seeded(client)
    before = stored(client)
    with store.series_lock(client, SERIES, ttl_s=30) as lease:
        assert lease is not None
        # the lock expired (say the renewal could not reach Redis) and another job took it
        client.set(lease.key, b"another-job", xx=True)
        with pytest.raises(store.LeaseLost, match="no longer holds its lock"):
            store.update_series(
                client,
                SERIES,
                lambda s: setattr(s, "outcome", "clean") or True,
                also=lambda pipe: store.queue_history(pipe, SERIES, "rebased"),
                lease=lease,
            )
    assert stored(client) == before
    assert store.history(client, SERIES) == []
    assert client.get(f"carry:lock:{SERIES}") == b"another-job"  # not released by the loser


def test_a_held_lease_commits(client):
    seeded(client)
    with store.series_lock(client, SERIES, ttl_s=30) as lease:
        assert store.update_series(
            client, SERIES, lambda s: setattr(s, "last_event", "held") or True, lease=lease
        )
    assert stored(client)["last_event"] == "held"


def test_a_failing_write_with_the_state_is_reported(client):
    seeded(client)
    client.set(f"carry:history:{SERIES}", "not a stream")
    with pytest.raises(
        redis.ResponseError, match=r"was stored, but not all with it: XADD: WRONGTYPE"
    ):
        store.update_series(
            client,
            SERIES,
            lambda s: setattr(s, "last_event", "x") or True,
            also=lambda pipe: store.queue_history(pipe, SERIES, "rebased"),
        )
    assert stored(client)["last_event"] == "x"
    # the global stream's entry, queued after the failing one, was still written
    assert [e["kind"] for e in store.history(client)] == ["rebased"]


def test_a_change_is_two_round_trips_on_a_warm_connection(redis_url):
    pool = redis.ConnectionPool.from_url(redis_url, connection_class=CountingConnection)
    client = redis.Redis(connection_pool=pool)
    seeded(client)
    store.update_series(client, SERIES, lambda s: True)  # loads the script once
    CountingConnection.writes = 0
    assert store.update_series(
        client,
        SERIES,
        lambda s: True,
        also=lambda pipe: store.queue_history(pipe, SERIES, "rebased"),
    )
    assert CountingConnection.writes == 2  # the read, and the commit with its history


def test_a_commit_returns_the_state_it_stored_and_none_when_nothing_changed(client):
    seeded(client)

    def note(state: SeriesState) -> bool:
        state.last_event = "noted"
        return True

    committed = store.update_series(client, SERIES, note)
    assert committed is not None and committed.last_event == "noted"
    assert committed.to_dict() == store.load_series(client, SERIES).to_dict()  # type: ignore[union-attr]
    assert store.update_series(client, SERIES, lambda s: False) is None
    assert store.update_series(client, "no-such-series", note) is None


def test_a_history_kind_carry_does_not_know_is_refused_before_anything_is_written(client):
    seeded(client)
    with pytest.raises(ValueError, match="not a valid HistoryKind"):
        store.append_history(client, SERIES, "head-moved", head="a" * 40)  # type: ignore[arg-type]
    assert store.history(client, SERIES) == []
