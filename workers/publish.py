"""Propose a series' new state: a PR on GitHub, or, without credentials, a recorded proposal.

The GitHub side lives in bot.github; this module decides what to send and records it.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from bot.core import events as ev
from bot.core import proposal
from bot.core import transitions as tr
from bot.core.history import HistoryKind
from bot.core.publishing import PublishStep, publish_step
from bot.core.render import next_version, pr_body, pr_title
from bot.core.state import SeriesState
from bot.store import series as store
from workers.publish_github import publish as publish_on_github
from workers.runtime import Runtime

log = logging.getLogger("carry.publish")


def publish(
    rt: Runtime,
    series_id: str,
    head_sha: str,
    digest: str,
    changed: bool,
    tree: str | None = None,
    *,
    every_head: bool = False,
) -> list[ev.TreeReady]:
    """Proposes the checked series (a PR, or a recorded proposal without credentials). Returns
    where `tree` now is for the runners to test (the PR's branch; with `every_head` also when
    there is nothing to propose: the series as the downstream branch carries it), as events
    the planner plans; none in read-only mode."""
    state = store.load_series(rt.redis, series_id)
    configured = series_id in {s.id for s in rt.config.series}
    if (
        not configured
        or state is None
        or state.checked_head != head_sha
        or state.checked_digest != digest
    ):
        store.append_history(
            rt.redis,
            series_id,
            HistoryKind.PUBLISH_SKIPPED,
            reason="a newer rebase replaced this result",
            head=head_sha,
        )
        return []
    version = next_version(state.version, datetime.now(UTC).date()) if changed else state.version
    title, body = pr_title(state), pr_body(state, version)
    proposal = {"changed": changed, "title": title, "body": body, "version": version}
    proposal["head"] = head_sha
    if rt.settings.github_auth == "none":
        step = would_do(rt, state, version)
        note = f"read-only mode (no GitHub credentials), nothing pushed; carry would {step.words}"
        said = step.fields()
        store.update_series(
            rt.redis,
            series_id,
            lambda fresh: tr.published(fresh, None, None, note),
            also=lambda pipe: store.queue_history(
                pipe, series_id, HistoryKind.PROPOSAL, read_only=True, **proposal, **said
            ),
        )
        return []
    # What is about to be posted, before it is: shown on the series page, also when GitHub
    # then refuses it.
    store.append_history(rt.redis, series_id, HistoryKind.PROPOSAL, read_only=False, **proposal)
    return publish_on_github(rt, state, title, body, version, changed, tree, every_head=every_head)


def would_do(rt: Runtime, state: SeriesState, version: str | None) -> PublishStep:
    """What the publisher on GitHub would do with this result: the same proposal and the
    same decision, with the downstream checkout standing for the downstream branch and carry's
    PR as carry last knew it (read-only mode pushes no branch)."""
    series = rt.config.series_by_id(state.id)
    directory = rt.patches_root / series.patches
    files = sorted(directory.iterdir()) if directory.is_dir() else []
    current = {p.name: p.read_bytes() for p in files if p.is_file()}
    stash = store.refreshed(
        rt.redis, state.id, state.checked_head or "", state.checked_digest or ""
    )
    plan = proposal.build(current, state, stash, version, datetime.now(UTC).date())
    pr = state.pr.number if state.pr is not None and state.pr.state == "open" else None
    return publish_step(
        files=plan.files,
        open_pr=pr,
        branch_exists=False,
        outcome=state.outcome,
        closed=state.closed_pr,
        checked_head=state.checked_head,
    )
