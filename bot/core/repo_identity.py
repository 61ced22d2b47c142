"""Which configured repository a delivery is about: GitHub keeps a repository's id through a
rename or a transfer, while its name changes, so an event is matched by `repository.id` first
and by name only until carry has learned the id. Pure.

`known` maps each configured name (lower case) to the id carry learned for it; `names` maps
each configured name (as the config spells it) to the config field that holds it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from bot.core import events as ev

# Events about one repository, named by `repo` with GitHub's id in `repo_id`.
RepoEvent = (
    ev.HeadMoved
    | ev.RefDeleted
    | ev.PrStateChanged
    | ev.CommentCreated
    | ev.IssueEdited
    | ev.CiResultReceived
)
REPO_EVENTS: tuple[type[RepoEvent], ...] = (
    ev.HeadMoved,
    ev.RefDeleted,
    ev.PrStateChanged,
    ev.CommentCreated,
    ev.IssueEdited,
    ev.CiResultReceived,
)


@dataclass(frozen=True)
class Match:
    """`name`: the configured name the event's repository has (None: not one of carry's);
    `learn`: an id to record for `name`, seen with it for the first time; `other_id`: the id
    carry knows for the event's name when the event is of another repository of that name."""

    name: str | None
    learn: int | None = None
    other_id: int | None = None


@dataclass(frozen=True)
class Move:
    """A configured repository GitHub now knows by another name."""

    configured: str  # as the config names it
    field: str  # the config field that names it
    was: str
    now: str
    action: ev.MoveKind
    repo_id: int

    @property
    def key(self) -> str:
        """Said once per new name, whichever event tells it first (a `repository` event, or
        any event under the new name)."""
        return f"repo-moved:{self.repo_id}:{self.now.lower()}"

    @property
    def action_words(self) -> str:
        return f"set {self.field} to {self.now} in the config"


def match(
    repo: str, repo_id: int | None, names: Mapping[str, str], known: Mapping[str, int]
) -> Match:
    """The configured repository an event names: by id when carry knows it, else by name
    (whose id is then learned). A repository that took a configured name after the one carry
    follows moved away is not that repository."""
    if repo_id is not None:
        for name in names:
            if known.get(name.lower()) == repo_id:
                return Match(name)
    by_name = next((name for name in names if name.lower() == repo.lower()), None)
    if by_name is None:
        return Match(None)
    known_id = known.get(by_name.lower())
    if repo_id is not None and known_id is not None:  # known_id != repo_id: matched above
        return Match(None, other_id=known_id)
    return Match(by_name, learn=repo_id if known_id is None else None)


def unknown(names: Mapping[str, str], known: Mapping[str, int]) -> tuple[str, ...]:
    """The configured names whose id carry has not learned."""
    return tuple(name for name in names if name.lower() not in known)


def move_of(
    event: ev.RepositoryMoved, names: Mapping[str, str], known: Mapping[str, int]
) -> tuple[Move | None, Match]:
    """The configured repository GitHub's `repository` event renamed or transferred (matched
    by id, else by its old name), and what carry learns from the event."""
    found = match(event.was, event.repo_id, names, known)
    if found.name is None:
        return None, found
    return _move(found.name, names, event.was, event.repo, event.repo_id, event.action), found


def seen_moved(event: RepoEvent, configured: str, names: Mapping[str, str]) -> Move | None:
    """An event of a configured repository under another name: GitHub moved it (carry may
    not receive `repository` events, so any event can be the first to tell)."""
    if event.repo.lower() == configured.lower() or event.repo_id is None:
        return None
    owner_changed = event.repo.split("/")[0].lower() != configured.split("/")[0].lower()
    action: ev.MoveKind = "transferred" if owner_changed else "renamed"
    return _move(configured, names, configured, event.repo, event.repo_id, action)


def as_configured(event: RepoEvent, configured: str) -> RepoEvent:
    """The event under the config's name for its repository: what the planner matches, and
    what its key (shared with the poller's events) is made of."""
    if event.repo == configured:
        return event
    return dataclasses.replace(event, repo=configured)


def _move(
    configured: str,
    names: Mapping[str, str],
    was: str,
    now: str,
    repo_id: int,
    action: ev.MoveKind,
) -> Move:
    return Move(configured, names[configured], was, now, action, repo_id)
