"""What a CI row's report does on GitHub (pure): which row a report speaks for, whether GitHub
still has to be told, whether a refused report is still worth sending, and how many content-
creating requests GitHub's secondary limit leaves room for (and how long a refusal holds them
all), and whether the PR's CI table owes GitHub an edit it refused.

One check run per run and check: created at the run's first report (its id is kept with the
row, CiState.check_run_id) and updated through queued, in progress and completed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from bot.core.state import CiState, PrInfo, SeriesState


class CheckRunCall(StrEnum):
    CREATE = "create"  # no check run for this run yet (after a look-up by name and run)
    UPDATE = "update"  # PATCH the run's check run


def owns(stored: CiState, row: CiState) -> bool:
    """Whether the stored row speaks for the check where `row` would be reported: the same run,
    or a newer run on the same commit (a retest)."""
    return stored.run_id == row.run_id or (
        bool(stored.commit_sha) and (stored.commit_sha == row.commit_sha)
    )


def report_target(stored: CiState | None, row: CiState) -> CiState | None:
    """The row a report about `row` sends: the stored row when it is `row`'s run (its newest
    word and its check run id), `row` itself when a newer run on another commit took its place
    (an old run's end still ends its own check run), None when there is nothing to send: a
    newer run on the same commit owns the check, or the row has no commit to go on."""
    if stored is not None and stored.run_id == row.run_id:
        return stored
    if stored is not None and owns(stored, row):
        return None
    return row if row.commit_sha else None


def needs_sending(row: CiState) -> bool:
    """GitHub does not show this row's state yet."""
    return not row.on_github


def shown_on_github(row: CiState, has_pr: bool) -> bool:
    """What the dashboard says of a row: False ("not yet on GitHub") while carry owes GitHub
    its state; True once GitHub shows it, or where there is no PR to report it on."""
    return not has_pr or row.on_github


def check_run_call(row: CiState) -> CheckRunCall:
    return CheckRunCall.UPDATE if row.check_run_id else CheckRunCall.CREATE


def landed(stored: CiState, sent: CiState, check_run_id: int) -> CiState | None:
    """The stored row once GitHub has `sent`: its check run id and the state GitHub shows.
    None when the stored row is another run's by now (nothing of it to mark)."""
    if stored.run_id != sent.run_id or stored.commit_sha != sent.commit_sha:
        return None
    return replace(stored, check_run_id=check_run_id or stored.check_run_id, reported=sent.state)


def carry_over(existing: CiState | None, row: CiState) -> CiState:
    """A new word of a run keeps what GitHub has of that run: its check run and the state GitHub
    shows (until this word is reported)."""
    if existing is not None and (existing.run_id, existing.commit_sha) == (
        row.run_id,
        row.commit_sha,
    ):
        return replace(
            row,
            check_run_id=row.check_run_id or existing.check_run_id,
            reported=row.reported or existing.reported,
        )
    return row


# --------------------------------------------------------------------------- the PR's CI table


def table_owed(state: SeriesState | None) -> bool:
    """Whether the CI table of carry's open PR (in its body) owes GitHub an edit that did not
    land: a report sends it again until it does (or a publish rewrites the body)."""
    pr = state.pr if state is not None else None
    return pr is not None and not table_shown_on_github(pr)


def table_shown_on_github(pr: PrInfo) -> bool:
    """What the dashboard says of the PR's CI table: False ("not yet on GitHub") while GitHub
    refused its latest edit and carry owes it one (sent again after GitHub's Retry-After)."""
    return not (pr.state == "open" and pr.ci_table_owed)


def edits_table(state: SeriesState | None, *, sent: bool, first: bool) -> bool:
    """Whether a report edits the PR's CI table: its first attempt does, whatever became of its
    row (the table shows carry's word); a retry only when it sent its row now or the table is
    still owed (an edit sent again for nothing would spend the writes a storm has left)."""
    if state is None or state.pr is None or state.pr.state != "open":
        return False
    return first or sent or table_owed(state)


def owes_table(stored_body: str, sent_body: str | None) -> bool:
    """Whether the table is still owed after an edit: `sent_body` None (GitHub refused it), or
    the body as carry renders it now differs from what landed (a newer row came meanwhile and
    its own edit may have been refused before this older one landed)."""
    return sent_body is None or sent_body != stored_body


# --------------------------------------------------------------------------- the write budget


@dataclass(frozen=True)
class WriteLimit:
    window_s: float
    limit: int


# GitHub's docs, "Rate limits for the REST API", secondary rate limits: "No more than 80
# content-generating requests per minute and no more than 500 content-generating requests per
# hour are allowed."
CONTENT_LIMITS: tuple[WriteLimit, ...] = (WriteLimit(60.0, 80), WriteLimit(3600.0, 500))


def write_wait(
    recent: Sequence[float],
    now: float,
    limits: Sequence[WriteLimit] = CONTENT_LIMITS,
    held_until: float | None = None,
    waited_until: float | None = None,
) -> float:
    """Seconds until one more content-creating request fits GitHub's limits, given the times of
    the installation's recent ones and the end of a hold GitHub asked for (0.0: it fits now).

    A hold: GitHub refused one of the installation's requests with a rate limit and said how
    long to wait (Retry-After); its docs ("Best practices for using the REST API") ask for no
    more requests until then, so every write of the installation waits, not just the refused
    one (continuing may get the integration banned). A hold that ends by `waited_until` was
    sat out by the writer already (the wait its own refusal asked for) and holds it no longer;
    one that ends later (another worker was refused since) does."""
    wait = 0.0
    if held_until is not None and (waited_until is None or held_until > waited_until):
        wait = max(held_until - now, 0.0)
    for limit in limits:
        inside = sorted(t for t in recent if now - limit.window_s < t <= now)
        if len(inside) >= limit.limit:
            # the request that makes room is the one `limit` places back from the newest
            frees_at = inside[len(inside) - limit.limit] + limit.window_s
            wait = max(wait, frees_at - now)
    return wait
