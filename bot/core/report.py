"""Results of checking a series on a head, as values with a stable JSON form.

Pure: the engine fills these in, the CLI prints them, the planner and PR renderer read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bot.core.classify import Decision, Status
from bot.core.patchfile import PatchFile, split_lines

# `carry check` runs as a short process: difflib and shlex are imported where they are used,
# and typing.TYPE_CHECKING is had without importing typing (mypy and ruff know the name).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


@dataclass
class PatchReport:
    patch: str  # the file as the user named it
    status: Status
    decision: Decision
    reason: str
    evidence: list[dict[str, Any]] = field(default_factory=list)
    subject: str = ""
    refreshed: bytes | None = None  # new patch bytes; None when the patch must not be written
    changed: bool = False  # refreshed differs from the input bytes
    interdiff: str = ""
    conflict: dict[str, Any] | None = None
    # for a patch upstream took in some form (upstream-version, partial, contained): the
    # upstream commits that brought its version into the head, {sha, subject, pr, how}
    upstream_commits: list[dict[str, Any]] | None = None
    # for a refreshed patch (changed): {"class": context-only | content-changed, and for a
    # content change "forced_by": [{file, hunk, sha, subject, pr}]} (bot.core.refresh)
    refresh: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "patch": self.patch,
            "subject": self.subject,
            "status": self.status.value,
            "decision": self.decision.value,
            "reason": self.reason,
            "evidence": self.evidence,
            "refreshed_changed": self.changed,
        }
        if self.interdiff:
            out["interdiff"] = self.interdiff
        if self.refresh is not None:
            out["refresh"] = self.refresh
        if self.upstream_commits is not None:
            out["upstream_commits"] = self.upstream_commits
        if self.conflict:
            out["conflict"] = self.conflict
        return out


@dataclass
class SeriesReport:
    repo: str
    head: str
    head_ref: str | None
    base: str | None
    patches: list[PatchReport]
    result_tree: str | None = None  # the id of the resulting tree (stored with result_commit)
    result_commit: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "repo": self.repo,
            "head": self.head,
            "head_ref": self.head_ref,
            "base": self.base,
            "result_commit": self.result_commit,
            "summary": self.summary(),
            "patches": [p.as_dict() for p in self.patches],
        }

    def summary(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for report in self.patches:
            counts[report.status.value] = counts.get(report.status.value, 0) + 1
        return counts


def diff_section(data: bytes, parsed: PatchFile) -> list[str]:
    """The diff part of a patch file as text lines, without the mail header and signature."""
    lines = split_lines(data)[parsed.diff_offset :]
    out: list[str] = []
    for i, line in enumerate(lines):
        text = line.decode("utf-8", "surrogateescape").rstrip("\n")
        if text == "-- " and i + 1 < len(lines) and not lines[i + 1].startswith((b"diff", b"@@")):
            break
        if text.startswith("index "):
            continue  # blob abbreviations differ between tools; they are not content
        out.append(text)
    return out


def interdiff(old: bytes, old_parsed: PatchFile, new: bytes, new_parsed: PatchFile) -> str:
    """A diff of the two patches' diff sections: what changed in the carried patch."""
    import difflib

    lines = difflib.unified_diff(
        diff_section(old, old_parsed),
        diff_section(new, new_parsed),
        "carried",
        "refreshed",
        lineterm="",
        n=1,
    )
    return "\n".join(lines)


def same_hunks(a: PatchFile, b: PatchFile) -> bool:
    """True when both patches make the same changes at the same places (context included)."""

    def shape(p: PatchFile) -> list[tuple[Any, ...]]:
        return [
            (
                f.old_path,
                f.new_path,
                f.old_mode if f.is_new or f.is_deleted or f.old_mode != f.new_mode else None,
                f.new_mode if f.is_new or f.is_deleted or f.old_mode != f.new_mode else None,
                f.binary,
                tuple((h.old_start, h.old_len, h.new_start, h.new_len, h.lines) for h in f.hunks),
            )
            for f in p.files
        ]

    return shape(a) == shape(b)


def reproduce_commands(
    repo: str,
    head: str,
    head_ref: str | None,
    patch_paths: list[str],
    downstream: tuple[str, str] | None = None,
) -> list[str]:
    """Exact commands that reproduce the apply of patches 1..N by hand. With `downstream`
    (clone URL, branch) the patches are taken from a clone of the downstream repository, by
    their paths in it, so the commands work on any machine."""
    import shlex

    commands = []
    if downstream is not None:
        url, branch = downstream
        commands.append(
            f"git clone --depth 1 -b {shlex.quote(branch)} {shlex.quote(url)} carry-downstream"
        )
        patch_paths = [f"../carry-downstream/{path}" for path in patch_paths]
    commands += [f"git clone {shlex.quote(repo)} carry-repro", "cd carry-repro"]
    if head_ref and head_ref.startswith("refs/pull/"):
        commands.append(f"git fetch origin {shlex.quote(head_ref)}")
    commands.append(f"git checkout --detach {head}")
    commands.append("git am -3 " + " ".join(shlex.quote(p) for p in patch_paths))
    return commands
