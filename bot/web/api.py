"""The read-only JSON API of the dashboard: its routes, over the views of bot.web.views.

Nothing from Settings is ever put in a response; the access token is compared, never shown.
"""

from __future__ import annotations

from typing import Annotated, Any

import redis
from fastapi import APIRouter, Query
from fastapi import Path as PathParam
from pydantic import BaseModel, Field, field_validator

from bot.config import CarryConfig
from bot.store.series import HISTORY_MAXLEN
from bot.web.access import (
    Access,
)
from bot.web.models import (
    ErrorOut,
    HistoryOut,
    PatchDetailOut,
    RunLogOut,
    RunnersOut,
    RunOut,
    RunsFilterOut,
    RunsOut,
    SeriesListOut,
    SeriesOut,
    SeriesSummaryOut,
)
from bot.web.series_cache import SeriesCache
from bot.web.timeline import Outcome
from bot.web.views import (
    RUN_RESULTS,
    RUNS_PAGE,
    FixPages,
    find_run,
    patch_detail,
    run_log,
    runners_view,
    runs_view,
    series_detail,
    series_history,
    series_list,
)

# Celery's Redis transport keeps one list per priority step beside the plain queue name.
_STREAM_ID = r"^(-|[0-9]+(-[0-9]+)?)$"
_ENTRY_ID = r"^[0-9]+-[0-9]+$"  # one history entry's stream id


class RunsQuery(BaseModel):
    """The filters of the list of runs, as query parameters (the page's form sends "" for
    any)."""

    series: str | None = Field(None, max_length=200)
    runner: str | None = Field(None, max_length=200)
    head: Annotated[str, Field(pattern=r"^[0-9a-fA-F]{0,40}$")] | None = None
    result: str | None = Field(None, max_length=40)

    @field_validator("result")
    @classmethod
    def _known_result(cls, value: str | None) -> str | None:
        if value and value not in RUN_RESULTS:
            raise ValueError(f"unknown result {value!r}: one of {', '.join(RUN_RESULTS)}")
        return value

    def filters(self) -> RunsFilterOut:
        return RunsFilterOut(
            series=self.series or None,
            runner=self.runner or None,
            head=self.head.lower() if self.head else None,
            result=self.result or None,
        )


# --------------------------------------------------------------------------- the router


_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorOut, "description": "Unknown series, patch or run"}
}
SeriesId = Annotated[str, PathParam(min_length=1, max_length=200)]
Limit = Annotated[int, Query(ge=1, le=HISTORY_MAXLEN)]
After = Annotated[str, Query(pattern=_STREAM_ID, max_length=40)]


def api_router(
    client: redis.Redis, access: Access, config: CarryConfig | None, fix_pages: FixPages
) -> APIRouter:
    """GET-only JSON routes under /api/v1 (the events route lives in bot.web.app)."""
    router = APIRouter(prefix="/api/v1", dependencies=[access.dependency()], tags=["dashboard"])
    summaries: SeriesCache[SeriesSummaryOut] = SeriesCache()  # kept while a series is unchanged

    @router.get("/series", response_model=SeriesListOut)
    def list_series() -> SeriesListOut:
        return series_list(client, fix_pages, config, summaries)

    @router.get("/series/{series_id}", response_model=SeriesOut, responses=_NOT_FOUND)
    def get_series(series_id: SeriesId) -> SeriesOut:
        return series_detail(client, series_id, fix_pages)

    @router.get("/series/{series_id}/history", response_model=HistoryOut, responses=_NOT_FOUND)
    def get_history(
        series_id: SeriesId,
        limit: Limit = 100,
        kind: Annotated[str | None, Query(min_length=1, max_length=100)] = None,
        before: Annotated[str | None, Query(pattern=_ENTRY_ID, max_length=40)] = None,
    ) -> HistoryOut:
        return series_history(client, series_id, limit, before=before, kind=kind)

    @router.get(
        "/series/{series_id}/patches/{name}", response_model=PatchDetailOut, responses=_NOT_FOUND
    )
    def get_patch(series_id: SeriesId, name: SeriesId) -> PatchDetailOut:
        return patch_detail(client, fix_pages, series_id, name)

    @router.get("/history", response_model=HistoryOut, responses=_NOT_FOUND)
    def get_all_history(
        limit: Limit = 100,
        series: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
        kind: Annotated[str | None, Query(min_length=1, max_length=100)] = None,
        outcome: Annotated[Outcome | None, Query()] = None,
        before: Annotated[str | None, Query(pattern=_ENTRY_ID, max_length=40)] = None,
    ) -> HistoryOut:
        """Every series' history (or one's, with `series`), newest first, of one `kind` and
        one `outcome` if given; `before` (a page's next_before) pages back."""
        return series_history(client, series, limit, before=before, kind=kind, outcome=outcome)

    @router.get("/runners", response_model=RunnersOut)
    def get_runners() -> RunnersOut:
        return runners_view(client, config)

    @router.get("/runs", response_model=RunsOut)
    def get_runs(
        chosen: Annotated[RunsQuery, Query()],
        page: Annotated[int, Query(ge=1, le=100_000)] = 1,
        per_page: Annotated[int, Query(ge=1, le=500)] = RUNS_PAGE,
    ) -> RunsOut:
        """Every hardware run, newest request first; `series`, `runner` (a kind or a runner's
        name), `head` (a prefix of the upstream head) and `result` keep those that match."""
        return runs_view(client, chosen.filters(), page, per_page)

    @router.get("/runs/{run_id}", response_model=RunOut, responses=_NOT_FOUND)
    def get_run(run_id: SeriesId) -> RunOut:
        return find_run(client, run_id)

    @router.get("/runs/{run_id}/log", response_model=RunLogOut, responses=_NOT_FOUND)
    def get_run_log(run_id: SeriesId, after: After = "-") -> RunLogOut:
        return run_log(client, run_id, after)

    return router
