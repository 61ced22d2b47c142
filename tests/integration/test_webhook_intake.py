"""Webhook intake over real HTTP (uvicorn) with a real Redis."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
import redis
from pydantic import SecretStr
from redis.backoff import NoBackoff
from redis.retry import Retry

from bot.config import CarryConfig, ConfigError, Settings
from bot.core.events import Event, Ignored, Ping, event_to_dict
from bot.core.github_payloads import normalize
from bot.store import get_delivery, recent_deliveries
from bot.store.deliveries import BODY_ZLIB
from bot.web.app import create_app
from bot.web.webhooks import sign
from harness.redis_server import PrivateRedis
from tests.support.asgi import serve
from tests.support.paths import WEBHOOK_EXAMPLES
from tests.support.webhook_intake import CONFIG, SECRET, example_body

EXAMPLES = sorted(
    p.name
    for p in WEBHOOK_EXAMPLES.glob("*.json")
    if p.name not in ("manifest.json", "validation.json")
)


# --------------------------------------------------------------------------- harness


@dataclass
class Recorder:
    """on_event hook that also checks the delivery was persisted before it was called."""

    client: redis.Redis
    events: list[Event] = field(default_factory=list)
    persisted_first: list[bool] = field(default_factory=list)
    fail_with: Exception | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, event: Event) -> None:
        stored = get_delivery(self.client, event.delivery_id)
        with self.lock:
            self.events.append(event)
            self.persisted_first.append(stored is not None and stored.outcome == "accepted")
        if self.fail_with is not None:
            raise self.fail_with


@dataclass
class Intake:
    url: str
    client: redis.Redis
    recorder: Recorder
    http: httpx.Client

    def post(
        self,
        body: bytes,
        *,
        event: str | None = "push",
        delivery: str | None = None,
        signature: str | None = "auto",
        content_type: str = "application/json",
        extra_headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        headers = {"Content-Type": content_type, "User-Agent": "GitHub-Hookshot/test"}
        if event is not None:
            headers["X-GitHub-Event"] = event
        if delivery is not None:
            headers["X-GitHub-Delivery"] = delivery
        if signature == "auto":
            signature = sign(SECRET, body)
        if signature is not None:
            headers["X-Hub-Signature-256"] = signature
        headers.update(extra_headers or {})
        return self.http.post(f"{self.url}/webhooks/github", content=body, headers=headers)

    def stored_keys(self) -> list[bytes]:
        return sorted(self.client.keys("carry:*"))


def settings(**overrides: Any) -> Settings:
    return Settings(**{"webhook_secret": SECRET, "max_body_bytes": None, **overrides})


@contextlib.contextmanager
def running_intake(client: redis.Redis, config: CarryConfig | None = CONFIG) -> Iterator[Intake]:
    recorder = Recorder(client)
    app = create_app(config, settings(), client, on_event=recorder)
    with serve(app) as url, httpx.Client(timeout=10) as http:
        yield Intake(url, client, recorder, http)


@pytest.fixture
def intake(client: redis.Redis) -> Iterator[Intake]:
    with running_intake(client) as running:
        yield running


def new_id() -> str:
    return str(uuid.uuid4())


def fail_fast_client(url: str) -> redis.Redis:
    """A client that reports a dead Redis at once instead of retrying with backoff."""
    return redis.Redis.from_url(url, retry=Retry(NoBackoff(), 0), socket_connect_timeout=1)


# --------------------------------------------------------------------------- real payloads


@pytest.mark.parametrize("file_name", EXAMPLES)
def test_every_example_payload_is_accepted_and_normalized(intake: Intake, file_name: str) -> None:
    body = example_body(file_name)
    event_name = file_name.split(".", 1)[0]
    delivery = new_id()
    expected = normalize(event_name, delivery, json.loads(body))

    response = intake.post(body, event=event_name, delivery=delivery)

    stored = get_delivery(intake.client, delivery)
    assert stored is not None
    assert stored.body == body
    assert stored.event == json.loads(json.dumps(event_to_dict(expected)))
    assert stored.event_key == expected.key
    if isinstance(expected, Ping):
        assert (response.status_code, response.json()["status"]) == (200, "pong")
        assert intake.recorder.events == []
    elif isinstance(expected, Ignored):
        assert response.status_code == 202
        assert response.json() == {
            "status": "ignored",
            "reason": expected.reason,
            "delivery_id": delivery,
        }
        assert stored.outcome == "ignored"
        assert intake.recorder.events == []
    else:
        assert response.status_code == 202
        assert response.json()["key"] == expected.key
        assert stored.outcome == "accepted"
        assert intake.recorder.events == [expected]
        assert intake.recorder.persisted_first == [True]


def test_form_encoded_delivery_is_accepted(intake: Intake) -> None:
    payload = example_body("pull_request.closed.merged.json").decode()
    body = urlencode({"payload": payload}).encode()
    delivery = new_id()

    response = intake.post(
        body,
        event="pull_request",
        delivery=delivery,
        content_type="application/x-www-form-urlencoded",
    )

    assert response.status_code == 202
    assert intake.recorder.events == [normalize("pull_request", delivery, json.loads(payload))]


# --------------------------------------------------------------------------- signatures


def test_docs_test_vector() -> None:
    assert sign("It's a Secret to Everybody", b"Hello, World!") == (
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    )


def test_docs_test_vector_verifies_over_http(client: redis.Redis) -> None:
    app = create_app(
        CONFIG, settings(webhook_secret=SecretStr("It's a Secret to Everybody")), client
    )
    delivery = new_id()
    with serve(app) as url, httpx.Client() as http:
        response = http.post(
            f"{url}/webhooks/github",
            content=b"Hello, World!",
            headers={
                "X-GitHub-Event": "push",
                "X-GitHub-Delivery": delivery,
                "X-Hub-Signature-256": (
                    "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
                ),
            },
        )

    # The signature passed; "Hello, World!" is simply not JSON.
    assert response.status_code == 400
    assert response.json()["error"].startswith("malformed JSON")
    stored = get_delivery(client, delivery)
    assert stored is not None and stored.outcome == "rejected_payload"


FORGERIES = [
    (None, "missing X-Hub-Signature-256 header"),
    ("sha256=" + "0" * 64, "X-Hub-Signature-256 does not match the body"),
    ("sha1=" + "0" * 40, "X-Hub-Signature-256 does not match the body"),
    (sign("another secret", example_body("push.json")), "does not match"),
    # Signing a re-serialized body is not signing the bytes that were sent.
    (sign(SECRET, json.dumps(json.loads(example_body("push.json"))).encode()), "does not match"),
    (sign(SECRET, example_body("push.json")).upper(), "does not match"),
]


def test_kept_bodies_are_compressed_and_older_raw_ones_still_read(intake: Intake) -> None:
    """Issue 37: the bodies kept for 35 days dominated Redis's memory. They are stored
    compressed (the exact bytes come back), and a body an older carry stored as sent reads as
    it was."""
    raw_sizes, kept_sizes = 0, 0
    for name in ("push.json", "pull_request.opened.json", "issue_comment.created.json"):
        body, delivery = example_body(name), new_id()
        intake.post(body, event=name.split(".", 1)[0], delivery=delivery)
        kept = intake.client.hget(f"carry:delivery:{delivery}", "body")
        assert isinstance(kept, bytes) and kept.startswith(BODY_ZLIB)
        stored = get_delivery(intake.client, delivery)
        assert stored is not None and stored.body == body
        raw_sizes, kept_sizes = raw_sizes + len(body), kept_sizes + len(kept)
    assert kept_sizes * 3 < raw_sizes, (kept_sizes, raw_sizes)
    # an older carry's entry: the body as sent
    old = new_id()
    intake.post(example_body("push.json"), event="push", delivery=old)
    intake.client.hset(f"carry:delivery:{old}", "body", b'{"as": "sent"}')
    stored = get_delivery(intake.client, old)
    assert stored is not None and stored.body == b'{"as": "sent"}'


@pytest.mark.parametrize(("signature", "error"), FORGERIES)
def test_forged_or_unsigned_is_401_and_nothing_is_stored(
    intake: Intake, signature: str | None, error: str
) -> None:
    response = intake.post(
        example_body("push.json"), event="push", delivery=new_id(), signature=signature
    )

    assert response.status_code == 401
    assert error in response.json()["error"]
    assert intake.stored_keys() == []
    assert intake.recorder.events == []


def test_app_refuses_to_start_without_a_secret(client: redis.Redis) -> None:
    for secret in (None, SecretStr("")):
        with pytest.raises(ConfigError, match="CARRY_WEBHOOK_SECRET is not set"):
            create_app(CONFIG, settings(webhook_secret=secret), client)


# --------------------------------------------------------------------------- dedup


def test_same_delivery_sent_concurrently_is_processed_once(intake: Intake) -> None:
    body = example_body("pull_request.synchronize.json")
    delivery = new_id()
    senders = 8
    barrier = threading.Barrier(senders)
    statuses: list[int] = []

    def send() -> None:
        with httpx.Client(timeout=10) as http:
            request = Intake(intake.url, intake.client, intake.recorder, http)
            barrier.wait()
            statuses.append(request.post(body, event="pull_request", delivery=delivery).status_code)

    threads = [threading.Thread(target=send) for _ in range(senders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(statuses) == [200] * (senders - 1) + [202]
    assert len(intake.recorder.events) == 1
    outcomes = sorted(entry.outcome for entry in recent_deliveries(intake.client, 50))
    assert outcomes == ["accepted"] + ["duplicate"] * (senders - 1)


def test_redelivery_is_a_duplicate(intake: Intake) -> None:
    body = example_body("push.json")
    delivery = new_id()

    first = intake.post(body, delivery=delivery)
    second = intake.post(body, delivery=delivery)

    assert (first.status_code, second.status_code) == (202, 200)
    assert second.json() == {"status": "duplicate", "delivery_id": delivery}
    assert len(intake.recorder.events) == 1


# --------------------------------------------------------------------------- bad requests


def test_body_over_the_declared_limit_is_413(intake: Intake) -> None:
    body = b'{"pad": "' + b"x" * (64 * 1024) + b'"}'

    response = intake.post(body, delivery=new_id())

    assert response.status_code == 413
    assert "exceeds the limit of 65536 bytes" in response.json()["error"]
    assert intake.stored_keys() == []


def test_chunked_body_over_the_limit_is_413(intake: Intake) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(20):
            yield b"x" * 8192

    response = intake.http.post(
        f"{intake.url}/webhooks/github",
        content=chunks(),
        # Signed (if wrongly): an unsigned request is refused before its body is read at all.
        headers={
            "X-GitHub-Event": "push",
            "X-GitHub-Delivery": new_id(),
            "X-Hub-Signature-256": "sha256=" + "0" * 64,
        },
    )

    assert "content-length" not in response.request.headers
    assert response.status_code == 413
    assert response.json()["error"] == "body exceeds the limit of 65536 bytes"
    assert intake.stored_keys() == []


def test_body_limit_from_environment_wins(client: redis.Redis) -> None:
    app = create_app(CONFIG, settings(max_body_bytes=100), client)
    with serve(app) as url, httpx.Client() as http:
        small = Intake(url, client, Recorder(client), http)
        response = small.post(example_body("ping.json"), event="ping", delivery=new_id())
    assert response.status_code == 413


@pytest.mark.parametrize(
    ("event", "delivery", "error"),
    [
        (None, "d-1", "missing X-GitHub-Event header"),
        ("push", None, "missing X-GitHub-Delivery header"),
        (None, None, "missing X-GitHub-Event and X-GitHub-Delivery header"),
    ],
)
def test_missing_delivery_headers_are_400(
    intake: Intake, event: str | None, delivery: str | None, error: str
) -> None:
    response = intake.post(example_body("push.json"), event=event, delivery=delivery)

    assert (response.status_code, response.json()) == (400, {"error": error})
    assert intake.stored_keys() == []


@pytest.mark.parametrize(
    ("body", "content_type", "error"),
    [
        (b'{"ref": "refs/heads/main",', "application/json", "malformed JSON: "),
        (b"\xff\xfe{}", "application/json", "body is not valid UTF-8"),
        (b"other=1", "application/x-www-form-urlencoded", "form body has no 'payload' field"),
    ],
)
def test_undecodable_body_is_400_and_recorded(
    intake: Intake, body: bytes, content_type: str, error: str
) -> None:
    delivery = new_id()

    response = intake.post(body, delivery=delivery, content_type=content_type)

    assert response.status_code == 400
    assert response.json()["error"].startswith(error)
    stored = get_delivery(intake.client, delivery)
    assert stored is not None and stored.body == body
    assert (stored.outcome, stored.event) == ("rejected_payload", None)
    assert stored.reason is not None and stored.reason.startswith(error)
    assert intake.recorder.events == []


def test_payload_missing_a_field_is_422_and_recorded(intake: Intake) -> None:
    payload = json.loads(example_body("pull_request.synchronize.json"))
    del payload["pull_request"]["head"]["sha"]
    body = json.dumps(payload).encode()
    delivery = new_id()

    response = intake.post(body, event="pull_request", delivery=delivery)

    message = "malformed pull_request payload: pull_request.head.sha: required field is missing"
    assert (response.status_code, response.json()) == (422, {"error": message})
    stored = get_delivery(intake.client, delivery)
    assert stored is not None and (stored.outcome, stored.reason) == ("rejected_payload", message)
    assert stored.action == "synchronize"
    assert intake.recorder.events == []


# --------------------------------------------------------------------------- Redis failures


def test_redis_down_is_503_and_the_redelivery_is_accepted(private_redis: PrivateRedis) -> None:
    client = fail_fast_client(private_redis.url)
    body = example_body("pull_request.synchronize.json")
    delivery = new_id()
    with running_intake(client) as intake:
        private_redis.stop(kill=True)
        down = intake.post(body, event="pull_request", delivery=delivery)
        not_ready = intake.http.get(f"{intake.url}/readyz")

        private_redis.start()
        redelivered = intake.post(body, event="pull_request", delivery=delivery)

    assert down.status_code == 503
    assert "store unavailable, delivery not recorded" in down.json()["error"]
    assert not_ready.status_code == 503
    assert not_ready.json()["reasons"][0].startswith("redis unreachable")
    assert redelivered.status_code == 202
    assert [e.delivery_id for e in intake.recorder.events] == [delivery]


def test_accepted_delivery_survives_a_redis_restart(private_redis: PrivateRedis) -> None:
    client = fail_fast_client(private_redis.url)
    body = example_body("push.json")
    delivery = new_id()
    with running_intake(client) as intake:
        accepted = intake.post(body, delivery=delivery)
        private_redis.stop(kill=True)
        private_redis.start()
        redelivered = intake.post(body, delivery=delivery)

    assert (accepted.status_code, redelivered.status_code) == (202, 200)
    stored = get_delivery(client, delivery)
    assert stored is not None and stored.body == body and stored.outcome == "accepted"
    assert len(intake.recorder.events) == 1


def test_failed_hand_off_is_503_and_the_redelivery_is_processed(intake: Intake) -> None:
    body = example_body("push.json")
    delivery = new_id()
    intake.recorder.fail_with = RuntimeError("broker down")

    failed = intake.post(body, delivery=delivery)
    intake.recorder.fail_with = None
    redelivered = intake.post(body, delivery=delivery)

    assert failed.status_code == 503
    assert "hand-off failed: RuntimeError: broker down" in failed.json()["error"]
    assert redelivered.status_code == 202
    assert len(intake.recorder.events) == 2
    outcomes = [entry.outcome for entry in recent_deliveries(intake.client, 10)]
    assert outcomes == ["accepted", "dispatch_failed", "accepted"]


# --------------------------------------------------------------------------- health and API


def test_health_and_readiness(intake: Intake, client: redis.Redis) -> None:
    assert intake.http.get(f"{intake.url}/healthz").json() == {"status": "alive"}
    ready = intake.http.get(f"{intake.url}/readyz")
    assert (ready.status_code, ready.json()) == (200, {"status": "ready"})

    with running_intake(client, config=None) as no_config:
        unready = no_config.http.get(f"{no_config.url}/readyz")
    assert (unready.status_code, unready.json()) == (
        503,
        {"status": "unready", "reasons": ["config not loaded"]},
    )


def test_events_api_lists_newest_first(intake: Intake) -> None:
    sent = [
        ("push.json", "push", new_id()),
        ("issue_comment.created.json", "issue_comment", new_id()),
        ("pull_request.closed.merged.json", "pull_request", new_id()),
    ]
    for file_name, event_name, delivery in sent:
        intake.post(example_body(file_name), event=event_name, delivery=delivery)
    intake.post(example_body("push.json"), event="push", delivery=sent[0][2])

    listed = intake.http.get(f"{intake.url}/api/v1/events", params={"limit": 3}).json()

    rows = [(d["delivery_id"], d["event"], d["action"], d["outcome"]) for d in listed["deliveries"]]
    assert rows == [
        (sent[0][2], "push", None, "duplicate"),
        (sent[2][2], "pull_request", "closed", "accepted"),
        (sent[1][2], "issue_comment", "created", "ignored"),
    ]
    ignored = listed["deliveries"][2]
    assert ignored["reason"] == "issue_comment on an issue, not a pull request"
    assert listed["deliveries"][1]["normalized"]["state"] == "merged"


@pytest.mark.parametrize("limit", [0, 501, "x"])
def test_events_api_validates_limit(intake: Intake, limit: Any) -> None:
    response = intake.http.get(f"{intake.url}/api/v1/events", params={"limit": limit})
    assert response.status_code == 422


def test_events_api_requires_the_dashboard_token_when_set(
    client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CARRY_DASHBOARD_TOKEN", "dash-token")
    with running_intake(client) as intake:
        api = f"{intake.url}/api/v1/events"
        anonymous = intake.http.get(api)
        wrong = intake.http.get(api, headers={"Authorization": "Bearer nope"})
        right = intake.http.get(api, headers={"Authorization": "Bearer dash-token"})
    assert (anonymous.status_code, wrong.status_code, right.status_code) == (401, 401, 200)


# --------------------------------------------------------------------------- hostile senders


def _raw_request(url: str, head: dict[str, str], body: bytes = b"") -> socket.socket:
    """Sends a POST's request line and headers (and `body`, maybe less than declared) over a
    raw socket, leaving the connection open."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=15)
    lines = ["POST /webhooks/github HTTP/1.1", f"Host: {host}:{port}"]
    lines += [f"{name}: {value}" for name, value in head.items()]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
    return sock


