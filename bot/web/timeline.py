"""History entries as sentences for people; the raw fields stay behind a details toggle.

A timeline row used to be planner debug output (idempotency keys, 64-hex tree keys,
`duration_s: 0.09065809499998068`). Each known kind gets a sentence from its fields; any other
entry gets its fields without the machine-only ones, numbers rounded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol, get_args

from bot.core.history import HistoryKind as H
from bot.core.publishing import PublishStep

LIMIT: Final = 300
# Fields for machines (idempotency keys, content digests, delivery ids): shown under details.
MACHINE_FIELDS: Final = frozenset(
    {"key", "digest", "tree_key", "delivery_id", "event_key", "trigger", "comment_id", "body"}
)


def _short(sha: Any) -> str:
    return str(sha or "")[:12]


def _rebased(d: Mapping[str, Any]) -> str:
    summary = f": {_counts(d['summary'])}" if d.get("summary") else ""
    return f"checked on {_short(d['head'])}, outcome {d['outcome']}{summary}"


def _counts(summary: Any) -> str:
    """A rebase's summary, patches by status ({"applies": 2, "contained": 1}), in words."""
    if isinstance(summary, Mapping):
        return ", ".join(f"{count} {status}" for status, count in summary.items())
    return str(summary)


def _decision(d: Mapping[str, Any]) -> str:
    reason = f": {d['reason']}" if d.get("reason") else ""
    return f"{d['patch']} {d['status']}, decided {d['decision']}{reason}"


def _published(d: Mapping[str, Any]) -> str:
    if d.get("result"):
        return str(d["result"])
    files = d.get("files") or []
    what = f"{len(files)} file(s) pushed" if d.get("pushed") else "nothing pushed"
    replaces = f" (it replaces #{d['replaces']}, closed by a person)" if d.get("replaces") else ""
    return f"PR #{d['pr']} updated for {_short(d.get('head'))}: {what}{replaces}"


def _proposal(d: Mapping[str, Any]) -> str:
    if not d.get("read_only", True):
        return f"PR text ready to post: {d['title']}"
    step = PublishStep.from_fields(d)
    if step is None:  # recorded before carry said what it would do
        return f"PR proposed (read-only mode, nothing pushed): {d['title']}"
    return f"read-only mode, nothing pushed; carry would {step.words}: {step.reason}"


SENTENCES: Final[dict[H, Callable[[Mapping[str, Any]], str]]] = {
    H.REBASED: _rebased,
    H.DECISION: _decision,
    H.PUBLISHED: _published,
    H.SUPERSEDED: lambda d: (
        f"{_short(d.get('head'))} not checked: a newer head {_short(d.get('newest'))} came"
    ),
    H.UNCHANGED: lambda d: f"{_short(d.get('head'))} not checked again: {d.get('reason', '')}",
    H.LEASE_LOST: lambda d: (
        f"the check of {_short(d.get('head'))} lost its hold on the series and stored nothing;"
        " it runs again"
    ),
    H.CI_CHECK: lambda d: (
        f"{d.get('runner', 'CI')}: {d.get('state', d.get('verdict', '?'))}"
        + (f" ({d['reason']})" if d.get("reason") else "")
    ),
    H.POLL_FAILED: lambda d: f"poll of {d.get('upstream') or d.get('pr')} failed: {d.get('error')}",
    H.WAITING_FOR_REF: lambda d: f"waiting for upstream to create {d.get('ref')}",
    H.REF_APPEARED: lambda d: f"{d.get('ref')} appeared upstream",
    H.SUCCESSOR_PROPOSED: lambda d: str(d.get("summary", "")),
    H.PROPOSAL: lambda d: _proposal(d),
    H.CI_STARTED: lambda d: (
        f"{d['run_id']} started on {d['runner']}"
        + (f" (attempt {d['attempt']})" if d.get("attempt", 1) > 1 else "")
    ),
    H.BRANCH_COMMITS_KEPT: lambda d: (
        f"{len(d.get('commits') or [])} commit(s) of others on carry's branch kept on "
        f"{d.get('backup')}"
    ),
    H.PUSH_READ_BACK: lambda d: (
        f"the push failed; {d.get('branch')} "
        + ("has carry's commit" if d.get("landed") else f"is at {_short(d.get('tip'))}")
        + (f": VERSION {d['version']} recorded" if d.get("version") else "")
    ),
    H.NOTICE_SAID: lambda d: f"notice {d.get('notice')} said on PR #{d.get('pr')}",
    H.PUBLISH_REFUSED: lambda d: (
        f"GitHub refused the push to {d['branch']} ({d['code']}): {d['setting']}; not retried"
    ),
    H.TREE_BRANCH: lambda d: (
        f"{d['branch']} "
        + ("pushed" if d.get("pushed") else "already there")
        + f": {_short(d.get('head'))} + the series = {_short(d.get('commit'))}"
    ),
    H.TREE_BRANCH_SKIPPED: lambda d: f"{d['branch']} not pushed: {d.get('reason', '')}",
    H.GOOD_REF: lambda d: (
        f"{d['ref']} at {_short(d.get('commit'))}, the tree of good head {_short(d.get('head'))}"
    ),
    H.RED_STREAK: lambda d: str(d.get("reason", "")),
}


def known_kind(kind: str) -> H | None:
    """The kind of a stored entry, or None for one an older carry wrote."""
    try:
        return H(kind)
    except ValueError:
        return None


