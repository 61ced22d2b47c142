"""`carry init`'s decisions, pure: which upstream line a downstream branch follows, which
upstream change each of its commits carries, how its commits group into fixes, and the text
of the fix-page stubs and config entries written for them. The git and file work is in
bot/onboard.py.

A downstream branch (a team's build of vllm-gaudi, say) is an upstream line plus commits on
top: the line is the upstream branch (or tag) that leaves the fewest of the branch's commits
on top. Each commit on top is one patch; commits that carry the same upstream pull request
(the `(#1234)` of a subject, the `(cherry picked from commit ...)` trailer) make one fix page.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from bot.core.fixpage import STATE_CHOICES, PatchFiles, render_patches

# "Fix the scheduler (#1234)", also "[v0.10.1] Fix it (#1234) (#1300)": the numbers at the end.
_PR_SUFFIX_RE = re.compile(r"\s*\(#([1-9][0-9]*)\)\s*$")
_PICKED_RE = re.compile(r"^\s*\(cherry picked from commit ([0-9a-f]{7,40})\)\s*$", re.M)
_TAG_PREFIX_RE = re.compile(r"^\s*\[[^\]]*\]\s*")
FIX_NAME_MAX = 48
SERIES_ID_MAX = 64


class LineKind(enum.Enum):
    BRANCH = "branch"
    TAG = "tag"


@dataclass(frozen=True)
class LineCandidate:
    """An upstream branch or tag and how far a downstream branch is from it."""

    name: str  # "releases/v0.1", "v0.1.0"
    kind: LineKind
    ahead: int  # commits of the downstream branch that it does not have
    behind: int  # its commits that the downstream branch does not have

    def describe(self) -> str:
        return f"{self.kind.value} {self.name}"


@dataclass(frozen=True)
class LineChoice:
    chosen: LineCandidate
    tied: tuple[LineCandidate, ...]  # as few commits on top as the chosen one
    next_best: LineCandidate | None  # the closest one with more commits on top


def _rank(candidate: LineCandidate) -> tuple[int, int, int, str]:
    # Fewest commits on top; a release line (a branch) before a tag at the same place; then
    # the line that moved least since the branch left it.
    return (
        candidate.ahead,
        0 if candidate.kind is LineKind.BRANCH else 1,
        candidate.behind,
        candidate.name,
    )


def choose_line(candidates: Iterable[LineCandidate]) -> LineChoice | None:
    """The line the branch follows; None when no candidate shares history with it."""
    ranked = sorted(candidates, key=_rank)
    if not ranked:
        return None
    chosen = ranked[0]
    tied = tuple(c for c in ranked[1:] if c.ahead == chosen.ahead)
    next_best = next((c for c in ranked[1:] if c.ahead > chosen.ahead), None)
    return LineChoice(chosen, tied, next_best)


def release_name(line: str) -> str:
    """The release a line stands for, as fix pages' `Releases` name it: the last part of the
    branch or tag (`releases/v0.1` -> `v0.1`)."""
    return line.rstrip("/").rsplit("/", 1)[-1]


def series_id(upstream: str, line: str) -> str:
    """A series id for the branch on `line` of `upstream` (`vllm-gaudi-v0.1`)."""
    raw = f"{upstream}-{release_name(line)}".lower()
    cleaned = re.sub(r"[^a-z0-9._-]+", "-", raw).strip("-._")
    return cleaned[:SERIES_ID_MAX].rstrip("-._") or "series"


# ---------------------------------------------------------------- commit messages


def pr_numbers(subject: str) -> tuple[int, ...]:
    """The pull request numbers at the end of a subject, in order: `(#1234) (#1300)`."""
    found: list[int] = []
    rest = subject
    while match := _PR_SUFFIX_RE.search(rest):
        found.insert(0, int(match.group(1)))
        rest = rest[: match.start()]
    return tuple(found)


def bare_subject(subject: str) -> str:
    """The subject without leading `[tags]` and trailing `(#N)` numbers."""
    rest = subject
    while _PR_SUFFIX_RE.search(rest):
        rest = _PR_SUFFIX_RE.sub("", rest, count=1)
    while _TAG_PREFIX_RE.match(rest):
        rest = _TAG_PREFIX_RE.sub("", rest, count=1)
    return rest.strip()


def picked_from(message: str) -> tuple[str, ...]:
    """The commits a `git cherry-pick -x` message names."""
    return tuple(_PICKED_RE.findall(message))


def fix_name(subject: str, fallback: str) -> str:
    """A fix name (`[a-z0-9][a-z0-9-]*`) from a commit subject, cut at a word boundary."""
    words = re.findall(r"[a-z0-9]+", bare_subject(subject).lower())
    name = ""
    for word in words:
        candidate = f"{name}-{word}" if name else word
        if len(candidate) > FIX_NAME_MAX:
            break
        name = candidate
    if not name and words:
        name = words[0][:FIX_NAME_MAX]
    return name or fallback


# ---------------------------------------------------------------- fixes


@dataclass(frozen=True)
class UpstreamChange:
    """The upstream commit a downstream commit carries, found by its cherry-pick trailer or by
    its PR number and subject."""

    sha: str
    prs: tuple[int, ...]  # the PR numbers of the upstream commit's subject
    how: str  # "cherry-picked from" or "same PR and subject as"


@dataclass(frozen=True)
class BranchCommit:
    sha: str
    subject: str
    body: str
    patch: str  # the patch file name it becomes
    touched: tuple[str, ...]
    upstream: UpstreamChange | None = None
    in_line: bool = False  # the followed line already has an equal change (git cherry)

    @property
    def pr_numbers(self) -> tuple[int, ...]:
        return pr_numbers(self.subject)


@dataclass(frozen=True)
class Fix:
    name: str
    commits: tuple[BranchCommit, ...]

    @property
    def upstream_prs(self) -> tuple[int, ...]:
        """Upstream PRs whose merged commits this fix carries, in order, once each."""
        seen: dict[int, None] = {}
        for commit in self.commits:
            for number in commit.upstream.prs if commit.upstream else ():
                seen.setdefault(number)
        return tuple(seen)


def _fix_key(commit: BranchCommit) -> str:
    if commit.upstream is not None and commit.upstream.prs:
        return f"upstream#{commit.upstream.prs[0]}"
    if commit.pr_numbers:
        return f"downstream#{commit.pr_numbers[0]}"
    return f"commit {commit.sha}"


def group_fixes(commits: Sequence[BranchCommit]) -> tuple[Fix, ...]:
    """One fix per upstream PR the commits carry (else per PR number of their subjects, else
    per commit), in the order of their first commit; names unique."""
    groups: dict[str, list[BranchCommit]] = {}
    for commit in commits:
        groups.setdefault(_fix_key(commit), []).append(commit)
    fixes: list[Fix] = []
    used: set[str] = set()
    for members in groups.values():
        first = members[0]
        name = fix_name(first.subject, f"fix-{first.sha[:12]}")
        if name in used:
            suffix = str(first.pr_numbers[0]) if first.pr_numbers else first.sha[:12]
            name = f"{name}-{suffix}"
        while name in used:
            name = f"{name}-{first.sha[:12]}"
        used.add(name)
        fixes.append(Fix(name, tuple(members)))
    return tuple(fixes)


# ---------------------------------------------------------------- fix-page stubs


def _quote(text: str) -> str:
    """A commit message as a Markdown block quote: no line of it reads as a heading, a table
    row or a code fence of the page."""
    return "\n".join(f"> {line}".rstrip() for line in text.strip("\n").splitlines())


def upstream_cell(fix: Fix, upstream_repo: str) -> str:
    prs = fix.upstream_prs
    if not prs:
        return "not-filed"
    return "; ".join(f"{upstream_repo}#{number} (merged)" for number in prs)


def render_fix_page(fix: Fix, *, releases: Sequence[str], upstream_repo: str, source: str) -> str:
    """The page `carry init` writes for a fix: what the commits say is filled in, the rest is
    marked TODO for a person."""
    first = fix.commits[0]
    patches = render_patches(PatchFiles(c.patch, c.touched) for c in fix.commits)
    lines = [
        f"# {fix.name}",
        "",
        f"Carried from {source}: {first.subject}",
        "",
        "<!-- Written by `carry init` from the commits below. Fill in each TODO, check",
        "     Upstream (states: " + STATE_CHOICES + "),",
        "     then delete this comment. -->",
        "",
        "| Field | Value |",
        "|---|---|",
        "| Affects | TODO: who hits the bug: models, features, hardware, configurations |",
        f"| Releases | {', '.join(releases)} |",
        f"| Patches | {patches} |",
        f"| Upstream | {upstream_cell(fix, upstream_repo)} |",
        "| Test | TODO: the test that shows the bug, or 'none' and why |",
        "",
        "## Problem",
        "",
        "TODO: the defect in the code, precisely enough to review the patch against.",
        "",
        "## Symptom",
        "",
        "TODO: what a user sees when it hits.",
        "",
        "## Who is affected",
        "",
        "TODO: which deployments hit it, and which do not.",
        "",
        "## The fix",
        "",
    ]
    for commit in fix.commits:
        origin = ""
        if commit.upstream is not None:
            origin = f" ({commit.upstream.how} upstream commit {commit.upstream.sha[:12]})"
        lines += [f"`{commit.patch}`, commit {commit.sha[:12]}{origin}:", ""]
        lines += [_quote(f"{commit.subject}\n\n{commit.body}".strip()), ""]
    lines += [
        "## Verify",
        "",
        "TODO: how the hardware check shows the fix works (and fails without it).",
    ]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- config entries


_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "y", "n", "null"}
_PLAIN_RE = re.compile(r"[A-Za-z][A-Za-z0-9._/-]*|[0-9]{4}-[A-Za-z0-9._-]*[A-Za-z][A-Za-z0-9._-]*")


def yaml_scalar(value: str) -> str:
    """`value` as a YAML scalar that reads back as this string: plain when it safely can be
    (names, branches, patch files), else double-quoted."""
    if _PLAIN_RE.fullmatch(value) and value.lower() not in _YAML_WORDS:
        return value
    return json.dumps(value)


@dataclass(frozen=True)
class SeriesEntry:
    id: str
    upstream: str  # a key of upstreams
    base_kind: LineKind
    base: str
    patches: str  # directory under downstream.patches_dir
    links: Mapping[str, tuple[str, ...]]  # patch file -> upstream PR refs


def render_series_entry(entry: SeriesEntry, indent: int = 2) -> str:
    """One item of the config's `series:` list, each line ending in a newline."""
    pad = " " * indent
    lines = [
        f"{pad}- id: {yaml_scalar(entry.id)}",
        f"{pad}  upstream: {yaml_scalar(entry.upstream)}",
        f"{pad}  base: {{{entry.base_kind.value}: {yaml_scalar(entry.base)}}}",
        f"{pad}  patches: {yaml_scalar(entry.patches)}",
    ]
    if entry.links:
        lines.append(f"{pad}  links:")
        for patch, refs in entry.links.items():
            lines.append(f"{pad}    {yaml_scalar(patch)}: [{', '.join(refs)}]")
    return "".join(f"{line}\n" for line in lines)


def render_upstream_entry(name: str, url: str, repo: str, indent: int = 2) -> str:
    pad = " " * indent
    return (
        f"{pad}{yaml_scalar(name)}:\n"
        f"{pad}  url: {yaml_scalar(url)}\n"
        f"{pad}  repo: {yaml_scalar(repo)}\n"
    )


def render_config(
    *,
    downstream_repo: str,
    patches_dir: str,
    upstream: tuple[str, str, str],
    series: Sequence[SeriesEntry],
) -> str:
    """A whole config file for a checkout that has none yet."""
    name, url, repo = upstream
    return (
        "# carry's configuration, written by `carry init`: what carry carries, on which\n"
        "# upstream heads. Secrets never go here (see .env.example); every key is described\n"
        "# in config/carry.example.yaml.\n"
        "\n"
        "downstream:\n"
        f"  repo: {yaml_scalar(downstream_repo)}\n"
        "  branch: main\n"
        f"  patches_dir: {yaml_scalar(patches_dir)}\n"
        "\n"
        "upstreams:\n"
        f"{render_upstream_entry(name, url, repo)}"
        "\n"
        "series:\n" + "".join(render_series_entry(entry) for entry in series)
    )
