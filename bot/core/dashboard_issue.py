"""The dashboard issue: one issue on the downstream repository that carry keeps up to date
with every series' state, and a checkbox per action. Ticking a box is a `/carry` command by
whoever ticked it, with the same permission check (like Renovate's Dependency Dashboard).
Pure: the body from the states, and the commands from an edit of the body.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from bot.core.markdown import list_items
from bot.core.render import as_code
from bot.core.state import PatchState, SeriesState

MARKER: Final = "<!-- carry:dashboard-issue -->"
TITLE: Final = "carry: patch series dashboard"
LABEL: Final = "carry-dashboard"
# `- [ ] <!-- carry-action:VERB:SERIES[:ARG] --> words`: GitHub shows the box and the words,
# and writes `[x]` into the body when someone ticks it. Matched on a list item's text.
_BOX: Final = re.compile(
    r"^\[(?P<mark>[ xX])\] <!-- carry-action:(?P<verb>[a-z]+):(?P<series>[A-Za-z0-9._-]+)"
    r"(?::(?P<arg>[A-Za-z0-9._-]+))? -->"
)
VERBS: Final = frozenset({"rebase", "retest", "keep", "approve", "pause", "resume"})
_SHORT: Final = 12


@dataclass(frozen=True)
class BoardDecision:
    """Whether carry keeps the dashboard issue, and why (said once at start)."""

    on: bool
    reason: str


def decide_board(
    configured: bool | None, credentials: bool, writable: bool | None
) -> BoardDecision:
    """`configured`: downstream.dashboard_issue (None: unset); `credentials`: carry has GitHub
    credentials; `writable`: GitHub says they may write issues (None: it did not say). Unset,
    the issue is on whenever the credentials can write issues; false always turns it off."""
    if configured is False:
        return BoardDecision(False, "off: downstream.dashboard_issue is false")
    if not credentials:
        return BoardDecision(False, "off: no GitHub credentials (read-only mode)")
    if configured is True:
        if writable is False:
            return BoardDecision(
                True,
                "on (downstream.dashboard_issue is true), but GitHub says carry's credentials "
                "cannot write issues: its updates will fail until they can",
            )
        return BoardDecision(True, "on: downstream.dashboard_issue is true")
    if writable is False:
        return BoardDecision(
            False,
            "off: carry's credentials cannot write issues on the downstream repository (an App "
            "needs the Issues: write permission, a token triage access or more); grant it to "
            "have the dashboard issue, or set downstream.dashboard_issue: false to say so",
        )
    if writable is None:
        return BoardDecision(
            True, "on by default: GitHub did not say whether carry may write issues, so it tries"
        )
    return BoardDecision(True, "on by default: carry's credentials can write issues")


@dataclass(frozen=True)
class Tick:
    """A box someone ticked: the command it stands for, on one series."""

    series_id: str
    verb: str
    arg: str | None = None

    @property
    def command(self) -> str:
        return f"/carry {self.verb}" + (f" {self.arg}" if self.arg else "")


def ticked(before: str | None, after: str) -> list[Tick]:
    """The boxes ticked in `after` that were not ticked in `before`, in body order, each
    once. An edit that did not change the body (`before` None) ticks nothing."""
    if before is None:
        return []
    already = {_key(m) for m in _boxes(before) if m.group("mark") != " "}
    found: list[Tick] = []
    for match in _boxes(after):
        if match.group("mark") == " " or _key(match) in already:
            continue
        tick = Tick(match.group("series"), match.group("verb"), match.group("arg"))
        if tick.verb in VERBS and tick not in found:
            found.append(tick)
    return found


def _boxes(body: str) -> list[re.Match[str]]:
    """Task-list items outside code, HTML comments, <pre> and <details> (only those are
    boxes anyone sees and can tick)."""
    return [m for item in list_items(body) if (m := _BOX.match(item))]


def _key(match: re.Match[str]) -> tuple[str, str, str | None]:
    return match.group("verb"), match.group("series"), match.group("arg")


# --------------------------------------------------------------------------- the body


def render(states: Sequence[SeriesState], *, dashboard_url: str | None = None) -> str:
    """The issue's body: what needs a maintainer first, then one section per series."""
    ordered = sorted(states, key=lambda s: (not s.needs_attention, s.id))
    lines = [
        MARKER,
        "carry keeps this issue up to date with every patch series it carries here. Tick a "
        "box to act: it works like the `/carry` comment command and needs write access.",
        "",
    ]
    if dashboard_url:
        lines += [f"Full details: [carry's dashboard]({dashboard_url.rstrip('/')}/).", ""]
    lines += _attention(ordered)
    for state in ordered:
        lines += _series(state, dashboard_url)
    if not ordered:
        lines += ["No series is configured yet.", ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def _attention(states: Sequence[SeriesState]) -> list[str]:
    rows = [f"- `{s.id}`: {as_code(r)}" for s in states for r in s.needs_attention]
    return ["## Needs attention", "", *(rows or ["Nothing needs a maintainer now."]), ""]


def _series(state: SeriesState, dashboard_url: str | None) -> list[str]:
    title = f"## `{state.id}`" + (f" on {as_code(state.base)}" if state.base else "")
    if dashboard_url:
        title += f" ([details]({dashboard_url.rstrip('/')}/series/{state.id}))"
    return [
        title,
        "",
        _summary(state),
        "",
        *_patches(state.patches),
        *_ci(state),
        "Actions:",
        "",
        *_actions(state),
        "",
    ]


def _summary(state: SeriesState) -> str:
    head = f"`{state.head_sha[:_SHORT]}`" if state.head_sha else "no head seen yet"
    parts = [f"upstream head {head}", f"phase {state.phase}", f"outcome {state.outcome}"]
    if state.paused_by:
        parts.append(f"paused by {as_code(state.paused_by)}")
    if state.pr is not None:
        parts.append(f"carry's PR #{state.pr.number} ({state.pr.state})")
    else:
        parts.append("no PR open")
    return "; ".join(parts) + "."


def _patches(patches: Sequence[PatchState]) -> list[str]:
    if not patches:
        return ["Patches: not checked yet.", ""]
    rows = [
        f"| `{p.name}` | {p.status} | {p.decision}{' (pinned)' if p.pinned else ''} |"
        for p in patches
    ]
    return ["| patch | status | decision |", "|---|---|---|", *rows, ""]


def _ci(state: SeriesState) -> list[str]:
    if not state.ci:
        return []
    rows = [f"| {c.runner} | {c.state} |" for c in sorted(state.ci.values(), key=_runner)]
    return ["| hardware CI | state |", "|---|---|", *rows, ""]


def _runner(row: object) -> str:
    return str(getattr(row, "runner", ""))


def _actions(state: SeriesState) -> list[str]:
    sid = state.id
    boxes = []
    if state.head_sha:
        boxes.append(_box("rebase", sid, None, "Re-check the series on the upstream head now"))
    if state.ci:
        boxes.append(_box("retest", sid, None, "Run hardware CI again on every runner"))
    waiting = sorted({c.head_sha for c in state.ci.values() if c.state == "waiting-approval"})
    boxes += [
        _box("approve", sid, sha, f"Approve upstream head `{sha[:_SHORT]}` for the hardware")
        for sha in waiting
        if sha
    ]
    boxes += [
        _box("keep", sid, p.name, f"Keep `{p.name}` (decision: {p.decision})")
        for p in state.patches
        if p.decision in ("drop", "review") and not p.pinned
    ]
    if state.paused_by:
        boxes.append(_box("resume", sid, None, "Resume automatic work"))
    else:
        boxes.append(_box("pause", sid, None, "Pause automatic work"))
    return boxes


def _box(verb: str, series_id: str, arg: str | None, words: str) -> str:
    target = f"{series_id}:{arg}" if arg else series_id
    return f"- [ ] <!-- carry-action:{verb}:{target} --> {words}"
