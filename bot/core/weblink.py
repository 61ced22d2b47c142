"""Which links carry stores and shows: absolute http:// and https:// URLs only. A
`javascript:` or `data:` link in a fix page or a stored state would run in the reader's
browser on the dashboard's origin; a relative one would resolve against carry's own pages.
Pure."""

from __future__ import annotations

from typing import Final
from urllib.parse import urlsplit

WEB_SCHEMES: Final = frozenset({"http", "https"})


def is_web_link(url: str) -> bool:
    """True for an absolute http:// or https:// URL with a host and no surrounding space."""
    if url != url.strip() or any(ord(c) < 0x20 or c == "\x7f" for c in url):
        return False
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        return False
    return parts.scheme.lower() in WEB_SCHEMES and bool(host)


def web_link_problem(url: str) -> str | None:
    """Why `url` is not a link carry accepts, in the user's words; None when it is one."""
    if is_web_link(url):
        return None
    return f"{url!r} is not an http(s) URL: only http:// and https:// links are accepted"
