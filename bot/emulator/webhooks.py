"""Webhook hooks, signed deliveries, the delivery log and redelivery.

Deliveries are queued when an event happens and sent in order by one background thread (or
by `deliver_pending()` when the dispatcher is manual). `wait_idle()` blocks until the queue is
empty, so tests wait on a condition instead of sleeping.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import httpx

from .util import iso

HOOKSHOT_AGENT = "GitHub-Hookshot/emulator"
DELIVERY_TIMEOUT = 10.0  # GitHub gives a receiver 10 seconds


def signature_256(secret: str | bytes, body: bytes) -> str:
    """The X-Hub-Signature-256 value: "sha256=" + hex HMAC-SHA256 of the exact body bytes."""
    key = secret.encode() if isinstance(secret, str) else secret
    return "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()


@dataclass
class Hook:
    """A webhook: a repository hook (owner/repo set), a catch-all hook, or an App's hook."""

    id: int
    url: str
    secret: str | None
    events: frozenset[str]  # {"*"} for everything
    repo: str | None = None  # "owner/name" for a repository hook
    app_id: int | None = None
    content_type: str = "json"  # or "form"
    active: bool = True

    def wants(self, event: str) -> bool:
        return self.active and ("*" in self.events or event in self.events)


@dataclass
class Delivery:
    """One POST of one event to one hook: its own `id`, the event's `guid` (shared by every
    hook the event went to, and kept by a redelivery, which is a new Delivery)."""

    id: int
    guid: str
    hook_id: int
    event: str
    action: str | None
    payload: dict[str, Any]
    body: bytes
    headers: dict[str, str]
    url: str
    redelivery: bool = False
    status_code: int | None = None
    response_body: bytes | None = None
    error: str | None = None
    duration: float | None = None
    delivered_at: float | None = None  # emulator clock, when the attempt was made
    delivered: threading.Event = field(default_factory=threading.Event, repr=False)

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300

    @property
    def status(self) -> str:
        """GitHub's words for the answer (REST's `status`; "failed to connect" is its example
        for a receiver that could not be reached, with status_code 502)."""
        if self.status_code is None:
            return "failed to connect"
        return "OK" if self.ok else f"Invalid HTTP Response: {self.status_code}"

    def item(self) -> dict[str, Any]:
        """The delivery as GitHub lists it (`hook-delivery-item`)."""
        repository = self.payload.get("repository")
        installation = self.payload.get("installation")
        return {
            "id": self.id,
            "guid": self.guid,
            "delivered_at": iso(self.delivered_at),
            "redelivery": self.redelivery,
            "duration": round(self.duration or 0.0, 3),
            "status": self.status,
            "status_code": self.status_code if self.status_code is not None else 502,
            "event": self.event,
            "action": self.action,
            "installation_id": installation.get("id") if isinstance(installation, dict) else None,
            "repository_id": repository.get("id") if isinstance(repository, dict) else None,
            "throttled_at": None,  # the emulator never throttles a delivery
        }


