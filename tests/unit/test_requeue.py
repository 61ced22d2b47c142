"""bot/core/requeue.py: what the sweep does with a delivery still open after
CARRY_REQUEUE_AFTER_S."""

from __future__ import annotations

import pytest

from bot.core.requeue import MAX_REQUEUES, OpenDelivery, Requeue, decide


@pytest.mark.parametrize(
    ("has_event", "handled", "requeued", "verdict"),
    [
        (True, False, 0, Requeue.AGAIN),  # its message was lost: queue it again
        (True, False, MAX_REQUEUES - 1, Requeue.AGAIN),
        (True, False, MAX_REQUEUES, Requeue.GIVE_UP),  # runs that fail whatever the retry
        (True, True, 0, Requeue.SETTLE),  # handled; only the settle was lost
        (True, True, MAX_REQUEUES, Requeue.SETTLE),
        (False, False, 0, Requeue.GONE),  # its record expired: nothing to queue
        (False, True, 0, Requeue.SETTLE),
    ],
)
def test_an_open_delivery_is_queued_again_settled_or_given_up(
    has_event: bool, handled: bool, requeued: int, verdict: Requeue
) -> None:
    assert decide(OpenDelivery("d-1", has_event, handled, requeued)) is verdict
