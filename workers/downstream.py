"""Keep the worker's copy of the downstream series current: carry always works from the
repository as it is now (a maintainer may have edited the series by hand)."""

from __future__ import annotations

from pathlib import Path

from bot.config import CarryConfig, Settings
from bot.git.downstream import Downstream
from bot.github.forge import Forge, ForgeCaches
from bot.github.urls import downstream_git_url


def url(settings: Settings, config: CarryConfig) -> str:
    return downstream_git_url(settings, config)


def refresh(settings: Settings, config: CarryConfig, target: Path, caches: ForgeCaches) -> None:
    """Exports the patches directory of the downstream default branch into `target`."""
    forge = Forge.connect(settings, config.downstream.repo, caches=caches)
    downstream = Downstream(
        url(settings, config),
        settings.cache_dir,
        forge.token,
        network_timeout_s=settings.git_timeout_s,
    )
    heads = downstream.fetch(config.downstream.branch)
    target.mkdir(parents=True, exist_ok=True)
    patches = config.downstream.patches_dir
    downstream.export(heads[config.downstream.branch], patches, target / patches)