def describe(kind: str, data: Mapping[str, Any]) -> str:
    """One line for people about a history entry."""
    known = known_kind(kind)
    make = SENTENCES.get(known) if known else None
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
    text = field_words(value)
    return text if len(text) <= 80 else text[:79] + "…"


def field_words(value: Any) -> str:
    """A field's value for people: no JSON braces, quotes, true/false or null."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None:
        return "none"
    if isinstance(value, float):
        return f"{value:.2f}"
    if isinstance(value, Mapping):
        return ", ".join(f"{key} {_nested(item)}" for key, item in value.items())
    if isinstance(value, list | tuple):
        return ", ".join(_nested(item) for item in value)
    return str(value)


def _nested(value: Any) -> str:
    text = field_words(value)
    return f"({text})" if isinstance(value, Mapping | list | tuple) and text else text


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


# --------------------------------------------------------------------------- outcomes

Outcome = Literal["problem", "changed", "routine", "nothing"]
OUTCOMES: Final[tuple[Outcome, ...]] = get_args(Outcome)
# What each outcome holds, for the events page's filter.
OUTCOME_WORDS: Final[dict[Outcome, str]] = {
    "problem": "problem: failed, conflict, refused",
    "changed": "changed: rebased, published, dropped",
    "routine": "routine: heads seen, checks passed",
    "nothing": "nothing: notes, duplicates, skips",
}

_PROBLEM_KINDS: Final = frozenset(
    {H.POLL_FAILED, H.SERIES_INVALID, H.DOWNSTREAM_RENAMED, H.DRAFT_REFUSED, H.CI_REFUSED}
    | {H.CI_RUNNER_LOST, H.CI_RETRY, H.CI_FAILURE, H.CI_INFRA_ERROR, H.SUCCESSOR_PROPOSED}
    | {H.COMMAND_NOT_CHECKED, H.LEASE_LOST, H.CI_REPORT_REFUSED, H.WENT_RED, H.BISECTED}
    | {H.PUBLISH_REFUSED, H.NEW_CONFLICT, H.NEW_REVIEW, H.STUCK, H.REPOSITORY_MOVED}
    | {H.TREE_BRANCH_SKIPPED, H.GOOD_REF_REFUSED, H.GOOD_REF_FAILED, H.RED_STREAK}
)
_CHANGED_KINDS: Final = frozenset(
    {H.RETARGET, H.SET_PAUSED, H.PIN_PATCH, H.REQUEST_DROP, H.REPLY, H.LABEL_REMOVED}
    | {H.BRANCH_COMMITS_KEPT, H.CI_APPROVED, H.CI_TRUSTED_PUSHER, H.WENT_GREEN}
    | {H.PUSH_READ_BACK, H.NOTICE_SAID, H.TREE_BRANCH, H.GOOD_REF}
)
_NOTHING_KINDS: Final = frozenset(
    {H.NOTE, H.RECORD_CI, H.SKIPPED, H.UNCHANGED, H.SUPERSEDED, H.PUBLISH_SKIPPED}
    | {H.DUPLICATE_EVENT, H.CI_DUPLICATE_DELIVERY, H.CI_ORPHAN_JOB, H.CI_CANCELLED}
)
_PROBLEM_SUFFIXES: Final = ("-failed", "-timed-out")
_BAD_VERDICTS: Final = frozenset({"failure", "infra-error"})


def _rebased_outcome(d: Mapping[str, Any]) -> Outcome:
    found = d.get("outcome")
    if found in ("conflict", "review", "error"):
        return "problem"
    return "changed" if found == "changed" else "routine"


def _decision_outcome(d: Mapping[str, Any]) -> Outcome:
    if d.get("status") in ("conflict", "invalid") or d.get("decision") == "review":
        return "problem"
    return "changed" if d.get("decision") == "drop" else "routine"


def _ci_check_outcome(d: Mapping[str, Any]) -> Outcome:
    verdict = d.get("verdict", d.get("state"))
    if verdict in _BAD_VERDICTS:
        return "problem"
    return "nothing" if verdict == "cancelled" else "routine"


# Kinds whose outcome depends on their fields. A `result` on a published or retest entry is
# carry saying why it did nothing ("nothing to propose", "no proposed tree to test yet").
_BY_FIELDS: Final[dict[H, Callable[[Mapping[str, Any]], Outcome]]] = {
    H.REBASED: _rebased_outcome,
    H.DECISION: _decision_outcome,
    H.CI_CHECK: _ci_check_outcome,
    H.PUBLISHED: lambda d: "changed" if d.get("pushed") else "nothing",
    H.PROPOSAL: lambda d: "changed" if d.get("changed") else "nothing",
    H.RETEST: lambda d: "nothing" if d.get("result") else "routine",
}


def outcome_of(kind: str, data: Mapping[str, Any]) -> Outcome:
    """What a history entry amounts to, for people scanning the events: a problem, a change
    carry made, a routine step, or nothing done. Kinds not named here are routine unless they
    report a failure or carry an `error`."""
    known = known_kind(kind)
    by_fields = _BY_FIELDS.get(known) if known else None
    if by_fields is not None:
        return by_fields(data)
    if kind in _PROBLEM_KINDS or kind.endswith(_PROBLEM_SUFFIXES) or data.get("error"):
        return "problem"
    if kind in _CHANGED_KINDS:
        return "changed"
    if kind in _NOTHING_KINDS:
        return "nothing"
    return "routine"
