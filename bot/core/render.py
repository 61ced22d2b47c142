"""Text that people read: carry's PR title and body, conflict reports, VERSION bumps. Pure."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import date
from typing import Any

from bot.core.state import CiState, Notice, NoticeKind, PatchState, SeriesState

MARKER = "<!-- carry:series={series} -->"
NOTICE_MARKER = "<!-- carry:notice={id} -->"
_VERSION = re.compile(r"^(\d{8})\.(\d+)$")
MAX_INTERDIFF_LINES = 200
# GitHub refuses longer texts with a 422: PR bodies and comments count characters, check-run
# output.summary / output.text count UTF-8 bytes.
GITHUB_MAX_BODY_CHARS = 65536
GITHUB_MAX_CHECK_OUTPUT_BYTES = 65535
_FENCE_CLOSE = "\n```\n"
_LOOK_BACK_FOR_LINE_END = 2000


def next_version(current: str | None, today: date) -> str:
    """YYYYMMDD.N: the next build number today, distinct from every earlier build."""
    stamp = today.strftime("%Y%m%d")
    match = _VERSION.match((current or "").strip())
    if match and match.group(1) == stamp:
        return f"{stamp}.{int(match.group(2)) + 1}"
    return f"{stamp}.1"


def _build_number(version: str | None) -> tuple[str, int] | None:
    match = _VERSION.match((version or "").strip())
    return (match.group(1), int(match.group(2))) if match else None


def landed_version(recorded: str | None, carried: str | bytes | None) -> str | None:
    """The version a series has after a publish: what carry's branch carries (`carried`: its
    VERSION file, read back from GitHub after the push, whether the push answered or not),
    unless the state already records a later build. A push that landed but answered an error
    leaves the branch ahead of the state; a number once on GitHub is never handed out again."""
    text = carried.decode("utf-8", "replace") if isinstance(carried, bytes) else carried
    on_branch = _build_number(text)
    if on_branch is None:
        return recorded
    known = _build_number(recorded)
    if known is not None and known >= on_branch:
        return recorded
    return (text or "").strip()


def notice_comment(notice: Notice) -> str:
    """The comment that says `notice`: its marker first, so that it is found, not posted again."""
    return f"{NOTICE_MARKER.format(id=notice.id)}\n{notice.body}"


def commits_kept_notice(
    branches: tuple[str, str, str],
    tip: str,
    head: str,
    commits: Iterable[tuple[str, str, str]],
    at: str,
) -> Notice:
    """The notice that carry's refresh replaces commits (sha, author, subject) it did not make
    on its branch, whose tip was `tip`; branches: (carry's, the backup, main)."""
    branch, backup, main = branches
    listed = list(commits)
    return Notice(
        id=f"commits-kept-{tip[:12]}",
        kind=NoticeKind.COMMITS_KEPT,
        body=kept_commits_comment(branch, backup, head, listed, main),
        at=at,
        details={
            "backup": backup,
            "commits": [sha for sha, _, _ in listed],
            "authors": sorted({author for _, author, _ in listed}),
        },
    )


def pr_title(state: SeriesState) -> str:
    head = (state.checked_head or state.head_sha or "")[:12]
    drops = sum(1 for p in state.patches if p.decision == "drop")
    review = sum(1 for p in state.patches if p.decision == "review")
    parts = [f"carry({state.id}): refresh on {state.base} {head}"]
    if drops:
        parts.append(f"drop {drops}")
    if review:
        parts.append(f"{review} to review")
    return "; ".join(parts)


def pr_body(state: SeriesState, version: str | None, ci: Iterable[CiState] = ()) -> str:
    lines = [
        MARKER.format(series=state.id),
        f"Series **{state.id}** on `{state.upstream_repo}` {state.base}, "
        f"head `{state.checked_head or state.head_sha}`.",
        "",
    ]
    if version:
        lines += [f"Release VERSION: `{version}`", ""]
    lines += _outcome_table(state.patches)
    lines += _refreshed(state.patches)
    lines += _section(
        "Dropped: upstream contains them", [_drop(p) for p in state.patches if p.decision == "drop"]
    )
    lines += _section(
        "Needs a human", [_review(p) for p in state.patches if p.decision == "review"]
    )
    lines += _section(
        "Conflicts", [conflict_report(p) for p in state.patches if p.status == "conflict"]
    )
    lines += _upstream_prs(state.patches)
    lines += _ci_table(list(ci) or list(state.ci.values()))
    lines += ["", "Commands (write access): `/carry help`."]
    return "\n".join(lines).rstrip() + "\n"


def _outcome_table(patches: list[PatchState]) -> list[str]:
    out = ["| patch | status | decision | why |", "|---|---|---|---|"]
    for p in patches:
        out.append(f"| `{p.name}` | {p.status} | **{p.decision}** | {_cell(p.reason)} |")
    return [*out, ""]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _section(title: str, blocks: list[str]) -> list[str]:
    return [f"### {title}", "", *blocks, ""] if blocks else []


def _refreshed(patches: list[PatchState]) -> list[str]:
    """The refreshed patches as two lists: context only (the same `+`/`-` lines, moved or with
    new context) and content changed (each with the upstream commit that forced it)."""
    refreshed = [p for p in patches if p.changed and p.interdiff and p.decision != "drop"]
    content = [p for p in refreshed if p.refresh.get("class") == "content-changed"]
    context = [p for p in refreshed if p.refresh.get("class") == "context-only"]
    other = [p for p in refreshed if p not in content and p not in context]
    return [
        *_section(
            "Refreshed, context only (the same +/- lines, moved or with new context)",
            [_interdiff(p) for p in context],
        ),
        *_section(
            "Refreshed, content changed (their +/- lines changed)",
            [_forced_by(p) + "\n" + _interdiff(p) for p in content],
        ),
        *_section("Refreshed patches", [_interdiff(p) for p in other]),
    ]


def _forced_by(p: PatchState) -> str:
    """Which upstream commits forced a content change, per changed hunk."""
    named = []
    for c in p.refresh.get("forced_by", []):
        where = f"`{c.get('file', '')}` `{c.get('hunk', '')}`"
        if c.get("sha"):
            number = c.get("pr")
            pr = f" (PR {as_code(f'#{number}')})" if number is not None else ""
            named.append(
                f"{where} by `{str(c['sha'])[:12]}` {as_code(str(c.get('subject', '')))}{pr}"
            )
        else:
            named.append(f"{where} (no upstream commit found that touched these lines)")
    forced = "; ".join(named) if named else "no upstream commit named"
    return f"- `{p.name}`: forced by {forced}."


def _interdiff(p: PatchState) -> str:
    lines = p.interdiff.splitlines()
    if len(lines) > MAX_INTERDIFF_LINES:
        lines = [
            *lines[:MAX_INTERDIFF_LINES],
            f"... ({len(lines) - MAX_INTERDIFF_LINES} more lines)",
        ]
    body = "\n".join(lines)
    return f"<details><summary><code>{p.name}</code>: what changed</summary>\n\n```diff\n{body}\n```\n</details>\n"


def _drop(p: PatchState) -> str:
    evidence = "; ".join(_evidence_line(e) for e in p.evidence if _evidence_line(e))
    subject = f" ({as_code(p.subject)})" if p.subject.strip() else ""
    return (
        f"- `{p.name}`{subject}: {p.reason}. Evidence: {evidence or 'see the dashboard'}."
        + _landing_words(p)
    )


def _evidence_line(entry: dict[str, Any]) -> str:
    signal = entry.get("signal", "")
    if signal in ("reverse-apply", "forward-apply"):
        return f"{signal} {entry.get('result')}"
    if signal == "3way-apply":
        return f"3-way apply {entry.get('result')}" + (
            ", tree unchanged" if entry.get("unchanged") else ""
        )
    if signal.endswith("-match"):
        reverted = f", reverted by {entry['reverted_by'][:12]}" if entry.get("reverted_by") else ""
        return f"{signal} {str(entry.get('commit'))[:12]} {as_code(str(entry.get('subject')))}{reverted}"
    if signal == "linked-pr":
        return f"{entry.get('pr')} {entry.get('state')}" + (
            f" (merge commit in head: {entry.get('ancestor_of_head')})"
            if "ancestor_of_head" in entry
            else ""
        )
    if signal == "tree-unchanged":
        return "applying it leaves the tree unchanged"
    return ""


def _review(p: PatchState) -> str:
    hunks = (p.conflict or {}).get("hunks") or []
    where = ", ".join(f"{h['file']} {h['hunk']} ({h['state']})" for h in hunks[:8])
    return (
        f"- `{p.name}` **{p.status}**: {p.reason}."
        + _landing_words(p)
        + (f" Hunks: {where}." if where else "")
    )


def _landing_words(p: PatchState) -> str:
    """Where upstream's version of the patch came from: its upstream commits (and PRs)."""
    named = []
    for c in p.upstream_commits[:3]:
        pr = c.get("pr")
        by_pr = (
            f" (PR {as_code(f'#{pr}')})" if pr is not None and f"#{pr}" not in c["subject"] else ""
        )
        named.append(f"`{str(c['sha'])[:12]}` {as_code(str(c['subject']))}{by_pr}")
    return f" Upstream's version: {', '.join(named)}." if named else ""


def conflict_report(p: PatchState) -> str:
    """The hunks that fail, the upstream commits that touched them, and how to reproduce."""
    conflict = p.conflict or {}
    out = [f"#### `{p.name}` does not apply", "", p.reason, ""]
    for hunk in conflict.get("hunks", []):
        commits = hunk.get("upstream_commits") or hunk.get("recent_commits") or []
        label = (
            "upstream commits that touched these lines"
            if "upstream_commits" in hunk
            else "recent commits on this file"
        )
        out.append(f"- `{hunk['file']}` `{hunk['hunk']}`: {hunk.get('detail') or hunk['state']}")
        out += [f"  - {label}: `{c['sha'][:12]}` {as_code(c['subject'])}" for c in commits[:5]]
    reproduce = conflict.get("reproduce")
    if reproduce:
        out += ["", "Reproduce locally:", "", "```sh", *reproduce, "```"]
    return "\n".join(out) + "\n"


MAX_QUOTED_CHARS = 200


def as_code(text: str) -> str:
    """Text nobody here wrote (an upstream commit subject) as a Markdown code span: shown as
    is, so its HTML, links, @mentions and #references are never acted on by GitHub."""
    text = " ".join(text.split())
    if not text:
        return ""
    if len(text) > MAX_QUOTED_CHARS:
        text = text[: MAX_QUOTED_CHARS - 1] + "…"
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or longest else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _upstream_prs(patches: list[PatchState]) -> list[str]:
    rows = [
        f"| `{p.name}` | {pr['ref']} | {pr['state'].replace('_', ' ')} |"
        for p in patches
        for pr in p.upstream_prs
    ]
    if not rows:
        return []
    return ["### Upstream PRs", "", "| patch | PR | state |", "|---|---|---|", *rows, ""]


def _ci_table(runs: list[CiState]) -> list[str]:
    header = ["### Hardware CI", "", "| runner | state | detail |", "|---|---|---|"]
    if not runs:
        return [*header, "| - | not started | CI runs once this tree is proposed |", ""]
    return [*header, *(f"| {r.runner} | {r.state} | {_cell(r.detail)} |" for r in runs), ""]


def fit_for_github(
    text: str,
    series_id: str | None = None,
    *,
    limit: int = GITHUB_MAX_BODY_CHARS,
    in_bytes: bool = False,
) -> str:
    """`text` as is when GitHub accepts its size, else cut at a line end under `limit` with a
    visible note that says where the full text is (an open code block is closed first)."""
    size = _utf8_len if in_bytes else len
    total = size(text)
    if total <= limit:
        return text
    note = _overflow_note(series_id, total, limit, "bytes" if in_bytes else "characters")
    budget = limit - size(note) - len(_FENCE_CLOSE)
    head = _utf8_prefix(text, budget) if in_bytes else text[:budget]
    line_end = head.rfind("\n", max(0, len(head) - _LOOK_BACK_FOR_LINE_END))
    if line_end > 0:
        head = head[: line_end + 1]
    if head.count("```") % 2:
        head += _FENCE_CLOSE
    return head.rstrip("\n") + note


def _overflow_note(series_id: str | None, total: int, limit: int, unit: str) -> str:
    where = (
        f"the page of series `{series_id}` (`/series/{series_id}`) on carry's dashboard"
        if series_id
        else "carry's dashboard"
    )
    return (
        f"\n\n> **Truncated by carry**: the full text has {total} {unit}, GitHub takes at most "
        f"{limit}. Full text on {where}.\n"
    )


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


def _utf8_prefix(text: str, max_bytes: int) -> str:
    return text.encode("utf-8")[:max_bytes].decode("utf-8", errors="ignore")


def kept_commits_comment(
    branch: str, backup: str, head: str, commits: Iterable[tuple[str, str, str]], main: str
) -> str:
    """What carry tells a PR when its refresh of `branch` replaces commits (sha, author,
    subject) that it did not make; they are kept on `backup`."""
    listed = [
        f"- `{sha[:12]}` {as_code(subject)} by {as_code(author)}"
        for sha, author, subject in commits
    ]
    return "\n".join(
        [
            f"carry refreshed `{branch}` on `{head[:12]}`, which replaces commits it did not make:",
            *listed,
            "",
            f"They are kept on the branch `{backup}`. carry rebuilds `{branch}` from the series'",
            "patches at every refresh, so a change meant to stay belongs in the series: commit it",
            f"to `{main}` (or ask carry to `/carry pause` this series while you work on its branch).",
        ]
    )
