"""A presence table across heads: for release lines, whether each patch of a series is in each
head as its own commit, as another commit, in part, or not at all.

Pure: the engine checks the series on every head (Engine.check_heads) and says which of the
patches' own commits each head's history holds; this module turns that into rows and cells and
renders them as text or JSON. A cell rests on the engine's decision for that head, never on a
guess of its own: `same` is the patch's commit itself (by id) in the head's history; `other` is
the engine finding the head has the change (contained or upstream's version), named by the
upstream commit that brought it when the engine found one; `partial` and `conflict` are the
engine's statuses; everything that still applies is `absent`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from bot.core.classify import Decision, Status
from bot.core.report import PatchReport, SeriesReport

# typing.TYPE_CHECKING without importing typing (mypy and ruff treat the name the same way).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

SHORT = 12  # the length carry's text output gives commit ids


class Presence(StrEnum):
    SAME = "same"  # the patch's own commit is in the head's history
    OTHER = "other"  # the head has the change as another commit (or another version)
    PARTIAL = "partial"  # the head has some of the patch's hunks
    ABSENT = "absent"  # the patch still applies: the head lacks it
    CONFLICT = "conflict"  # the patch does not apply and the head does not have it
    INVALID = "invalid"  # the patch file could not be read


@dataclass(frozen=True)
class HeadsEvidence:
    """What the engine found on several heads, for one series: the input of build_table."""

    reports: tuple[SeriesReport, ...]  # one per head, in the order the heads were given
    own_commits: tuple[str | None, ...]  # per patch, in series order: its `From` commit
    contains: Mapping[str, frozenset[str]]  # head commit -> the own commits in its history


@dataclass(frozen=True)
class Cell:
    presence: Presence
    sha: str | None  # same: the patch's commit; other, partial: the upstream commit, if found
    status: Status
    decision: Decision

    def text(self) -> str:
        """The cell as the table prints it, in the words the kernel's stable tooling uses."""
        short = self.sha[:SHORT] if self.sha else None
        if self.presence is Presence.SAME:
            return "present (same SHA)"
        if self.presence is Presence.OTHER:
            return f"present (different SHA: {short})" if short else "present (no commit found)"
        if self.presence is Presence.PARTIAL:
            return f"partial ({short})" if short else "partial"
        return self.presence.value

    def as_dict(self) -> dict[str, Any]:
        return {
            "presence": self.presence.value,
            "sha": self.sha,
            "status": self.status.value,
            "decision": self.decision.value,
        }


@dataclass(frozen=True)
class HeadColumn:
    name: str  # the revision as the user gave it
    sha: str
    ref: str | None


@dataclass(frozen=True)
class Row:
    patch: str
    subject: str
    commit: str | None  # the patch's own commit (its `From` line), when it names one
    cells: tuple[Cell, ...]  # one per head, in the heads' order


@dataclass(frozen=True)
class PresenceTable:
    repo: str
    base: str | None
    heads: tuple[HeadColumn, ...]
    rows: tuple[Row, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "repo": self.repo,
            "base": self.base,
            "heads": [{"name": h.name, "head": h.sha, "head_ref": h.ref} for h in self.heads],
            "patches": [
                {
                    "patch": row.patch,
                    "subject": row.subject,
                    "commit": row.commit,
                    "cells": [
                        {"head": head.name, **cell.as_dict()}
                        for head, cell in zip(self.heads, row.cells, strict=True)
                    ],
                }
                for row in self.rows
            ],
        }


class PresenceError(ValueError):
    """The evidence does not describe one series on the named heads (a caller's bug)."""


def cell_for(report: PatchReport, own_commit: str | None, in_head: bool) -> Cell:
    """One patch on one head: its own commit in the head wins; otherwise the engine's status."""
    status, decision = report.status, report.decision
    if in_head and own_commit:
        return Cell(Presence.SAME, own_commit, status, decision)
    if status in (Status.CONTAINED, Status.UPSTREAM_VERSION):
        return Cell(Presence.OTHER, _landing(report), status, decision)
    if status is Status.PARTIAL:
        return Cell(Presence.PARTIAL, _landing(report), status, decision)
    if status is Status.CONFLICT:
        return Cell(Presence.CONFLICT, None, status, decision)
    if status is Status.INVALID:
        return Cell(Presence.INVALID, None, status, decision)
    return Cell(Presence.ABSENT, None, status, decision)


def _landing(report: PatchReport) -> str | None:
    """The upstream commit that brought the head's version: the engine's first landing (history
    matches come before content matches), else a patch-id or changed-lines match in the
    evidence."""
    for commit in report.upstream_commits or ():
        if commit.get("sha"):
            return str(commit["sha"])
    for entry in report.evidence:
        same = entry.get("signal") in ("patch-id-match", "changes-match")
        match = same and not entry.get("reverted_by")
        if match and entry.get("commit"):
            return str(entry["commit"])
    return None


def build_table(evidence: HeadsEvidence, names: Sequence[str]) -> PresenceTable:
    """Rows (patches, in series order) by columns (heads, in the order of `names`)."""
    reports = evidence.reports
    if not reports or len(names) != len(reports):
        raise PresenceError(f"{len(reports)} head reports for {len(names)} heads")
    first = reports[0]
    count = len(first.patches)
    if len(evidence.own_commits) != count or any(len(r.patches) != count for r in reports):
        raise PresenceError("the head reports do not hold the same patches")
    heads = tuple(
        HeadColumn(name, r.head, r.head_ref) for name, r in zip(names, reports, strict=True)
    )
    rows = []
    for i, patch in enumerate(first.patches):
        own = evidence.own_commits[i]
        cells = tuple(
            cell_for(r.patches[i], own, own in evidence.contains.get(r.head, frozenset()))
            for r in reports
        )
        subject = next((r.patches[i].subject for r in reports if r.patches[i].subject), "")
        rows.append(Row(patch.patch, subject, own, cells))
    return PresenceTable(first.repo, first.base, heads, tuple(rows))


def render_text(table: PresenceTable) -> str:
    """An aligned table: a line per patch, a column per head (its name and commit on top)."""
    lines = [
        f"presence of {len(table.rows)} patch{'es' if len(table.rows) != 1 else ''} on "
        f"{len(table.heads)} heads of {table.repo}"
    ]
    header = ["patch", *(f"{h.name} ({h.sha[:SHORT]})" for h in table.heads)]
    body = [[row.patch, *(cell.text() for cell in row.cells)] for row in table.rows]
    widths = [max(len(line[col]) for line in [header, *body]) for col in range(len(header))]
    for line in [header, *body]:
        padded = [text.ljust(width) for text, width in zip(line, widths, strict=True)]
        lines.append(("  " + "  ".join(padded)).rstrip())
    return "\n".join(lines) + "\n"


def needs_human(table: PresenceTable) -> bool:
    """A cell a person must look at on some head (for `carry check --exit-code`)."""
    stuck = (Status.CONFLICT, Status.PARTIAL, Status.INVALID)
    return any(
        cell.status in stuck or cell.decision is Decision.REVIEW
        for row in table.rows
        for cell in row.cells
    )


__all__ = [
    "Cell",
    "HeadColumn",
    "HeadsEvidence",
    "Presence",
    "PresenceError",
    "PresenceTable",
    "Row",
    "build_table",
    "cell_for",
    "render_text",
]
