"""The files carry proposes for a series directory after a rebase. Pure.

Input: the series directory as main has it, the series state with each patch's decision, the
refreshed patch bytes, the VERSION. Output: the files to write (bytes) or remove (None).
A conflicting patch keeps its last good file: a conflicted result is never written.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import date

from bot.core.fixpage import PageUpdateError, parse_fix_page, record_upstream_take, update_upstream
from bot.core.seriesfile import parse_series, render_series, with_base, without_patch
from bot.core.state import PatchState, SeriesState


@dataclass(frozen=True)
class Proposal:
    files: dict[str, bytes | None]  # name inside the series directory -> new bytes / removal
    notes: list[str]  # what could not be done automatically, for the PR body


def build(
    current: Mapping[str, bytes],
    state: SeriesState,
    refreshed: Mapping[str, bytes],
    version: str | None,
    today: date,
) -> Proposal:
    files: dict[str, bytes | None] = {}
    notes: list[str] = []
    series, _problems = parse_series(current.get("series", b"").decode("utf-8"))
    for patch in state.patches:
        if patch.decision == "drop":
            files[patch.name] = None
            if patch.name in series.patches:
                series = without_patch(series, patch.name)
            _record_take(current, patch, files, notes, today)
        elif patch.changed and patch.name in refreshed and patch.status != "conflict":
            files[patch.name] = refreshed[patch.name]
    _observed_upstream_states(current, state, files, notes)
    if state.checked_head and files:  # the base moves only with a real change: no churn
        series = with_base(series, state.checked_head)
    rendered = render_series(series).encode()
    if rendered != current.get("series"):
        files["series"] = rendered
    if version and files:
        files["VERSION"] = version.encode() + b"\n"
    return Proposal({k: v for k, v in files.items() if current.get(k) != v}, notes)


def _record_take(
    current: Mapping[str, bytes],
    patch: PatchState,
    files: dict[str, bytes | None],
    notes: list[str],
    today: date,
) -> None:
    commit, pr = _where_upstream_took(patch)
    page_name = _page_naming(current, patch.name, files)
    if page_name is None:
        notes.append(f"{patch.name}: no fix page names it")
        return
    if commit is None or pr is None:
        notes.append(
            f"{patch.name}: the evidence names no upstream commit and PR; update its page by hand"
        )
        return
    text = (files.get(page_name) or current[page_name]).decode("utf-8")
    try:
        updated = record_upstream_take(
            text, page_name, patch=patch.name, commit=commit, pr=pr, on=today
        )
    except PageUpdateError as err:
        notes.append(f"{patch.name}: fix page not updated: {err}")
        return
    files[page_name] = updated.encode("utf-8")


_OBSERVED = {"merged": "merged", "closed_unmerged": "closed", "open": "open", "reopened": "open"}


def _observed_upstream_states(
    current: Mapping[str, bytes],
    state: SeriesState,
    files: dict[str, bytes | None],
    notes: list[str],
) -> None:
    """Keeps each fix page's Upstream states current with what carry observed of those PRs."""
    observed = {
        pr["ref"]: _OBSERVED[pr["state"]]
        for patch in state.patches
        for pr in patch.upstream_prs
        if pr.get("state") in _OBSERVED
    }
    if not observed:
        return
    for name in sorted(n for n in current if n.endswith(".md")):
        data = files.get(name) or current[name]
        text = data.decode("utf-8")
        page, problems = parse_fix_page(text, name)
        if problems:
            continue
        entries = [
            replace(e, state=observed[str(e.ref)])
            if e.ref is not None
            and str(e.ref) in observed
            and e.state not in ("superseded", observed[str(e.ref)])
            else e
            for e in page.upstream
        ]
        if entries == list(page.upstream):
            continue
        try:
            files[name] = update_upstream(text, name, entries).encode("utf-8")
        except PageUpdateError as err:
            notes.append(f"{name}: Upstream state not updated: {err}")


def _page_naming(
    current: Mapping[str, bytes], patch: str, files: Mapping[str, bytes | None]
) -> str | None:
    for name in sorted(current):
        if not name.endswith(".md"):
            continue
        data = files.get(name) or current[name]
        page, _ = parse_fix_page(data.decode("utf-8"), name)
        if patch in page.patch_names:
            return name
    return None


def _where_upstream_took(patch: PatchState) -> tuple[str | None, str | None]:
    """(commit, PR) from the evidence: a matching upstream commit, a merged linked PR, the
    merge of a declared PR (fix page, drop_when)."""
    commit = pr = None
    for entry in patch.evidence:
        if entry.get("signal") in (
            "patch-id-match",
            "changes-match",
            "subject-match",
        ) and not entry.get("reverted_by"):
            commit = commit or entry.get("commit")
        if entry.get("signal") == "declared-pr" and entry.get("merged"):
            commit = commit or entry.get("merge_commit")
            if "/" in str(entry.get("pr")):  # a ref with its repository: the page can say it
                pr = pr or entry.get("pr")
        if entry.get("signal") == "linked-pr" and entry.get("state") == "merged":
            pr = pr or entry.get("pr")
            if entry.get("ancestor_of_head"):
                commit = commit or entry.get("merge_commit")
    for linked in patch.upstream_prs:
        pr = pr or linked.get("ref")
    return commit, pr


def applied(current: Mapping[str, bytes], files: Mapping[str, bytes | None]) -> dict[str, bytes]:
    """The series directory after the proposal."""
    out = dict(current)
    for name, data in files.items():
        if data is None:
            out.pop(name, None)
        else:
            out[name] = data
    return out


def same_patches(a: Mapping[str, bytes], b: Mapping[str, bytes]) -> bool:
    """True when both directories carry the same patches, byte for byte, in the same order.
    The recorded base and VERSION do not count: they alone never justify a push."""

    def content(files: Mapping[str, bytes]) -> tuple[object, ...]:
        listed = parse_series(files.get("series", b"").decode("utf-8"))[0].patches
        return listed, sorted((n, d) for n, d in files.items() if n.endswith(".patch"))

    return content(a) == content(b)
