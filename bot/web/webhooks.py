"""POST /webhooks/github: verify, deduplicate, normalize, persist, then hand off.

Order matters and is the contract with GitHub (which never redelivers on its own: a delivery
answered 5xx is asked for again by the `carry.redeliver` beat task, workers/redelivery.py):
  size limit -> HMAC over the exact raw bytes -> headers -> decode -> normalize
  -> persist in Redis (dedup by X-GitHub-Delivery) -> on_event -> 2xx.
Nothing is acknowledged with a 2xx unless it is in Redis. Nothing unsigned is stored.
No git or GitHub work happens here: on_event only enqueues.
With `queue_task` (the service's web process) persisting and enqueueing are one step: the
event's task message is built here and queued by the same Lua script that stores and dedups
the delivery (one Redis round trip per delivery, no worker thread, nothing pending between).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs

import redis
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from prometheus_client import Counter
from pydantic import SecretStr
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect

from bot.core.events import Event, Ignored, Ping, event_to_dict
from bot.core.github_payloads import PayloadError, normalize
from bot.log import correlated
from bot.queue.task_message import QueuedTask
from bot.store.async_twin import AsyncTwin
from bot.store.deliveries import (
    DeliveryInFlight,
    NewDelivery,
    Outcome,
    forget_delivery,
    mark_handed_off,
    record_delivery_async,
)

log = logging.getLogger(__name__)

OnEvent = Callable[[Event], None]
QueueTask = Callable[[Event], QueuedTask]

SIGNATURE_HEADER = "X-Hub-Signature-256"
EVENT_HEADER = "X-GitHub-Event"
DELIVERY_HEADER = "X-GitHub-Delivery"
_MAX_DELIVERY_ID_LEN = 128
# GitHub gives up on a delivery after 10 s, so a body still arriving after that is nobody's
# delivery: a slow sender only holds a connection and memory.
BODY_DEADLINE_S = 10.0
# Bodies read at once; a delivery past that waits for one to finish (memory for 64 bodies,
# not for every connection), and only one that waited all of BODY_DEADLINE_S gets 503.
MAX_CONCURRENT_READS = 64
# How long a delivery waits for an earlier attempt of the same id that is being handed off.
IN_FLIGHT_WAIT_S = 2.0

DELIVERIES = Counter("carry_webhook_deliveries_total", "Webhook deliveries by outcome", ["outcome"])
REJECTED = Counter(
    "carry_webhook_refused_total",
    "Webhook requests refused before recording (bad signature, size, headers)",
    ["status"],
)


def sign(secret: str | bytes, body: bytes) -> str:
    """The X-Hub-Signature-256 value GitHub sends for `body`."""
    key = secret.encode() if isinstance(secret, str) else secret
    return "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()


def verify_signature(secret: str | bytes, body: bytes, header: str | None) -> bool:
    if not header or not header.startswith("sha256="):
        return False
    return hmac.compare_digest(sign(secret, body).encode(), header.strip().encode())


class Rejection(Exception):
    """An HTTP error answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message

    def response(self) -> JSONResponse:
        return JSONResponse({"error": self.message}, status_code=self.status)


class Unavailable(Exception):
    """Redis or the hand-off (the broker, also Redis) failed: answer 503, so that GitHub
    records the delivery as failed and carry's redelivery task asks for it again."""


