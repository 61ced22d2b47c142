"""Which failed webhook deliveries carry asks GitHub to redeliver (bot/core/redelivery.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bot.core.redelivery import (
    RETENTION,
    Attempt,
    DeliveryItemError,
    backoff,
    choose,
    read_further,
)

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def attempt(id: int, guid: str, ago_s: float, status: int, *, redelivery: bool = False) -> Attempt:
    return Attempt(
        id=id,
        guid=guid,
        delivered_at=NOW - timedelta(seconds=ago_s),
        redelivery=redelivery,
        status_code=status,
        event="issue_comment",
        action="created",
    )


def chosen_ids(attempts: list[Attempt]) -> list[int]:
    return [r.attempt.id for r in choose(attempts, NOW)]


def test_a_failed_delivery_is_redelivered_once_and_a_delivered_one_never():
    attempts = [attempt(1, "a", 600, 503), attempt(2, "b", 500, 202), attempt(3, "c", 400, 0)]
    assert chosen_ids(attempts) == [1, 3]
    (first, _) = choose(attempts, NOW)
    assert first.attempts == 1 and first.reason == "issue_comment delivery answered 503"
    assert choose(attempts, NOW)[1].reason == "issue_comment delivery answered nothing"


def test_any_2xx_attempt_of_the_event_means_carry_has_it():
    # a redelivery that worked, and a failed attempt after a good one (a manual redelivery)
    later_ok = [attempt(1, "a", 900, 503), attempt(2, "a", 300, 202, redelivery=True)]
    earlier_ok = [attempt(1, "a", 900, 200), attempt(2, "a", 300, 503, redelivery=True)]
    assert chosen_ids(later_ok) == [] and chosen_ids(earlier_ok) == []


def test_the_newest_failed_attempt_is_asked_for_after_its_backoff():
    tries = [attempt(1, "a", 3600, 503), attempt(5, "a", 200, 503, redelivery=True)]
    assert chosen_ids(tries) == []  # one redelivery failed 200 s ago: wait 5 minutes
    tries[1] = attempt(5, "a", 301, 503, redelivery=True)
    (again,) = choose(tries, NOW)
    assert again.attempt.id == 5 and again.attempts == 2
    assert "1 redeliveries failed too" in again.reason


def test_backoff_doubles_up_to_four_hours():
    assert [backoff(n) for n in range(4)] == [
        timedelta(0),
        timedelta(minutes=5),
        timedelta(minutes=10),
        timedelta(minutes=20),
    ]
    assert backoff(30) == timedelta(hours=4)


def test_an_event_past_githubs_retention_is_left_alone():
    old = RETENTION.total_seconds()
    assert chosen_ids([attempt(1, "a", old + 1, 503)]) == []
    # the event's first attempt counts, not its latest redelivery
    tries = [attempt(1, "a", old + 1, 503), attempt(2, "a", 600, 503, redelivery=True)]
    assert chosen_ids(tries) == []
    assert chosen_ids([attempt(1, "a", old - 60, 503)]) == [1]


def test_oldest_event_first():
    attempts = [attempt(9, "new", 100, 500), attempt(2, "old", 900, 500)]
    assert chosen_ids(attempts) == [2, 9]


def test_paging_stops_at_an_empty_page_or_past_the_retention():
    recent = [attempt(1, "a", 60, 202)]
    assert read_further(recent, NOW)
    assert not read_further([], NOW)
    assert not read_further([*recent, attempt(0, "z", RETENTION.total_seconds(), 202)], NOW)


def test_githubs_item_is_read_and_a_broken_one_is_refused_in_one_line():
    item = {
        "id": 12,
        "guid": "0b989ba4-242f-11e5-81e1-c7b6966d2516",
        "delivered_at": "2026-12-05T11:59:00Z",
        "redelivery": False,
        "duration": 0.27,
        "status": "Invalid HTTP Response: 503",
        "status_code": 503,
        "event": "issue_comment",
        "action": "created",
        "installation_id": None,
        "repository_id": 7,
    }
    got = Attempt.from_item(item)
    assert (got.id, got.status_code, got.action) == (12, 503, "created")
    assert got.delivered_at == NOW - timedelta(minutes=1)
    with pytest.raises(DeliveryItemError, match="guid"):
        Attempt.from_item({k: v for k, v in item.items() if k != "guid"})
