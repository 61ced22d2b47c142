"""Hardware runs as both sides see them: the run record read into a `Run`, what its progress
causes beyond that record (RunEffects: the service does it, a runner reports it), its end, and
the CI rows a job produces. The keys are bot/store/ci_runs.py's; the service writes the rows
into the series (workers/ci/rows.py)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import redis

from bot.ci.spec import (
    JobPayload,
    StepSpec,
)
from bot.core.ci_plan import (
    ACTIVE_STATES,
    UPSTREAM_VARIANT,
    ci_key,
)
from bot.core.history import HistoryKind, ci_kind
from bot.core.state import CiStatus
from bot.log import redact
from bot.store.ci_runs import leave_budget, run_fields, transition

TASK_NAME = "carry.ci.run_job"
REPORT_TASK = "carry.ci.report"
PACED_TASK = "carry.ci.release_paced"  # the service's: starts paced runs whose time came
PACED_EVERY_S = 30.0  # how often the beat sends PACED_TASK when a series paces its runs
SERVICE_QUEUE = "carry"


# --------------------------------------------------------------------------- the run record


@dataclass
class Run:
    run_id: str
    series: str
    kind: str
    tree_key: str
    head_sha: str
    state: CiStatus
    detail: str
    attempt: int
    runner: str
    dispatched: bool
    payload: JobPayload
    checks: dict[str, dict[str, Any]]


def load_run(client: redis.Redis, run_id: str) -> Run | None:
    raw = run_fields(client, run_id)
    if "payload" not in raw:
        return None
    checks = {
        k.removeprefix("check:"): json.loads(v) for k, v in raw.items() if k.startswith("check:")
    }
    return Run(
        run_id=run_id,
        series=raw["series"],
        kind=raw["kind"],
        tree_key=raw["tree_key"],
        head_sha=raw["head_sha"],
        state=CiStatus(raw.get("state", CiStatus.QUEUED)),
        detail=raw.get("detail", ""),
        attempt=int(raw.get("attempt") or 0),
        runner=raw.get("runner", ""),
        dispatched=raw.get("dispatched") == "1",
        payload=JobPayload.from_dict(json.loads(raw["payload"])),
        checks=checks,
    )


def must_load(client: redis.Redis, run_id: str) -> Run:
    run = load_run(client, run_id)
    if run is None:
        raise RuntimeError(f"run {run_id} vanished from Redis while it was being recorded")
    return run


class RunEffects(Protocol):
    """What a run's progress causes beyond its own record: history entries, the series' CI
    rows and the budget. The service does them (workers.ci.requests.ServiceEffects); a runner
    reports them (runner.task.ReportedEffects), since its broker user may not write series
    state."""

    def history(self, series_id: str, kind: HistoryKind, **fields: Any) -> None: ...

    def rows(self, run_id: str, only: str | None = None) -> None: ...

    def budget_freed(self, kind: str) -> None: ...


def end_run(
    client: redis.Redis, effects: RunEffects, run: Run, state: CiStatus, detail: str
) -> bool:
    """Ends a run (once): its unfinished rows take `state`; budget entries are dropped. The
    detail (an error's text, a URL in it) is redacted as carry's logs are before it is
    stored."""
    detail = redact(detail)
    if not transition(client, run.run_id, state, ACTIVE_STATES, detail=detail):
        return False
    leave_budget(client, run.kind, run.run_id)
    effects.history(
        run.series,
        ci_kind(state),
        runner_kind=run.kind,
        run_id=run.run_id,
        tree_key=run.tree_key,
        head=run.head_sha,
        reason=detail,
    )
    effects.rows(run.run_id)
    return True


def check_keys(kind: str, checks: Iterable[StepSpec]) -> list[str]:
    """The CI rows a job produces, in order: each check, then its A/B variant."""
    keys = []
    for check in checks:
        keys.append(ci_key(kind, check.name))
        if check.ab:
            keys.append(ci_key(kind, check.name, UPSTREAM_VARIANT))
    return keys