@dataclass
class WebhookIntake:
    secret: SecretStr
    client: redis.Redis
    max_body_bytes: int
    on_event: OnEvent | None = None
    queue_task: QueueTask | None = None
    body_deadline_s: float = BODY_DEADLINE_S
    max_concurrent_reads: int = MAX_CONCURRENT_READS
    _reads: asyncio.Semaphore = field(init=False, repr=False)
    # Recording runs on the event loop: no worker thread per delivery.
    _async: AsyncTwin = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._reads = asyncio.Semaphore(self.max_concurrent_reads)
        self._async = AsyncTwin(self.client)

    async def handle(self, request: Request) -> JSONResponse:
        received_at = datetime.now(UTC)
        try:
            # Everything the headers can refuse is refused before a byte of the body is read.
            signature = _signature_header(request)
            event_name, delivery_id = _delivery_headers(request)
            body = await self._read_body(request)
            self._check_signature(body, signature)
        except Rejection as rejection:
            REJECTED.labels(status=str(rejection.status)).inc()
            return rejection.response()
        with correlated(delivery_id=delivery_id):
            try:
                return await self._process(request, body, event_name, delivery_id, received_at)
            except Unavailable as exc:
                log.error("delivery not taken: %s", exc, extra={"fields": {"event": event_name}})
                return JSONResponse({"error": f"{exc}; redeliver later"}, status_code=503)

    async def _read_body(self, request: Request) -> bytes:
        # A delivery past the bound waits for a body to be read rather than being refused:
        # GitHub does not redeliver a refused one by itself. The wait and the read share
        # GitHub's 10 s, after which nobody waits for the answer.
        reading = False
        try:
            async with asyncio.timeout(self.body_deadline_s):
                await self._reads.acquire()
                reading = True
                return await read_limited(request, self.max_body_bytes)
        except TimeoutError:
            if not reading:
                log.warning(
                    "webhook intake busy for %gs: %d bodies being read",
                    self.body_deadline_s,
                    self.max_concurrent_reads,
                )
                raise Rejection(
                    503, "too many deliveries being received at once; redeliver later"
                ) from None
            log.warning("webhook body not received within %gs: refused", self.body_deadline_s)
            raise Rejection(408, f"body not received within {self.body_deadline_s:g} s") from None
        except ClientDisconnect:
            log.warning("webhook sender went away before the whole body arrived")
            raise Rejection(400, "connection closed before the whole body arrived") from None
        finally:
            if reading:
                self._reads.release()

    def _check_signature(self, body: bytes, signature: str) -> None:
        if not verify_signature(self.secret.get_secret_value(), body, signature):
            raise Rejection(401, f"{SIGNATURE_HEADER} does not match the body")

    async def _process(
        self,
        request: Request,
        body: bytes,
        event_name: str,
        delivery_id: str,
        received_at: datetime,
    ) -> JSONResponse:
        meta = _Meta(delivery_id, event_name, body, received_at)
        try:
            payload = decode_payload(body, request.headers.get("content-type", ""))
            meta.action = _action(payload)
            event = normalize(event_name, delivery_id, payload)
        except PayloadError as exc:
            return await self._reject(
                meta, Rejection(422, f"malformed {event_name} payload: {exc}")
            )
        except Rejection as rejection:
            return await self._reject(meta, rejection)

        outcome: Outcome = "ignored" if isinstance(event, Ignored) else "accepted"
        reason = event.reason if isinstance(event, Ignored) else None
        task = self._task(event)
        if not await self._record(meta, outcome, event, reason, task):
            DELIVERIES.labels(outcome="duplicate").inc()
            log.info("duplicate delivery, not processed again")
            return JSONResponse({"status": "duplicate", "delivery_id": delivery_id})
        DELIVERIES.labels(outcome=outcome).inc()
        return await self._answer(event, meta, queued=task is not None)

    def _task(self, event: Event) -> QueuedTask | None:
        """The event's task message when this intake queues it with the record itself."""
        if self.queue_task is None or isinstance(event, (Ping, Ignored)):
            return None
        with correlated(event_key=event.key):  # the ids travel in the message's headers
            try:
                return self.queue_task(event)
            except Exception as exc:  # nothing is recorded yet: GitHub's redelivery retries
                log.exception("hand-off failed")
                raise Unavailable(f"hand-off failed: {type(exc).__name__}: {exc}") from exc

    async def _answer(self, event: Event, meta: _Meta, *, queued: bool) -> JSONResponse:
        with correlated(event_key=event.key):
            if not queued and not isinstance(event, (Ping, Ignored)):
                await self._dispatch(event, meta)
            if not queued and not isinstance(event, Ignored):  # recorded as pending until now
                await self._handed_off(meta)
            if isinstance(event, Ping):
                log.info("ping", extra={"fields": {"hook_id": event.hook_id}})
                return JSONResponse({"status": "pong", "delivery_id": meta.delivery_id})
            if isinstance(event, Ignored):
                log.info("delivery ignored: %s", event.reason)
                return JSONResponse(
                    {"status": "ignored", "reason": event.reason, "delivery_id": meta.delivery_id},
                    status_code=202,
                )
            log.info("delivery accepted", extra={"fields": {"event": event.kind}})
            return JSONResponse(
                {
                    "status": "accepted",
                    "delivery_id": meta.delivery_id,
                    "event": event.kind,
                    "key": event.key,
                },
                status_code=202,
            )

    async def _dispatch(self, event: Event, meta: _Meta) -> None:
        if self.on_event is None:
            return
        try:
            await run_in_threadpool(self.on_event, event)
        except Exception as exc:
            # The delivery is recorded but nobody will act on it: forget it so that GitHub's
            # redelivery (same id) is processed, and answer 5xx so the failure is visible there.
            log.exception("hand-off failed")
            reason = f"hand-off failed: {type(exc).__name__}: {exc}"
            try:
                await run_in_threadpool(forget_delivery, self.client, meta.delivery_id, reason)
            except redis.RedisError:
                log.exception("could not un-record the delivery after a failed hand-off")
            raise Unavailable(reason) from exc

    async def _handed_off(self, meta: _Meta) -> None:
        try:
            await run_in_threadpool(mark_handed_off, self.client, meta.delivery_id)
        except redis.RedisError:  # a redelivery then takes over later: processed twice, not lost
            log.warning("could not mark the delivery handed off", exc_info=True)

    async def _reject(self, meta: _Meta, rejection: Rejection) -> JSONResponse:
        await self._record(meta, "rejected_payload", None, rejection.message, None)
        DELIVERIES.labels(outcome="rejected_payload").inc()
        log.warning("delivery rejected: %s", rejection.message)
        return rejection.response()

    async def _record(
        self,
        meta: _Meta,
        outcome: Outcome,
        event: Event | None,
        reason: str | None,
        task: QueuedTask | None,
    ) -> bool:
        # An earlier attempt of the same id being handed off right now: wait for it briefly
        # (then this one is a duplicate); one still pending after that is told to retry.
        deadline = asyncio.get_running_loop().time() + IN_FLIGHT_WAIT_S
        while True:
            try:
                return await self._record_once(meta, outcome, event, reason, task)
            except DeliveryInFlight as exc:
                if asyncio.get_running_loop().time() >= deadline:
                    raise Unavailable(
                        "an earlier attempt of this delivery is still being handed off; retry"
                    ) from exc
                await asyncio.sleep(0.05)

    async def _record_once(
        self,
        meta: _Meta,
        outcome: Outcome,
        event: Event | None,
        reason: str | None,
        task: QueuedTask | None,
    ) -> bool:
        event_json = json.dumps(event_to_dict(event)) if event is not None else None
        try:
            delivery = NewDelivery(
                meta.delivery_id,
                meta.event_name,
                meta.body,
                meta.received_at,
                outcome,
                event_json,
                reason,
                action=meta.action,
                event_key=event.key if event is not None else None,
                task=task,
            )
            return await record_delivery_async(self._async.get(), delivery)
        except redis.RedisError as exc:
            raise Unavailable(f"store unavailable, delivery not recorded ({exc})") from exc


