"""Fault injection: make the next N matching requests fail, before they have any effect or
(`after=True`) after it: the ref moved, the object was created, the comment posted, and then
the client gets the error (a proxy's 502 on an answer lost on its way back)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

FAULT_KINDS = (
    "server_error",  # 5xx (502 unless status= says otherwise)
    "too_many_requests",  # 429 with Retry-After
    "primary_rate_limit",  # 403 "API rate limit exceeded ..." with x-ratelimit-remaining: 0
    "secondary_rate_limit",  # 403 "You have exceeded a secondary rate limit ..." (+ Retry-After)
    "disconnect",  # the connection is closed without any response
)
WRITE_METHODS = frozenset({"POST", "PATCH", "PUT", "DELETE"})
RATE_DOCS = "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"
# GitHub's words for a secondary limit, as in real 403 answers (the text PyGithub's
# Requester.isSecondaryRateLimitError recognizes); GitHub's docs (RATE_DOCS, "Handle rate limit
# errors appropriately") say such an answer may carry `Retry-After`, and that a client must
# otherwise wait at least a minute before trying again.
SECONDARY_MESSAGE = (
    "You have exceeded a secondary rate limit. Please wait a few minutes before you try again. "
    "If you reach out to GitHub Support for help, please include the request ID {request_id}."
)


@dataclass
class Fault:
    kind: str
    times: int
    method: str | None = None
    path: str | None = None  # glob over the path without query, e.g. "/repos/*/pulls"
    status: int | None = None
    retry_after: int | None = None
    reset_in: int = 60  # seconds until x-ratelimit-reset for primary_rate_limit
    scope: str = "api"  # "api", "git" or "any"
    writes_only: bool = False  # match any write method (POST, PATCH, PUT, DELETE), no read
    after: bool = False  # the request takes effect first; only its answer is the fault's
    hits: list[int] = field(default_factory=list)  # sequence numbers of the failed requests

    @property
    def remaining(self) -> int:
        return self.times - len(self.hits)

    def matches(self, kind: str, method: str, path: str) -> bool:
        if self.remaining <= 0 or (self.scope != "any" and self.scope != kind):
            return False
        if self.method is not None and self.method.upper() != method.upper():
            return False
        if self.writes_only and method.upper() not in WRITE_METHODS:
            return False
        return self.path is None or fnmatchcase(path, self.path)

    def response(self, request_id: str, who: str) -> tuple[int, dict[str, Any], dict[str, str]]:
        """(status, body, extra headers) for this fault."""
        if self.kind == "server_error":
            status = self.status or 502
            if status == 503:
                return status, {"code": "unavailable", "message": "Service Unavailable"}, {}
            return (
                status,
                {"message": "Server Error", "documentation_url": "https://docs.github.com/rest"},
                {},
            )
        if self.kind == "too_many_requests":
            headers = {"Retry-After": str(self.retry_after if self.retry_after is not None else 1)}
            body = {
                "message": SECONDARY_MESSAGE.format(request_id=request_id),
                "documentation_url": RATE_DOCS,
            }
            return self.status or 429, body, headers
        if self.kind == "primary_rate_limit":
            body = {
                "message": f"API rate limit exceeded for {who}.",
                "documentation_url": RATE_DOCS,
            }
            return self.status or 403, body, {}
        if self.kind == "secondary_rate_limit":
            headers = {"Retry-After": str(self.retry_after)} if self.retry_after is not None else {}
            body = {
                "message": SECONDARY_MESSAGE.format(request_id=request_id),
                "documentation_url": RATE_DOCS,
            }
            return self.status or 403, body, headers
        raise ValueError(self.kind)


class FaultTable:
    def __init__(self) -> None:
        self._faults: list[Fault] = []
        self._lock = threading.Lock()

    def add(self, fault: Fault) -> Fault:
        if fault.kind not in FAULT_KINDS:
            raise ValueError(f"fault kind must be one of {FAULT_KINDS}")
        if fault.scope not in ("api", "git", "any"):
            raise ValueError("scope must be 'api', 'git' or 'any'")
        if fault.after and fault.kind != "server_error" and fault.kind != "disconnect":
            # GitHub refuses a rate-limited request before acting on it: only a server error or
            # a dropped connection can come after the effect.
            raise ValueError("after=True takes a server_error or a disconnect")
        with self._lock:
            self._faults.append(fault)
        return fault

    def take(self, kind: str, method: str, path: str, seq: int) -> Fault | None:
        """The first armed fault matching this request, consuming one of its shots."""
        with self._lock:
            for fault in self._faults:
                if fault.matches(kind, method, path):
                    fault.hits.append(seq)
                    return fault
        return None

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()
