"""What to do with a delivery carry acknowledged whose event no worker has finished yet.

The intake stores a delivery and queues its `carry.ingest` message in one atomic step, and
marks it open; the ingest task settles it once the event is handled (or was handled before).
A message can still be lost after that step: kombu's Redis transport takes a message off the
queue (BRPOP) and records it as unacknowledged in a second command, so a broker killed between
the two loses the message with nothing left to restore it (seen in bench/reliability's Redis
restart scenario: the AOF held the pop and no unacked entry). GitHub will not send it again
(carry answered 2xx). So a sweep queues an open delivery's event again once it has been open
for `requeue_after_s`; handling an event twice is safe (the event key is claimed once, a
second run is a `duplicate-event`). Pure: the choice from the delivery's facts.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final

# An event that failed this many queued runs is not queued again: its handling fails for a
# reason a retry does not change, and the history says so once.
MAX_REQUEUES: Final = 3


class Requeue(StrEnum):
    SETTLE = "settle"  # handled after all (the claim landed, the settle did not): forget it
    AGAIN = "again"  # never handled: queue its event again
    GIVE_UP = "give-up"  # queued MAX_REQUEUES times and still not handled: say so, forget it
    GONE = "gone"  # its record expired or holds no event: nothing to queue


@dataclass(frozen=True)
class OpenDelivery:
    """An open delivery's facts, as the store and the claims hold them."""

    delivery_id: str
    has_event: bool  # its record is there and holds the normalized event
    handled: bool  # its event key is claimed: a worker finished it
    requeued: int  # how often a sweep has queued it again


def decide(delivery: OpenDelivery) -> Requeue:
    if delivery.handled:
        return Requeue.SETTLE
    if not delivery.has_event:
        return Requeue.GONE
    if delivery.requeued >= MAX_REQUEUES:
        return Requeue.GIVE_UP
    return Requeue.AGAIN