@dataclass
class _Meta:
    delivery_id: str
    event_name: str
    body: bytes
    received_at: datetime
    action: str | None = None


async def read_limited(request: Request, limit: int) -> bytes:
    """The raw body, refusing more than `limit` bytes (declared or actually sent)."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise Rejection(400, "invalid Content-Length header")
        if int(declared) > limit:
            raise Rejection(413, f"body of {declared} bytes exceeds the limit of {limit} bytes")
    chunks = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise Rejection(413, f"body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _signature_header(request: Request) -> str:
    header = request.headers.get(SIGNATURE_HEADER)
    if header is None:
        raise Rejection(401, f"missing {SIGNATURE_HEADER} header (is the webhook secret set?)")
    return header


def _delivery_headers(request: Request) -> tuple[str, str]:
    event_name = request.headers.get(EVENT_HEADER, "").strip()
    delivery_id = request.headers.get(DELIVERY_HEADER, "").strip()
    given = ((EVENT_HEADER, event_name), (DELIVERY_HEADER, delivery_id))
    missing = [name for name, value in given if not value]
    if missing:
        raise Rejection(400, f"missing {' and '.join(missing)} header")
    if len(delivery_id) > _MAX_DELIVERY_ID_LEN or not delivery_id.isprintable():
        raise Rejection(400, f"invalid {DELIVERY_HEADER} header")
    return event_name, delivery_id


def decode_payload(body: bytes, content_type: str) -> Any:
    """JSON body, or a form body whose `payload` field holds the JSON (repository hooks)."""
    media_type = content_type.split(";", 1)[0].strip().lower()
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise Rejection(400, "body is not valid UTF-8") from None
    if media_type == "application/x-www-form-urlencoded":
        fields = parse_qs(text, keep_blank_values=True)
        if "payload" not in fields:
            raise Rejection(400, "form body has no 'payload' field")
        text = fields["payload"][0]
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as exc:
        raise Rejection(400, f"malformed JSON: {exc}") from None
    except (ValueError, RecursionError) as exc:  # huge integers, absurd nesting
        raise Rejection(400, f"unusable JSON: {str(exc)[:200]}") from None
    try:
        json.dumps(payload, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (\ud800) cannot be stored or shown
        raise Rejection(400, "JSON holds text that is not valid Unicode") from None
    except (ValueError, RecursionError) as exc:
        raise Rejection(400, f"unusable JSON: {str(exc)[:200]}") from None
    return payload


def _action(payload: Any) -> str | None:
    action = payload.get("action") if isinstance(payload, dict) else None
    return action if isinstance(action, str) else None


def webhook_router(intake: WebhookIntake) -> APIRouter:
    router = APIRouter()

    async def github_webhook(request: Request) -> JSONResponse:
        return await intake.handle(request)

    # A plain Starlette route: the handler reads the request itself, so FastAPI's parameter
    # and dependency resolution would be work for nothing on every delivery.
    router.add_route("/webhooks/github", github_webhook, methods=["POST"], include_in_schema=False)
    return router
