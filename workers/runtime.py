"""What a worker process needs, loaded once: config, settings, Redis, the patches directory."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import redis

from bot.config import CarryConfig, Settings, load_config, load_settings
from bot.github.forge import Forge
from bot.store.metrics import record_rate_limit


@dataclass(frozen=True)
class Runtime:
    config: CarryConfig
    settings: Settings
    redis: redis.Redis
    downstream_dir: Path  # a checkout of the downstream repository (holds patches/)
    bot_login: str = "carry[bot]"  # carry's own GitHub login: its comments are not commands

    @property
    def patches_root(self) -> Path:
        return self.downstream_dir / self.config.downstream.patches_dir

    def forge(self) -> Forge:
        """The downstream repository on GitHub; the rate limit it sees goes to the metrics."""
        return Forge.connect(
            self.settings,
            self.config.downstream.repo,
            on_rate_limit=functools.partial(record_rate_limit, self.redis),
        )

    @property
    def cache_dir(self) -> Path:
        return self.settings.cache_dir

    def refresh_downstream(self) -> None:
        """Re-reads the series from the downstream repository when carry tracks it on GitHub."""
        from workers import downstream as downstream_repo

        if self.settings.tracks_github:
            downstream_repo.refresh(self.settings, self.config, self.downstream_dir)


def redis_client(url: str) -> redis.Redis:
    # Bounded retries and timeouts: a dead Redis must turn into a visible error quickly.
    return redis.Redis.from_url(
        url, socket_timeout=5, socket_connect_timeout=2, health_check_interval=30
    )


@functools.cache
def runtime() -> Runtime:
    from workers import downstream as downstream_repo

    settings = load_settings()
    downstream = settings.downstream_checkout()
    if settings.tracks_github:
        unchecked = load_config(settings.config_path, check_dirs=False)
        downstream_repo.refresh(settings, unchecked, downstream)
    config = load_config(settings.config_path, downstream_dir=downstream)
    client = redis_client(settings.redis_url.get_secret_value())
    return Runtime(config, settings, client, downstream, settings.bot_login)


def reset() -> None:
    """Forget the cached runtime (tests that change the environment)."""
    runtime.cache_clear()
