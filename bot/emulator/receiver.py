"""WebhookSink: a tiny local HTTP endpoint that records webhook deliveries for tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any


@dataclass
class Received:
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes

    @property
    def event(self) -> str:
        return self.headers.get("x-github-event", "")


class WebhookSink:
    """`with WebhookSink() as sink:` -> sink.url; sink.received; sink.wait_for(n)."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.received: list[Received] = []
        self._cond = threading.Condition()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with sink._cond:
                    sink.received.append(
                        Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                    )
                    sink._cond.notify_all()
                self.send_response(sink.status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/webhook"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def __enter__(self) -> WebhookSink:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()

    def wait_for(
        self, predicate: Callable[[list[Received]], bool] | int, timeout: float = 10.0
    ) -> list[Received]:
        """Blocks until predicate(received) holds (an int n means "at least n deliveries")."""
        check = predicate if callable(predicate) else (lambda items: len(items) >= predicate)
        deadline = time.monotonic() + timeout
        with self._cond:
            while not check(self.received):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"webhook sink: condition not met; got {len(self.received)}")
                self._cond.wait(left)
            return list(self.received)
