"""What a worker process needs, loaded once: config, settings, and the ports to the outside
(Redis, GitHub, the task queue, the clock), passed to every step that acts."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from bot.ci.job_keys import JobIssuer
from bot.config import CarryConfig, Settings, load_config, load_settings
from bot.core.ci_report import WriteLimit
from bot.core.dashboard_issue import BoardDecision
from bot.github.forge import Forge, ForgeCaches
from bot.github.port import ForgePort
from bot.log import install_secrets, secret_values
from bot.store.metrics import record_rate_limit
from bot.store.series import now_iso
from bot.store.write_budget import hold_writes, take_write

BoardKey = tuple[str, str, bool | None, str]  # downstream repo, API, configured, credentials
Sender = Callable[[str, dict[str, Any]], None]  # (task name, kwargs) -> enqueued
Clock = Callable[[], str]  # the time now, as carry records it (ISO 8601, UTC)


def send_with_celery(name: str, kwargs: dict[str, Any]) -> None:
    from bot.queue.celery_app import app

    app.send_task(name, kwargs=kwargs)


@dataclass(frozen=True)
class Runtime:
    config: CarryConfig
    settings: Settings
    redis: redis.Redis  # the store's client (bot.store)
    downstream_dir: Path  # a checkout of the downstream repository (holds patches/)
    bot_login: str = "carry[bot]"  # carry's own GitHub login: its comments are not commands
    send: Sender = send_with_celery  # the task queue
    clock: Clock = now_iso
    # GitHub for this runtime; None: the real adapter from the settings (see forge())
    connect_forge: Callable[[Runtime], ForgePort] | None = None
    # what this process's Forges share: tokens, roles, moved repositories, ETags, waits
    forge_caches: ForgeCaches = field(default_factory=ForgeCaches)
    # whether this process keeps the dashboard issue, decided once (workers.dashboard_issue)
    board_decisions: dict[BoardKey, BoardDecision] = field(default_factory=dict)

    @property
    def patches_root(self) -> Path:
        return self.downstream_dir / self.config.downstream.patches_dir

    def forge(self) -> ForgePort:
        """The downstream repository on GitHub; the rate limit it sees goes to the metrics."""
        if self.connect_forge is not None:
            return self.connect_forge(self)
        return self.github()

    def github(self) -> Forge:
        """The real adapter for the downstream repository, its writes (redelivery requests
        included) through the installation's write budget and holds (bot.store.write_budget)."""
        return Forge.connect(
            self.settings,
            self.config.downstream.repo,
            caches=self.forge_caches,
            on_rate_limit=functools.partial(record_rate_limit, self.redis),
            write_gate=self.take_write,
            write_hold=functools.partial(hold_writes, self.redis, self.github_writer),
        )

    def take_write(self, waited_until: float | None = None) -> float:
        """A content-creating request's turn in the installation's write budget (0.0), or the
        seconds to wait for it (bot.store.write_budget.take_write)."""
        return take_write(
            self.redis, self.github_writer, limits=self.write_limits, waited_until=waited_until
        )

    @property
    def write_limits(self) -> tuple[WriteLimit, ...]:
        """GitHub's content-creation limits as the settings give them."""
        settings = self.settings
        return (
            WriteLimit(60.0, settings.github_writes_per_minute),
            WriteLimit(3600.0, settings.github_writes_per_hour),
        )

    @property
    def github_writer(self) -> str:
        """Whose content-creating requests GitHub counts together: the App's installation (on
        the downstream owner), or the token's user."""
        settings = self.settings
        owner = self.config.downstream.repo.split("/")[0]
        who = "token"
        if settings.github_auth == "app":
            who = f"installation:{settings.github_installation_id or owner}"
        return f"{settings.github_base_url.rstrip('/')}|{who}"

    @property
    def job_issuer(self) -> JobIssuer:
        """How this service signs and hands hardware jobs to runners (workers.ci.requests)."""
        return JobIssuer.from_settings(self.settings)

    @property
    def cache_dir(self) -> Path:
        return self.settings.cache_dir

    def refresh_downstream(self) -> None:
        """Re-reads the series from the downstream repository when carry tracks it on GitHub."""
        from workers import downstream as downstream_repo

        if self.settings.tracks_github:
            downstream_repo.refresh(
                self.settings, self.config, self.downstream_dir, self.forge_caches
            )


def redis_client(url: str) -> redis.Redis:
    # Bounded retries and timeouts: a dead Redis must turn into a visible error quickly.
    return redis.Redis.from_url(
        url, socket_timeout=5, socket_connect_timeout=2, health_check_interval=30
    )


@functools.cache
def runtime() -> Runtime:
    from workers import downstream as downstream_repo

    settings = load_settings()
    install_secrets(secret_values(settings))  # for bot.log.redact
    downstream = settings.downstream_checkout()
    caches = ForgeCaches()
    if settings.tracks_github:
        unchecked = load_config(settings.config_path, check_dirs=False)
        downstream_repo.refresh(settings, unchecked, downstream, caches)
    config = load_config(settings.config_path, downstream_dir=downstream)
    client = redis_client(settings.redis_url.get_secret_value())
    return Runtime(config, settings, client, downstream, settings.bot_login, forge_caches=caches)


def reset() -> None:
    """Forget the cached runtime (tests that change the environment)."""
    runtime.cache_clear()