class Dispatcher:
    """Turns events into signed deliveries and sends them, in order, one at a time."""

    def __init__(
        self,
        *,
        manual: bool = False,
        transport: httpx.BaseTransport | None = None,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.now = now  # when an attempt is made (delivered_at), on the emulator's clock
        self.hooks: dict[int, Hook] = {}
        self.deliveries: list[Delivery] = []
        self._queue: deque[Delivery] = deque()
        self._cond = threading.Condition()
        self._busy = False
        self._stopped = False
        self._next_hook = 1
        self._last_id = 0  # the numeric id of the last delivery made
        self._manual = manual
        self._holding = False  # deliveries wait in the queue (held())
        self._client = httpx.Client(timeout=DELIVERY_TIMEOUT, transport=transport)
        self._thread: threading.Thread | None = None
        if not manual:
            self._thread = threading.Thread(
                target=self._run, name="webhook-dispatcher", daemon=True
            )
            self._thread.start()

    # -- configuration --------------------------------------------------------------------------

    def add_hook(self, url: str, secret: str | None, **options: Any) -> Hook:
        with self._cond:
            hook = Hook(id=self._next_hook, url=url, secret=secret, **options)
            self.hooks[hook.id] = hook
            self._next_hook += 1
            return hook

    # -- enqueueing -----------------------------------------------------------------------------

    def enqueue(
        self,
        event: str,
        payload: dict[str, Any],
        *,
        hooks: list[Hook],
        target: Callable[[Hook], tuple[str, int]],
    ) -> list[Delivery]:
        """Queues a delivery of this event for each hook; target(hook) -> (target type, id).
        They share one GUID (X-GitHub-Delivery): GitHub's REST docs for a hook's deliveries call
        `guid` the "Unique identifier for the event (shared with all deliveries for all webhooks
        that subscribe to this event)"; each delivery has its own numeric `id`."""
        made = []
        guid = str(uuid.uuid4())
        with self._cond:
            for hook in hooks:
                target_type, target_id = target(hook)
                made.append(self._build(hook, event, payload, target_type, target_id, guid))
            self._queue.extend(made)
            self.deliveries.extend(made)
            self._cond.notify_all()
        return made

    def _new_id(self) -> int:
        """A delivery's own numeric id (called under the lock): the deliveries of one event to
        several hooks each get one, as on GitHub."""
        self._last_id += 1
        return self._last_id

    def _build(
        self,
        hook: Hook,
        event: str,
        payload: dict[str, Any],
        target_type: str,
        target_id: int,
        guid: str,
    ) -> Delivery:
        body_json = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
        if hook.content_type == "form":
            body = urlencode({"payload": body_json.decode()}).encode()
            content_type = "application/x-www-form-urlencoded"
        else:
            body, content_type = body_json, "application/json"
        headers = {
            "Accept": "*/*",
            "Content-Type": content_type,
            "User-Agent": HOOKSHOT_AGENT,
            "X-GitHub-Event": event,
            "X-GitHub-Delivery": guid,
            "X-GitHub-Hook-ID": str(hook.id),
            "X-GitHub-Hook-Installation-Target-ID": str(target_id),
            "X-GitHub-Hook-Installation-Target-Type": target_type,
        }
        if hook.secret:
            headers["X-Hub-Signature"] = (
                "sha1=" + hmac.new(hook.secret.encode(), body, hashlib.sha1).hexdigest()
            )
            headers["X-Hub-Signature-256"] = signature_256(hook.secret, body)
        return Delivery(
            id=self._new_id(),
            guid=guid,
            hook_id=hook.id,
            event=event,
            action=payload.get("action"),
            payload=payload,
            body=body,
            headers=headers,
            url=hook.url,
        )

    def redeliver(self, original: Delivery) -> Delivery:
        """Sends a past delivery again: same GUID, same body and signature."""
        with self._cond:
            again = Delivery(
                id=self._new_id(),
                guid=original.guid,
                hook_id=original.hook_id,
                event=original.event,
                action=original.action,
                payload=original.payload,
                body=original.body,
                headers=dict(original.headers),
                url=self.hooks[original.hook_id].url,
                redelivery=True,
            )
            self.deliveries.append(again)
            self._queue.append(again)
            self._cond.notify_all()
            return again

    def attempted(self, hook_id: int) -> list[Delivery]:
        """The hook's attempted deliveries, newest first (GitHub's list of them)."""
        with self._cond:
            made = [d for d in self.deliveries if d.hook_id == hook_id]
        return sorted((d for d in made if d.delivered.is_set()), key=lambda d: d.id, reverse=True)

    # -- sending --------------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while (not self._queue or self._holding) and not self._stopped:
                    self._cond.wait()
                if self._stopped:
                    return
                delivery = self._queue.popleft()
                self._busy = True
            try:
                self._send(delivery)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    @contextlib.contextmanager
    def held(self, *, newest_first: bool = False) -> Iterator[None]:
        """Deliveries made inside the block wait; leaving it sends them in the calling thread,
        the newest first if asked (GitHub promises no order), then sending goes on as before."""
        with self._cond:
            while self._busy:  # a delivery being sent now is not held
                self._cond.wait()
            self._holding = True
        try:
            yield
        finally:
            try:
                self.deliver_pending(newest_first=newest_first)
            finally:
                with self._cond:
                    self._holding = False
                    self._cond.notify_all()

    def deliver_pending(self, *, newest_first: bool = False) -> int:
        """Sends every queued delivery in the calling thread (manual mode); returns the count.
        GitHub promises no order of deliveries: `newest_first` sends the newest first."""
        sent = 0
        while True:
            with self._cond:
                if not self._queue:
                    return sent
                delivery = self._queue.pop() if newest_first else self._queue.popleft()
            self._send(delivery)
            sent += 1

    def _send(self, delivery: Delivery) -> None:
        delivery.delivered_at = self.now()
        started = time.monotonic()
        try:
            response = self._client.post(
                delivery.url, content=delivery.body, headers=delivery.headers
            )
            delivery.status_code = response.status_code
            delivery.response_body = response.content
        except httpx.HTTPError as exc:
            delivery.error = f"{type(exc).__name__}: {exc}"
        finally:
            delivery.duration = time.monotonic() - started
            delivery.delivered.set()

    @property
    def pending(self) -> int:
        with self._cond:
            return len(self._queue) + (1 if self._busy else 0)

    def wait_idle(self, timeout: float = 10.0) -> None:
        """Blocks until every queued delivery has been attempted; TimeoutError otherwise."""
        if self._manual:
            self.deliver_pending()
            return
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._queue or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{len(self._queue)} webhook deliveries still pending")
                self._cond.wait(left)

    def close(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=DELIVERY_TIMEOUT + 1)
        self._client.close()
