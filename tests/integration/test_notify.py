"""workers/notify.py against a real HTTP endpoint: a webhook that refuses a message, or whose
secret is missing, is a clear NotifyError (the task records it and retries with backoff)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from bot.config import Webhook
from workers.notify import NotifyError, backoff_s, send

NOTICE = {
    "key": "s:went-red:t2",
    "change": "went-red",
    "series": "s",
    "head": "b" * 40,
    "summary": "s went red on bbbbbbbbbbbb",
}


@pytest.fixture
def endpoint() -> Iterator[tuple[str, list[int], list[dict[str, str]]]]:
    answers: list[int] = []
    seen: list[dict[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            seen.append(dict(self.headers))
            self.send_response(answers.pop(0) if answers else 204)
            self.end_headers()
            self.wfile.write(b"")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook", answers, seen
    finally:
        server.shutdown()
        server.server_close()


def test_a_refused_message_is_an_error_naming_the_answer(
    endpoint: tuple[str, list[int], list[dict[str, str]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, answers, seen = endpoint
    monkeypatch.setenv("CARRY_TEST_NOTIFY", "s3cret")
    hook = Webhook(url=url, secret_env="CARRY_TEST_NOTIFY")
    answers.append(503)
    with pytest.raises(NotifyError, match="answered 503"):
        send(hook, NOTICE, None)
    send(hook, NOTICE, None)  # the retry lands
    assert [h["X-Carry-Delivery"] for h in seen] == [NOTICE["key"]] * 2
    assert all(h["X-Carry-Signature-256"].startswith("sha256=") for h in seen)


def test_a_missing_secret_is_said_and_nothing_is_sent_unsigned(
    endpoint: tuple[str, list[int], list[dict[str, str]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _, seen = endpoint
    monkeypatch.delenv("CARRY_TEST_NOTIFY", raising=False)
    hook = Webhook(url=url, secret_env="CARRY_TEST_NOTIFY")
    with pytest.raises(NotifyError, match=r"CARRY_TEST_NOTIFY \(its secret\) is not set"):
        send(hook, NOTICE, None)
    assert seen == []


def test_an_unreachable_webhook_is_an_error_and_the_backoff_grows_to_ten_minutes() -> None:
    hook = Webhook(url="http://127.0.0.1:9/hook", format="slack")
    with pytest.raises(NotifyError, match="ConnectError"):
        send(hook, NOTICE, None)
    assert [backoff_s(n) for n in (0, 1, 2, 8)] == [5, 10, 20, 600]
