"""Which of a webhook's failed deliveries to ask GitHub to redeliver.

GitHub does not redeliver a failed delivery by itself (its docs, "Handling failed webhook
deliveries"): it records the attempt and its answer, and lists them through the REST API. The
documented remedy is a scheduled script that reads that list and asks for a redelivery of each
delivery that failed. Pure: the choice from the listed attempts and the time.

One event is one `guid`; each attempt to deliver it (the first, and each redelivery) is an
item of the list with its own `id`. An event needs a redelivery when none of its attempts was
answered with a 2xx (carry stores a delivery before it answers 2xx, so one 2xx is enough) and
GitHub still keeps it (3 days, on github.com). A redelivery that fails again is asked for again
later, each time later than the last (`backoff`), so that a receiver down for hours costs a few
dozen requests, not one per event per run.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

# GitHub: "You can only redeliver webhooks that were delivered in the past 3 days."
RETENTION: Final = timedelta(days=3)
FIRST_BACKOFF: Final = timedelta(minutes=5)  # after the first redelivery that failed again
MAX_BACKOFF: Final = timedelta(hours=4)


class DeliveryItemError(ValueError):
    """An item of GitHub's delivery list that lacks a field carry needs."""


@dataclass(frozen=True)
class Attempt:
    """One attempt at one delivery, as GitHub lists it (`hook-delivery-item`)."""

    id: int
    guid: str
    delivered_at: datetime
    redelivery: bool
    status_code: int
    event: str
    action: str | None = None

    @property
    def ok(self) -> bool:
        return 200 <= self.status_code < 300

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> Attempt:
        """From GitHub's JSON (`delivered_at` is ISO 8601 with a `Z`)."""
        try:
            return cls(
                id=int(item["id"]),
                guid=str(item["guid"]),
                delivered_at=datetime.fromisoformat(str(item["delivered_at"])),
                redelivery=bool(item["redelivery"]),
                status_code=int(item["status_code"] or 0),
                event=str(item["event"]),
                action=item.get("action") if isinstance(item.get("action"), str) else None,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise DeliveryItemError(f"a webhook delivery item is unusable: {exc!r}") from None


@dataclass(frozen=True)
class Redelivery:
    """Ask GitHub to redeliver `attempt` (the newest failed attempt of its event)."""

    attempt: Attempt
    attempts: int  # how many attempts GitHub has made so far
    reason: str


def backoff(redeliveries: int) -> timedelta:
    """How long after the last attempt the next redelivery is asked for, when `redeliveries`
    were asked for already: none for the first, then 5 min, doubling, at most 4 h."""
    if redeliveries <= 0:
        return timedelta(0)
    return min(FIRST_BACKOFF * 2 ** (redeliveries - 1), MAX_BACKOFF)


def choose(
    attempts: Iterable[Attempt], now: datetime, *, retention: timedelta = RETENTION
) -> list[Redelivery]:
    """The events to redeliver, oldest first: each event (guid) with no 2xx attempt, first
    delivered within `retention` of `now`, whose last attempt is at least `backoff` old."""
    by_guid: dict[str, list[Attempt]] = {}
    for attempt in attempts:
        by_guid.setdefault(attempt.guid, []).append(attempt)
    chosen = []
    for tries in by_guid.values():
        if any(t.ok for t in tries):
            continue
        tries.sort(key=lambda t: (t.delivered_at, t.id))
        first, last = tries[0], tries[-1]
        if now - first.delivered_at >= retention:
            continue  # GitHub refuses it (and will soon forget it)
        redeliveries = sum(1 for t in tries if t.redelivery)
        if now - last.delivered_at < backoff(redeliveries):
            continue
        reason = f"{last.event} delivery answered {last.status_code or 'nothing'}"
        if redeliveries:
            reason += f" ({redeliveries} redeliveries failed too)"
        chosen.append(Redelivery(last, len(tries), reason))
    chosen.sort(key=lambda r: (r.attempt.delivered_at, r.attempt.id))
    return chosen


def read_further(page: list[Attempt], now: datetime, *, retention: timedelta = RETENTION) -> bool:
    """Whether the next page of the list (newest first) may still hold an event to redeliver:
    not when this page was empty or already reached past the retention."""
    return bool(page) and all(now - a.delivered_at < retention for a in page)
