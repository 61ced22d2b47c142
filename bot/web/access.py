"""Who may read the dashboard and its API: the access token (a bearer header, or the session
cookie it sets), compared in constant time and never shown."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from dataclasses import dataclass
from typing import Final, Literal

from fastapi import Depends, HTTPException, Request, params
from pydantic import SecretStr

SESSION_COOKIE: Final = "carry_session"
_SESSION_LABEL: Final = b"carry dashboard session v1"
# Celery's Redis transport keeps one list per priority step beside the plain queue name.


# --------------------------------------------------------------------------- access


AccessVia = Literal["open", "header", "cookie", "query"]


@dataclass(frozen=True)
class Access:
    """The optional dashboard/API token: a bearer header, the `?token=` query parameter (for
    browsers, which then get a session cookie) or that cookie. The cookie holds an HMAC of the
    token, never the token itself."""

    token: SecretStr | None

    def session_value(self) -> str:
        if self.token is None:
            return ""
        key = self.token.get_secret_value().encode()
        return hmac.new(key, _SESSION_LABEL, hashlib.sha256).hexdigest()

    def check(self, request: Request) -> AccessVia:
        if self.token is None:
            return "open"
        secret = self.token.get_secret_value()
        if _same(request.headers.get("authorization", ""), f"Bearer {secret}"):
            return "header"
        if _same(request.cookies.get(SESSION_COOKIE, ""), self.session_value()):
            return "cookie"
        if _same(request.query_params.get("token", ""), secret):
            return "query"
        raise HTTPException(
            status_code=401,
            detail="missing or wrong token: send 'Authorization: Bearer <token>' "
            "or open the dashboard once with ?token=<token>",
        )

    def dependency(self) -> params.Depends:
        def check(request: Request) -> AccessVia:
            return self.check(request)

        return Depends(check)


def _same(given: str, expected: str) -> bool:
    return bool(given) and hmac.compare_digest(given.encode(), expected.encode())


# --------------------------------------------------------------------------- exposure


def exposure_warning(host: str, port: int, token: SecretStr | None, token_env: str) -> str | None:
    """What to say, at start and on every page, when the dashboard listens beyond this machine
    with no token: anyone who reaches it reads every series, run log and /metrics. None when
    it listens on loopback only or needs the token."""
    if token is not None or _loopback(host):
        return None
    return (
        f"the dashboard, its run logs and /metrics are open to anyone who can reach "
        f"{host}:{port}: set {token_env} (web.dashboard_token_env) to require a token, or "
        "serve on 127.0.0.1 behind a proxy that checks who asks"
    )


def _loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve anywhere
        return False
