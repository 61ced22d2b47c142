"""Deliveries matched to carry's repositories by GitHub's id (bot.core.repo_identity decides):
the ids learned are kept in Redis (bot.store.repo_ids), a rename or transfer is said in the
history of each series it concerns, and an event under a repository's new name reaches the
planner under the config's name."""

from __future__ import annotations

import logging

from bot.config import CarryConfig
from bot.core import events as ev
from bot.core import repo_identity as ri
from bot.core.history import HistoryKind as H
from bot.github.forge import ForgeError
from bot.github.port import ForgePort
from bot.store import repo_ids
from bot.store import series as store
from workers.runtime import Runtime

log = logging.getLogger("carry.repo_identity")


def configured_names(config: CarryConfig) -> dict[str, str]:
    """Each repository the config names -> the config field that names it."""
    names = {config.downstream.repo: "downstream.repo"}
    for key, upstream in config.upstreams.items():
        names.setdefault(upstream.repo, f"upstreams.{key}.repo")
    return names


def resolve(rt: Runtime, event: ev.Event) -> ev.Event | None:
    """The event as the planner sees it: under the config's name for its repository (matched
    by id). None when there is nothing to plan: a `repository` event (said here), or an event
    of another repository that took the name of one carry follows."""
    if isinstance(event, ev.RepositoryMoved):
        _repository_moved(rt, event)
        return None
    if not isinstance(event, ri.REPO_EVENTS):
        return event
    names = configured_names(rt.config)
    found = ri.match(event.repo, event.repo_id, names, repo_ids.known(rt.redis))
    if found.other_id is not None:
        store.append_history(
            rt.redis,
            None,
            H.NOTE,
            reason=(
                f"{event.repo} (id {event.repo_id}) is not the repository carry follows under "
                f"that name (id {found.other_id}, since renamed or transferred): not acted on"
            ),
            key=event.key,
        )
        return None
    if found.name is None:
        return event
    if found.learn is not None:
        repo_ids.learn(rt.redis, found.name, found.learn)
    move = ri.seen_moved(event, found.name, names)
    if move is not None:
        tell(rt, move)
    return ri.as_configured(event, found.name)


def _repository_moved(rt: Runtime, event: ev.RepositoryMoved) -> None:
    names = configured_names(rt.config)
    move, found = ri.move_of(event, names, repo_ids.known(rt.redis))
    if move is None:
        log.info("%s %s: not a repository carry follows", event.was, event.action)
        return
    if found.learn is not None:
        repo_ids.learn(rt.redis, move.configured, found.learn)
    tell(rt, move, by=event.actor)


def tell(rt: Runtime, move: ri.Move, by: str | None = None) -> None:
    """Said once per move, in the history of each series on the repository, with what to
    change in the config; carry goes on under the new name meanwhile. The entries and the
    move's claim commit together, so workers telling one move at once say it once."""
    said = {
        "how": move.action,
        "was": move.was,
        "now": move.now,
        "repo_id": move.repo_id,
        "by": by or "",
        "action": move.action_words,
    }
    entries = [
        (series_id, H.REPOSITORY_MOVED, said)
        for series_id in _series_on(rt.config, move.configured)
    ]
    if not store.append_history_once(rt.redis, move.key, entries):
        return
    log.warning(
        "GitHub: %s was %s to %s; carry follows it by id (%s)",
        move.configured,
        move.action,
        move.now,
        move.action_words,
    )


def _series_on(config: CarryConfig, repo: str) -> list[str]:
    if repo.lower() == config.downstream.repo.lower():
        return [s.id for s in config.series]
    return [
        s.id for s in config.series if config.upstreams[s.upstream].repo.lower() == repo.lower()
    ]


def learn_ids(rt: Runtime, forge: ForgePort) -> None:
    """Asks GitHub for the id of each configured repository whose id carry has not learned
    (at most once an hour each): a repository renamed before its first delivery is then
    still matched. GitHub answers by an old name with a redirect that names the id."""
    names = configured_names(rt.config)
    for name in ri.unknown(names, repo_ids.known(rt.redis)):
        if not repo_ids.may_ask(rt.redis, name):
            continue
        try:
            repo_ids.learn(rt.redis, name, forge.repository_id(name))
        except ForgeError as err:
            log.warning("cannot learn the GitHub id of %s: %s", name, err)
