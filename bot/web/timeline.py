"""History entries as sentences for people; the raw fields stay behind a details toggle.

A timeline row used to be planner debug output (idempotency keys, 64-hex tree keys,
`duration_s: 0.09065809499998068`). Each known kind gets a sentence from its fields; any other
entry gets its fields without the machine-only ones, numbers rounded.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

LIMIT: Final = 300
# Fields for machines (idempotency keys, content digests, delivery ids): shown under details.
MACHINE_FIELDS: Final = frozenset(
    {"key", "digest", "tree_key", "delivery_id", "event_key", "trigger", "comment_id", "body"}
)


def _short(sha: Any) -> str:
    return str(sha or "")[:12]


def _rebased(d: Mapping[str, Any]) -> str:
    summary = f": {d['summary']}" if d.get("summary") else ""
    return f"checked on {_short(d['head'])}, outcome {d['outcome']}{summary}"


def _decision(d: Mapping[str, Any]) -> str:
    reason = f": {d['reason']}" if d.get("reason") else ""
    return f"{d['patch']} {d['status']}, decided {d['decision']}{reason}"


def _published(d: Mapping[str, Any]) -> str:
    if d.get("result"):
        return str(d["result"])
    files = d.get("files") or []
    what = f"{len(files)} file(s) pushed" if d.get("pushed") else "nothing pushed"
    return f"PR #{d['pr']} updated for {_short(d.get('head'))}: {what}"


SENTENCES: Final[dict[str, Callable[[Mapping[str, Any]], str]]] = {
    "rebased": _rebased,
    "decision": _decision,
    "published": _published,
    "superseded": lambda d: (
        f"{_short(d.get('head'))} not checked: a newer head {_short(d.get('newest'))} came"
    ),
    "unchanged": lambda d: f"{_short(d.get('head'))} not checked again: {d.get('reason', '')}",
    "ci-check": lambda d: (
        f"{d.get('runner', 'CI')}: {d.get('state', d.get('verdict', '?'))}"
        + (f" ({d['reason']})" if d.get("reason") else "")
    ),
    "poll-failed": lambda d: f"poll of {d.get('upstream') or d.get('pr')} failed: {d.get('error')}",
    "waiting-for-ref": lambda d: f"waiting for upstream to create {d.get('ref')}",
    "ref-appeared": lambda d: f"{d.get('ref')} appeared upstream",
    "successor-proposed": lambda d: str(d.get("summary", "")),
    "branch-commits-kept": lambda d: (
        f"{len(d.get('commits') or [])} commit(s) of others on carry's branch kept on "
        f"{d.get('backup')}"
    ),
}


def describe(kind: str, data: Mapping[str, Any]) -> str:
    """One line for people about a history entry."""
    make = SENTENCES.get(kind)
    if make is not None:
        try:
            return _cut(make(data))
        except (KeyError, TypeError, ValueError):
            pass  # an entry of an older shape: its fields, as below
    if isinstance(data.get("reason"), str) and data["reason"]:
        return _cut(str(data["reason"]))
    parts = [f"{k}: {_value(v)}" for k, v in data.items() if k not in MACHINE_FIELDS]
    return _cut(", ".join(parts))


def _value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.2f}"
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= 80 else text[:79] + "…"


def _cut(text: str) -> str:
    return text if len(text) <= LIMIT else text[: LIMIT - 1] + "…"


class Entry(Protocol):
    """What grouping needs of a history entry (HistoryEntryOut has it)."""

    @property
    def data(self) -> Mapping[str, Any]: ...


@dataclass
class HeadGroup:
    """The entries about one upstream head, newest first (head "" : entries before any head)."""

    head: str
    entries: list[Any] = field(default_factory=list)


def _head_of(data: Mapping[str, Any]) -> str:
    for name in ("head", "head_sha", "after"):
        value = data.get(name)
        if isinstance(value, str) and len(value) >= 7:
            return value
    return ""


def by_head(entries: Iterable[Entry]) -> Sequence[HeadGroup]:
    """Newest-first entries grouped by the upstream head they are about: an entry naming a head
    starts (or continues) its group; one naming none belongs to the group it sits in."""
    groups: list[HeadGroup] = []
    for entry in entries:
        head = _head_of(entry.data)
        if not groups or (head and head != groups[-1].head and groups[-1].head):
            groups.append(HeadGroup(head))
        elif head and not groups[-1].head:
            groups[-1].head = head
        groups[-1].entries.append(entry)
    return groups
