"""The service's side of the runners' reports (bot/store/runner_channel.py): read each kind's
stream, check every report against the run it names, apply it, acknowledge it.

A runner's broker user may not write series state, history or a service queue, so what a
run causes there (a history entry, the series' CI rows, the budget's deferred runs) arrives
here as data. A report is applied only if it is about a run of the stream's own kind and
says only what such a run may say; a run the service never issued (bot/store/ci_runs.py keeps
what it issued where runners cannot write) or has not handed to a runner (it waits for
`/carry approve`) is no run to report on. Anything else is refused, logged and written to the
global history as `ci-report-refused`, and changes nothing. A report is acknowledged once
applied or refused; one whose applier died is claimed by another after CLAIM_IDLE_MS.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import redis
from celery import Celery

from bot.ci.job_keys import JobIssuer
from bot.ci.runs import check_keys, load_run
from bot.core.history import RUN_KINDS, UNKNOWN_RUN_KINDS, HistoryKind
from bot.store import runner_channel as channel
from bot.store.ci_runs import IssuedState, issued_run
from bot.store.runner_channel import Report
from bot.store.series import append_history, load_series
from workers.ci.requests import ServiceEffects

log = logging.getLogger("carry.ci")

CLAIM_IDLE_MS: Final = 60_000


class RefusedReport(ValueError):
    """A report that does not fit the run it names; the message says why."""


def apply_report(
    client: redis.Redis, celery_app: Celery, kind: str, report: Report, *, issuer: JobIssuer
) -> None:
    """Applies one report of a `kind` runner, or raises RefusedReport and changes nothing."""
    effects = ServiceEffects(client, celery_app, issuer)
    if report.type == "budget-freed":
        effects.budget_freed(kind)
    elif report.type == "history":
        series, event, fields = _history(client, kind, report)
        append_history(client, series, event, **fields)
    elif report.type == "rows":
        only = report.data.get("only")
        run = _own_run(client, kind, report.run_id)
        if only is not None and only not in check_keys(run.kind, run.payload.checks):
            raise RefusedReport(f"run {run.run_id} has no check {only!r}")
        effects.rows(run.run_id, only=only)
    else:
        raise RefusedReport(f"unknown report type {report.type!r}")


def _history(
    client: redis.Redis, kind: str, report: Report
) -> tuple[str, HistoryKind, dict[str, Any]]:
    series, event, fields = (report.data.get(k) for k in ("series", "event", "fields"))
    if not isinstance(series, str) or not isinstance(event, str) or not isinstance(fields, dict):
        raise RefusedReport("a history report needs series, event and fields")
    if event not in RUN_KINDS:
        raise RefusedReport(f"a runner may not write {event!r} entries")
    entry = HistoryKind(event)
    if not report.run_id or fields.get("run_id") != report.run_id:
        raise RefusedReport("the entry's run_id is not the report's")
    if issued_run(client, report.run_id) is None:  # whatever run record a runner wrote
        if entry not in UNKNOWN_RUN_KINDS:
            raise RefusedReport(
                f"carry never issued run {report.run_id} (only a refusal may name one)"
            )
        if load_series(client, series) is None:
            raise RefusedReport(f"no series {series!r}")
        return series, entry, fields
    # a runner may say it refused a job of a run that waits: it ran nothing
    run = _own_run(client, kind, report.run_id, dispatched=entry not in UNKNOWN_RUN_KINDS)
    if series != run.series:
        raise RefusedReport(f"run {run.run_id} belongs to series {run.series!r}, not {series!r}")
    if entry is HistoryKind.CI_CHECK and fields.get("key") not in check_keys(
        run.kind, run.payload.checks
    ):
        raise RefusedReport(f"run {run.run_id} has no check {fields.get('key')!r}")
    return series, entry, fields


def _own_run(client: redis.Redis, kind: str, run_id: str, *, dispatched: bool = True) -> Any:
    """The run a report of a `kind` runner names, as the service issued it: a run record the
    service never issued (a runner's broker user can write run records of its kind) is no run,
    one that differs from what was issued is refused, and one the service has not handed to a
    runner (it waits for `/carry approve`, or for the budget) has nothing a runner may say."""
    issued = issued_run(client, run_id)
    if issued is None:
        raise RefusedReport(f"carry never issued run {run_id}")
    try:
        run = load_run(client, run_id)
    except (ValueError, KeyError, TypeError) as err:  # a record a runner's user rewrote
        raise RefusedReport(f"run {run_id}'s record cannot be read: {err}") from None
    if run is None:
        raise RefusedReport(f"no run {run_id!r}")
    if run.kind != kind:
        raise RefusedReport(f"run {run_id} is a {run.kind} run, not {kind}")
    record = (run.series, run.kind, run.tree_key, run.head_sha)
    if record != (issued.series, issued.kind, issued.tree_key, issued.head_sha):
        raise RefusedReport(f"run {run_id}'s record differs from the run carry issued")
    if dispatched and issued.state == IssuedState.WAITING_APPROVAL:
        raise RefusedReport(f"run {run_id} waits for /carry approve: carry has not queued it")
    if dispatched and issued.state != IssuedState.DISPATCHED:
        raise RefusedReport(f"run {run_id} is held by the budget: carry has not queued it")
    return run


# --------------------------------------------------------------------------- the applier


@dataclass
class ReportApplier:
    """Applies the reports of `kinds` as they come (one of these runs in every service worker
    that serves the quick lane; the stream's consumer group shares the work)."""

    client: redis.Redis
    celery_app: Celery
    kinds: Sequence[str]
    issuer: JobIssuer  # releasing runs the budget held back dispatches them (signed)
    consumer: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")
    block_ms: int = 1000
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def apply_new(self) -> int:
        """Applies what arrived (waiting up to block_ms for it); returns how many."""
        batch = channel.read_reports(self.client, list(self.kinds), self.consumer, self.block_ms)
        return self._apply(batch)

    def apply_stale(self) -> int:
        """Applies reports that a dead applier read and never acknowledged."""
        done = 0
        for kind in self.kinds:
            done += self._apply(
                channel.claim_stale(self.client, kind, self.consumer, CLAIM_IDLE_MS)
            )
        return done

    def _apply(self, batch: list[tuple[str, Report]]) -> int:
        for kind, report in batch:
            try:
                apply_report(self.client, self.celery_app, kind, report, issuer=self.issuer)
            except RefusedReport as refused:
                _refused(self.client, kind, report, str(refused))
            channel.ack_report(self.client, kind, report.entry_id)
        return len(batch)

    def start(self) -> ReportApplier:
        for kind in self.kinds:
            channel.ensure_group(self.client, kind)
        self._thread = threading.Thread(target=self._loop, name="carry-reports", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        rounds = 0
        while not self._stop.is_set():
            try:
                if rounds % 60 == 0:
                    self.apply_stale()
                self.apply_new()
            except (redis.RedisError, OSError):
                log.warning("applying runner reports failed; trying again", exc_info=True)
                self._stop.wait(1)
            rounds += 1


def _refused(client: redis.Redis, kind: str, report: Report, reason: str) -> None:
    log.warning(
        "refused a %s report of %s runner %s (run %s): %s",
        report.type,
        kind,
        report.runner,
        report.run_id,
        reason,
    )
    append_history(
        client,
        None,
        HistoryKind.CI_REPORT_REFUSED,
        runner_kind=kind,
        runner=report.runner,
        type=report.type,
        run_id=report.run_id,
        reason=reason,
    )