def _status(sock: socket.socket) -> int:
    answer = sock.recv(4096).decode(errors="replace")
    return int(answer.split(" ", 2)[1])


def test_an_unsigned_delivery_is_refused_before_its_body_is_read(intake: Intake) -> None:
    """An unsigned request declaring 1 MiB and sending none of it is answered at once: carry
    never waits for (nor buffers) the body of a request its headers already refuse."""
    head = {"X-GitHub-Event": "push", "X-GitHub-Delivery": "d-unsigned", "Content-Length": "60000"}
    with _raw_request(intake.url, head) as sock:
        started = time.monotonic()
        assert _status(sock) == 401
        assert time.monotonic() - started < 2


def test_a_slow_body_gets_408_at_the_deadline(
    client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = Recorder(client)
    app = create_app(CONFIG, settings(), client, on_event=recorder)
    app.state.webhook_intake.body_deadline_s = 0.5
    body = b'{"zen": "slow"}'
    head = {
        "X-GitHub-Event": "ping",
        "X-GitHub-Delivery": "d-slow",
        "X-Hub-Signature-256": sign(SECRET, body),
        "Content-Length": str(len(body)),
    }
    with serve(app) as url, _raw_request(url, head, body[:5]) as sock:
        started = time.monotonic()
        assert _status(sock) == 408
        assert 0.4 < time.monotonic() - started < 3
    assert recorder.events == [] and get_delivery(client, "d-slow") is None
    assert not [r for r in caplog.records if r.exc_info], "a refused body logs no traceback"


def test_a_sender_that_goes_away_mid_body_costs_one_log_line(
    intake: Intake, caplog: pytest.LogCaptureFixture
) -> None:
    body = b'{"zen": "gone"}'
    head = {
        "X-GitHub-Event": "ping",
        "X-GitHub-Delivery": "d-gone",
        "X-Hub-Signature-256": sign(SECRET, body),
        "Content-Length": "5000",
    }
    with caplog.at_level(logging.INFO), _raw_request(intake.url, head, body) as sock:
        sock.shutdown(socket.SHUT_RDWR)
    wait = time.monotonic() + 5
    while time.monotonic() < wait and not any(
        "went away" in r.getMessage() for r in caplog.records
    ):
        time.sleep(0.05)
    aborted = [r for r in caplog.records if "went away" in r.getMessage()]
    assert len(aborted) == 1 and aborted[0].exc_info is None
    assert not [r for r in caplog.records if r.exc_info], "an aborted body logs no traceback"
    assert get_delivery(intake.client, "d-gone") is None


def test_bodies_read_at_once_are_bounded_and_a_delivery_past_the_bound_waits(
    client: redis.Redis,
) -> None:
    """Issue 34, item 3: GitHub does not redeliver a refused delivery by itself, so a valid
    delivery past the bound waits for a body read to finish and is taken (it got 503 at once);
    only one that waited the whole deadline is refused, with 503."""
    app = create_app(CONFIG, settings(), client, on_event=Recorder(client))
    intake_ = app.state.webhook_intake
    intake_.max_concurrent_reads, intake_.body_deadline_s = 2, 5.0
    intake_.__post_init__()
    body = b'{"zen": "held"}'
    head = {
        "X-GitHub-Event": "ping",
        "X-GitHub-Delivery": "d-held",
        "X-Hub-Signature-256": sign(SECRET, body),
        "Content-Length": str(len(body)),
    }
    with serve(app) as url:
        held = [
            _raw_request(url, {**head, "X-GitHub-Delivery": f"d-held-{i}"}, b"{") for i in range(2)
        ]
        time.sleep(0.3)
        with _raw_request(url, head, body) as third:
            third.settimeout(1.0)
            with pytest.raises(TimeoutError):  # two bodies are being read: it waits
                third.recv(1)
            held[0].close()  # one read ends (the sender went away): the third is read
            third.settimeout(5.0)
            assert _status(third) == 200
        assert get_delivery(client, "d-held") is not None
        held[1].close()
        intake_.body_deadline_s = 3.0
        slow = [
            _raw_request(url, {**head, "X-GitHub-Delivery": f"d-slow-{i}"}, b"{") for i in range(2)
        ]
        time.sleep(0.3)
        intake_.body_deadline_s = 0.5  # a delivery that waits the whole deadline gets 503
        with _raw_request(url, {**head, "X-GitHub-Delivery": "d-late"}, body) as late:
            assert _status(late) == 503
        assert [_status(sock) for sock in slow] == [408, 408]
        for sock in slow:
            sock.close()


def test_a_delivery_whose_hand_off_and_un_recording_both_failed_is_processed_when_redelivered(
    intake: Intake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bench/reliability's redis-restart scenario caught it: Redis went down between the
    record and the hand-off, so un-recording failed too; the redelivery was answered
    'duplicate' and the event never reached a worker."""
    from bot.store import deliveries
    from bot.web import webhooks

    def redis_down(*_: object, **__: object) -> bool:
        raise redis.ConnectionError("Connection refused")

    body = example_body("push.json")
    delivery = new_id()
    intake.recorder.fail_with = redis.ConnectionError("broker down")
    monkeypatch.setattr(webhooks, "forget_delivery", redis_down)
    failed = intake.post(body, delivery=delivery)
    intake.recorder.fail_with = None
    # Soon after, the first attempt may still be handing off: not a duplicate, come back.
    monkeypatch.setattr(webhooks, "IN_FLIGHT_WAIT_S", 0.2)
    soon = intake.post(body, delivery=delivery)
    assert soon.status_code == 503 and "still being handed off" in soon.json()["error"]
    monkeypatch.setattr(deliveries, "HANDOFF_TAKEOVER_S", 0)  # GitHub redelivers much later
    redelivered = intake.post(body, delivery=delivery)

    assert failed.status_code == 503
    assert redelivered.status_code == 202, redelivered.text
    assert len(intake.recorder.events) == 2  # the first hand-off raised; the second went
    stored = get_delivery(intake.client, delivery)
    assert stored is not None and stored.outcome == "accepted"
