"""The results of bisection probes (runs with purpose `bisect`): each goes to the series'
bisection (bot.core.bisect), never to its CI rows, and the next step is asked of the
`carry.bisect` task (workers/bisect.py)."""

from __future__ import annotations

from collections.abc import Sequence

import redis
from celery import Celery

from bot.core import bisect
from bot.core import events as ev
from bot.core.ci_plan import FINAL_STATES, UPSTREAM_VARIANT, ci_key, split_ci_key
from bot.core.state import CiState, SeriesState
from bot.core.verified import row_passed
from bot.store.series import now_iso, update_series
from workers.ci.rows import committed_at, plan_recorded


def probe_of(row: CiState | None) -> bisect.Probe | None:
    """A probe's result from its row; None while the row has none yet."""
    if row is None or row.state not in FINAL_STATES:
        return None
    passed = row_passed(row)
    if passed is None:
        return bisect.Probe.NO_VERDICT
    return bisect.Probe.PASS if passed else bisect.Probe.FAIL


def probe_ended(
    client: redis.Redis, celery_app: Celery, series_id: str, sha: str, rows: Sequence[CiState]
) -> None:
    """Rows of a probe of `sha` changed: once they have a result, the bisection records it
    (only the probe it waits for counts) and its next step is asked for."""
    by_key = {row.runner: row for row in rows}
    recorded: list[bool] = []

    def record(state: SeriesState) -> bool:
        recorded.clear()
        b = state.bisect
        if b is None or not b.active:
            return False
        kind, check, _ = split_ci_key(b.check)
        if b.status is bisect.Status.RUNNING:
            with_series = probe_of(by_key.get(b.check))
            if with_series is None or not bisect.record(b, sha, with_series):
                return False
        else:  # the A/B step: the check on plain upstream at the culprit, then its parent
            plain = probe_of(by_key.get(ci_key(kind, check, UPSTREAM_VARIANT)))
            if plain is None or not bisect.record_ab(b, sha, plain, now_iso()):
                return False
        recorded.append(True)
        return True

    update_series(client, series_id, record)
    if recorded:
        plan_recorded(
            celery_app,
            ev.ChecksRecorded(series_id=series_id, head_sha=sha, at=committed_at(), probe=True),
        )
