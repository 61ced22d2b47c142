"""A base PR closed unmerged: which PR carries its work on, from GitHub's own records. Pure.

The records are the closed PR's timeline: `cross-referenced` events (another PR of the same
repository mentions it) and `commented` events (someone writes "closed in favor of #N").
Candidates are ranked by how plainly the records say so; the content evidence (do the series'
patches hold on the successor?) is the engine's, gathered by the adapter.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# Words people use on a PR closed for another one; the PR they name follows.
_IN_FAVOR = re.compile(
    r"\b(?:in\s+favou?r\s+of|superseded\s+by|replaced\s+by|continued\s+in|moved\s+to|"
    r"continues\s+in|follow(?:ed)?[-\s]up\s+in|see\s+instead)\s+"
    r"(?P<repo>[\w.-]+/[\w.-]+)?#(?P<number>\d+)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Candidate:
    number: int
    reasons: tuple[str, ...]  # what in the records points at it, for people
    named_in_words: bool  # a comment says the closed PR was closed for this one
    referenced: bool  # this PR's body or comments mention the closed PR

    @property
    def score(self) -> int:
        return 2 * self.named_in_words + self.referenced


def candidates(repo: str, number: int, timeline: Iterable[Mapping[str, Any]]) -> list[Candidate]:
    """PRs of `repo` that GitHub's records name as carrying on PR `number`, best first (the
    plainest records, then the newest PR)."""
    words: dict[int, list[str]] = {}
    references: dict[int, list[str]] = {}
    for event in timeline:
        kind = event.get("event")
        if kind == "commented":
            for found, said in _named_in(str(event.get("body") or ""), repo):
                who = (event.get("user") or {}).get("login") or "someone"
                words.setdefault(found, []).append(f"{who} wrote on #{number}: “{said}”")
        elif kind == "cross-referenced":
            issue = (event.get("source") or {}).get("issue") or {}
            if "pull_request" not in issue or not _same_repo(issue, repo):
                continue
            found = int(issue.get("number") or 0)
            title = str(issue.get("title") or "")
            references.setdefault(found, []).append(f"PR #{found} ({title}) mentions #{number}")
    ranked = [
        Candidate(n, tuple(words.get(n, []) + references.get(n, [])), n in words, n in references)
        for n in set(words) | set(references)
        if n not in (0, number)
    ]
    return sorted(ranked, key=lambda c: (-c.score, -c.number))


def _named_in(body: str, repo: str) -> list[tuple[int, str]]:
    found = []
    for match in _IN_FAVOR.finditer(body):
        if match["repo"] and match["repo"].lower() != repo.lower():
            continue  # a PR of another repository cannot be this series' base
        found.append((int(match["number"]), match[0]))
    return found


def _same_repo(issue: Mapping[str, Any], repo: str) -> bool:
    url = str(issue.get("repository_url") or "")
    return not url or url.lower().endswith(f"/repos/{repo.lower()}")


@dataclass(frozen=True)
class Retarget:
    """What carry proposes: the new base and the command that takes it."""

    base: str  # as the config writes it: "branch main" or "pull 54371"
    command: str


def retarget_for(repo: str, candidate: int, state: str, base_ref: str) -> Retarget:
    """A merged successor's work is on the branch it merged into; an open one is its head."""
    if state == "merged":
        return Retarget(f"branch {base_ref}", f"/carry retarget {base_ref}")
    return Retarget(f"pull {candidate}", f"/carry retarget {repo}#{candidate}")


def summary(
    closed: str, found: Candidate | None, state: str | None, retarget: Retarget | None
) -> str:
    """One line for "needs attention"."""
    if found is None or retarget is None:
        return (
            f"base PR {closed} was closed without being merged; no successor found in its records"
        )
    return (
        f"base PR {closed} was closed without being merged; its likely successor #{found.number} "
        f"is {(state or 'unknown').replace('_', ' ')}: {retarget.command} moves the series to "
        f"{retarget.base}"
    )
