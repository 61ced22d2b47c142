"""The carry web service: webhook intake, health/readiness, the JSON API and the dashboard."""

from __future__ import annotations

from typing import Annotated

import redis
from fastapi import FastAPI, Query
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from bot.config import CarryConfig, ConfigError, Settings
from bot.metrics import metrics_router
from bot.store.deliveries import recent_deliveries
from bot.web.access import Access
from bot.web.api import api_router
from bot.web.dashboard import install_dashboard
from bot.web.views import FixPages
from bot.web.webhooks import OnEvent, QueueTask, WebhookIntake, webhook_router


def create_app(
    config: CarryConfig | None,
    settings: Settings,
    redis_client: redis.Redis,
    on_event: OnEvent | None = None,
    exposure: str | None = None,
    queue_task: QueueTask | None = None,
) -> FastAPI:
    """Build the app. Raises ConfigError when CARRY_WEBHOOK_SECRET is unset: carry never
    serves a webhook route that would accept unsigned deliveries. `exposure`: a warning every
    page shows (bot.web.access.exposure_warning). `queue_task`: builds an event's task message,
    which the intake queues together with the delivery's record (instead of calling on_event)."""
    secret = settings.webhook_secret
    if secret is None or not secret.get_secret_value():
        raise ConfigError(
            [
                "environment: CARRY_WEBHOOK_SECRET is not set; refusing to serve /webhooks/github "
                "without signature verification (set it to the webhook's secret)"
            ]
        )
    app = FastAPI(title="carry", docs_url=None, redoc_url=None)
    intake = WebhookIntake(
        secret=secret,
        client=redis_client,
        max_body_bytes=settings.effective_max_body_bytes(config),
        on_event=on_event,
        queue_task=queue_task,
    )
    app.state.webhook_intake = intake
    app.include_router(webhook_router(intake))
    _add_health_routes(app, config, redis_client)
    access = Access(Settings.dashboard_token(config) if config else None)
    app.include_router(metrics_router(redis_client, config, access.dependency()))
    # The series the workers check: the downstream checkout, not the web process's directory.
    checkout = settings.downstream_checkout()
    fix_pages = FixPages.from_config(
        config,
        checkout / config.downstream.patches_dir if config else None,
        exported=settings.tracks_github,
    )
    _add_api_routes(app, redis_client, access)
    app.include_router(api_router(redis_client, access, config, fix_pages))
    install_dashboard(app, redis_client, access, config, fix_pages, exposure)
    return app


def _add_health_routes(app: FastAPI, config: CarryConfig | None, client: redis.Redis) -> None:
    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "alive"}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        reasons = []
        if config is None:
            reasons.append("config not loaded")
        try:
            await run_in_threadpool(client.ping)
        except redis.RedisError as exc:
            reasons.append(f"redis unreachable: {type(exc).__name__}: {exc}")
        if reasons:
            return JSONResponse({"status": "unready", "reasons": reasons}, status_code=503)
        return JSONResponse({"status": "ready"})


def _add_api_routes(app: FastAPI, client: redis.Redis, access: Access) -> None:
    @app.get("/api/v1/events", dependencies=[access.dependency()])
    async def events(limit: Annotated[int, Query(ge=1, le=500)] = 50) -> JSONResponse:
        try:
            entries = await run_in_threadpool(recent_deliveries, client, limit)
        except redis.RedisError as exc:
            return JSONResponse({"error": f"store unavailable: {exc}"}, status_code=503)
        return JSONResponse({"deliveries": [entry.to_json() for entry in entries]})
