"""Where carry's repositories are cloned from: one answer for the service, which puts the
URLs in a job, and for a runner, which fetches only what its own configuration names."""

from __future__ import annotations

from urllib.parse import urlparse

from bot.config import CarryConfig, Settings


def git_base_url(api_base_url: str) -> str:
    """Where repositories are cloned from, for an API base URL (github.com, GHE, emulator)."""
    parsed = urlparse(api_base_url)
    if parsed.netloc == "api.github.com":
        return "https://github.com"
    if parsed.netloc.startswith("api.") and parsed.netloc.endswith(".ghe.com"):
        return f"{parsed.scheme}://{parsed.netloc.removeprefix('api.')}"  # GHE.com residency
    path = parsed.path.rstrip("/").removesuffix("/api/v3")
    return f"{parsed.scheme}://{parsed.netloc}{path}"


def downstream_git_url(settings: Settings, config: CarryConfig) -> str:
    """The downstream repository's git URL: CARRY_DOWNSTREAM_GIT_URL, else GitHub's for
    downstream.repo."""
    return settings.downstream_git_url or (
        f"{git_base_url(settings.github_base_url)}/{config.downstream.repo}.git"
    )


def downstream_sources(settings: Settings, config: CarryConfig) -> tuple[str, ...]:
    """Where the downstream repository may be fetched from: its git URL, and the checkout the
    settings name (CARRY_DOWNSTREAM_DIR: carry's series come from a local repository)."""
    found = [downstream_git_url(settings, config)]
    if settings.downstream_dir is not None:
        found.append(str(settings.downstream_dir.resolve()))
    return tuple(found)
