"""Propose a series' new state: a PR on GitHub, or, without credentials, a recorded proposal.

The GitHub side lives in bot.github; this module decides what to send and records it.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from bot.core import transitions as tr
from bot.core.render import next_version, pr_body, pr_title
from bot.store import series as store
from workers.publish_github import publish as publish_on_github
from workers.runtime import Runtime

log = logging.getLogger("carry.publish")


def publish(
    rt: Runtime, series_id: str, head_sha: str, digest: str, changed: bool, tree: str | None = None
) -> None:
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
            "publish-skipped",
            reason="a newer rebase replaced this result",
            head=head_sha,
        )
        return
    version = next_version(state.version, datetime.now(UTC).date()) if changed else state.version
    title, body = pr_title(state), pr_body(state, version)
    proposal = {"changed": changed, "title": title, "body": body, "version": version}
    proposal["head"] = head_sha
    if rt.settings.github_auth == "none":
        note = "proposal ready; read-only mode (no GitHub credentials): nothing pushed"
        store.update_series(
            rt.redis,
            series_id,
            lambda fresh: tr.published(fresh, None, None, note),
            also=lambda pipe: store.queue_history(
                pipe, series_id, "proposal", read_only=True, **proposal
            ),
        )
        return
    # What is about to be posted, before it is: shown on the series page, also when GitHub
    # then refuses it.
    store.append_history(rt.redis, series_id, "proposal", read_only=False, **proposal)
    publish_on_github(rt, state, title, body, version, changed, tree)
