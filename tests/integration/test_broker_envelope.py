"""bot.queue.broker_transport.envelope_problem: what a Celery app really publishes passes; each
malformed variant is named by what is wrong with it."""

from __future__ import annotations

import pytest
import redis

from bot.queue.broker_transport import envelope_problem
from bot.queue.celery_app import make_app
from tests.support.broker_junk import malformed, real_envelope


@pytest.fixture
def envelope(redis_url: str) -> bytes:
    return real_envelope(make_app(redis_url), redis.Redis.from_url(redis_url))


def test_what_celery_publishes_is_a_sound_envelope(envelope: bytes) -> None:
    assert envelope_problem(envelope) is None


def test_each_malformed_entry_is_named_by_what_is_wrong(envelope: bytes) -> None:
    found = {why: envelope_problem(raw) for why, raw in malformed(envelope).items()}
    assert found == {why: why for why in found}


@pytest.mark.parametrize("raw", [b"\xff\xfe", b"", b"{", b"null", b'"text"'])
def test_bytes_that_are_no_json_object_are_refused(raw: bytes) -> None:
    assert envelope_problem(raw) is not None
