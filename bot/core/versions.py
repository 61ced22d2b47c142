"""Version order for release tags (v0.10.0 > v0.9.1, a release after its pre-releases). Pure."""

from __future__ import annotations

import re


def version_key(tag: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key: numbers compare numerically, and v1.0.0rc1 < v1.0.0."""
    key: list[tuple[int, int | str]] = []
    for part in re.findall(r"\d+|[A-Za-z]+", tag):
        key.append((2, int(part)) if part.isdigit() else (0, part.lower()))
    # A trailing marker makes the bare release newer than any suffixed pre-release.
    key.append((1, ""))
    return tuple(key)
