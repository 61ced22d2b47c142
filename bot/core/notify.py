"""What carry sends to a webhook when a series went red or green again, or needs a human (a
new conflict or review, stuck waiting: bot.core.attention), and its signature.
Pure: workers/notify.py sends it.

Two formats: `json` (the notice's fields, plus the series page's address when the dashboard
has a public URL) and `slack` (a Slack-compatible incoming-webhook message, {"text": ...}).
A body is signed as GitHub signs its deliveries: `X-Carry-Signature-256: sha256=<hex HMAC-SHA256
of the body>` with the webhook's secret, so a receiver can tell carry's messages from others.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from typing import Any, Literal

NOTIFY_TASK = "carry.notify"  # the task that sends a notice to the webhooks (workers/notify.py)
STUCK_TASK = "carry.stuck"  # the beat's: tells series stuck for hours (workers/attention.py)
STUCK_EVERY_S = 600.0  # how often the beat sends STUCK_TASK when notify.stuck_hours is set
SIGNATURE_HEADER = "X-Carry-Signature-256"
EVENT_HEADER = "X-Carry-Event"
DELIVERY_HEADER = "X-Carry-Delivery"

Format = Literal["json", "slack"]
_ICONS = {  # a Slack message's emoji per change (bot.core.verified, bot.core.attention)
    "went-green": ":large_green_circle:",
    "went-red": ":red_circle:",
    "new-conflict": ":warning:",
    "new-review": ":eyes:",
    "stuck": ":hourglass:",
    "red-streak": ":rotating_light:",  # the owners of the failing fix (bot.core.owners)
}


def series_page(public_url: str | None, series_id: str) -> str | None:
    return f"{public_url.rstrip('/')}/series/{series_id}" if public_url else None


def body(notice: Mapping[str, Any], fmt: Format, public_url: str | None) -> bytes:
    page = series_page(public_url, str(notice["series"]))
    if fmt == "slack":
        icon = _ICONS.get(str(notice["change"]), ":red_circle:")
        text = f"{icon} carry: {notice['summary']}" + (f" <{page}|dashboard>" if page else "")
        return json.dumps({"text": text}).encode()
    return json.dumps({**notice, "dashboard": page}, sort_keys=True).encode()


def signature(secret: bytes, payload: bytes) -> str:
    return "sha256=" + hmac.new(secret, payload, hashlib.sha256).hexdigest()


def headers(notice: Mapping[str, Any], payload: bytes, secret: bytes | None) -> dict[str, str]:
    sent = {
        "Content-Type": "application/json",
        "User-Agent": "carry-notify",
        EVENT_HEADER: str(notice["change"]),
        DELIVERY_HEADER: str(notice["key"]),
    }
    if secret is not None:
        sent[SIGNATURE_HEADER] = signature(secret, payload)
    return sent
