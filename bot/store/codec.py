"""What carry's store reads back, as text: one codec for every store module, whether the Redis
client decodes answers or not (carry's clients return bytes)."""

from __future__ import annotations

from collections.abc import Mapping


def text(value: object) -> str:
    """A Redis answer as text ("" for nothing); bytes are UTF-8, undecodable bytes replaced."""
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def text_map(raw: Mapping[object, object]) -> dict[str, str]:
    """A hash as Redis answers HGETALL, keys and values as text."""
    return {text(k): text(v) for k, v in raw.items()}
