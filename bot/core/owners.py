"""The owners of a fix are told when its check stays red (issue 32). Pure.

A fix page may name its owners (`| Owners | @alice, @bob |`, bot.core.fixpage). When a series
has been red for `notify.red_streak_mention` heads in a row, carry mentions the owners of the
failing fix once per streak: in a comment on the dashboard issue (a mention in an edited body
notifies nobody on GitHub) and in a `red-streak` message to the webhooks. The failing fix is
the fix page named like a failing check (`gaudi/async-inputs` fails: the page `async-inputs`);
where no page is named so, every page of the series is the fix that fails.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bot.core.ci_plan import split_ci_key
from bot.core.fixpage import FixPage
from bot.core.state import RedStreak, SeriesState

RED_STREAK_TASK = "carry.red_streak"  # workers/mention.py: a red streak grew by one head
CHANGE = "red-streak"  # the message's change (X-Carry-Event) and history entry


@dataclass(frozen=True)
class StreakGrew:
    """A red streak gained a head: what the mention task needs to decide."""

    series_id: str
    head: str  # the newest red head
    streak_head: str  # the first red head: the streak's identity
    heads: int
    since: str
    checks: tuple[tuple[str, str], ...]  # the newest red head's (CI row key, state)

    def to_dict(self) -> dict[str, object]:
        return {
            "series": self.series_id,
            "head": self.head,
            "streak_head": self.streak_head,
            "heads": self.heads,
            "since": self.since,
            "checks": dict(self.checks),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StreakGrew:
        return cls(
            series_id=str(data["series"]),
            head=str(data["head"]),
            streak_head=str(data["streak_head"]),
            heads=int(data["heads"]),
            since=str(data["since"]),
            checks=tuple(sorted((str(k), str(v)) for k, v in dict(data["checks"]).items())),
        )


def streak_grew(
    state: SeriesState, before: RedStreak | None, checks: dict[str, str]
) -> StreakGrew | None:
    """The streak the state is in now, when it is `before` with more heads."""
    now = state.red_streak
    if now is None or before is None or now.head != before.head or now.heads <= before.heads:
        return None
    return StreakGrew(
        state.id, now.last or now.head, now.head, now.heads, now.at, tuple(sorted(checks.items()))
    )


def mention_due(heads: int, threshold: int | None) -> bool:
    """Whether a streak of `heads` red heads reached the configured mention (None: never)."""
    return threshold is not None and heads >= threshold


def mention_key(series_id: str, streak_head: str) -> str:
    """Once per streak: the streak is named by its first red head."""
    return f"mention:{series_id}:{streak_head}"


def failing_checks(checks: dict[str, str]) -> list[str]:
    """The names of the checks that failed (`gaudi/fixed` -> `fixed`), A/B variants aside."""
    names = []
    for key, state in checks.items():
        _kind, name, variant = split_ci_key(key)
        if state == "failure" and not variant and name not in names:
            names.append(name)
    return names


def owners_of(pages: Sequence[FixPage], failing: Iterable[str]) -> tuple[str, ...]:
    """The logins to mention: the owners of the pages named like a failing check, else of
    every page (each login once, in page order)."""
    wanted = set(failing)
    named = [p for p in pages if p.name in wanted]
    found: list[str] = []
    for page in named or pages:
        for login in page.owners:
            if login.lower() not in {f.lower() for f in found}:
                found.append(login)
    return tuple(found)


def mention_text(grew: StreakGrew, owners: Sequence[str], page: str | None) -> str:
    """The comment and the message: who is told, what is red, since when."""
    who = " ".join(f"@{login}" for login in owners) or "nobody (no fix page names owners)"
    failing = ", ".join(k for k, s in grew.checks if s == "failure") or "a check"
    where = f" ({page})" if page else ""
    return (
        f"{who}: carry's series `{grew.series_id}` is red since {grew.streak_head[:12]} "
        f"({grew.heads} heads, since {grew.since}); newest red head {grew.head[:12]}, "
        f"failing: {failing}{where}"
    )


def mention_notice(grew: StreakGrew, owners: Sequence[str], page: str | None) -> dict[str, object]:
    """The webhooks' message (bot.core.notify formats and signs it)."""
    return {
        "key": mention_key(grew.series_id, grew.streak_head),
        "change": CHANGE,
        "series": grew.series_id,
        "head": grew.head,
        "checks": dict(grew.checks),
        "streak_head": grew.streak_head,
        "streak_heads": grew.heads,
        "since": grew.since,
        "owners": list(owners),
        "summary": mention_text(grew, owners, page),
    }
